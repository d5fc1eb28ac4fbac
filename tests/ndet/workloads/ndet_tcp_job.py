"""Two processes started by hand, joined with init_method="tcp://...": no RANK/WORLD_SIZE variables.

usage: ndet_tcp_job.py RANK PORT.  A compiled step, a few all_reduces, a barrier; the group is
destroyed before exit, as well-behaved scripts do (so the rank must be learnt earlier than exit).
"""
import sys
import time

import torch
import torch.distributed as dist

rank, port = int(sys.argv[1]), int(sys.argv[2])
time.sleep(0.3)  # let a periodic NDET write happen before the group exists (named gid- then)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
cf = torch.compile(lambda x: torch.tanh(x @ x.T), backend="aot_eager")
for _ in range(3):
    cf(torch.randn(8, 8))
    dist.all_reduce(torch.ones(16))
dist.barrier()
dist.destroy_process_group()
