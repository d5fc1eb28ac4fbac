"""A small real training job: an MLP compiled with torch.compile, trained with DDP over gloo.

Run it under profiling without changing it:
    NEURON_RT_INSPECT_ENABLE=1 NEURON_RT_INSPECT_OUTPUT_DIR=out torchrun --nproc_per_node 2 examples/train.py

It prints, per rank, what it really did (steps, compiled calls, explicit collectives) so the
profile can be checked against it.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--backend", default="aot_eager", help="torch.compile backend (inductor, aot_eager, ...)")
    ap.add_argument("--no-ddp", action="store_true", help="average gradients with explicit all_reduce calls")
    ap.add_argument("--hidden", type=int, default=256)
    args = ap.parse_args()

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    explicit_cc = 0
    # Compile the module itself; DDP wraps the compiled module and all-reduces its gradients.
    cmodel = torch.compile(model, backend=args.backend)
    if distributed and not args.no_ddp:
        cmodel = nn.parallel.DistributedDataParallel(cmodel)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(cmodel(x), y)
        loss.backward()
        if distributed and args.no_ddp:
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
                explicit_cc += 1
        opt.step()
    if distributed:
        t = torch.tensor([loss.item()])
        dist.all_reduce(t)
        explicit_cc += 1
        dist.barrier()
    print(f"rank {rank}: steps={args.steps} explicit_all_reduce={explicit_cc} loss={loss.item():.4f}", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
