"""A training loop whose memory grows close to a memory limit, for ``memory_near_limit`` under a
cgroup (tests/analysis/test_cgroup_memory_limit.py, decision 0182).

``python memory_fill.py LIMIT_BYTES STEPS``: each of the first STEPS - 6 steps keeps one more chunk
of activations-like tensors (filled, so their pages are really used and charged to the cgroup),
until ``FILL_SHARE`` of LIMIT_BYTES is held; the last 6 steps hold that.  A chunk that would take
the process's anonymous memory (``RssAnon``: what the cgroup charges and cannot reclaim without
swap) within ``MARGIN`` of the limit is not taken, so the kernel never ends the run; the program
prints ``HELD <bytes>`` and ``RSS_ANON <bytes>`` at its end, and ``STOPPED`` when it held back.
"""
import sys
import time

import torch
import torch.nn as nn

torch.set_num_threads(1)
FILL_SHARE = 0.92  # of the limit, held in kept tensors; the rule fires at 90% (MEMORY_NEAR_LIMIT)
MARGIN = 64 << 20
STEADY = 6


def rss_anon() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    limit, steps = int(sys.argv[1]), int(sys.argv[2])
    grow = max(1, steps - STEADY)
    target = int(FILL_SHARE * limit)
    chunk = target // grow
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 4)
    kept: list[torch.Tensor] = []
    held, stopped = 0, False
    for _ in range(steps):
        if held + chunk <= target:
            if rss_anon() + chunk <= limit - MARGIN:
                kept.append(torch.ones(chunk // 4, dtype=torch.float32))  # touched: charged to the cgroup
                held += chunk
            else:
                stopped = True
        loss = (net(x) - y).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.04)  # two memory samples a step at the test's 20 ms period
    print("HELD", held)
    print("RSS_ANON", rss_anon())
    if stopped:
        print("STOPPED")


if __name__ == "__main__":
    main()
