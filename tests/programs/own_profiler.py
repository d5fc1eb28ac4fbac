"""A program that runs ``torch.profiler`` itself, as people do to find their own hot spots, and
prints what its profiler recorded: every ``key_averages()`` entry's name and count, sorted, with no
times.  If profiling this program from outside changed what its own profiler sees (an extra op, a
region of ours), this output would change.

Ground truth: each ``model(x)`` call is one root-module execution, each ``loss.backward()`` one
backward, each ``opt.step()`` one optimizer step.
"""
import json

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

# the graphs the runtime should name (README: <ModuleClass>_<hash>, its _bwd, <OptimizerClass>_<hash>)
MODELS = ["Sequential", "Sequential_bwd", "SGD"]


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    counts = {"forward": 0, "backward": 0, "optimizer": 0}

    def step():
        with record_function("train_step"):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        counts["forward"] += 1
        counts["backward"] += 1
        counts["optimizer"] += 1
        return loss.item()

    with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        for _ in range(4):
            loss = step()
    print(f"loss {loss:.6f}")
    for e in sorted(prof.key_averages(), key=lambda e: e.key):
        print(f"{e.key} {e.count}")
    print("GROUND_TRUTH " + json.dumps({"processes": [dict(key="main", models=MODELS, **counts)]}))


if __name__ == "__main__":
    main()
