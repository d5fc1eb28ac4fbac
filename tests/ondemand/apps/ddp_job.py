"""A 2-rank eager DDP training loop that knows nothing of neuron-explorer (no variable, no import).

Each rank writes ``pid <pid>``, then ``step <i> loss <value>`` per step, to ``argv[3].<rank>``.
It runs until the file named by argv[1] exists (rank 0 looks; the ranks agree through an
all-reduce, so both stop at the same step), then until step ``max(that step, argv[2]) + 10``: a
run released at once with argv[2] = N does exactly N + 10 steps, the same loss sequence as any
longer run's first steps.  While the file argv[4] (optional) exists, rank 1 stalls before its next
all-reduce: a hang, until the release file appears."""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

release, min_steps = sys.argv[1], int(sys.argv[2])
PARENT = os.getppid()
dist.init_process_group("gloo")
rank = dist.get_rank()
out = open(f"{sys.argv[3]}.{rank}", "w", buffering=1)
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
gen = torch.Generator().manual_seed(rank)
print(f"pid {os.getpid()}", file=out)
end, i = None, 0
while end is None or i < end:
    if os.getppid() != PARENT:
        sys.exit(3)  # the test (or torchrun) that started this job is gone: never outlive it
    x, y = torch.randn(16, 32, generator=gen), torch.randn(16, 1, generator=gen)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {i} loss {loss.item():.8f}", file=out)
    while rank == 1 and len(sys.argv) > 4 and os.path.exists(sys.argv[4]) and not os.path.exists(release):
        time.sleep(0.05)  # rank 1 stalls before the stop flag's all-reduce while the file argv[4] exists
    if end is None:
        flag = torch.tensor([1.0 if rank == 0 and os.path.exists(release) else 0.0])
        dist.all_reduce(flag)
        if flag.item() > 0:
            end = max(i, min_steps) + 10
    i += 1
    time.sleep(0.01)
dist.destroy_process_group()
