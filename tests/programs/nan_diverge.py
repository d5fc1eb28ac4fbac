"""A regression whose learning rate is far too high: the loss grows, overflows to inf and becomes
NaN a few steps in, and the program goes on training, as a diverging job does until someone
looks.  NDET's NaN check exists for this.

Ground truth: each ``model(x)`` call is one root-module execution, each ``loss.backward()`` one
backward, each ``opt.step()`` one optimizer step; ``numerical`` counts the model calls whose
output holds a NaN or an Inf (what the NaN check must report, once each).
"""
import json

import torch
import torch.nn as nn

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

# the graphs the runtime should name (README: <ModuleClass>_<hash>, its _bwd, <OptimizerClass>_<hash>)
MODELS = ["Linear", "Linear_bwd", "SGD"]


def main():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=50.0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 4, generator=g) * 10
    y = x.sum(dim=1, keepdim=True)
    counts = {"forward": 0, "backward": 0, "optimizer": 0, "numerical": 0}
    for step in range(12):
        opt.zero_grad()
        out = model(x)
        counts["forward"] += 1
        counts["numerical"] += int(not bool(torch.isfinite(out).all()))
        loss = nn.functional.mse_loss(out, y)
        loss.backward()
        counts["backward"] += 1
        opt.step()
        counts["optimizer"] += 1
        print(f"step {step:2d} loss {loss.item():.6g}")
    print("GROUND_TRUTH " + json.dumps({"processes": [dict(key="main", models=MODELS, **counts)]}))


if __name__ == "__main__":
    main()
