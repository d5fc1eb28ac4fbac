"""A small training loop with one injected pathology, for the summary's insights (docs/summary.md).

``python pathologies.py MODE STEPS`` (or under ``torchrun --nproc_per_node 2`` for the
distributed modes).  Each injected cost is a fixed amount of time per step, printed as
``INJECTED_NS <ns per step>`` so a test can compare the insight's impact with it:

* ``healthy``: nothing injected.
* ``dataloader``: the dataset sleeps ``COST_MS`` per batch (a slow input pipeline).
* ``recompile``: ``torch.compile`` on an input whose shape changes every step; the injected cost is
  measured here (a new shape's call minus a known shape's call, median).
* ``straggler``: rank 1's forward busy-waits ``STRAGGLER_MS`` (a slower device) under DDP (gloo);
  larger than ``COST_MS`` so that a loaded host's scheduling noise (a few ms on either rank) stays
  well inside the test's 25%.
* ``buckets``: DDP (gloo) with ``bucket_cap_mb`` so small that every gradient is its own
  all-reduce (``LAYERS`` x 2 per step); the injected cost is measured after the training loop: the
  same steps with DDP's default buckets, median step time of each, the difference.
"""
import json
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)
COST_MS = 12.0
STRAGGLER_MS = 30.0
LAYERS = 12
SLEPT: list = []


class Data(Dataset):
    def __init__(self, n: int, slow: bool):
        self.n, self.slow = n, slow
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 32, generator=g), torch.randn(n, 4, generator=g)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.slow and i % 8 == 0:  # one sleep per batch of 8, measured (a loaded host oversleeps)
            t0 = time.perf_counter_ns()
            time.sleep(COST_MS / 1e3)
            SLEPT.append(time.perf_counter_ns() - t0)
        return self.x[i], self.y[i]


class Net(nn.Module):
    def __init__(self, spin_ms: float = 0.0):
        super().__init__()
        self.a, self.b = nn.Linear(32, 64), nn.Linear(64, 4)
        self.spin_ms = spin_ms

    def forward(self, x):
        if self.spin_ms:
            end = time.perf_counter() + self.spin_ms / 1e3
            while time.perf_counter() < end:
                pass
        return self.b(torch.relu(self.a(x)))


def train(mode: str, steps: int) -> None:
    dist = None
    rank = 0
    if mode == "buckets":
        return buckets(steps)
    if mode == "straggler":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
    torch.manual_seed(0)
    net = Net(STRAGGLER_MS if mode == "straggler" and rank == 1 else 0.0)
    model = net
    if dist is not None:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Data(8 * steps, mode == "dataloader"), batch_size=8)
    if mode == "recompile":
        return recompile(net, opt, steps)
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    if mode == "dataloader":
        print(f"INJECTED_NS {sorted(SLEPT)[len(SLEPT) // 2]}")
    elif mode == "straggler" and rank == 0:
        print(f"INJECTED_NS {int(STRAGGLER_MS * 1e6)}")
    if dist is not None:
        dist.barrier()
        del model
        dist.destroy_process_group()


def buckets(steps: int) -> None:
    """Tiny all-reduce buckets for ``steps`` steps, then the default buckets to measure what
    they cost (with another optimizer class, stepped fewer times: its graph is not the steps'
    boundary, so the measuring steps are no steps of the summary)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    times = {}
    for label, cap, n, optim in (("tiny", 1e-6, steps, torch.optim.SGD), ("default", 25, steps - 2, torch.optim.Adam)):
        net = nn.Sequential(*[nn.Linear(64, 64) for _ in range(LAYERS)])
        model = DDP(net, bucket_cap_mb=cap)
        opt = optim(model.parameters(), lr=0.01)
        x, y = torch.randn(8, 64), torch.randn(8, 64)
        took = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            took.append(time.perf_counter_ns() - t0)
        took = sorted(took[1:])
        times[label] = took[len(took) // 2]
        del model
    if dist.get_rank() == 0:
        print(f"INJECTED_NS {times['tiny'] - times['default']}")
        print(f"STEP_NS {json.dumps(times)}")
    dist.barrier()
    dist.destroy_process_group()


def recompile(net, opt, steps: int) -> None:
    """A new batch size every step: each step compiles a graph (Dynamo, dynamic shapes off)."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = torch._dynamo.config.cache_size_limit = 10 * steps
    f = torch.compile(net, backend="aot_eager", dynamic=False)
    new, old = [], []
    for i in range(steps):
        x, y = torch.randn(8 + i, 32), torch.randn(8 + i, 4)
        opt.zero_grad()
        t0 = time.perf_counter_ns()
        out = f(x)
        t1 = time.perf_counter_ns()
        f(x)  # the same shape again: no compile
        t2 = time.perf_counter_ns()
        nn.functional.mse_loss(out, y).backward()
        opt.step()
        if i:
            new.append(t1 - t0)
            old.append(t2 - t1)
    new.sort()
    old.sort()
    print(f"INJECTED_NS {new[len(new) // 2] - old[len(old) // 2]}")
    print("GROUND_TRUTH " + json.dumps({"steps": steps}))


if __name__ == "__main__":
    train(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
    sys.stdout.flush()
