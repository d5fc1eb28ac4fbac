"""The runtime's own hooks feed neuron-monitor: unmodified compiled programs, tagged by
NEURON_PROCESS_TAG, show up with their executions and loaded graphs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from monitor_helpers import FULL_RUNTIME_METRICS, bin_path, write_config

pytestmark = pytest.mark.slow

APP = Path(__file__).parent / "apps" / "compiled_loop.py"


def test_tagged_compiled_programs_are_reported(tmp_path: Path) -> None:
    stats = tmp_path / "stats"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_RT_", "NEURON_PROCESS_TAG"))}
    env["NEURON_EXPLORER_STATS_DIR"] = str(stats)
    procs = []
    for tag in ("train_x", "serve_y"):
        p = subprocess.Popen([sys.executable, str(APP), "40"], env=dict(env, NEURON_PROCESS_TAG=tag),
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        conf = write_config(tmp_path / "monitor.conf", {
            "period": "1s", "neuron_runtimes": [{"tag_filter": "^train_", "metrics": FULL_RUNTIME_METRICS}]})
        mon = subprocess.Popen([bin_path("neuron-monitor"), "-c", str(conf)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
        try:
            reports = [json.loads(mon.stdout.readline()) for _ in range(3)]
        finally:
            mon.terminate()
            mon.wait(timeout=10)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
    last = reports[-1]
    (rt,) = last["neuron_runtime_data"]
    assert rt["neuron_runtime_tag"] == "train_x" and rt["pid"] == procs[0].pid
    ex = rt["report"]["execution_stats"]
    assert ex["execution_summary"]["completed"] > 0
    assert ex["latency_stats"]["total_latency"]["p50"] > 0
    models = rt["report"]["memory_used"]["loaded_models"]
    assert models and all(m["name"] for m in models)
    nc = rt["report"]["neuroncore_counters"]["neuroncores_in_use"]["0"]
    assert nc["neuroncore_utilization"] > 0
