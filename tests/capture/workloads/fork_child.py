"""The parent executes a compiled graph N times, forks a child that executes it M times, and exits.

argv: mode, N, M, done file.  ``os.fork``: the child outlives the parent, then exits normally (its
atexit handlers run) and writes its pid to the done file.  ``mp-fork``: a daemonic process of
multiprocessing's 'fork' context, which the parent's exit ends with SIGTERM, as multiprocessing
does with daemonic children."""
import multiprocessing
import os
import sys
import time

import torch

mode, n, m, done_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
parent = os.getpid()


def f(x):
    return torch.relu(x @ x.T).sum(dim=0)


cf = torch.compile(f, backend="aot_eager")
x = torch.randn(16, 16)


def child() -> None:
    for _ in range(m):
        cf(x)
    print(f"child executed {m}", flush=True)
    deadline = time.time() + 30
    while os.getppid() == parent and time.time() < deadline:
        time.sleep(0.01)  # outlive the parent (or be ended by it)
    time.sleep(0.3)
    with open(done_file + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.rename(done_file + ".tmp", done_file)


for _ in range(n):
    cf(x)
if mode == "os.fork":
    if os.fork() == 0:
        child()
        sys.exit(0)  # a normal exit: atexit handlers run in the child
else:
    proc = multiprocessing.get_context("fork").Process(target=child, daemon=True)
    proc.start()
time.sleep(1.0)  # the child has run its graphs
print("parent done", flush=True)
