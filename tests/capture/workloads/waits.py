"""A one-rank gloo job that compiles a graph, runs it, all-reduces synchronously and
asynchronously, and synchronizes the way Trainium scripts do (tests/capture/test_event_types.py)."""
import os

import torch
import torch.distributed as dist

import neuron_explorer.torch as torch_neuronx  # noqa: F401  (gives torch.neuron.synchronize)

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
dist.init_process_group("gloo", rank=0, world_size=1)
f = torch.compile(lambda x: (x @ x).relu().sum(), backend="aot_eager")
x = torch.randn(32, 32)
for _ in range(3):
    f(x)
t = torch.ones(64)
dist.all_reduce(t)  # torch.distributed waits on the Work itself
work = dist.all_reduce(t, async_op=True)
work.wait()  # the program waits
torch.neuron.synchronize()
dist.destroy_process_group()
