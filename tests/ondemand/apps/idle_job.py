"""A PyTorch training loop that knows nothing of neuron-explorer: steps until the file argv[1]
exists (and, with argv[2], for at least that many steps), then prints (JSON) whether
neuron-explorer's runtime runs and its hooks are in, and its losses."""
import json
import os
import sys
import time

import torch

release = sys.argv[1]
PARENT = os.getppid()
min_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 0
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
print(os.getpid(), flush=True)
losses = []
while not os.path.exists(release) or len(losses) < min_steps:
    if os.getppid() != PARENT:
        sys.exit(3)  # the test (or torchrun) that started this job is gone: never outlive it
    x = torch.randn(4, 8)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(round(loss.item(), 6))
    time.sleep(0.01)
core = sys.modules.get("neuron_explorer.runtime.core")
print(json.dumps({"runtime": core is not None and core.get_runtime() is not None,
                  "hooked": torch.nn.Module.__call__ is not torch.nn.Module._wrapped_call_impl,
                  "steps": len(losses), "losses": losses}), flush=True)
