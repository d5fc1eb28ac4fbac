"""An unmodified PyTorch program (no neuron_explorer import): a compiled function called in a loop.
With NEURON_PROCESS_TAG set, the runtime's hooks publish its counters for neuron-monitor."""
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
f = torch.compile(lambda x: torch.relu(x @ x).sum(), backend="aot_eager")
x = torch.randn(64, 64)
f(x)
print("ready", flush=True)
end = time.time() + seconds
while time.time() < end:
    f(x)
    time.sleep(0.002)
