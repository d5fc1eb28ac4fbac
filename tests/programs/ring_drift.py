"""A 2-rank DDP job whose rank 1 records many more events per step than rank 0 (empty
``record_function`` regions), so that under a small ``NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC``
rank 1's ring overwrites its first steps and rank 0's does not (tests/analysis/test_step_alignment_ddp.py).

Usage: torchrun --nproc_per_node 2 ring_drift.py STEPS EXTRA_REGIONS"""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x = torch.randn(32, 64)
steps, extra = int(sys.argv[1]), int(sys.argv[2])
for _step in range(steps):
    for _ in range(extra if rank == 1 else 0):
        with torch.autograd.profiler.record_function("ring_drift.extra"):
            pass
    opt.zero_grad()
    net(x).sum().backward()
    opt.step()
print(f"rank {rank} ran {steps} steps", flush=True)
dist.destroy_process_group()
