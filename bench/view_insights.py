"""The cost of the summary's step analysis inside ``view`` Parquet (issue 31: at most +20%).

Paired, interleaved runs of ``view --output-format parquet --jobs 1`` over one synthetic capture
(``bench.synth_capture``): the tree under test against a base tree without the analysis
(``--base``: e.g. ``git archive <the commit before the analysis> src | tar -x -C /tmp/base`` with the
built C extensions copied beside their sources), each a fresh process with OMP_NUM_THREADS=1; the
figure is the ratio of the medians of whole-process CPU time (user + system of the child).

    python -m bench.view_insights --base /tmp/base/src --events 312500 --instances 4 --processes 4 --runs 3
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile


def _cpu(src: str, cap: str, out: str) -> float:
    env = dict(os.environ, PYTHONPATH=src, OMP_NUM_THREADS="1", NEURON_EXPLORER_QUIET="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "neuron_explorer", "view", "-d", cap, "--output-file", out,
                    "--jobs", "1", "--no-progress"], env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(out, ignore_errors=True)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="/work/main/src")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    tmp = tempfile.mkdtemp(prefix="bench-insights.")
    try:
        cap = os.path.join(tmp, "cap")
        subprocess.run([sys.executable, "-m", "bench.synth_capture", cap, "--instances", str(a.instances),
                        "--processes", str(a.processes), "--events", str(a.events)], check=True,
                       env=dict(os.environ, PYTHONPATH=here + os.pathsep + os.path.dirname(here)))
        base, test = [], []
        for _ in range(a.runs):  # interleaved: the machine's load falls on both alike
            base.append(_cpu(a.base, cap, os.path.join(tmp, "out")))
            test.append(_cpu(here, cap, os.path.join(tmp, "out")))
        mb, mt = sorted(base)[len(base) // 2], sorted(test)[len(test) // 2]
        print(f"view parquet CPU s, median of {a.runs}: base {mb:.2f}, with steps/insights {mt:.2f}, "
              f"x{mt / mb:.3f}; load average {os.getloadavg()[0]:.2f}")
        print("base runs", [round(x, 2) for x in base], "test runs", [round(x, 2) for x in test])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
