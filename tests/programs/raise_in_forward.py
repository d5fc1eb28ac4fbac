"""A model whose forward raises the user's own exception at step ``FAIL_AT`` (a data check that
fails, as real pipelines do), and nobody catches it: the program dies with its traceback and exit
status 1.  A profiler must leave that traceback exactly as it is.

Ground truth is printed before the failing step: every ``model(x)`` call made so far, the failing
one included (it is a root-module call that ended in an exception), each ``loss.backward()`` one
backward, each ``opt.step()`` one optimizer step.
"""
import json

import torch
import torch.nn as nn

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

# the graphs the runtime should name (README: <ModuleClass>_<hash>, its _bwd, <OptimizerClass>_<hash>)
MODELS = ["Checked", "Checked_bwd", "SGD"]

FAIL_AT = 3


class BadBatch(ValueError):
    pass


class Checked(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 2))

    def forward(self, x, step):
        if step == FAIL_AT:
            raise BadBatch(f"batch {step} has {x.shape[0]} rows, expected a multiple of 4")
        return self.body(x)


def main():
    torch.manual_seed(0)
    model = Checked()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 6), torch.randn(8, 2)
    counts = {"forward": 0, "backward": 0, "optimizer": 0}
    for step in range(5):
        if step == FAIL_AT:
            counts["forward"] += 1
            print("GROUND_TRUTH " + json.dumps({"processes": [dict(key="main", models=MODELS, **counts)]}), flush=True)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x, step), y)
        counts["forward"] += 1
        loss.backward()
        counts["backward"] += 1
        opt.step()
        counts["optimizer"] += 1
        print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
