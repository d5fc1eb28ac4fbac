"""Run every benchmark and print one table: ``python -m bench [--full]``.

Each benchmark runs in its own process and writes ``bench/results/<name>.json``; this runner then
collects the headline figures, each a same-run ratio against its peer or a stated absolute with
its target, into one table and ``bench/results/summary.json``.  Default: quick settings (about 10
minutes on a 2-core machine); ``--full`` uses each benchmark's full settings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RES = os.path.join(HERE, "results")

BENCHES = {
    # name: (quick args, full args)
    "capture_overhead": (["--quick"], []),
    "view_throughput": (["--instances", "2", "--processes", "2", "--events", "500000"], ["--events", "1000000"]),
    "hook_costs": (["--runs", "3", "--calls", "2000"], []),
    "view_scaling": (["--events", "1e6,4e6", "--processes", "2,16", "--out", "view_scaling_quick.json"], []),
    "ndet_bench": (["--quick"], []),
    "monitor_bench": (["--seconds", "10"], []),
    "ui_bench": (["--events", "4000000"], []),
}


def _load(name: str, full: bool = False) -> dict:
    fname = {"ndet_bench": "ndet.json", "monitor_bench": "monitor.json", "ui_bench": "ui.json",
             "view_scaling": "view_scaling.json" if full else "view_scaling_quick.json"}.get(name, name + ".json")
    try:
        with open(os.path.join(RES, fname)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _get(d: dict, *path, default=None):
    for p in path:
        if isinstance(d, dict) and p in d:
            d = d[p]
        else:
            return default
    return d


def _flatten(d, prefix: str = ""):
    """(dotted key, number) for the numeric leaves of nested dicts."""
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        yield prefix, float(d)


def headline(results: dict[str, dict]) -> list[tuple[str, str, str, str]]:
    """(figure, value, peer / target, benchmark) rows."""
    rows = []
    co = results.get("capture_overhead", {})
    for cfg, d in (co.get("configs") or {}).items():
        if cfg == "unprofiled":
            continue
        for key, label in (("ratio_vs_unprofiled", "wall"), ("cpu_ratio_vs_unprofiled", "CPU")):
            v = d.get(key)
            if isinstance(v, (int, float)):
                rows.append((f"capture {cfg} step time ({label})", f"{v:.3f}x",
                             "vs unprofiled, same run; target <= 1.01x (system profile)", "capture_overhead"))
    vt = results.get("view_throughput", {})
    for m in vt.get("modes", []):
        ours = m["mode"] in ("parquet", "perfetto", "json")
        rows.append((f"view {m['mode']} events/s", f"{m['events_per_s']:,.0f}",
                     "target 5M/s/core (parquet), 2M/s (perfetto)" if ours else "peer (same events, same run)",
                     "view_throughput"))
        if "events_per_cpu_s" in m and m["mode"] in ("parquet", "perfetto"):
            rows.append((f"view {m['mode']} events/CPU-second", f"{m['events_per_cpu_s']:,.0f}",
                         "per core (one worker)", "view_throughput"))
    for peer in ("load-orjson", "load-json"):
        if f"parquet_speed_vs_{peer}" in vt:
            rows.append((f"view parquet speed vs {peer}", f"{vt[f'parquet_speed_vs_{peer}']:.1f}x",
                         "peer: loading the Chrome JSON of the same events", "view_throughput"))
    if "perfetto_vs_chrome_json_size" in vt:
        rows.append(("perfetto size / chrome json", f"{vt['perfetto_vs_chrome_json_size']:.3f}", "target <= 0.2", "view_throughput"))
    for name, keys, target in (
        ("ndet_bench", ("overhead", "analysis"), "logging <= 1% (1 s flush); 64 x 20 MB logs < 20 s"),
        ("monitor_bench", ("monitor_cpu_pct_of_one_core", "exporter_http_scrape_ms_p95",
                           "exporter_first_scrape_after_report_ms_max"), "CPU < 1% of a core; scrape < 20 ms"),
        ("ui_bench", ("first_paint_ms_after_load_event", "window_query_ms", "browser_memory"),
         "first paint < 2 s; window p95 < 150 ms; browser < 500 MB"),
    ):
        for path, v in _flatten({k: results.get(name, {}).get(k) for k in keys}):
            rows.append((f"{name.replace('_bench', '')} {path}"[:44], f"{v:.3f}", target, name))
    for op, d in (results.get("hook_costs", {}).get("ops") or {}).items():
        rows.append((f"hook {op} per call", f"{d['hook_ns'] / 1000:+.1f} us ({d['ratio']:.2f}x)",
                     "vs the same call unprofiled, same run", "hook_costs"))
    vs = results.get("view_scaling", {})
    for k in ("time_exponent_events", "memory_exponent_processes"):
        if vs.get(k) is not None:
            rows.append((f"view scaling {k}", f"{vs[k]:.2f}", "1.0 = linear; 0 = flat", "view_scaling"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--only", default=None, help="comma-separated benchmark names")
    a = ap.parse_args()
    names = a.only.split(",") if a.only else list(BENCHES)
    timings = {}
    for name in names:
        args = BENCHES[name][1 if a.full else 0]
        t = time.perf_counter()
        print(f"== {name} {' '.join(args)}", flush=True)
        p = subprocess.run([sys.executable, "-m", f"bench.{name}", *args], cwd=os.path.dirname(HERE))
        timings[name] = {"seconds": time.perf_counter() - t, "returncode": p.returncode}
    results = {n: _load(n, a.full) for n in BENCHES}
    rows = headline(results)
    print()
    print(f"{'figure':<44}{'value':>14}  {'peer / target':<44}{'benchmark'}")
    for fig, val, peer, b in rows:
        print(f"{fig:<44}{val:>14}  {peer:<44}{b}")
    summary = {"date": time.strftime("%Y-%m-%d"), "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                                              "python": platform.python_version()},
               "runs": timings, "headline": [dict(zip(("figure", "value", "peer_or_target", "benchmark"), r)) for r in rows],
               "results": results}
    os.makedirs(RES, exist_ok=True)
    with open(os.path.join(RES, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)


if __name__ == "__main__":
    main()
