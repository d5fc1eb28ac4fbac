"""`view` throughput and memory against a naive exporter of the same events, in one run.

Generates a synthetic multi-instance capture through the real writer (bench/synth_capture.py),
then runs each output format in a fresh process (so peak RSS is that format's alone) and a naive
peer: one Python dict per event dumped with json (what a simple Chrome-trace exporter does), and
the issue's peer: loading the same events as Kineto-style Chrome JSON with ``json`` and ``orjson``.
Every `view` run uses one worker (--jobs 1), so events/CPU-s is the per-core rate.
Reports events/s, peak RSS per event of the largest process (net of the interpreter + libraries,
measured by the same wrapper on an empty run), output sizes, and Perfetto's size against Chrome
JSON.  Prints a table and writes bench/results/view_throughput.json.

    python -m bench.view_throughput [--instances 2 --processes 2 --events 1000000]
    python -m bench.view_throughput --only parquet --before /path/to/main/src --pairs 5

``--before SRC`` adds paired Parquet runs of another checkout (its ``src``, e.g. main's) in the same
run: before and after alternate in fresh processes, and the medians of events/CPU-s and peak RSS
are reported (the shared VM's load moves single runs by +-20%; pairs move together).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

WRAPPER = r"""
import json, resource, sys, time
mode, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
jobs = int(sys.argv[4]) if len(sys.argv) > 4 else 1
import numpy, pyarrow, pyarrow.parquet, google.protobuf  # the libraries every mode loads
from neuron_explorer.view import pipeline
from neuron_explorer.exporters import parquet as export_parquet, chrome_json as export_json, perfetto as export_perfetto
from neuron_explorer.analysis import reader


def hwm():
    # VmHWM belongs to this exec'd image; ru_maxrss would include the parent's RSS at fork
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


base = hwm()
t = time.perf_counter()
cpu = time.process_time()
events = 0
if mode in ("load-json", "load-orjson"):  # the peer: reading the same events as Kineto-style Chrome JSON
    if mode == "load-json":
        with open(src) as f:
            doc = json.load(f)
    else:
        import orjson
        with open(src, "rb") as f:
            doc = orjson.loads(f.read())
    events = sum(1 for e in doc["traceEvents"] if e.get("ph") in ("X", "i"))
elif mode == "naive-json":
    out = open(dst, "w")
    out.write('{"traceEvents":[')
    first = True
    for p in reader.discover(src):
        s = reader.load_session(p)
        e = s.events
        names = s.type_names
        for i in range(s.num_events):
            d = {"name": names[int(e["type"][i])], "ph": "X", "pid": s.pid, "tid": int(e["nc_idx"][i]),
                 "ts": int(e["start_ns"][i]) / 1000, "dur": int(e["end_ns"][i] - e["start_ns"][i]) / 1000,
                 "args": {"a": int(e["a"][i]), "b": int(e["b"][i])}}
            out.write(("" if first else ",") + json.dumps(d))
            first = False
            events += 1
    out.write("]}")
    out.close()
elif mode != "baseline":
    from neuron_explorer.view.pipeline import ViewOptions, run
    res = run(ViewOptions(directory=src, output_format=mode, output_file=dst, progress=False, jobs=jobs))
    events = res.events
secs = time.perf_counter() - t
cpu = time.process_time() - cpu  # this process only: with jobs=1 that is all the work, on one core
peak = hwm()
print(json.dumps({"mode": mode, "seconds": secs, "cpu_seconds": cpu, "events": events, "peak_rss": peak,
                  "base_rss": base}))
"""


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path) if os.path.exists(path) else 0


def run_mode(mode: str, src: str, dst: str, jobs: int = 1, pythonpath: str | None = None) -> dict:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    p = subprocess.run([sys.executable, "-c", WRAPPER, mode, src, dst, str(jobs)], capture_output=True, text=True,
                       check=True, env=env)
    return json.loads(p.stdout.strip().splitlines()[-1])


def paired_parquet(src: str, work: str, before: str, pairs: int, base_rss: int, events: int) -> dict:
    """Parquet with ``before`` (a src directory) and with this checkout, alternating, ``pairs`` times."""
    import statistics

    after = os.path.join(os.path.dirname(HERE), "src")
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(pairs):
        for name, path in (("before", before), ("after", after)):
            dst = os.path.join(work, f"pq-{name}")
            shutil.rmtree(dst, ignore_errors=True)
            runs[name].append(run_mode("parquet", src, dst, pythonpath=path))
    out = {"before_src": before, "pairs": pairs}
    for name, rs in runs.items():
        out[name] = {"events_per_cpu_s_median": statistics.median(r["events"] / r["cpu_seconds"] for r in rs),
                     "events_per_cpu_s_best": max(r["events"] / r["cpu_seconds"] for r in rs),
                     "cpu_seconds": [r["cpu_seconds"] for r in rs],
                     "peak_rss_median": statistics.median(r["peak_rss"] for r in rs),
                     "net_rss_per_event_largest_process": max(0, statistics.median(r["peak_rss"] for r in rs)
                                                              - base_rss) / events}
    out["speedup_median"] = out["after"]["events_per_cpu_s_median"] / out["before"]["events_per_cpu_s_median"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--events", type=int, default=1_000_000, help="events per process")
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the generated capture and outputs")
    ap.add_argument("--only", choices=["parquet", "perfetto", "json"], help="run this format only (and no peers)")
    ap.add_argument("--before", metavar="SRC", help="also run Parquet with this src directory (e.g. main's), paired")
    ap.add_argument("--pairs", type=int, default=3, help="paired runs with --before (default 3)")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(HERE))
    from bench.synth_capture import generate

    work = tempfile.mkdtemp(prefix="nx-view-bench-")
    try:
        src = os.path.join(work, "capture")
        t = time.perf_counter()
        total = generate(src, a.instances, a.processes, a.events)
        gen_s = time.perf_counter() - t
        capture_bytes = _size(src)
        rows = []
        base = run_mode("baseline", src, os.path.join(work, "none"))
        outs = {"parquet": "pq", "perfetto": "system_profile.pftrace", "json": "system_profile.json"}
        if a.only:
            outs = {a.only: outs[a.only]}
        elif not a.skip_naive:
            outs["naive-json"] = "naive.json"
        for mode, name in outs.items():
            dst = os.path.join(work, name)
            r = run_mode(mode, src, dst)
            r["output_bytes"] = _size(dst)
            r["events_per_s"] = r["events"] / r["seconds"] if r["seconds"] else 0.0
            r["events_per_cpu_s"] = r["events"] / r["cpu_seconds"] if r["cpu_seconds"] else 0.0
            r["net_rss_per_event_largest_process"] = max(0, r["peak_rss"] - base["peak_rss"]) / a.events
            rows.append(r)
        for mode in ("load-json", "load-orjson") if "json" in outs else ():  # the Chrome JSON `view` just wrote
            r = run_mode(mode, os.path.join(work, outs["json"]), "")
            r["events_per_s"] = r["events"] / r["seconds"] if r["seconds"] else 0.0
            r["events_per_cpu_s"] = r["events"] / r["cpu_seconds"] if r["cpu_seconds"] else 0.0
            r["output_bytes"] = 0
            r["net_rss_per_event_largest_process"] = max(0, r["peak_rss"] - base["peak_rss"]) / total
            rows.append(r)
        by = {r["mode"]: r for r in rows}
        result = {
            **provenance.stamp(), "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                                          "python": platform.python_version()},
            "capture": {"instances": a.instances, "processes_per_instance": a.processes,
                        "events_per_process": a.events, "events": total, "bytes_on_disk": capture_bytes,
                        "bytes_per_event": capture_bytes / total, "generate_s": gen_s},
            "baseline_rss": base["peak_rss"], "modes": rows,
        }
        if "perfetto" in by and "json" in by:
            result["perfetto_vs_chrome_json_size"] = by["perfetto"]["output_bytes"] / by["json"]["output_bytes"]
        if a.before:
            result["parquet_paired"] = paired_parquet(src, work, a.before, a.pairs, base["peak_rss"], a.events)
        for peer in ("naive-json", "load-json", "load-orjson"):
            if peer in by:
                for m in ("parquet", "perfetto", "json"):
                    if m in by:
                        result[f"{m}_speed_vs_{peer}"] = by[m]["events_per_s"] / by[peer]["events_per_s"]
                        # the same in CPU time, ours and the peer's alike
                        result[f"{m}_cpu_speed_vs_{peer}"] = by[m]["events_per_cpu_s"] / by[peer]["events_per_cpu_s"]
        print(f"capture: {total:,} events in {a.instances * a.processes} processes, "
              f"{capture_bytes / total:.1f} bytes/event on disk")
        print(f"{'format':<12}{'events/s':>14}{'events/CPU-s':>14}{'seconds':>10}{'peak RSS':>12}{'net B/event':>13}"
              f"{'output':>14}")
        for r in rows:
            print(f"{r['mode']:<12}{r['events_per_s']:>14,.0f}{r['events_per_cpu_s']:>14,.0f}{r['seconds']:>10.2f}"
                  f"{r['peak_rss'] / 2**20:>10.0f}MB{r['net_rss_per_event_largest_process']:>13.1f}"
                  f"{r['output_bytes'] / 2**20:>12.1f}MB")
        if "perfetto_vs_chrome_json_size" in result:
            print(f"perfetto size / chrome json size: {result['perfetto_vs_chrome_json_size']:.3f}")
        pp = result.get("parquet_paired")
        if pp:
            print(f"parquet, {pp['pairs']} pairs, events/CPU-s median (best), peak RSS median: before "
                  f"{pp['before']['events_per_cpu_s_median']:,.0f} ({pp['before']['events_per_cpu_s_best']:,.0f}), "
                  f"{pp['before']['peak_rss_median'] / 2**20:.0f} MB; after "
                  f"{pp['after']['events_per_cpu_s_median']:,.0f} ({pp['after']['events_per_cpu_s_best']:,.0f}), "
                  f"{pp['after']['peak_rss_median'] / 2**20:.0f} MB; x{pp['speedup_median']:.2f}")
        for peer in ("naive-json", "load-json", "load-orjson"):
            for m in ("parquet", "perfetto", "json"):
                k = f"{m}_speed_vs_{peer}"
                if k in result:
                    print(f"{m} speed vs {peer}: {result[k]:.1f}x wall, "
                          f"{result[f'{m}_cpu_speed_vs_{peer}']:.1f}x CPU")
        os.makedirs(RESULTS, exist_ok=True)
        name = "view_throughput.json" if not a.only else f"view_throughput_{a.only}{'_paired' if a.before else ''}.json"
        with open(os.path.join(RESULTS, name), "w") as f:  # (a partial run keeps the full run's file)
            json.dump(result, f, indent=2)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
