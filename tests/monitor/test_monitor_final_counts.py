"""What a process did last reaches neuron-monitor (issue 29 item 3): a process that exits while a
monitor is announced leaves its final counters behind, marked final; every monitor reports them
once, whatever its period, and then drops the process; final snapshots go by age and count, and
nothing else in the stats directory is ever removed (docs/decisions/0075-final-snapshots.md).

The end-to-end tests run the real ``neuron-monitor`` over real, unmodified short PyTorch and JAX
jobs with no variable set (discovery: docs/decisions/0030-monitor-discovery.md), in an interpreter
where this checkout is installed as a wheel installs it (``installed.py``)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path

import pytest
from installed import make_installed_python
from monitor_helpers import bin_path, stop_all, write_config

from neuron_explorer.contracts import stats_files
from neuron_explorer.monitor.config import parse_config
from neuron_explorer.monitor.monitor import Monitor
from neuron_explorer.recorders.app_stats import AppStats

JOB = Path(__file__).parent / "apps" / "short_job.py"
CONFIG = {"period": "1s", "neuron_runtimes": [{"metrics": [{"type": "execution_stats"}, {"type": "memory_used"},
                                                           {"type": "neuron_runtime_vcpu_usage"}]}]}
TIMEOUT_S = 180.0  # generous: nothing here asserts how fast, only what is eventually reported


# ------------------------------------------------------------------ in-process: the protocol


def _announced(stats_dir: Path) -> Path:
    stats_files.announce_monitor(stats_dir)
    return stats_dir


def _app(stats_dir: Path, pid: int | None = None) -> AppStats:
    st = AppStats(tag="job", pid=pid, instance_id="i-test", nc_indices=[0], stats_dir=stats_dir, interval_s=3600)
    st.on_model_load(1, "mm", 0, flops=1e6)
    return st.start()


def _entries(mon: Monitor, pid: int) -> list[dict]:
    return [a for a in mon.report()["neuron_runtime_data"] if a["pid"] == pid]


def _collect(mon: Monitor) -> None:
    """One collection of every group, whatever its period (the monitor's clock moved on a day)."""
    mon.test_now = getattr(mon, "test_now", time.monotonic()) + 86400.0
    assert mon.collect_due(now=mon.test_now)


def test_an_exiting_process_leaves_its_final_counts_and_every_monitor_reports_them_once(tmp_path):
    d = _announced(tmp_path / "stats")
    app = _app(d)
    mons = [Monitor(parse_config(CONFIG), stats_dir=d, use_nvml=False) for _ in range(2)]
    for _ in range(7):
        app.on_execution(1, 0, 1000, 1000, "completed")
    app.stop()  # at exit: the 7 executions were never published before
    snap = json.loads(stats_files.snapshot_path(d, app.pid).read_bytes())
    assert snap["final"] is True and snap["executions"]["completed"] == 7
    for mon in mons:  # (this test process is alive: the monitors take the final snapshot as its end)
        _collect(mon)
        (entry,) = _entries(mon, app.pid)
        rep = entry["report"]
        assert rep["execution_stats"]["execution_summary"]["completed"] == 7
        assert rep["neuron_runtime_vcpu_usage"]["vcpu_usage"] is not None
        assert rep["memory_used"]["neuron_runtime_used_bytes"]["host"] > 0
        _collect(mon)
        assert _entries(mon, app.pid) == []  # reported once, then gone
        _collect(mon)
        assert _entries(mon, app.pid) == []
    assert stats_files.snapshot_path(d, app.pid).exists()  # left for monitors that have not read it yet


def test_a_monitor_with_a_long_period_reports_a_final_snapshot_read_between_its_collections(tmp_path):
    d = _announced(tmp_path / "stats")
    app = _app(d)
    cfg = dict(CONFIG, period="1h")
    mon = Monitor(parse_config(cfg), stats_dir=d, use_nvml=False)
    app.on_execution(1, 0, 1000, 1000, "completed")
    app.stop()
    mon.watch_exits()  # a heartbeat: it reads the final snapshot now
    stats_files.snapshot_path(d, app.pid).unlink()  # (pruned long before the hour is over)
    _collect(mon)
    (entry,) = _entries(mon, app.pid)
    assert entry["report"]["execution_stats"]["execution_summary"]["completed"] == 1


def test_a_process_that_starts_and_ends_between_two_collections_is_reported_whole(tmp_path):
    d = _announced(tmp_path / "stats")
    mon = Monitor(parse_config(CONFIG), stats_dir=d, use_nvml=False)
    app = _app(d)
    for _ in range(3):
        app.on_execution(1, 0, 1000, 1000, "completed")
    app.stop()
    _collect(mon)
    (entry,) = _entries(mon, app.pid)
    assert entry["report"]["execution_stats"]["execution_summary"]["completed"] == 3


def test_a_second_stop_returns_only_once_the_first_ones_final_snapshot_is_whole(tmp_path, monkeypatch):
    """The exit's hook and a signal's final write may stop the counters together: the one that
    does not write must not return (and let the process end) while the other still writes."""
    from neuron_explorer.recorders import app_stats

    monkeypatch.setattr(app_stats, "END_WAIT_S", 600.0)  # (what bounds the wait is not tested here)
    d = _announced(tmp_path / "stats")
    app = _app(d)
    app.on_execution(1, 0, 1000, 1000, "completed")
    writing, go = threading.Event(), threading.Event()
    publish = app.publish

    def slow_publish(final=False):
        if final:
            writing.set()
            go.wait()
        return publish(final=final)

    app.publish = slow_publish
    first = threading.Thread(target=app.stop, daemon=True)
    first.start()
    try:
        assert writing.wait(60)
        second = threading.Thread(target=app.stop, daemon=True)
        second.start()
        second.join(0.3)
        assert second.is_alive(), "the second stop() returned while the final snapshot was being written"
    finally:
        go.set()
    first.join(60)
    second.join(60)
    snap = json.loads(stats_files.snapshot_path(d, app.pid).read_bytes())
    assert snap["final"] is True and snap["executions"]["completed"] == 1


def test_a_final_snapshot_found_at_a_monitors_start_is_not_reported(tmp_path):
    d = _announced(tmp_path / "stats")
    app = _app(d)
    app.on_execution(1, 0, 1000, 1000, "completed")
    app.stop()
    mon = Monitor(parse_config(CONFIG), stats_dir=d, use_nvml=False)
    _collect(mon)
    assert _entries(mon, app.pid) == []


def test_without_a_monitor_the_snapshot_is_removed_at_exit(tmp_path):
    d = tmp_path / "stats"
    app = _app(d)
    app.on_execution(1, 0, 1000, 1000, "completed")
    app.stop()
    assert not stats_files.snapshot_path(d, app.pid).exists()


def test_final_snapshots_go_by_age_and_count_and_nothing_else_is_removed(tmp_path):
    d = _announced(tmp_path / "stats")
    pids = [2_000_000_000 + i for i in range(5)]  # (no such processes)
    for pid in pids:
        _app(d, pid).stop()
    paths = [stats_files.snapshot_path(d, pid) for pid in pids]
    assert all(p.exists() for p in paths)
    now = time.time()
    for i, p in enumerate(paths):  # oldest first
        os.utime(p, (now - 100 + i, now - 100 + i))
    foreign = d / "1999999999.json"
    foreign.write_text('{"format": "something else", "final": true}')
    old = now - 10 * stats_files.FINAL_KEEP_S
    os.utime(foreign, (old, old))
    live = _app(d)  # a running process's snapshot, however old
    os.utime(live.path, (old, old))
    link = d / "1999999998.json"
    link.symlink_to(paths[0])
    assert stats_files.prune_final_snapshots(d, max_files=3) == pids[:2]  # the two oldest, beyond 3
    assert stats_files.prune_final_snapshots(d, now=now + stats_files.FINAL_KEEP_S) == pids[2:]  # by age
    assert foreign.exists() and live.path.exists() and link.is_symlink() and stats_files.monitor_file(d).exists()
    live.stop(remove=False)


# ------------------------------------------------------------------ end to end: real jobs, real monitor


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> str:
    return make_installed_python(tmp_path_factory.mktemp("installed"))


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "XDG_"))}
    e.update(XDG_RUNTIME_DIR=str(xdg), OMP_NUM_THREADS="1")
    return e


class Reports:
    """The monitor's report lines, read on a thread so that waiting has a deadline."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, f) -> None:
        for line in f:
            self.q.put(json.loads(line))
        self.q.put(None)

    def next(self, deadline: float) -> dict:
        rep = self.q.get(timeout=max(0.1, deadline - time.monotonic()))
        assert rep is not None, "the monitor stopped"
        return rep


def _start_monitor(tmp_path: Path, env: dict[str, str], procs: list) -> Reports:
    conf = write_config(tmp_path / "monitor.json", CONFIG)
    mon = subprocess.Popen([bin_path("neuron-monitor"), "-c", str(conf)], env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    procs.append(mon)
    stats = Path(env["XDG_RUNTIME_DIR"]) / "neuron-explorer" / "stats"
    deadline = time.monotonic() + TIMEOUT_S
    while not stats_files.monitor_present(stats):
        assert time.monotonic() < deadline and mon.poll() is None, "the monitor never announced itself"
        time.sleep(0.1)
    return Reports(mon)


def _start_job(python: str, env: dict[str, str], procs: list, framework: str, steps: int) -> subprocess.Popen:
    job = subprocess.Popen([python, str(JOB), framework, str(steps), "wait"], env=env, text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    procs.append(job)
    assert job.stdout.readline().strip() == "ready"
    return job


def _run_to_the_end(job: subprocess.Popen) -> int:
    job.stdin.write("go\n")
    job.stdin.flush()
    out, _ = job.communicate(timeout=TIMEOUT_S)
    assert job.returncode == 0
    return int(out.split()[-1])


def _until_gone(reports: Reports, pid: int) -> list[dict]:
    """The job's report entries, read until a report no longer lists it (after its final one)."""
    seen: list[dict] = []
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        rep = reports.next(deadline)
        entry = next((a for a in rep["neuron_runtime_data"] if a["pid"] == pid), None)
        if entry is None and seen:
            return seen
        if entry is not None:
            seen.append(entry["report"])


def _completed(entries: list[dict]) -> int:
    return sum(e["execution_stats"]["execution_summary"]["completed"] for e in entries)


@pytest.mark.slow
@pytest.mark.parametrize("framework,model", [("torch", "Sequential"), ("jax", "update@short_job.py")])
def test_every_execution_of_a_job_that_ends_reaches_a_monitor_started_before_it(python, env, tmp_path,
                                                                                 framework, model):
    """Its steps run in the job's last moments, after the last periodic publish: without the final
    snapshot they never reached the monitor (a DDP rank showed 0 of 192, a CNN 61 of 62)."""
    procs: list = []
    try:
        reports = _start_monitor(tmp_path, env, procs)
        job = _start_job(python, env, procs, framework, 40)
        steps = _run_to_the_end(job)
        entries = _until_gone(reports, job.pid)
    finally:
        stop_all(procs)
    assert _completed(entries) == steps == 40
    names = [m["name"] for m in entries[-1]["memory_used"]["loaded_models"]]
    assert any(n.startswith(model) for n in names), names
    assert entries[-1]["neuron_runtime_vcpu_usage"]["vcpu_usage"] is not None  # from its final snapshot


@pytest.mark.slow
def test_a_jax_job_counts_its_jit_calls_once_a_monitor_appears(python, env, tmp_path):
    """No variable set and no monitor when the job's functions were jitted: once a monitor appears
    (the job's watch thread), the jitted functions made before are instrumented, and their calls
    are counted (before: 0 in every report, and no loaded model)."""
    procs: list = []
    try:
        job = _start_job(python, env, procs, "jax", 60)
        reports = _start_monitor(tmp_path, env, procs)
        snap = stats_files.snapshot_path(Path(env["XDG_RUNTIME_DIR"]) / "neuron-explorer" / "stats", job.pid)
        deadline = time.monotonic() + TIMEOUT_S
        while not snap.exists():  # the job found the monitor and started its counters
            assert time.monotonic() < deadline, "the job never found the monitor"
            time.sleep(0.1)
        _run_to_the_end(job)
        entries = _until_gone(reports, job.pid)
    finally:
        stop_all(procs)
    # the counters start a moment before the functions are adopted: calls in between are not
    # counted, so only "counted" is certain here, not how many
    assert 0 < _completed(entries) <= 60
    names = [m["name"] for m in entries[-1]["memory_used"]["loaded_models"]]
    assert any(n.startswith("update@short_job.py") for n in names), names
