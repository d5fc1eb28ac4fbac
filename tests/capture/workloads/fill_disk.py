"""Runs a compiled graph until its first periodic profile write is on disk, then fills the disk the
profile is on (argv[1]: a filler file on it, written until ENOSPC), runs more graphs and exits
normally, so that its final write finds the disk full."""
import glob
import os
import sys
import time

import torch


def f(x):
    return torch.relu(x @ x.T).sum(dim=0)


cf = torch.compile(f, backend="aot_eager")
x = torch.randn(16, 16)
out = os.environ["NEURON_RT_INSPECT_OUTPUT_DIR"]
deadline = time.time() + 60
while not glob.glob(os.path.join(out, "*", "*", "trace_info.pb")) and time.time() < deadline:
    cf(x)
    time.sleep(0.01)
with open(sys.argv[1], "wb", buffering=0) as fh:
    try:
        while True:
            fh.write(b"\0" * 4096)
    except OSError:
        pass
for _ in range(50):
    cf(x)
print("done", flush=True)
