"""How much plain ATen ops move when something else is imported before torch: no hook, no thread,
nothing recorded.

Each configuration runs in fresh processes (interleaved, rotated each round, ``OMP_NUM_THREADS=1``):

* ``none``          -- ``import torch`` first;
* ``numpy_first``   -- ``import numpy`` before torch;
* ``ne_first``      -- ``import neuron_explorer.runtime.core`` before torch;
* ``both_first``    -- numpy and neuron-explorer's runtime, recorder and monitor modules before torch
                       (what an NDET process has loaded when the ``.pth`` autostart has run).

Then it times a loop of ``torch.add`` on two 16x64 tensors and ``torch._foreach_add_`` on four
64x32 pairs (the toy training step's sizes) on the training thread's CPU clock, the best of five
50,000-iteration windows, and prints the ratio over ``none``; ``--pointers`` also prints each
tensor's address modulo 4096 (two tensors at the same offset stall each other's loads and stores).

Why: NDET's per-step CPU time over an unprofiled process was 2.5-10% while its instruction count
was +0.4-1.3% (docs/decisions/0062). This shows how much of such a gap the import order alone makes.

    python -m bench.import_order              # ~2 minutes
    python -m bench.import_order --rounds 7 --pointers

Results go to ``bench/results/import_order.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "import_order.json")
CONFIGS = ("none", "numpy_first", "ne_first", "both_first")
FIRST = {"none": (), "numpy_first": ("numpy",), "ne_first": ("neuron_explorer.runtime.core",),
         "both_first": ("numpy", "neuron_explorer.runtime.core", "neuron_explorer.recorders.ndet",
                        "neuron_explorer.recorders.app_stats")}


def worker(config: str) -> None:
    import importlib
    import time

    for m in FIRST[config]:
        importlib.import_module(m)
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    a, b = torch.randn(16, 64), torch.randn(16, 64)
    ps = [torch.randn(64, 32) for _ in range(4)]
    gs = [torch.randn(64, 32) for _ in range(4)]

    def run(n: int) -> float:
        t = time.thread_time_ns()
        for _ in range(n):
            torch.add(a, b)
            torch._foreach_add_(ps, gs, alpha=-1e-3)
        return (time.thread_time_ns() - t) / n

    run(20_000)
    best = min(run(50_000) for _ in range(5))
    out = torch.add(a, b)
    print(json.dumps({"ns_per_iter": best,
                      "offsets": [t.data_ptr() % 4096 for t in (a, b, out, *ps, *gs)]}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pointers", action="store_true", help="print the tensors' addresses modulo 4096")
    ap.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=RESULTS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker)
        return 0
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NEURON_RT_", "NEURON_EXPLORER_", "NEURON_PROCESS_TAG"))}
    env.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0", NEURON_EXPLORER_QUIET="1")
    got: dict[str, list[dict]] = {c: [] for c in CONFIGS}
    for i in range(a.rounds):
        for c in CONFIGS[i % len(CONFIGS):] + CONFIGS[:i % len(CONFIGS)]:
            p = subprocess.run([sys.executable, "-m", "bench.import_order", "--worker", c], env=env,
                               cwd=os.path.dirname(HERE), capture_output=True, text=True, timeout=600, check=False)
            if p.returncode != 0:
                print(f"error: worker {c} exited {p.returncode}: {p.stderr.strip()[-500:]}", file=sys.stderr)
                return 1
            got[c].append(json.loads(p.stdout.strip().splitlines()[-1]))
    base = statistics.median(r["ns_per_iter"] for r in got["none"])
    res = {**provenance.stamp(), "rounds": a.rounds, "configs": {}}
    print(f"{'imported before torch':24s} {'us/iter (median)':>17s} {'over none':>10s} {'paired range':>16s}")
    for c in CONFIGS:
        xs = [r["ns_per_iter"] for r in got[c]]
        paired = [x / r["ns_per_iter"] for x, r in zip(xs, got["none"])]
        med = statistics.median(xs)
        res["configs"][c] = {"median_us": med / 1000, "ratio": med / base, "paired_min": min(paired),
                             "paired_max": max(paired), "offsets": got[c][0]["offsets"]}
        print(f"{c:24s} {med / 1000:17.3f} {med / base:10.4f} {min(paired):7.3f}..{max(paired):.3f}")
        if a.pointers:
            print(f"  offsets mod 4096 (a, b, a+b, 4 params, 4 grads): {[hex(o) for o in got[c][0]['offsets']]}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
