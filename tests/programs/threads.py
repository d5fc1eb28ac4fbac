"""Two threads training their own models at the same time, as a hyper-parameter sweep or a
server with a worker pool does: each thread builds nothing (the models are made in the main
thread, so their weights do not depend on scheduling), trains with its own data and optimizer,
and the results are printed after both are joined.

Ground truth: each ``model(x)`` call in either thread is one root-module execution (depth is per
thread), each ``loss.backward()`` one backward, each ``opt.step()`` one optimizer step.
"""
import json
import threading

import torch
import torch.nn as nn

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

# the graphs the runtime should name (README: <ModuleClass>_<hash>, its _bwd, <OptimizerClass>_<hash>)
MODELS = ["Sequential", "Sequential_bwd", "SGD"]
STEPS = 150


def main():
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)) for _ in range(2)]
    losses = [None, None]
    start = threading.Barrier(2)

    def train(i):
        g = torch.Generator().manual_seed(10 + i)
        x = torch.randn(16, 8, generator=g)
        y = x[:, :1] * (i + 1)
        opt = torch.optim.SGD(models[i].parameters(), lr=0.05)
        start.wait()
        for _ in range(STEPS):
            opt.zero_grad()
            loss = nn.functional.mse_loss(models[i](x), y)
            loss.backward()
            opt.step()
        losses[i] = loss.item()

    threads = [threading.Thread(target=train, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, loss in enumerate(losses):
        print(f"thread {i}: final loss {loss:.6f}")
    counts = {"forward": 2 * STEPS, "backward": 2 * STEPS, "optimizer": 2 * STEPS}
    print("GROUND_TRUTH " + json.dumps({"processes": [dict(key="main", models=MODELS, **counts)]}))


if __name__ == "__main__":
    main()
