"""A compiled graph that runs a collective inside itself (Dynamo turns ``dist.all_reduce`` into a
functional collective in the graph), three times, under NDET (tests/ndet/test_trace_nesting.py)."""
import os

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
dist.init_process_group("gloo", rank=int(os.environ.get("RANK", 0)), world_size=int(os.environ.get("WORLD_SIZE", 1)))
def step(x):
    y = x * 2
    dist.all_reduce(y)
    return y.sum()
f = torch.compile(step, backend="aot_eager")
x = torch.ones(16)
for _ in range(3):
    f(x)
dist.destroy_process_group()
