"""A 2-rank gloo job that deadlocks in C: after warm-up (compiled-graph calls and one all_reduce
both ranks join), rank 0 enters an all_reduce that rank 1 never joins, and rank 1 blocks in a recv
that rank 0 never sends.  Each rank writes ``<dir>/ready_<rank>`` holding its pid just before it
blocks (argv[1]: that directory).  Run under torchrun."""
import os
import sys

import torch
import torch.distributed as dist

out = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()


def f(x):
    return torch.relu(x @ x.T).sum(dim=0)


cf = torch.compile(f, backend="aot_eager")
x = torch.randn(16, 16)
for _ in range(10):
    cf(x)
t = torch.ones(4)
dist.all_reduce(t)
tmp = os.path.join(out, f".ready_{rank}")
with open(tmp, "w") as fh:
    fh.write(str(os.getpid()))
os.rename(tmp, os.path.join(out, f"ready_{rank}"))
if rank == 0:
    dist.all_reduce(t)  # blocks in gloo: rank 1 never joins
else:
    dist.recv(torch.zeros(4), src=0)  # blocks in gloo: rank 0 never sends
print("unreachable", flush=True)
