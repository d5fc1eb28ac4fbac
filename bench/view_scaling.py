"""How `view` time and peak memory grow with events per process and with the number of processes.

Each point is a synthetic capture written through the real writer and converted to Parquet in a
fresh process (`bench.view_throughput`'s wrapper) with one worker (--jobs 1), so the time is one
core's and peak RSS is that run's alone (with --jobs N, N workers each use about that much).  The
growth exponent is the slope of log(y) / log(x) between the points: 1.0 is linear, 0 is flat.

    python -m bench.view_scaling                 # total events 1M -> 10M -> 100M over 8 processes,
                                                 # processes 2 -> 64 -> 512 (20k events each) (~15 min)
    python -m bench.view_scaling --events 250000,1000000 --processes 2,8      # quick
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _slope(xs, ys) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def point(work: str, processes: int, events: int) -> dict:
    from bench.synth_capture import generate
    from bench.view_throughput import _size, run_mode

    src = os.path.join(work, f"cap_{processes}_{events}")
    generate(src, 1 if processes < 8 else processes // 8, min(processes, 8), events)
    r = run_mode("parquet", src, os.path.join(work, "pq"), jobs=1)
    out_bytes = _size(os.path.join(work, "pq"))
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(os.path.join(work, "pq"), ignore_errors=True)
    p = {"processes": processes, "events_per_process": events, "total_events": processes * events,
         "seconds": r["seconds"], "cpu_seconds": r["cpu_seconds"], "peak_rss": r["peak_rss"], "base_rss": r["base_rss"],
         "events_per_s": processes * events / r["seconds"], "events_per_cpu_s": processes * events / r["cpu_seconds"],
         "parquet_bytes_per_event": out_bytes / (processes * events)}
    print(f"  {processes} processes x {events:,} events: {r['seconds']:.1f} s, {r['cpu_seconds']:.1f} CPU s, "
          f"peak RSS {r['peak_rss'] / 2**20:.0f} MB", flush=True)
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", default="1e6,1e7,1e8", help="total events (spread over --event-processes)")
    ap.add_argument("--event-processes", type=int, default=8)
    ap.add_argument("--processes", default="2,64,512", help="process counts (--per-process events each)")
    ap.add_argument("--per-process", type=int, default=20_000)
    ap.add_argument("--out", default="view_scaling.json", help="file under bench/results/")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(HERE))
    work = tempfile.mkdtemp(prefix="nx-scale-", dir=os.environ.get("NX_BENCH_TMP"))
    try:
        ev_points = [point(work, a.event_processes, int(float(e)) // a.event_processes) for e in a.events.split(",")]
        pr_points = [point(work, int(p), a.per_process) for p in a.processes.split(",")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res = {
        **provenance.stamp(), "cpus": os.cpu_count(), "jobs": 1,
        "events_curve": ev_points, "processes_curve": pr_points,
        "time_exponent_events": _slope([p["total_events"] for p in ev_points], [p["seconds"] for p in ev_points]),
        "memory_exponent_events": _slope([p["total_events"] for p in ev_points],
                                         [max(p["peak_rss"] - p["base_rss"], 1) for p in ev_points]),
        "time_exponent_processes": _slope([p["processes"] for p in pr_points], [p["seconds"] for p in pr_points]),
        "memory_exponent_processes": _slope([p["processes"] for p in pr_points],
                                            [max(p["peak_rss"] - p["base_rss"], 1) for p in pr_points]),
    }
    print(f"{'processes':>10}{'events/proc':>13}{'seconds':>10}{'CPU s':>8}{'events/CPU-s':>14}{'peak RSS':>12}")
    for p in ev_points + pr_points:
        print(f"{p['processes']:>10}{p['events_per_process']:>13,}{p['seconds']:>10.2f}{p['cpu_seconds']:>8.1f}"
              f"{p['events_per_cpu_s']:>14,.0f}{p['peak_rss'] / 2**20:>10.0f}MB")
    for k in ("time_exponent_events", "memory_exponent_events", "time_exponent_processes", "memory_exponent_processes"):
        v = res[k]
        print(f"{k}: {v:.2f}" if v is not None else f"{k}: n/a")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", a.out), "w") as f:
        json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
