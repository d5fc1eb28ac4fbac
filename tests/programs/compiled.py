"""A ``torch.compile``d model trained with Adam, then evaluated under ``no_grad``; the backend is
the first argument (``inductor`` or ``aot_eager``).  ``fullgraph=True``, so each call of the
compiled model runs exactly one forward graph, and each backward one AOTAutograd backward graph.

Ground truth: each call of the compiled model is one forward graph execution, each
``loss.backward()`` one backward graph execution, each ``optimizer.step()`` one optimizer step
(the step itself is eager).
"""
import json
import sys

import torch
import torch.nn as nn

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

# the graphs the runtime should name (README: <ModuleClass>_<hash>, its _bwd, <OptimizerClass>_<hash>)
MODELS = ["MLP", "MLP_bwd", "Adam"]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.nn.functional.gelu(self.fc2(x))
        return self.out(x)


def main():
    backend = sys.argv[1] if len(sys.argv) > 1 else "inductor"
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)
    model = MLP()
    cmodel = torch.compile(model, backend=backend, fullgraph=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    counts = {"forward": 0, "backward": 0, "optimizer": 0}
    for step in range(6):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(cmodel(x), y)
        counts["forward"] += 1
        loss.backward()
        counts["backward"] += 1
        opt.step()
        counts["optimizer"] += 1
        print(f"step {step} loss {loss.item():.5f}")
    with torch.no_grad():
        acc = (cmodel(x).argmax(-1) == y).float().mean().item()
        counts["forward"] += 1
    print(f"accuracy {acc:.4f}")
    print("GROUND_TRUTH " + json.dumps({"processes": [dict(key="main", models=MODELS, **counts)]}))


if __name__ == "__main__":
    main()
