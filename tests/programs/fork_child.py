"""A program that forks: the parent trains a little, forks a child that evaluates the model and
exits with ``os._exit``, waits for it, then trains on.  The child's results reach the parent
through a pipe, so the output's order does not depend on scheduling.

Ground truth: the parent's executions only (a forked child records nothing of its own and never
writes its parent's files): each ``model(x)`` one root-module execution, each ``loss.backward()``
one backward, each ``opt.step()`` one optimizer step.
"""
import json
import os

import torch
import torch.nn as nn

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

# the graphs the runtime should name (README: <ModuleClass>_<hash>, its _bwd, <OptimizerClass>_<hash>)
MODELS = ["Sequential", "Sequential_bwd", "RMSprop"]


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.RMSprop(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(32, 8, generator=g)
    y = x.sum(dim=1, keepdim=True).sin()
    counts = {"forward": 0, "backward": 0, "optimizer": 0}

    def train(steps):
        for _ in range(steps):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            for k in counts:
                counts[k] += 1
        return loss.item()

    print(f"before fork: loss {train(4):.6f}")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: evaluate, report through the pipe, leave without cleanup
        os.close(r)
        with torch.no_grad():
            preds = [model(x[i:i + 8]).sum().item() for i in range(0, 32, 8)]
        os.write(w, json.dumps(preds).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    print(f"child exit status {os.waitstatus_to_exitcode(status)}")
    print("child predictions", " ".join(f"{v:.5f}" for v in json.loads(data)))
    print(f"after fork: loss {train(4):.6f}")
    print("GROUND_TRUTH " + json.dumps({"processes": [dict(key="main", models=MODELS, **counts)]}))


if __name__ == "__main__":
    main()
