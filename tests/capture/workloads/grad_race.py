"""Many small layers trained eagerly as fast as possible: backward keeps writing .grad while the
runtime's sampler (1 ms here) attributes memory. Reading .grad from the sampler thread crashed this job
(SIGSEGV/SIGABRT within seconds) before gradients were read on the stepping thread."""
import time

import torch

torch.manual_seed(0)
m = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(40)])
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(32, 64)
end = time.time() + float(__import__("sys").argv[1])
n = 0
while time.time() < end:
    m(x).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    n += 1
print("steps", n)
