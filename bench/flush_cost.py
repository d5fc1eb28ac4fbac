"""The capture sink's periodic write: its cost per new event against the events already stored
(issue 33, item 1; decision 0111).

One core's store is filled through the real write path (``writer.write_session`` appending to
segment files) up to each stored count, then ``--flushes`` flushes of ``--new`` events each are
timed (process CPU and wall, medians).  Append-only writes should cost the same per new event at
10 thousand and at 100 million stored events.  For contrast the whole rewrite (``ntrace.pb`` with
every event inline, what each flush did before) is timed at the smaller counts::

    OMP_NUM_THREADS=1 python bench/flush_cost.py                       # up to 1e7 stored, ~1 min
    OMP_NUM_THREADS=1 python bench/flush_cost.py --max-stored 100000000  # ~7 GB in /tmp, ~3 min

Results go to ``bench/results/flush_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

from neuron_explorer.capture import writer
from neuron_explorer.capture.segments import SegmentWriter
from neuron_explorer.capture.store import CoreStore, enabled_mask
from neuron_explorer.contracts import events as ev
from neuron_explorer.contracts.layout import make_session_dir
from neuron_explorer.runtime.config import CaptureConfig
from neuron_explorer.runtime.core import Runtime

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

MASK = enabled_mask([True] * len(ev.EVENT_TYPES))
FILL_BLOCK = 2_000_000


def rows(lo: int, n: int) -> np.ndarray:
    r = np.zeros((n, ev.RECORD_WIDTH), dtype=np.int64)
    r[:, 0] = ev.EVENT_TYPES[11].id
    r[:, 1] = 10**12 + np.arange(lo, lo + n) * 10
    r[:, 2] = r[:, 1] + 5
    r[:, 4] = np.arange(lo, lo + n)
    return r


def timed(fn) -> tuple[float, float]:
    c, w = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c, time.perf_counter() - w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-stored", type=int, default=10_000_000)
    ap.add_argument("--new", type=int, default=10_000, help="new events per timed flush")
    ap.add_argument("--flushes", type=int, default=7)
    ap.add_argument("--dir", default=None, help="where the session goes (default: a temporary directory)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="flush_cost_", dir=args.dir)
    cap = 2 * args.max_stored + 10 * args.new * args.flushes
    rt = Runtime(CaptureConfig(output_dir=tmp, max_events_per_nc=cap, cpu_util=False, host_memory=False))
    d = make_session_dir(tmp, "i-bench", os.getpid(), rt.anchors[0][1])
    sw, st = SegmentWriter(d), CoreStore(0, cap)
    done = 0

    def flush(n: int) -> None:
        nonlocal done
        st.add(rows(done, n), MASK, done + n)
        done += n
        writer.write_session(d, rt, {0: st}, segments=sw)

    out = {**provenance.stamp(), "new_per_flush": args.new,
           "append": [], "rewrite": []}
    stored = 10_000
    try:
        while stored <= args.max_stored:
            while done < stored:
                flush(min(FILL_BLOCK, stored - done))
            base = done
            samples = [timed(lambda: flush(args.new)) for _ in range(args.flushes)]
            cpu = statistics.median(c for c, _ in samples)
            wall = statistics.median(w for _, w in samples)
            row = {"stored": base, "cpu_ms": round(cpu * 1e3, 3), "wall_ms": round(wall * 1e3, 3),
                   "cpu_ns_per_new_event": round(cpu * 1e9 / args.new, 1),
                   "disk_bytes": sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))}
            out["append"].append(row)
            print(f"append: {base:>11,} stored  {row['cpu_ms']:8.2f} ms CPU  {row['wall_ms']:8.2f} ms wall  "
                  f"{row['cpu_ns_per_new_event']:7.1f} ns CPU per new event", flush=True)
            if base <= 1_000_000:  # the whole rewrite every flush did before: O(stored)
                whole = CoreStore(0, cap)
                whole.add(rows(0, base + args.new), MASK, base + args.new)
                wd = make_session_dir(tmp, "i-rewrite", os.getpid(), rt.anchors[0][1] + base)
                rs = [timed(lambda wd=wd, whole=whole: writer.write_session(wd, rt, {0: whole})) for _ in range(3)]
                rc = statistics.median(c for c, _ in rs)
                out["rewrite"].append({"stored": base, "cpu_ms": round(rc * 1e3, 3),
                                       "cpu_ns_per_new_event": round(rc * 1e9 / args.new, 1)})
                print(f"rewrite: {base:>10,} stored  {rc * 1e3:8.2f} ms CPU  "
                      f"{rc * 1e9 / args.new:7.1f} ns CPU per new event", flush=True)
                shutil.rmtree(os.path.dirname(wd), ignore_errors=True)
            stored *= 10
    finally:
        sw.close()
        shutil.rmtree(tmp, ignore_errors=True)
    ns = [r["cpu_ns_per_new_event"] for r in out["append"]]
    out["flat_ratio_max_over_min"] = round(max(ns) / min(ns), 3)
    print(f"per new event, largest over smallest: {out['flat_ratio_max_over_min']}x")
    res = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "flush_cost.json")
    with open(res, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
