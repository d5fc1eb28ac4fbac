"""A small compiled training loop (no neuron_explorer import): known parameter and Adam state sizes."""
import time

import torch

torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.Adam(m.parameters())
f = torch.compile(m, backend="aot_eager")
x = torch.randn(64, 256)
for _ in range(25):
    f(x).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    time.sleep(0.01)
