"""An unmodified PyTorch job (no neuron_explorer import, no variable): a compiled (aot_eager) or
eager MLP, stepped in a loop for ``seconds``.  Prints "ready" once it has run its first step."""
import sys
import time

import torch

seconds = float(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "compiled"
m = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
f = torch.compile(m, backend="aot_eager") if mode == "compiled" else m
x = torch.randn(32, 128)
with torch.no_grad():
    f(x)
    print("ready", flush=True)
    end = time.time() + seconds
    while time.time() < end:
        f(x)
        time.sleep(0.002)
