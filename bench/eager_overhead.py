"""Capture overhead of eager PyTorch executions and record_function regions, per training step.

Two eager training steps (forward, autograd backward, SGD step; ``OMP_NUM_THREADS=1``):

* ``block`` -- a small transformer block (self-attention + MLP, LayerNorms), batch 4 x 32 tokens x
  256 features: about 5 ms a step on a 2-core VM;
* ``mlp``   -- a 3-layer MLP, batch 64 x 256: about 0.5 ms a step.

Each step runs inside ``record_function("step")`` (so the regions' cost is counted), in these
configurations, each a fresh interpreter, interleaved (A B C D A B C D ...):

* ``plain``        -- no profiler;
* ``system``       -- ``NEURON_RT_INSPECT_ENABLE=1`` (eager executions and regions on), with the
                      timer threads off as in ``capture_instructions.py`` (samplers, monitor
                      publisher, periodic flush) so the figure is the hooks' own;
* ``system_noreg`` -- the same with ``NEURON_EXPLORER_FRAMEWORK_REGIONS=0``;
* ``torch_profiler`` -- ``torch.profiler.profile(activities=[CPU])`` around the timed steps (the
                      peer).

The figure per run is the process CPU time (``time.process_time_ns``) per step over the timed
steps; the table shows the median over runs and its ratio to ``plain``.

Usage::

    python bench/eager_overhead.py              # 7 rounds, ~3 minutes
    python bench/eager_overhead.py --rounds 3 --steps 100
    python bench/eager_overhead.py --instructions   # callgrind: instructions per step instead

With ``--instructions`` each configuration runs once under ``valgrind --tool=callgrind`` with a
short and a long step count; instructions per step are the slope between the two, so start-up,
imports and exit cancel (the method of ``capture_instructions.py``).  CPU times on a shared VM move
by more than the budget being measured; instruction counts do not.

Results go to ``bench/results/eager_overhead.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIGS = ("plain", "system", "system_noreg", "torch_profiler")
WORKLOADS = {"block": (200, 20), "mlp": (1500, 100)}  # timed steps, warm-up steps


def _env(config: str, out: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NEURON_RT_INSPECT_", "NEURON_RT_DBG_NDET_", "NEURON_EXPLORER_", "NEURON_PROCESS_TAG"))}
    env.update(OMP_NUM_THREADS="1", NEURON_EXPLORER_QUIET="1",
               PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", ""))
    if config.startswith("system"):
        env.update(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=out, NEURON_RT_INSPECT_CPU_UTIL="0",
                   NEURON_RT_INSPECT_HOST_MEMORY="0", NEURON_EXPLORER_STATS="0",
                   NEURON_EXPLORER_FLUSH_PERIOD_MS="600000")
    if config == "system_noreg":
        env["NEURON_EXPLORER_FRAMEWORK_REGIONS"] = "0"
    return env


WORKER = r'''
import contextlib, json, sys, time
import torch
from torch.profiler import record_function
workload, config, steps, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
if workload == "block":
    class Block(torch.nn.Module):
        def __init__(self, d=256, h=4):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.attn = torch.nn.MultiheadAttention(d, h, batch_first=True)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
        def forward(self, x):
            y = self.ln1(x)
            x = x + self.attn(y, y, y, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))
    model, x = Block(), torch.randn(4, 32, 256)
else:
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    x = torch.randn(64, 256)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
def step():
    with record_function("step"):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
for _ in range(warmup):
    step()
ctx = contextlib.nullcontext()
if config == "torch_profiler":
    from torch.profiler import ProfilerActivity, profile
    ctx = profile(activities=[ProfilerActivity.CPU])
with ctx:
    c0 = time.process_time_ns()
    for _ in range(steps):
        step()
    c1 = time.process_time_ns()
print(json.dumps({"cpu_ns_per_step": (c1 - c0) / steps}))
'''


def run_one(workload: str, config: str, steps: int, warmup: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run([sys.executable, "-c", WORKER, workload, config, str(steps), str(warmup)],
                           env=_env(config, out), capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            raise SystemExit(f"{workload}/{config} failed:\n{p.stderr[-3000:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])["cpu_ns_per_step"]


def instructions(workload: str, config: str, steps: int, warmup: int) -> int:
    """Instructions of a whole run under callgrind (``Ir`` total)."""
    with tempfile.TemporaryDirectory() as out:
        cg = os.path.join(out, "cg.out")
        cmd = ["setarch", "-R", "valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}",
               sys.executable, "-c", WORKER, workload, config, str(steps), str(warmup)]
        p = subprocess.run(cmd, env=_env(config, os.path.join(out, "cap")), capture_output=True, text=True,
                           timeout=7200)
        if p.returncode != 0:
            raise SystemExit(f"{workload}/{config} under callgrind failed:\n{p.stderr[-3000:]}")
        with open(cg) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
    raise SystemExit("no instruction total in the callgrind output")


def main_instructions(short: int, long: int, workloads: list[str], configs: list[str]) -> dict:
    out: dict = {}
    for workload in workloads:
        warmup = min(WORKLOADS[workload][1], 5)
        per = {c: (instructions(workload, c, long, warmup) - instructions(workload, c, short, warmup)) / (long - short)
               for c in configs}
        out[workload] = {"short": short, "long": long, "instructions_per_step": per,
                         "ratio_to_plain": {c: per[c] / per["plain"] for c in configs}}
        print(f"\n{workload}: instructions per step (callgrind, slope between {short} and {long} steps)")
        for c in configs:
            print(f"  {c:15s} {per[c] / 1e6:10.3f} M   x{per[c] / per['plain']:.4f}   (+{(per[c] - per['plain']) / 1e3:9.1f} k)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default per workload)")
    ap.add_argument("--instructions", action="store_true", help="count instructions with callgrind instead")
    ap.add_argument("--short", type=int, default=10)
    ap.add_argument("--long", type=int, default=40)
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="e.g. mlp")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="(plain is always run)")
    args = ap.parse_args()
    workloads = args.workloads.split(",")
    configs = ["plain"] + [c for c in args.configs.split(",") if c != "plain"]
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    if args.instructions:
        res = main_instructions(args.short, args.long, workloads, configs)
        res["when"] = _dt.datetime.now(_dt.timezone.utc).isoformat()
        with open(os.path.join(HERE, "results", "eager_instructions.json"), "w") as f:
            json.dump(res, f, indent=1)
        return
    results: dict = {}
    for workload in workloads:
        steps, warmup = WORKLOADS[workload]
        steps = args.steps or steps
        runs: dict[str, list[float]] = {c: [] for c in configs}
        for _ in range(args.rounds):
            for c in configs:
                runs[c].append(run_one(workload, c, steps, warmup))
        med = {c: statistics.median(v) for c, v in runs.items()}
        results[workload] = {"steps": steps, "rounds": args.rounds, "runs_ns": runs, "median_ns": med,
                             "ratio_to_plain": {c: med[c] / med["plain"] for c in configs}}
        print(f"\n{workload}: median process CPU time per step over {args.rounds} interleaved runs of {steps} steps")
        for c in configs:
            print(f"  {c:15s} {med[c] / 1e6:8.3f} ms   x{med[c] / med['plain']:.4f}   "
                  f"(+{(med[c] - med['plain']) / 1e3:7.1f} us)")
    results["when"] = _dt.datetime.now(_dt.timezone.utc).isoformat()
    with open(os.path.join(HERE, "results", "eager_overhead.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
