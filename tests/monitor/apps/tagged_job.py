"""An unmodified job for the tests of which processes neuron-monitor lists (run with
NEURON_PROCESS_TAG set): ``tagged_job.py ranks|inductor|pool``.

  ranks     a rank of a torchrun job: a compiled (aot_eager) step and an all_reduce, three times
  inductor  a model compiled by Inductor (the default backend), called three times; Inductor starts
            short ``python -c "...cdll.LoadLibrary(...)"`` subprocesses to check its kernels load
  pool      a ``spawn`` Pool of two workers, each running a compiled (aot_eager) step three times;
            leaving the ``with`` block ends them with SIGTERM (the parent runs no step)

Each process that runs the workload prints ``APP <pid>`` before it exits."""
import faulthandler
import multiprocessing
import os
import sys

import torch


def pool_step(_: int) -> int:
    # a hang after this step (run 40 of stop 52 timed out once after the workers' steps, stderr
    # empty): every thread's stack on stderr well before the test's 300 s timeout
    faulthandler.dump_traceback_later(200)
    step = torch.compile(lambda x: torch.tanh(x @ x.T), backend="aot_eager")
    for _ in range(3):
        step(torch.randn(8, 8))
    os.write(1, f"APP {os.getpid()}\n".encode())
    return os.getpid()


mode = sys.argv[1]
torch.set_num_threads(1)
if mode == "pool" and __name__ == "__main__":
    faulthandler.dump_traceback_later(220)  # (the parent's stacks too, see pool_step)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(pool_step, [0, 1])
elif mode == "ranks":
    import torch.distributed as dist

    dist.init_process_group("gloo")
    step = torch.compile(lambda x: torch.tanh(x @ x.T), backend="aot_eager")
    for _ in range(3):
        step(torch.randn(8, 8))
        dist.all_reduce(torch.ones(4))
    dist.barrier()
    dist.destroy_process_group()
elif mode == "inductor":
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)))
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 16))
if mode != "pool":
    os.write(1, f"APP {os.getpid()}\n".encode())  # one write: torchrun's ranks share the pipe
