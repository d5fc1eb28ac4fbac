"""The per-process stats publisher: counters, private files, clean shutdown."""

import json
import os
import stat
from pathlib import Path

import pytest

from neuron_explorer.contracts import stats_files
from neuron_explorer.recorders.app_stats import AppStats


def test_snapshot_file_is_private_and_holds_the_counters(stats_dir: Path) -> None:
    s = AppStats("train_x", None, "i-test", [0, 1], interval_s=60)
    s.on_model_load(7, "mlp", 1, flops=1e6, code_bytes=10, constants_bytes=20)
    s.on_execution(7, 1, 2_000_000, 1_500_000, "completed", end_ns=10_000_000)
    s.on_execution(7, 1, 3_000_000, 2_500_000, "completed_with_num_err", end_ns=20_000_000)
    s.on_execution(7, 1, 100, -1, "failed_to_queue")
    s.on_error("numerical")
    s.set_memory({"tensors": 5}, {1: {"constants": 20, "model_code": 10}})
    s.start()
    try:
        path = stats_dir / f"{os.getpid()}.json"
        assert path.exists()
        assert stat.S_IMODE(os.stat(stats_dir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        s.publish()
        snap = json.loads(path.read_text())
        assert snap["tag"] == "train_x" and snap["instance_id"] == "i-test"
        assert snap["executions"]["completed"] == 1
        assert snap["executions"]["completed_with_num_err"] == 1
        assert snap["executions"]["failed_to_queue"] == 1
        assert snap["errors"]["numerical"] == 1
        core = snap["cores"]["1"]
        assert core["busy_ns"] == 4_000_000  # queue failures never ran
        assert core["flops"] == 2e6 and core["flops_known"]
        assert sum(snap["latency"]["total"][1]) == 2
        assert snap["memory"]["per_core"]["1"]["model_code"] == 10
        assert snap["models"][0]["executions"] == 3
    finally:
        s.stop()
    assert not path.exists()


def test_busy_time_is_the_union_of_execution_intervals(stats_dir: Path) -> None:
    """Overlapping executions on a core count once, as in view's summaries (one definition of busy
    time): also when the overlap spans two snapshots."""
    s = AppStats("t", None, "i-test", [0], interval_s=60)
    s.on_execution(1, 0, 4_000_000, 4_000_000, "completed", end_ns=14_000_000)  # [10, 14] ms
    s.on_execution(1, 0, 4_000_000, 4_000_000, "completed", end_ns=16_000_000)  # [12, 16] ms
    assert s.snapshot()["cores"]["0"]["busy_ns"] == 6_000_000
    s.on_execution(1, 0, 3_000_000, 3_000_000, "completed", end_ns=17_000_000)  # [14, 17]: 1 ms new
    s.on_execution(1, 0, 1_000_000, -1, "completed", end_ns=30_000_000)  # host time when unmeasured
    snap = s.snapshot()
    assert snap["cores"]["0"]["busy_ns"] == 8_000_000 and snap["cores"]["0"]["executions"] == 4


def test_tag_defaults_to_env_then_pid(stats_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_PROCESS_TAG", "tagged")
    assert AppStats(None, 123, "i", [0]).tag == "tagged"
    monkeypatch.delenv("NEURON_PROCESS_TAG")
    assert AppStats(None, 123, "i", [0]).tag == "123"
    assert len(AppStats("x" * 400, 1, "i", [0]).tag) == 255


def test_unknown_status_class_or_memory_category_is_rejected(stats_dir: Path) -> None:
    s = AppStats("t", None, "i", [0])
    with pytest.raises(ValueError, match="completed_with_err"):
        s.on_execution(1, 0, 1, 1, "done")
    with pytest.raises(ValueError, match="hardware"):
        s.on_error("cosmic")
    with pytest.raises(ValueError, match="dma_buffers"):
        s.set_memory({"heap": 1}, {})


def test_refuses_a_stats_dir_owned_by_someone_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "neuron-explorer-x" / "stats"
    d.mkdir(parents=True)
    if os.getuid() == 0:
        os.chown(d, 4321, 4321)
        with pytest.raises(stats_files.EndpointError, match="belongs to uid 4321"):
            stats_files.ensure_private_dir(d)
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(stats_files.EndpointError, match="symbolic link"):
        stats_files.ensure_private_dir(link)


def test_default_dir_prefers_env_then_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NEURON_EXPLORER_STATS_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert stats_files.default_stats_dir() == tmp_path / "neuron-explorer" / "stats"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert stats_files.default_stats_dir().parent.name == f"neuron-explorer-{os.getuid()}"
    monkeypatch.setenv("NEURON_EXPLORER_STATS_DIR", str(tmp_path / "x"))
    assert stats_files.default_stats_dir() == tmp_path / "x"


def test_forked_child_neither_overwrites_nor_removes_the_parents_snapshot(stats_dir: Path) -> None:
    s = AppStats("parent", None, "i", [0], interval_s=3600).start()
    try:
        s.on_execution(1, 0, 10, 10, "completed")
        s.publish()
        pid = os.fork()
        if pid == 0:  # child: what a fork-based worker does at exit
            s.on_execution(1, 0, 10, 10, "timed_out")
            s.publish()
            s.stop()
            os._exit(0)
        os.waitpid(pid, 0)
        assert s.path.exists()
        snap = json.loads(s.path.read_text())
        assert snap["executions"]["completed"] == 1 and snap["executions"]["timed_out"] == 0
    finally:
        s.stop()


def _seq(path: Path) -> int:
    return json.loads(path.read_text())["seq"]


def test_without_a_monitor_the_publisher_backs_off_until_one_announces_itself(stats_dir: Path) -> None:
    import time

    s = AppStats("idle", None, "i", [0], interval_s=0.05, idle_interval_s=3600).start()
    try:
        path = stats_dir / f"{os.getpid()}.json"
        first = _seq(path)  # start() publishes once, monitor or not
        time.sleep(0.4)  # eight periods: none publishes, nobody reads
        assert _seq(path) == first
        stats_files.announce_monitor(stats_dir)
        deadline = time.monotonic() + 10
        while _seq(path) < first + 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _seq(path) >= first + 3  # one per period now
    finally:
        s.stop()


def test_without_a_monitor_the_snapshot_is_still_rewritten_every_idle_interval(stats_dir: Path) -> None:
    import time

    s = AppStats("slow", None, "i", [0], interval_s=0.05, idle_interval_s=0.3).start()
    try:
        path = stats_dir / f"{os.getpid()}.json"
        first = _seq(path)
        deadline = time.monotonic() + 10
        while _seq(path) == first and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _seq(path) == first + 1
        assert time.monotonic() < deadline
    finally:
        s.stop()


def test_counters_publish_nothing_until_the_process_runs_a_workload(stats_dir: Path) -> None:
    """The runtime's counters (``workload=False``): no snapshot and no final one while the process
    runs no framework, even with a monitor watching; published at once when the workload begins."""
    import time

    stats_files.announce_monitor(stats_dir)
    path = stats_dir / f"{os.getpid()}.json"
    idle = AppStats("tool", None, "i", [0], interval_s=0.05, workload=False).start()
    time.sleep(0.3)  # six periods
    assert not path.exists()
    idle.stop()  # a monitor is announced: a workload would leave its final snapshot here
    assert not path.exists()

    s = AppStats("job", None, "i", [0], interval_s=3600, workload=False).start()
    try:
        assert not path.exists()
        s.begin_workload()  # (the publisher thread, not the caller, writes: long period, yet at once)
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert json.loads(path.read_text())["tag"] == "job"
    finally:
        s.stop()
    assert stats_files.is_final_head(stats_files.read_head(path))  # its counters at exit, for the monitor
