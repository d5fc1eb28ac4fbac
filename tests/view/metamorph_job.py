"""A small 2-rank training job for the metamorphic checks on ``view`` (two ranks over gloo: ``env://``).

DDP over an eager or a ``torch.compile(backend="aot_eager")`` model, a ``record_function`` region
per step (framework events on the host thread), a final all_reduce and a barrier: every kind of
track a CPU capture can hold (host threads, the core's executions, its collectives).
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.profiler import record_function


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "compiled"], default="eager")
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    m = torch.compile(model, backend="aot_eager") if a.mode == "compiled" else model
    ddp = nn.parallel.DistributedDataParallel(m)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16)
    y = torch.randint(0, 4, (8,))
    for _ in range(a.steps):
        with record_function("train_step"):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
    t = torch.tensor([loss.item()])
    dist.all_reduce(t)
    dist.barrier()
    print(f"rank {rank}: loss={t.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
