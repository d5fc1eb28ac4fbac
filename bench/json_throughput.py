"""`view --output-format json` events per CPU-second, before and after, beside a naive exporter, in one run.

Generates a synthetic capture through the real writer (bench/synth_capture.py, 1M events by
default), then runs, each in a fresh process and with one worker (--jobs 1, OMP_NUM_THREADS=1):

- ``after``: this checkout's `view` JSON (the C encoder, ``_pqenc.chrome_events``);
- ``before``: ``--before SRC``'s `view` JSON (e.g. an export of main's tree with its C extensions
  built), or, without it, this checkout with the C encoder switched off (the Python path: one dict
  and one ``dumps`` per event);
- ``naive``: one Python dict per event dumped with ``json`` (what a simple Chrome-trace exporter
  does; issue 33's peer).

The three alternate, ``--rounds`` times, in a rotating order; medians of process CPU per mode are
reported (the shared VM's load moves single runs by +-20%; interleaving spreads it over all three).
CPU is the converting process's own, counted from after the imports every mode shares.  Checks that
``before`` and ``after`` wrote the same bytes.  Writes bench/results/json_throughput.json.

    python -m bench.json_throughput [--events 500000 --processes 2 --rounds 5 --before /path/to/src]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

WRAPPER = r"""
import json, sys, time
mode, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
import numpy, pyarrow, google.protobuf  # the libraries every mode loads
from neuron_explorer.view import pipeline
from neuron_explorer.exporters import chrome_json
from neuron_explorer.analysis import reader
if mode == "python":  # this checkout with the C encoder off
    chrome_json._pqenc = None
cpu = time.process_time()
events = 0
if mode == "naive":
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
else:
    res = pipeline.run(pipeline.ViewOptions(directory=src, output_format="json", output_file=dst, progress=False,
                                            jobs=1))
    events = res.events
print(json.dumps({"cpu_seconds": time.process_time() - cpu, "events": events}))
"""


def run_mode(mode: str, src: str, dst: str, pythonpath: str) -> dict:
    env = dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", WRAPPER, mode, src, dst], capture_output=True, text=True, check=True,
                       env=env)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--events", type=int, default=500_000, help="events per process")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", metavar="SRC", help="the before checkout's src (default: this one, C encoder off)")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(HERE))
    from bench.synth_capture import generate

    after_src = os.path.join(os.path.dirname(HERE), "src")
    # mode -> (wrapper mode, PYTHONPATH)
    modes = {"after": ("view", after_src), "before": ("view", a.before) if a.before else ("python", after_src),
             "naive": ("naive", after_src)}
    work = tempfile.mkdtemp(prefix="nx-json-bench-")
    try:
        src = os.path.join(work, "capture")
        total = generate(src, a.instances, a.processes, a.events)
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        names = list(modes)
        for r in range(a.rounds):
            for m in names[r % 3:] + names[:r % 3]:  # rotate which mode goes first
                wrapper_mode, path = modes[m]
                runs[m].append(run_mode(wrapper_mode, src, os.path.join(work, f"{m}.json"), path))
        identical = filecmp.cmp(os.path.join(work, "before.json"), os.path.join(work, "after.json"), shallow=False)
        out: dict = {
            **provenance.stamp(), "machine": {"cpus": os.cpu_count(),
                                                                 "platform": platform.platform(),
                                                                 "python": platform.python_version(),
                                                                 "loadavg_at_end": os.getloadavg()},
            "capture": {"instances": a.instances, "processes": a.processes, "events": total},
            "rounds": a.rounds, "before_src": a.before or "this checkout, C encoder off",
            "before_after_identical": identical, "output_bytes": os.path.getsize(os.path.join(work, "after.json")),
        }
        for m, rs in runs.items():
            rates = [r["events"] / r["cpu_seconds"] for r in rs]
            out[m] = {"events_per_cpu_s_median": statistics.median(rates), "events_per_cpu_s": rates,
                      "cpu_seconds": [r["cpu_seconds"] for r in rs], "events": rs[0]["events"]}
        out["after_vs_before"] = out["after"]["events_per_cpu_s_median"] / out["before"]["events_per_cpu_s_median"]
        out["after_vs_naive"] = out["after"]["events_per_cpu_s_median"] / out["naive"]["events_per_cpu_s_median"]
        print(f"capture: {total:,} events; {a.rounds} interleaved rounds, one worker, OMP_NUM_THREADS=1; "
              f"load average at end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        for m in modes:
            rates = out[m]["events_per_cpu_s"]
            print(f"{m:<8}{out[m]['events_per_cpu_s_median']:>14,.0f} events/CPU-s (median; "
                  f"range {min(rates):,.0f}-{max(rates):,.0f})")
        print(f"after/before x{out['after_vs_before']:.2f}, after/naive x{out['after_vs_naive']:.2f}, "
              f"before and after identical: {identical}")
        os.makedirs(RESULTS, exist_ok=True)
        with open(os.path.join(RESULTS, "json_throughput.json"), "w") as f:
            json.dump(out, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
