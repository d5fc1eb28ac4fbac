"""How `view` time and peak memory grow with events per process and with the number of processes.

Each point is a synthetic capture written through the real writer and converted to Parquet in a
fresh process (`bench.view_throughput`'s wrapper), so peak RSS is that run's alone.  The growth
exponent is the slope of log(time) / log(size): 1.0 is linear.

    python -m bench.view_scaling                          # 0.25M -> 1M -> 4M events; 2 -> 8 -> 32 processes
    python -m bench.view_scaling --events 1e6,1e7,1e8 --processes 2,64,512   # the full curves (long)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _slope(xs, ys) -> float | None:
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def point(work: str, processes: int, events: int, jobs: int) -> dict:
    from bench.synth_capture import generate
    from bench.view_throughput import run_mode

    src = os.path.join(work, f"cap_{processes}_{events}")
    generate(src, 1 if processes < 8 else processes // 8, min(processes, 8), events)
    r = run_mode("parquet", src, os.path.join(work, "pq"))
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(os.path.join(work, "pq"), ignore_errors=True)
    return {"processes": processes, "events_per_process": events, "total_events": processes * events,
            "seconds": r["seconds"], "peak_rss": r["peak_rss"], "base_rss": r["base_rss"],
            "events_per_s": processes * events / r["seconds"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", default="250000,1000000,4000000", help="events per process (one process)")
    ap.add_argument("--processes", default="2,8,32", help="process counts (50k events each)")
    ap.add_argument("--per-process", type=int, default=50_000)
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(HERE))
    work = tempfile.mkdtemp(prefix="nx-scale-")
    try:
        ev_points = [point(work, 1, int(float(e)), 1) for e in a.events.split(",")]
        pr_points = [point(work, int(p), a.per_process, 1) for p in a.processes.split(",")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res = {
        "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
        "events_curve": ev_points, "processes_curve": pr_points,
        "time_exponent_events": _slope([p["total_events"] for p in ev_points], [p["seconds"] for p in ev_points]),
        "memory_exponent_events": _slope([p["total_events"] for p in ev_points],
                                         [max(p["peak_rss"] - p["base_rss"], 1) for p in ev_points]),
        "time_exponent_processes": _slope([p["processes"] for p in pr_points], [p["seconds"] for p in pr_points]),
        "memory_exponent_processes": _slope([p["processes"] for p in pr_points],
                                            [max(p["peak_rss"] - p["base_rss"], 1) for p in pr_points]),
    }
    print(f"{'processes':>10}{'events/proc':>13}{'seconds':>10}{'events/s':>12}{'peak RSS':>12}")
    for p in ev_points + pr_points:
        print(f"{p['processes']:>10}{p['events_per_process']:>13,}{p['seconds']:>10.2f}{p['events_per_s']:>12,.0f}"
              f"{p['peak_rss'] / 2**20:>10.0f}MB")
    for k in ("time_exponent_events", "memory_exponent_events", "time_exponent_processes", "memory_exponent_processes"):
        v = res[k]
        print(f"{k}: {v:.2f}" if v is not None else f"{k}: n/a")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "view_scaling.json"), "w") as f:
        json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
