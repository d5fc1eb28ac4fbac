"""End to end: real workloads publish stats, a real neuron-monitor process reports on them."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from monitor_helpers import FULL_RUNTIME_METRICS, FULL_SYSTEM_METRICS, Apps, bin_path, write_config

pytestmark = pytest.mark.slow


def read_reports(proc: subprocess.Popen, n: int) -> list[dict]:
    out = []
    for _ in range(n):
        line = proc.stdout.readline()
        assert line, f"neuron-monitor ended early: {proc.stderr.read() if proc.stderr else ''}"
        out.append(json.loads(line))
    return out


def test_tag_filter_reports_exactly_the_training_apps(apps: Apps, stats_dir: Path, tmp_path: Path) -> None:
    train = [apps.start("train_a", 60.0), apps.start("train_b", 60.0)]
    apps.start("serve_c", 60.0)
    apps.wait_ready()
    conf = write_config(tmp_path / "monitor.conf", {
        "period": "1s",
        "neuron_runtimes": [{"tag_filter": "^train_", "metrics": FULL_RUNTIME_METRICS}],
        "system_metrics": FULL_SYSTEM_METRICS,
    })
    mon = subprocess.Popen([bin_path("neuron-monitor"), "-c", str(conf)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        reports = read_reports(mon, 3)
    finally:
        mon.terminate()
        mon.wait(timeout=10)
    assert mon.returncode == 0
    want = {p.pid: tag for p, tag in zip(train, ("train_a", "train_b"))}
    for rep in reports:
        assert list(rep) == ["neuron_runtime_data", "system_data", "instance_info", "neuron_hardware_info"]
        got = {r["pid"]: r["neuron_runtime_tag"] for r in rep["neuron_runtime_data"]}
        assert got == want
        assert set(rep["system_data"]) == {"neuron_hw_counters", "vcpu_usage", "memory_info"}
    last = reports[-1]
    for rt in last["neuron_runtime_data"]:
        assert rt["error"] == "" and rt["address"]
        r = rt["report"]
        assert list(r) == ["neuroncore_counters", "execution_stats", "memory_used", "neuron_runtime_vcpu_usage"]
        ex = r["execution_stats"]
        assert ex["execution_summary"]["completed"] > 0
        assert set(ex["error_summary"]) == {"generic", "numerical", "transient", "model", "runtime", "hardware"}
        for kind in ("total_latency", "device_latency"):
            lat = ex["latency_stats"][kind]
            vals = [lat[k] for k in ("p0", "p1", "p25", "p50", "p75", "p99", "p100")]
            assert vals == sorted(vals) and 0 < vals[0] and vals[-1] < 5.0
        nc = r["neuroncore_counters"]
        assert 0 < nc["neuroncores_in_use"]["0"]["neuroncore_utilization"] <= 100
        assert nc["neuroncores_in_use"]["0"]["flops"] > 0
        assert 0.5 < nc["period"] < 3.0
        mem = r["memory_used"]
        assert mem["neuron_runtime_used_bytes"]["host"] > 0
        assert mem["neuron_runtime_used_bytes"]["neuron_device"] > 0
        assert mem["loaded_models"][0]["name"] == "matmul"
        assert mem["loaded_models"][0]["subgraphs"]["sg_00"]["neuroncore_index"] == 0
        vc = r["neuron_runtime_vcpu_usage"]["vcpu_usage"]
        assert vc["user"] + vc["system"] > 0
    sysd = last["system_data"]
    assert sum(sysd["vcpu_usage"]["average_usage"].values()) > 0
    assert sysd["vcpu_usage"]["context_switch_count"] > 0
    assert sysd["memory_info"]["memory_total_bytes"] > 0
    assert sysd["neuron_hw_counters"]["neuron_devices"][0]["neuron_device_index"] == 0
    assert last["instance_info"]["instance_id"]
    assert last["neuron_hardware_info"]["neuron_device_count"] >= 1


def test_without_config_all_groups_every_five_seconds(apps: Apps, stats_dir: Path) -> None:
    p = apps.start(None, 30.0, "--numpy")
    apps.wait_ready()
    mon = subprocess.Popen([bin_path("neuron-monitor")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        (rep,) = read_reports(mon, 1)
    finally:
        mon.terminate()
        mon.wait(timeout=10)
    (rt,) = rep["neuron_runtime_data"]
    assert rt["neuron_runtime_tag"] == str(p.pid)  # untagged: the pid is the tag
    assert set(rt["report"]) == {"neuroncore_counters", "execution_stats", "memory_used", "neuron_runtime_vcpu_usage"}
    assert 4.0 < rep["system_data"]["vcpu_usage"]["period"] < 7.0
