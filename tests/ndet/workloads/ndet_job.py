"""A small data-parallel job for the NDET tests, with one injected fault chosen by argv[1].

Every step runs a torch.compile'd (aot_eager) function and one all_reduce over the default group.

  clean     every rank runs STEPS steps and exits normally
  nan       the compiled function produces NaN on rank 1 (or rank 0 alone) at step 3, the job goes on
  skip      rank 1 skips the all_reduce of step 2; rank 0 ends up waiting in its last all_reduce until
            the 3 s gloo timeout fires, while rank 1 idles (it would have been waiting elsewhere)
            until torchrun stops it after rank 0's failure
  mismatch  at step 2 rank 1 all_reduces twice as many elements as rank 0 (gloo aborts rank 0)
  kill      rank 1 SIGKILLs itself at step 3

argv[3] ``no-compile``: the function runs eagerly (no graph, no execution records: collectives only),
for the tests about whole jobs whose logs need no execution (Dynamo's import and compile are about 2
CPU-s of each rank).
"""
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

mode = sys.argv[1] if len(sys.argv) > 1 else "clean"
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
distributed = "WORLD_SIZE" in os.environ
if distributed:
    dist.init_process_group("gloo", timeout=timedelta(seconds=3))
rank = dist.get_rank() if distributed else 0
world = dist.get_world_size() if distributed else 1
nan_rank = 1 if world > 1 else 0


def f(x, scale):
    return torch.tanh(x @ x.T) * scale


cf = f if sys.argv[3:4] == ["no-compile"] else torch.compile(f, backend="aot_eager")
x = torch.randn(8, 8)
for step in range(STEPS):
    scale = torch.tensor(float("nan") if (mode == "nan" and step == 3 and rank == nan_rank) else 1.0)
    y = cf(x, scale)
    if not distributed:
        continue
    n = 16
    if mode == "mismatch" and step == 2 and rank == 1:
        n = 32
        time.sleep(1.0)  # rank 0's in-flight all_reduce #2 reaches its log before gloo aborts it
    if mode == "skip" and step == 2 and rank == 1:
        continue
    if mode == "kill" and step == 3 and rank == 1:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    t = torch.ones(n)
    dist.all_reduce(t)
if mode == "skip" and rank == 1:
    # stay alive until torchrun ends this rank once rank 0 has failed: rank 0 must hit the timeout,
    # not a closed connection, and a barrier here could meet rank 0's all_reduce #4 (a host that
    # delays rank 0 past a fixed sleep made that a mismatch)
    time.sleep(300)
    sys.exit(3)  # (not reached under torchrun)
if distributed:
    dist.barrier()
    dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
