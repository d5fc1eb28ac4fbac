"""Per-call cost of the collective, barrier and copy hooks, against the same calls unprofiled.

Each configuration runs in a fresh process (the runtime starts at interpreter start from the
environment, exactly as a user gets it), with a one-rank gloo process group on 127.0.0.1, and
times ``N`` calls of each operation after a warm-up.  Runs alternate unprofiled / profiled, and the
figure is the median per-call time over runs; the hook cost is the difference of medians and the
ratio is against the same call unprofiled.  Copies are only hooked on CUDA hosts (host <-> device
transfers); without CUDA that row reports "not applicable".

    python -m bench.hook_costs [--runs 5 --calls 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, os, sys, time
import torch, torch.distributed as dist
n = int(sys.argv[1]); port = sys.argv[2]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
x = torch.ones(256)
ops = {"all_reduce (1 KB)": lambda: dist.all_reduce(x),
       "broadcast (1 KB)": lambda: dist.broadcast(x, 0),
       "barrier": lambda: dist.barrier()}
if torch.cuda.is_available():
    h = torch.ones(1 << 16); d = h.cuda()
    ops["copy host->device (256 KB)"] = lambda: h.to("cuda")
    ops["copy device->host (256 KB)"] = lambda: d.cpu()
out = {}
for name, f in ops.items():
    for _ in range(200):
        f()
    t = time.perf_counter_ns()
    for _ in range(n):
        f()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    out[name] = (time.perf_counter_ns() - t) / n
dist.destroy_process_group()
print(json.dumps(out))
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(profiled: bool, calls: int, out_dir: str) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_RT_", "NEURON_EXPLORER_"))}
    env["OMP_NUM_THREADS"] = "1"
    if profiled:
        env.update(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=out_dir, NEURON_EXPLORER_QUIET="1",
                   NEURON_RT_INSPECT_CPU_UTIL="0", NEURON_RT_INSPECT_HOST_MEMORY="0")
    p = subprocess.run([sys.executable, "-c", CHILD, str(calls), str(_free_port())], env=env, capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"hook_costs: child failed ({p.returncode}): {p.stderr.strip().splitlines()[-1:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3000)
    a = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"unprofiled": [], "profiled": []}
    with tempfile.TemporaryDirectory(prefix="nx-hooks-") as tmp:
        for i in range(a.runs):
            for cfg in ("unprofiled", "profiled"):
                runs[cfg].append(_run(cfg == "profiled", a.calls, os.path.join(tmp, f"r{i}")))
    ops = list(runs["unprofiled"][0])
    rows = {}
    for op in ops:
        base = statistics.median(r[op] for r in runs["unprofiled"])
        prof = statistics.median(r[op] for r in runs["profiled"])
        rows[op] = {"unprofiled_ns": base, "profiled_ns": prof, "hook_ns": prof - base, "ratio": prof / base,
                    "unprofiled_spread_ns": [min(r[op] for r in runs["unprofiled"]),
                                             max(r[op] for r in runs["unprofiled"])],
                    "profiled_spread_ns": [min(r[op] for r in runs["profiled"]), max(r[op] for r in runs["profiled"])]}
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    res = {**provenance.stamp(), "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                                          "cuda": cuda},
           "runs": a.runs, "calls": a.calls, "ops": rows,
           "copies": "measured" if cuda else "not applicable: copies are hooked only on CUDA hosts"}
    print(f"{'operation':<28}{'unprofiled':>12}{'profiled':>12}{'hook':>10}{'ratio':>8}")
    for op, r in rows.items():
        print(f"{op:<28}{r['unprofiled_ns'] / 1000:>10.1f}us{r['profiled_ns'] / 1000:>10.1f}us"
              f"{r['hook_ns'] / 1000:>8.1f}us{r['ratio']:>8.3f}")
    if not cuda:
        print("copies: not applicable (hooked only on CUDA hosts)")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "hook_costs.json"), "w") as f:
        json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
