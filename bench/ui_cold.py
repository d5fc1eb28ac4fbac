"""Cold first paint of the System Trace Viewer, before/after in one run (issue #18 item 4).

Opens the same synthetic many-rank profile (bench/ui_bench.py's store) cold, again and again, in a
fresh server each time with an empty index cache, alternating between servers run from different
source trees (e.g. ``main``'s and this one's), so both see the same machine load. Per open: ms from
navigation until the timeline's first paint, until the detail (the index) is drawn, the server's CPU
seconds at the first paint, and when each request of the first paint was answered (the browser's
resource timings), for a breakdown.

    python -m bench.ui_cold --work /tmp/ui20m --events 20000000 --opens 3 --baseline-src /work/main/src
    python -m bench.ui_cold --work /tmp/ui20m --no-write --opens 3 --no-summary-too   # this tree only
    python -m bench.ui_cold --work /tmp/ui512 --no-write --instances 64 --opens 3 --no-overview-too
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "ui_cold.json"


def _open_once(src: Path, ws: Path, name: str, cache: Path) -> dict:
    from bench.ui_bench import cold_open, free_port

    shutil.rmtree(cache, ignore_errors=True)  # our own scratch directory: the index cache of this open
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), PYTHONPATH=str(src))
    port = free_port()
    t = time.perf_counter()
    srv = subprocess.Popen([sys.executable, "-m", "neuron_explorer.ui.server", str(ws), "127.0.0.1", str(port)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        url = srv.stdout.readline().strip()
        started = (time.perf_counter() - t) * 1000
        got = cold_open(url, name, srv.pid, timings=True)
    finally:
        srv.terminate()
        srv.wait(30)
        shutil.rmtree(cache, ignore_errors=True)
    got["server_start_ms"] = round(started, 1)
    return got


def _median(runs: list[dict], key: str) -> float | None:
    xs = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(xs), 2) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="scratch directory holding workspace/ (kept)")
    ap.add_argument("--events", type=int, default=20_000_000)
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--ranks-per-instance", type=int, default=8)
    ap.add_argument("--no-write", action="store_true", help="reuse the store already in --work")
    ap.add_argument("--opens", type=int, default=3, help="cold opens per source tree (default 3)")
    ap.add_argument("--baseline-src", action="append", default=[],
                    help="another source tree's src/ to open the same profile with (repeatable), e.g. main's")
    ap.add_argument("--no-summary-too", action="store_true",
                    help="also open a copy of the profile without the events summary (an older view's workspace)")
    ap.add_argument("--no-overview-too", action="store_true",
                    help="also open a copy of the profile with the per-process summaries but without the events "
                         "overview (a workspace of the view before decision 0142)")
    ap.add_argument("--write-overview", action="store_true",
                    help="with --no-write: add the events overview to a store written before it existed")
    ap.add_argument("--results", default=str(RESULTS))
    args = ap.parse_args()
    from bench.ui_bench import write_store
    from neuron_explorer.contracts.dataset import EVENT_OVERVIEW, table_file
    from neuron_explorer.exporters import event_overview

    work = Path(args.work)
    ws = work / "workspace"
    name = f"synthetic-{args.instances * args.ranks_per_instance}r"
    if not args.no_write:
        shutil.rmtree(ws / name, ignore_errors=True)
        write_store(ws / name, args.instances, args.ranks_per_instance, args.events)
    if args.write_overview and not (ws / name / table_file(EVENT_OVERVIEW)).is_file():
        event_overview.write(str(ws / name))
    trees = [(f"baseline:{s}", Path(s), ws, name) for s in args.baseline_src] + [("this", REPO / "src", ws, name)]
    if args.no_overview_too:  # the same events and summaries in a workspace of its own, without the overview
        old = work / "workspace-nooverview"
        if not (old / name).is_dir():
            shutil.copytree(ws / name, old / name, ignore=shutil.ignore_patterns(table_file(EVENT_OVERVIEW)))
        trees.append(("this, summaries only", REPO / "src", old, name))
    if args.no_summary_too:  # the same events in a workspace of its own, without the summary
        old = work / "workspace-nosummary"
        if not (old / name).is_dir():
            shutil.copytree(ws / name, old / name, ignore=shutil.ignore_patterns("SystemProfileEventSummary",
                                                                                 table_file(EVENT_OVERVIEW)))
        trees.append(("this, no summary", REPO / "src", old, name))
    runs: dict[str, list[dict]] = {label: [] for label, *_ in trees}
    for i in range(args.opens):
        for label, src, w, n in trees:  # interleaved: each tree sees the same load
            r = _open_once(src, w, n, work / "cold-cache")
            runs[label].append(r)
            print(f"[{i + 1}/{args.opens}] {label}: first paint {r['first_paint_ms']} ms, "
                  f"detail {r['detail_ready_ms']} ms, server {r['server_cpu_s_at_first_paint']} CPU-s at the first "
                  f"paint, page main thread {r.get('page_main_thread_busy_ms_at_first_paint')} ms busy; requests "
                  f"{r.get('requests')}; load {[round(x, 1) for x in r['loadavg']]}", flush=True)
    out = {**provenance.stamp(), "profile": name, "opens": args.opens, "runs": runs,
           "median": {label: {k: _median(rs, k) for k in ("first_paint_ms", "detail_ready_ms",
                                                           "server_cpu_s_at_first_paint", "server_start_ms",
                                                           "page_main_thread_busy_ms_at_first_paint")}
                      for label, rs in runs.items()},
           "loadavg_1min": {label: [round(r["loadavg"][0], 1) for r in rs] for label, rs in runs.items()}}
    print("\n| source | first paint (median ms) | detail (median ms) | server CPU-s at first paint | page main thread "
          "busy ms at first paint | load (1 min) per open |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, m in out["median"].items():
        print(f"| {label} | {m['first_paint_ms']} | {m['detail_ready_ms']} | {m['server_cpu_s_at_first_paint']} | "
              f"{m['page_main_thread_busy_ms_at_first_paint']} | {out['loadavg_1min'][label]} |")
    Path(args.results).write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nwrote {args.results}")


if __name__ == "__main__":
    main()
