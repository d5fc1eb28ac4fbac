"""Data-parallel training in the style of PyTorch's DDP tutorial, run with
``torchrun --nproc_per_node 2``: gloo, a ``DistributedSampler`` with ``set_epoch``, SGD with
momentum, a barrier at the end.  Only rank 0 prints (the ranks' losses are all-reduced first), so
the output does not depend on how the ranks interleave.

Ground truth, per rank: each ``ddp_model(x)`` call is one root-module execution (the DDP wrapper is
the root), each ``loss.backward()`` one backward, each ``optimizer.step()`` one optimizer step.
"""
import json

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 32)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(32, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(7)
    xs, ys = torch.randn(48, 10, generator=g), torch.randn(48, 5, generator=g)
    sampler = DistributedSampler(TensorDataset(xs, ys), num_replicas=world, rank=rank, shuffle=True, seed=3)
    loader = DataLoader(TensorDataset(xs, ys), batch_size=8, sampler=sampler)
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.functional.mse_loss
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)
    steps = 0
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = loss_fn(ddp_model(x), y)
            loss.backward()
            optimizer.step()
            steps += 1
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if rank == 0:
                print(f"epoch {epoch} step {i} mean loss {mean.item() / world:.6f}")
    dist.barrier()
    if rank == 0:
        w = sum(p.detach().sum().item() for p in model.parameters())
        print(f"weights sum {w:.6f}")
        names = ["DistributedDataParallel", "DistributedDataParallel_bwd", "SGD"]
        per_rank = [{"key": f"rank:{r}", "models": names, "forward": steps, "backward": steps, "optimizer": steps}
                    for r in range(world)]
        print("GROUND_TRUTH " + json.dumps({"processes": per_rank}))
    del ddp_model  # the reducer goes before its process group (else gloo can hang at exit)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
