"""Compiles a small function and calls it; prints 'ready N' after the warm-up, then either exits,
raises, or loops until it is killed (argv[1]: exit | raise | forever | spin: forever without a pause)."""
import sys
import time

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "exit"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10


def f(x):
    return torch.relu(x @ x.T).sum(dim=0)


cf = torch.compile(f, backend="aot_eager")
x = torch.randn(16, 16)
for _ in range(steps):
    cf(x)
print(f"ready {steps}", flush=True)
if mode == "raise":
    raise RuntimeError("workload failed on purpose")
if mode == "forever":
    n = steps
    while True:
        cf(x)
        n += 1
        time.sleep(0.001)
if mode == "spin":
    while True:
        cf(x)
