"""Capture overhead on a plain ``jax.jit`` loop: unprofiled vs the runtime's system profile
(``NEURON_RT_INSPECT_ENABLE=1``, no jax.profiler) vs ``jax.profiler.trace`` around the same loop.

Each configuration runs in its own process; rounds are interleaved and the median process CPU time
per call of the loop is reported (OMP_NUM_THREADS=1).  ``python bench/jax_overhead.py [--calls N]
[--rounds R] [--size D]`` writes bench/results/jax_overhead.json."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r'''
import os, sys, time
import jax, jax.numpy as jnp
calls, size, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
@jax.jit
def step(w, x):
    g = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.01 * g
w = jnp.ones((size, size)) * 0.01; x = jnp.ones((64, size))
for _ in range(20): w = step(w, x)
w.block_until_ready()
def loop(w):
    t0 = time.process_time()
    for _ in range(calls):
        w = step(w, x)
    w.block_until_ready()
    return time.process_time() - t0
if mode == "jax_profiler":
    with jax.profiler.trace(os.environ["TRACE_DIR"]):
        cpu = loop(w)
else:
    cpu = loop(w)
print(cpu / calls * 1e6)
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=128)
    a = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_RT_", "NEURON_EXPLORER_"))}
    base.update(OMP_NUM_THREADS="1", NEURON_EXPLORER_QUIET="1")
    res: dict[str, list[float]] = {"plain": [], "system": [], "jax_profiler": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            for mode in res:
                env = dict(base, TRACE_DIR=os.path.join(tmp, "trace"))
                if mode == "system":
                    env.update(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=os.path.join(tmp, "out"))
                out = subprocess.run([sys.executable, "-c", CHILD, str(a.calls), str(a.size), mode], env=env,
                                     capture_output=True, text=True, check=True).stdout
                res[mode].append(float(out.split()[-1]))
    med = {k: statistics.median(v) for k, v in res.items()}
    summary = {"us_per_call": med, "runs": res, "calls": a.calls, "size": a.size,
               "system_ratio": med["system"] / med["plain"], "jax_profiler_ratio": med["jax_profiler"] / med["plain"]}
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "jax_overhead.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for k, v in med.items():
        print(f"{k:13s} {v:9.2f} us/call  x{v / med['plain']:.3f}")


if __name__ == "__main__":
    main()
