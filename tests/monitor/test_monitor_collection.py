"""The monitor's application groups: exact deltas, late arrivals, dead and vanishing applications."""

import subprocess
import sys
import time
from pathlib import Path

from monitor_helpers import Apps

from neuron_explorer.monitor.config import parse_config
from neuron_explorer.monitor.monitor import Monitor
from neuron_explorer.recorders.app_stats import AppStats

ALL = [{"type": g} for g in ("neuroncore_counters", "execution_stats", "memory_used", "neuron_runtime_vcpu_usage")]


def _monitor(stats_dir: Path, tag_filter: str = ".*") -> Monitor:
    cfg = parse_config({"period": "1s", "neuron_runtimes": [{"tag_filter": tag_filter, "metrics": ALL}],
                        "system_metrics": [{"type": "memory_info"}]})
    return Monitor(cfg, stats_dir=stats_dir, use_nvml=False)


def _tick(m: Monitor) -> dict:
    assert m.collect_due(now=m.next_due())
    return m.report()


def test_every_execution_is_counted_in_exactly_one_report(stats_dir: Path) -> None:
    s = AppStats("train_me", None, "i", [0], interval_s=3600)
    s.on_model_load(1, "g", 0, flops=1000.0)
    s.start()
    try:
        m = _monitor(stats_dir)
        total = 0
        for burst in (5, 0, 7):
            for _ in range(burst):
                s.on_execution(1, 0, 2_000_000, 1_000_000, "completed")
            time.sleep(0.01)
            s.publish()
            rep = _tick(m)
            (rt,) = rep["neuron_runtime_data"]
            ex = rt["report"]["execution_stats"]
            assert ex["execution_summary"]["completed"] == burst
            total += burst
            lat = ex["latency_stats"]["total_latency"]
            if burst:
                assert 0.0018 < lat["p50"] < 0.0022
                nc = rt["report"]["neuroncore_counters"]["neuroncores_in_use"]["0"]
                assert nc["neuroncore_utilization"] > 0 and nc["flops"] > 0
            else:
                assert lat is None
        assert total == 12
    finally:
        s.stop()


def test_application_started_after_the_monitor_is_counted_from_its_start(stats_dir: Path) -> None:
    m = _monitor(stats_dir)
    assert m.apps == {}
    s = AppStats("late", None, "i", [0], interval_s=3600)
    for _ in range(3):
        s.on_execution(1, 0, 1000, 1000, "completed")
    s.start()
    try:
        rep = _tick(m)
        (rt,) = rep["neuron_runtime_data"]
        assert rt["neuron_runtime_tag"] == "late"
        assert rt["report"]["execution_stats"]["execution_summary"]["completed"] == 3
        mem = rt["report"]["memory_used"]["neuron_runtime_used_bytes"]
        assert mem["host"] > 0  # the process's resident memory
        assert rep["system_data"]["memory_info"]["memory_total_bytes"] > 0
    finally:
        s.stop()
    rep = _tick(m)
    assert rep["neuron_runtime_data"] == []  # stop() removed the snapshot


def test_snapshot_of_a_dead_process_is_ignored_and_removed(stats_dir: Path) -> None:
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(p.stdout)
    s = AppStats("ghost", dead_pid, "i", [0])
    stats_dir.mkdir(parents=True, exist_ok=True)
    s.publish()  # a crashed app leaves its file behind
    stale = stats_dir / f"{dead_pid}.json"
    assert stale.exists()
    (stats_dir / "junk.json").write_text("not json")
    (stats_dir / "99999999.json").write_text("{truncated")
    m = _monitor(stats_dir)
    assert dead_pid not in m.apps and not stale.exists()
    rep = _tick(m)
    assert rep["neuron_runtime_data"] == []


def test_application_exiting_mid_period_is_dropped_without_crash(apps: Apps, stats_dir: Path) -> None:
    p = apps.start("train_short", 30.0, "--numpy")
    apps.wait_ready()
    m = _monitor(stats_dir, "^train_")
    rep = _tick(m)
    assert [r["pid"] for r in rep["neuron_runtime_data"]] == [p.pid]
    p.kill()  # no atexit: the snapshot file stays behind
    p.wait()
    rep = _tick(m)
    assert rep["neuron_runtime_data"] == []
    assert not (stats_dir / f"{p.pid}.json").exists()


def test_tag_filter_excludes_other_applications(stats_dir: Path) -> None:
    a = AppStats("train_1", None, "i", [0], interval_s=3600).start()
    try:
        m = _monitor(stats_dir, "^eval")
        assert _tick(m)["neuron_runtime_data"] == []
    finally:
        a.stop()


def test_filtered_out_application_that_dies_has_its_snapshot_removed(apps: Apps, stats_dir: Path) -> None:
    p = apps.start("eval_x", 30.0, "--numpy")
    apps.wait_ready()
    m = _monitor(stats_dir, "^train_")
    assert _tick(m)["neuron_runtime_data"] == []
    assert p.pid in m._ignored
    p.kill()
    p.wait()
    assert _tick(m)["neuron_runtime_data"] == []
    assert not (stats_dir / f"{p.pid}.json").exists()
