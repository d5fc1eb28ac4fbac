"""A deterministic 2-rank gloo training job for the capture-time type filter tests
(tests/capture/test_type_filter_equivalence.py): every event it causes comes a fixed number of
times, so a filtered capture can be compared count for count with an unfiltered one.

Two phases, so that one launch covers both execution paths:

* eager: a DDP model run op by op (root module, backward and optimizer step executions; DDP's
  bucket all-reduces issued from C++ and completed by callbacks), an explicit asynchronous
  all-reduce waited on from Python, a ``record_function`` region per step;
* compiled: another model compiled with ``aot_eager`` (its forward and backward graphs), gradients
  averaged with one blocking ``all_reduce`` per parameter, an eager optimizer step.

It ends with a barrier and prints each phase's loss."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
x = torch.randn(8, 16) + rank
y = torch.randint(0, 4, (8,))


def train(model, run, explicit: bool) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        with torch.profiler.record_function("train_step"):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(run(x), y)
            loss.backward()
            if explicit:
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world
            opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t, async_op=True).wait()
    return t.item() / world


eager = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
eager_loss = train(eager, nn.parallel.DistributedDataParallel(eager), explicit=False)
compiled = nn.Sequential(nn.Linear(16, 24), nn.Tanh(), nn.Linear(24, 4))
compiled_loss = train(compiled, torch.compile(compiled, backend="aot_eager"), explicit=True)
dist.barrier()
# one write: the ranks share torchrun's stdout, unbuffered, and print's two writes interleave
sys.stdout.write(f"rank {rank}: steps={steps} eager_loss={eager_loss:.6f} compiled_loss={compiled_loss:.6f}\n")
sys.stdout.flush()
dist.destroy_process_group()
