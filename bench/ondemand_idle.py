"""What the on-demand watcher costs while nobody asks, counted with callgrind (issue 32).

The watcher adds no code to a training step: nothing is hooked until a request arrives (the
hostile-request test checks that ``Module.__call__`` is torch's own afterwards).  What it does
cost is its thread waking once a second to look at the request file (``ondemand.Agent.poll``: one
``stat`` that fails with ENOENT, as for every process nobody asks).  This counts the instructions of
one wake-up, as the slope between ``--short`` and ``--long`` polls in a fresh interpreter under
``valgrind --tool=callgrind`` (start-up and imports cancel), against the same loop without the
poll, and turns it into instructions per step for a given step time::

    per step = (Ir per poll) x (step seconds / 1 s)

A whole-step count (``bench/capture_instructions.py --configs plain,ondemand_idle``) measures the
same thing through valgrind's ~50x slowdown, which multiplies the polls each counted step meets
by ~50, and takes ~10 minutes a run on this VM.

Usage::

    python bench/ondemand_idle.py                 # 2000 / 6000 polls, 10 ms and 100 ms steps
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results", "ondemand_idle.json")
_TOTAL = re.compile(rb"^(?:summary|totals):\s*(\d+)", re.M)

WORKER = r"""
import os, sys
sys.path.insert(0, sys.argv[3])
from neuron_explorer import ondemand
n, mode = int(sys.argv[1]), sys.argv[2]
agent = ondemand.Agent(lambda rt: None)
poll = agent.poll if mode == "poll" else (lambda: ondemand.IDLE_PERIOD_S)
for _ in range(n):
    poll()
"""


def count(n: int, mode: str, work: str) -> int:
    cg = os.path.join(work, f"cg.{mode}.{n}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    env.update(PYTHONHASHSEED="0", NEURON_EXPLORER_ON_DEMAND_DIR=os.path.join(work, "on-demand"))
    subprocess.run(["setarch", "-R", "valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}",
                    os.path.realpath(sys.executable), "-c", WORKER, str(n), mode, os.path.join(ROOT, "src")],
                   env=env, check=True, capture_output=True)
    with open(cg, "rb") as f:
        m = _TOTAL.search(f.read())
    assert m is not None
    return int(m.group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", type=int, default=2000)
    ap.add_argument("--long", type=int, default=6000)
    ap.add_argument("--out", default=RESULTS)
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="ondemand-idle-")
    ir = {(m, n): count(n, m, work) for m in ("loop", "poll") for n in (a.short, a.long)}
    span = a.long - a.short
    loop = (ir[("loop", a.long)] - ir[("loop", a.short)]) / span
    poll = (ir[("poll", a.long)] - ir[("poll", a.short)]) / span
    per_poll = poll - loop
    res = {**provenance.stamp(), "polls": [a.short, a.long],
           "ir": {f"{m}.{n}": v for (m, n), v in ir.items()}, "ir_per_poll": round(per_poll),
           "ir_per_step": {"10ms": round(per_poll * 0.010), "100ms": round(per_poll * 0.100),
                           "1s": round(per_poll)},
           "note": "instructions (callgrind, setarch -R); the watcher polls once a second, no per-step code"}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"instructions per poll: {per_poll:,.0f} (loop alone {loop:,.0f}); per training step: "
          f"{per_poll * 0.01:,.0f} at 10 ms a step, {per_poll * 0.1:,.0f} at 100 ms, {per_poll:,.0f} at 1 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
