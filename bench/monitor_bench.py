"""Benchmark: neuron-monitor CPU per period with many applications, and the exporter's scrape time.

Starts N real processes that publish stats through AppStats (each records a
few hundred executions per second over several graphs and cores), runs the
real ``neuron-monitor`` at a 1 s period on all of them, and measures the
monitor's own CPU time (user + system from /proc) over a steady-state
window.  The captured reports then feed the Prometheus companion: scrape time
is measured both for rendering (``generate_latest``) and for a full HTTP GET
on 127.0.0.1.

    python bench/monitor_bench.py [--apps 32] [--seconds 20]

Prints a table and writes bench/results/monitor.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

APP = r"""
import os, random, sys, time
from neuron_explorer.recorders.app_stats import AppStats
s = AppStats(sys.argv[1], None, None, [0, 1])
for m in range(4):
    s.on_model_load(m, f"graph_{m}", m % 2, flops=1e9 * (m + 1), subgraphs=2, code_bytes=1 << 20,
                    constants_bytes=64 << 20)
s.set_memory({"constants": 64 << 20, "tensors": 8 << 20, "dma_buffers": 1 << 20},
             {0: {"constants": 128 << 20, "model_code": 2 << 20, "tensors": 16 << 20},
              1: {"constants": 128 << 20, "model_code": 2 << 20, "tensors": 16 << 20}})
s.start()
print("ready", flush=True)
rng = random.Random(os.getpid())
while True:
    for _ in range(20):
        m = rng.randrange(4)
        d = int(rng.lognormvariate(13, 0.5))
        s.on_execution(m, m % 2, d + 20000, d, "completed")
    time.sleep(0.1)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--apps", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=20.0, help="steady-state measurement window")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "monitor.json"))
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="nx-monitor-bench-"))
    stats_dir = tmp / "stats"
    env = dict(os.environ, NEURON_EXPLORER_STATS_DIR=str(stats_dir))
    apps: list[subprocess.Popen] = []
    mon = None
    try:
        for i in range(args.apps):
            apps.append(subprocess.Popen([sys.executable, "-c", APP, f"bench_{i:02d}"], env=env,
                                         stdout=subprocess.PIPE, text=True))
        for p in apps:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        conf = tmp / "monitor.conf"
        conf.write_text(json.dumps({
            "period": "1s",
            "neuron_runtimes": [{"tag_filter": ".*", "metrics": [
                {"type": "neuroncore_counters"}, {"type": "execution_stats"},
                {"type": "memory_used"}, {"type": "neuron_runtime_vcpu_usage"}]}],
            "system_metrics": [{"type": "vcpu_usage"}, {"type": "memory_info"}, {"type": "neuron_hw_counters"}],
        }))
        exe = shutil.which("neuron-monitor") or str(Path(sys.executable).with_name("neuron-monitor"))
        mon = subprocess.Popen([exe, "-c", str(conf)], env=env, stdout=subprocess.PIPE, text=True)
        proc = psutil.Process(mon.pid)
        assert mon.stdout is not None
        for _ in range(3):  # warm-up: start-up, imports, first discovery
            mon.stdout.readline()
        c0, t0 = proc.cpu_times(), time.monotonic()
        reports = []
        while time.monotonic() - t0 < args.seconds:
            reports.append(mon.stdout.readline())
        c1, t1 = proc.cpu_times(), time.monotonic()
        wall = t1 - t0
        cpu = (c1.user - c0.user) + (c1.system - c0.system)
        last = json.loads(reports[-1])
        n_apps = len(last["neuron_runtime_data"])
        report_bytes = len(reports[-1])
    finally:
        if mon is not None:
            mon.terminate()
            mon.wait(timeout=10)
        for p in apps:
            p.terminate()
        for p in apps:
            p.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)

    # ---- exporter scrape time, fed with the real reports
    from prometheus_client import CollectorRegistry, generate_latest

    from neuron_explorer.monitor.prometheus_exporter import ReportState, serve

    state = ReportState()
    for line in reports:
        state.update(json.loads(line))
    body = state.render()
    series = sum(1 for ln in body.decode().splitlines() if ln and not ln.startswith("#"))
    render = []  # rendering after each new report (the cache is dropped each time)
    for _ in range(50):
        state._body = None
        s = time.perf_counter()
        state.render()
        render.append((time.perf_counter() - s) * 1e3)
    reg = CollectorRegistry(auto_describe=False)  # the peer: prometheus_client's generic formatter
    reg.register(state)
    generic = []
    for _ in range(10):
        s = time.perf_counter()
        generate_latest(reg)
        generic.append((time.perf_counter() - s) * 1e3)
    port = _free_port()
    server = serve(state, "127.0.0.1", port)
    http = []  # warm scrapes: the body is cached between reports
    for _ in range(50):
        s = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            r.read()
        http.append((time.perf_counter() - s) * 1e3)
    update = []
    for line in reports[-20:]:
        rep = json.loads(line)
        s = time.perf_counter()
        state.update(rep)
        update.append((time.perf_counter() - s) * 1e3)
    cold = []  # a scrape right after a report: render + HTTP
    for line in reports[-20:]:
        state.update(json.loads(line))
        s = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            r.read()
        cold.append((time.perf_counter() - s) * 1e3)
    server.shutdown()

    from neuron_explorer.util import jsonfast as _json

    result = {
        **provenance.stamp(),
        "host": {"cpus": psutil.cpu_count(), "python": platform.python_version(), "machine": platform.machine(),
                 "load_average_1m_at_end": round(os.getloadavg()[0], 2)},
        "json_backend": _json.BACKEND,
        "apps_requested": args.apps,
        "apps_in_report": n_apps,
        "period_s": 1.0,
        "window_s": round(wall, 3),
        "reports": len(reports),
        "report_bytes": report_bytes,
        "monitor_cpu_s": round(cpu, 4),
        "monitor_cpu_pct_of_one_core": round(100.0 * cpu / wall, 3),
        "monitor_cpu_target_pct": 1.0,
        "exporter_series": series,
        "exporter_render_ms_median": round(statistics.median(render), 3),
        "exporter_render_ms_p95": round(sorted(render)[int(0.95 * len(render)) - 1], 3),
        "exporter_http_scrape_ms_median": round(statistics.median(http), 3),
        "exporter_http_scrape_ms_p95": round(sorted(http)[int(0.95 * len(http)) - 1], 3),
        "exporter_first_scrape_after_report_ms_median": round(statistics.median(cold), 3),
        "exporter_first_scrape_after_report_ms_max": round(max(cold), 3),
        "prometheus_client_generate_latest_ms_median": round(statistics.median(generic), 3),
        "exporter_scrape_target_ms": 20.0,
        "exporter_update_ms_median": round(statistics.median(update), 3),
    }
    rows = [
        ("apps monitored", f"{n_apps}"),
        ("JSON backend", _json.BACKEND),
        ("host load average (1 min)", f"{result['host']['load_average_1m_at_end']} on {psutil.cpu_count()} vCPUs"),
        ("reports in window", f"{len(reports)} over {wall:.1f} s"),
        ("report size", f"{report_bytes / 1024:.1f} KiB"),
        ("monitor CPU (% of one core)", f"{result['monitor_cpu_pct_of_one_core']:.3f} %  (target < 1 %)"),
        ("exporter series", f"{series}"),
        ("exporter render median / p95",
         f"{result['exporter_render_ms_median']:.2f} / {result['exporter_render_ms_p95']:.2f} ms"),
        ("exporter HTTP scrape median / p95",
         f"{result['exporter_http_scrape_ms_median']:.2f} / {result['exporter_http_scrape_ms_p95']:.2f} ms  "
         "(target < 20 ms)"),
        ("exporter first scrape after a report median / max",
         f"{result['exporter_first_scrape_after_report_ms_median']:.2f} / "
         f"{result['exporter_first_scrape_after_report_ms_max']:.2f} ms"),
        ("peer: prometheus_client generate_latest", f"{result['prometheus_client_generate_latest_ms_median']:.2f} ms"),
        ("exporter report ingest median", f"{result['exporter_update_ms_median']:.2f} ms"),
    ]
    w = max(len(r[0]) for r in rows)
    print(f"{'metric'.ljust(w)}  value")
    for k, v in rows:
        print(f"{k.ljust(w)}  {v}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
