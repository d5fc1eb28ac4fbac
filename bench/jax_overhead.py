"""Capture overhead on a plain ``jax.jit`` loop: unprofiled vs the runtime's system profile
(``NEURON_RT_INSPECT_ENABLE=1``, no jax.profiler) vs ``jax.profiler.trace`` around the same loop.

The step is one jitted gradient step on a ``size x size`` weight (about 65 us at 128 on the
reference VM). Each configuration runs in fresh processes, interleaved by ``bench/interleave.py``;
the figure is the median process CPU time per call over a timed window of several seconds
(``OMP_NUM_THREADS=1``), with the one-time costs (start-up, first call, exit) apart. Instructions
per call (callgrind) come from ``bench/capture_instructions.py --workload jax --peer``.

    python -m bench.jax_overhead [--calls N] [--rounds R] [--size D]

writes ``bench/results/jax_overhead.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import interleave, provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIGS = ("plain", "system", "jax_profiler")


def build_step(size: int = 128):
    """(step, sync): one jitted gradient step whose weights carry over between calls."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def train(w, x):
        g = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
        return w - 0.01 * g

    state = [jnp.ones((size, size)) * 0.01]
    x = jnp.ones((64, size))

    def step():
        state[0] = train(state[0], x)

    def sync():
        state[0].block_until_ready()

    return step, sync


def worker(config: str, calls: int, size: int, trace_dir: str) -> None:
    interleave.mark_start()
    import contextlib

    import jax

    step, sync = build_step(size)
    step()
    sync()
    ctx = jax.profiler.trace(trace_dir) if config == "jax_profiler" else contextlib.nullcontext()
    with ctx:
        r = interleave.timed_window(step, calls, 20, sync=sync)
    interleave.report(r)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=60000, help="timed calls per run (~4 s unprofiled)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "jax_overhead.json"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker, a.calls, a.size, a.dir)
        return 0
    with tempfile.TemporaryDirectory(prefix="ne-jax-") as tmp:
        def job(config: str):
            def make(i: int):
                out = os.path.join(tmp, f"{config}_{i}")
                env = interleave.system_env(out) if config == "system" else interleave.clean_env()
                return [sys.executable, "-m", "bench.jax_overhead", "--worker", config, "--calls", str(a.calls),
                        "--size", str(a.size), "--dir", out], env
            return make

        res = interleave.run_interleaved({c: job(c) for c in CONFIGS}, a.rounds, cwd=ROOT, label="jax")
    summary = interleave.summarize(res["runs"])
    out = {"benchmark": "jax_overhead", **provenance.stamp(),
           "command": "python -m bench.jax_overhead " + " ".join(argv if argv is not None else sys.argv[1:]),
           "calls": a.calls, "size": a.size, "rounds": a.rounds, "summary": summary, **res}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    interleave.print_summary(f"jax.jit step ({a.size}x{a.size}): median process CPU time per call, {a.rounds} "
                             f"interleaved runs x {a.calls} calls (load {res['load_average']['start'][0]:.2f})",
                             summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
