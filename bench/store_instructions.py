"""Instructions per step of the capture's drain and final write: a drain's execution pairs expanded
into the column store (``CoreStore.add``) and the ``EventColumns`` bytes built from it
(``writer.encode_events``), with the C expansion (``runtime/_expand.h``) against its numpy
reference in the same run.

The drain is the compiled toy step's (``bench/capture_overhead.py``): per step three executions
of three graphs in turn (forward, backward, the optimizer's step) and torch's two optimizer
regions, which end after the executions they hold, so the ring is not in start order.  That is
14 events a step once expanded (3 x nrt_execute + runtime_execute + nc_exec_running + switch, and
2 regions).  Each configuration runs under ``valgrind --tool=callgrind`` with a short and a long
drain, the work repeated ``--reps`` times, and the slope per step is taken, so start-up cancels::

    python bench/store_instructions.py                 # ~1 min
    python bench/store_instructions.py --short 100 --long 300 --reps 50

Results go to ``bench/results/store_instructions.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
from bench.capture_instructions import _python  # noqa: E402  (the real interpreter, not a pyenv shim)

RESULTS = os.path.join(HERE, "results", "store_instructions.json")
EVENTS_PER_STEP = 14


def drain(steps: int):
    """The ring rows of ``steps`` compiled toy steps, in the order the hooks append them."""
    import numpy as np

    from neuron_explorer.contracts import events as ev

    region = ev.EVENT_TYPES[[t.name for t in ev.EVENT_TYPES].index("framework_op")].id
    rows = []
    for i in range(steps):
        t = 1_000_000 + i * 1000

        def pair(start, end, graph, i=i):
            return [ev.EXEC_PAIR, start, end, 7, graph, 3 * i + graph, 0, 0, 0]
        rows += [pair(t + 10, t + 100, 0), pair(t + 150, t + 300, 1), [region, t, t + 400, 7, 5, 0, 0, 0, 0],
                 pair(t + 500, t + 600, 2), [region, t + 450, t + 700, 7, 6, 0, 0, 0, 0]]
    return np.array(rows, dtype=np.int64)


def worker(steps: int, reps: int, native: bool) -> None:
    from neuron_explorer.capture import store, writer
    from neuron_explorer.contracts import events as ev

    block = drain(steps)
    enabled = store.enabled_mask([True] * len(ev.EVENT_TYPES))
    if not native:
        store._c_expand = None  # the numpy reference
    for _ in range(reps):
        s = store.CoreStore(0, 10**9)
        s.add(block, enabled, len(block))
        writer.encode_events({0: s})


def count(config: str, steps: int, reps: int, tmp: str) -> int:
    out = os.path.join(tmp, f"cg.{config}.{steps}")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "src"), os.environ.get("PYTHONPATH", "")]))
    cmd = ["setarch", "-R", "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", _python(),
           os.path.abspath(__file__), "--worker", config, str(steps), str(reps)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    m = re.search(r"Collected : (\d+)", p.stderr)
    if p.returncode != 0 or m is None:
        raise SystemExit(f"store_instructions: the {config} run failed: {p.stderr.strip().splitlines()[-1:]}")
    return int(m.group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", type=int, default=100, help="steps of the short drain")
    ap.add_argument("--long", type=int, default=300, help="steps of the long drain")
    ap.add_argument("--reps", type=int, default=50, help="add + encode repeated this many times a run")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(int(a.worker[1]), int(a.worker[2]), a.worker[0] == "c")
        return 0
    if a.long <= a.short or a.short < 1 or a.reps < 1:
        ap.error("--long must be above --short, both and --reps at least 1")
    if shutil.which("valgrind") is None or shutil.which("setarch") is None:
        print("store_instructions: valgrind and setarch are needed (apt-get install valgrind)", file=sys.stderr)
        return 2
    from neuron_explorer.runtime.ring import expand_pairs

    configs = ["c", "numpy"] if expand_pairs is not None else ["numpy"]
    per_step = {}
    with tempfile.TemporaryDirectory(prefix="store-instr-") as tmp:
        for config in configs:
            lo, hi = count(config, a.short, a.reps, tmp), count(config, a.long, a.reps, tmp)
            per_step[config] = (hi - lo) / ((a.long - a.short) * a.reps)
            print(f"  {config:6s} {per_step[config]:8,.0f} instructions per step "
                  f"({per_step[config] / EVENTS_PER_STEP:,.0f} per event)")
    res = {**provenance.stamp(), "events_per_step": EVENTS_PER_STEP,
           "short": a.short, "long": a.long, "reps": a.reps, "instructions_per_step": per_step,
           "command": "python bench/store_instructions.py"}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
