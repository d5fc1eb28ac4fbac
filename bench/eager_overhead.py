"""Capture overhead of eager PyTorch executions and record_function regions, per training step.

Two eager training steps (forward, autograd backward, SGD step; ``OMP_NUM_THREADS=1``):

* ``block`` -- a small transformer block (self-attention + MLP, LayerNorms), batch 4 x 32 tokens x
  256 features: about 5 ms a step on a quiet 2-core VM (the #15 target: within 1%);
* ``mlp``   -- a 3-layer MLP 128-128-128-10, batch 64: about 0.5 ms a step (reported beside torch.profiler).

Each step runs inside ``record_function("step")`` (so the regions' cost is counted), in these
configurations, each a fresh interpreter, interleaved by ``bench/interleave.py``:

* ``plain``          -- no profiler;
* ``system``         -- ``NEURON_RT_INSPECT_ENABLE=1`` as a user sets it (samplers, periodic flush
                        and monitor discovery running: what the user pays per step);
* ``system_noreg``   -- the same with ``NEURON_EXPLORER_FRAMEWORK_REGIONS=0`` (optional);
* ``system_nomem``   -- the same with ``NEURON_RT_INSPECT_HOST_MEMORY=0 NEURON_EXPLORER_STATS=0``:
                        nothing asks the torch memory source for its figures.  That source reads
                        parameters' ``.grad`` from the sampler's or the monitor publisher's thread
                        while the main thread runs a backward; with it on, runs of this bench die
                        with SIGSEGV/SIGABRT ("double free or corruption"), see the results;
* ``torch_profiler`` -- ``torch.profiler.profile(activities=[CPU])`` around the timed steps (the peer).

The figure per run is the process CPU time per step over a timed window of several seconds; the
table shows the median over runs, its ratio to ``plain`` and the one-time costs apart.
Instructions per step (callgrind) come from ``bench/capture_instructions.py --workload eager_mlp``
(or ``eager_block``), which builds the same steps.

Usage::

    python -m bench.eager_overhead                    # 5 rounds, both workloads (~8 minutes)
    python -m bench.eager_overhead --rounds 3 --workloads mlp --steps 4000
    python -m bench.eager_overhead --rounds 3 --same-process 9   # + one-process ratios (~10 minutes more)

``--same-process RUNS`` also runs, per workload, RUNS processes that time the system profile's
per-step work with the hooks working and paused in alternate blocks of one process (one memory
layout; ``ndet_bench.same_process``), beside an A/A control that pauses nothing.

Results go to ``bench/results/eager_overhead.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import interleave, provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIGS = ("plain", "system", "torch_profiler")
OPTIONAL = ("system_noreg", "system_nomem")
# timed steps (a window of ~5 s unprofiled on the reference VM), warm-up steps
WORKLOADS = {"block": (400, 20), "mlp": (10000, 200)}
# --same-process: steps per process and steps per block (~0.2-0.3 s a block)
SAME_PROCESS = {"block": (800, 25), "mlp": (12000, 250)}


def build_step(torch, workload: str):
    """The eager training step of ``workload`` (also used by capture_instructions.py)."""
    from torch.profiler import record_function

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
    elif workload == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                                    torch.nn.ReLU(), torch.nn.Linear(128, 10))
        x = torch.randn(64, 128)
    else:
        raise ValueError(f"unknown eager workload {workload!r}")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        with record_function("step"):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()

    return step


def worker(workload: str, config: str, steps: int, warmup: int) -> None:
    interleave.mark_start()
    import torch

    torch.set_num_threads(1)
    step = build_step(torch, workload)
    step()
    block = int(os.environ.get("NE_BENCH_SAME_PROCESS") or 0)
    if block:  # --same-process: hooks working and paused in blocks of this one process
        from bench import ndet_bench

        for _ in range(warmup):
            step()
        pause = ndet_bench.pauser(torch, bool(os.environ.get("NE_BENCH_NULL")), module_call=True)
        print(json.dumps(ndet_bench.time_blocks(step, steps, block, pause)))
        return
    ctx = contextlib.nullcontext()
    if config == "torch_profiler":
        from torch.profiler import ProfilerActivity, profile

        ctx = profile(activities=[ProfilerActivity.CPU])
    with ctx:
        r = interleave.timed_window(step, steps, warmup)
    interleave.report(r)


def _job(workload: str, config: str, steps: int, warmup: int, tmp: str):
    def make(i: int):
        out = os.path.join(tmp, f"{workload}_{config}_{i}")
        if config.startswith("system"):
            extra = {"system_noreg": {"NEURON_EXPLORER_FRAMEWORK_REGIONS": "0"},
                     "system_nomem": {"NEURON_RT_INSPECT_HOST_MEMORY": "0",
                                      "NEURON_EXPLORER_STATS": "0"}}.get(config, {})
            env = interleave.system_env(out, **extra)
        else:
            env = interleave.clean_env()
        argv = [sys.executable, "-m", "bench.eager_overhead", "--worker", workload, "--config", config,
                "--steps", str(steps), "--warmup", str(warmup)]
        return argv, env
    return make


def _check(config: str, r: dict) -> None:
    if r.get("runtime_active") is not config.startswith("system"):
        raise RuntimeError(f"{config}: runtime_active={r.get('runtime_active')} (is the .pth hook installed?)")


def _same_process(workload: str, runs: int, warmup: int) -> dict:
    """The system profile's per-step work at one memory layout (``ndet_bench.same_process``, as
    ``capture_overhead.py --same-process`` does for the compiled step): in the paused blocks the
    execution wrappers and regions record nothing and ``nn.Module.__call__`` is torch's own, so
    what still runs in both kinds of block is the backward and optimizer gates (in C) and our
    threads (those are in the interleaved rows)."""
    from bench import ndet_bench

    steps, block = SAME_PROCESS[workload]
    labels = {"system": f"system profile (NEURON_RT_INSPECT_ENABLE=1), eager {workload}",
              "null": "A/A control: system profile on, nothing paused (the method's noise floor)"}

    def run(label: str, env: dict[str, str], warmup_: int, steps_: int) -> dict:
        argv = [sys.executable, "-m", "bench.eager_overhead", "--worker", workload, "--config", "system",
                "--steps", str(steps_), "--warmup", str(warmup_)]
        return ndet_bench.run_worker(label, env, warmup_, steps_, argv=argv, cwd=ROOT)

    out = ndet_bench.same_process(runs, warmup=warmup, steps=steps, block=block, configs=("system",),
                                  env_for=lambda config, d: interleave.system_env(d), labels=labels, run=run)
    for r in out.values():
        print(f"  same process, {r['label']}: {r['median_ratio']:.4f}x ({r['min']:.4f}..{r['max']:.4f}, "
              f"{r['n']} processes)", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default per workload: a ~5 s window)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="e.g. mlp")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"(plain is always run; optional: {OPTIONAL})")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "eager_overhead.json"))
    ap.add_argument("--same-process", type=int, default=0, metavar="RUNS",
                    help="also time the system profile's hooks working and paused in one process, RUNS processes "
                         "per workload, beside an A/A control (default 0: skip)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker, a.config, a.steps, a.warmup)
        return 0
    configs = ["plain"] + [c for c in a.configs.split(",") if c and c != "plain"]
    results: dict = {"benchmark": "eager_overhead",
                     **provenance.stamp(),
                     "command": "python -m bench.eager_overhead "
                                + " ".join(argv if argv is not None else sys.argv[1:]),
                     "workloads": {}}
    with tempfile.TemporaryDirectory(prefix="ne-eager-") as tmp:
        for workload in a.workloads.split(","):
            steps, warmup = WORKLOADS[workload]
            steps = a.steps or steps
            jobs = {c: _job(workload, c, steps, warmup, tmp) for c in configs}
            res = interleave.run_interleaved(jobs, a.rounds, cwd=ROOT, check=_check, label=workload)
            summary = interleave.summarize(res["runs"])
            results["workloads"][workload] = {"steps": steps, "warmup": warmup, "rounds": a.rounds,
                                              "summary": summary, **res}
            interleave.print_summary(f"eager {workload}: median process CPU time per step, {a.rounds} interleaved "
                                     f"runs x {steps} steps (load {res['load_average']['start'][0]:.2f})", summary)
            if a.same_process:
                results["workloads"][workload]["same_process"] = _same_process(workload, a.same_process, warmup)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
