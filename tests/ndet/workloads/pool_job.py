"""Processes that ``multiprocessing`` starts, for the NDET tests; argv[1] chooses:

  pool       a ``spawn`` Pool of two workers, each running a torch.compile'd (aot_eager) step;
             leaving the ``with`` block ends the idle workers with SIGTERM (Pool.__exit__)
  rank-pool  under torchrun: each rank runs such a pool, then all_reduces and exits
  busy       a ``spawn`` Pool whose worker is inside a compiled step (a custom op that sleeps)
             when the ``with`` block ends it: work cut short
  spawn      torch.multiprocessing.spawn of two ranks (argv[2]: the TCP store's port) that
             all_reduce, print ``READY <rank> <pid>`` and wait: multiprocessing children that
             are ranks; the test ends one with SIGTERM

Prints ``POOL_PIDS [..]`` (the workers' pids) before it ends.
"""
import multiprocessing
import os
import sys
import time

import torch


def step(n: int) -> int:
    cf = torch.compile(lambda x: torch.tanh(x @ x.T) * 2, backend="aot_eager")
    for _ in range(n):
        cf(torch.randn(8, 8))
    return os.getpid()


@torch.library.custom_op("pool_job::slow", mutates_args=())
def slow(x: torch.Tensor, marker: str) -> torch.Tensor:
    """Inside a compiled graph: says so (the marker file), then takes longer than the pool waits."""
    if marker:
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
    return x.clone()


@slow.register_fake
def _(x, marker):
    return torch.empty_like(x)


def busy(marker: str) -> int:
    cf = torch.compile(lambda x, m: slow(torch.tanh(x), m), backend="aot_eager")
    cf(torch.ones(4), "")
    cf(torch.ones(4), marker)  # in flight when the pool ends the worker
    return os.getpid()


def spawn_rank(rank: int, port: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    dist.all_reduce(torch.ones(4))
    time.sleep(0.5)  # a periodic write after the collective
    os.write(1, f"READY {rank} {os.getpid()}\n".encode())  # one write: the ranks share the pipe
    time.sleep(60)


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "pool"
    ctx = multiprocessing.get_context("spawn")
    if mode == "spawn":
        import torch.multiprocessing as tmp

        tmp.spawn(spawn_rank, args=(int(sys.argv[2]),), nprocs=2)
        return
    if mode == "busy":
        marker = os.path.join(sys.argv[2], "busy.pid")
        with ctx.Pool(1) as pool:
            res = pool.apply_async(busy, (marker,))
            while not os.path.exists(marker):
                time.sleep(0.05)
            time.sleep(0.6)  # a periodic write or two, then Pool.__exit__ terminates the busy worker
        print(f"POOL_PIDS [{open(marker).read()}]", flush=True)
        del res
        return
    with ctx.Pool(2) as pool:
        pids = sorted(set(pool.map(step, [3, 3])))
    if mode == "rank-pool":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        dist.all_reduce(torch.ones(4))
        dist.barrier()
        dist.destroy_process_group()
    print(f"POOL_PIDS {pids}", flush=True)


if __name__ == "__main__":
    main()
