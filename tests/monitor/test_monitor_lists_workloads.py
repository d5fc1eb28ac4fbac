"""With NEURON_PROCESS_TAG set, neuron-monitor lists exactly the processes that run a workload: never
a tagged process that imports no framework, never neuron-monitor itself, never torchrun's agent or
Inductor's load-check subprocesses (docs/decisions/0095-monitor-lists-workloads.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from monitor_helpers import free_port, write_config

pytestmark = pytest.mark.slow

APP = Path(__file__).parent / "apps" / "tagged_job.py"
TAG = "tagged"


class TaggedMonitor:
    """A real ``neuron-monitor`` (with the tag in its own environment too) on a private stats
    directory, every 250 ms; ``stop()`` returns every pid it ever listed."""

    def __init__(self, tmp_path: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "TORCHINDUCTOR_"))}
        self.env.update(NEURON_EXPLORER_STATS_DIR=str(tmp_path / "stats"), NEURON_PROCESS_TAG=TAG,
                        OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
        conf = write_config(tmp_path / "monitor.json", {
            "period": "250ms", "neuron_runtimes": [{"metrics": [{"type": "execution_stats"}]}]})
        self.proc = subprocess.Popen([sys.executable, "-m", "neuron_explorer.monitor.cli", "-c", str(conf)],
                                     env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.listed: dict[int, int] = {}  # pid -> executions over every report
        self.reports = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 60
        while not (tmp_path / "stats" / "monitor.alive").exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.proc.stderr.read()
            time.sleep(0.05)

    def _read(self) -> None:
        for line in self.proc.stdout:
            rep = json.loads(line)
            self.reports += 1
            for app in rep["neuron_runtime_data"]:
                assert app["neuron_runtime_tag"] == TAG, app
                ex = app["report"]["execution_stats"]["execution_summary"]
                self.listed[app["pid"]] = self.listed.get(app["pid"], 0) + sum(ex.values())

    def stop(self) -> dict[int, int]:
        # the job has exited: the second report from now begins after now and reads every final
        # snapshot (waiting on reports, not on the clock: decision 0153)
        seen, deadline = self.reports, time.monotonic() + 60
        while self.reports < seen + 2 and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self._reader.join(timeout=10)
        assert self.proc.returncode in (0, -15) and self.reports >= 3, (self.proc.returncode, self.reports)
        return self.listed


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        # the apps dump every thread's stack (faulthandler) before this timeout: show them
        # (with text=True, still bytes on a timeout)
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr))
        raise AssertionError(f"{cmd} still ran after {timeout} s; stdout: {out!r}; stderr:\n{err[-12000:]}") from None
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def _apps(stdout: str) -> set[int]:
    return {int(x) for x in re.findall(r"^APP (\d+)$", stdout, re.M)}


def test_a_tagged_process_that_runs_no_workload_and_the_monitor_itself_are_not_listed(tmp_path: Path) -> None:
    mon = TaggedMonitor(tmp_path)
    try:
        _run([sys.executable, "-c", "import time; time.sleep(3)"], mon.env, tmp_path)
    finally:
        listed = mon.stop()
    assert mon.proc.pid not in listed, f"neuron-monitor (pid {mon.proc.pid}) lists itself: {listed}"
    assert listed == {}, f"a tagged `python -c 'import time; time.sleep(3)'` is listed: {listed}"


def test_a_tagged_torchrun_job_lists_its_two_ranks_only(tmp_path: Path) -> None:
    mon = TaggedMonitor(tmp_path)
    try:
        p = _run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                  "127.0.0.1", "--master_port", str(free_port()), str(APP), "ranks"], mon.env, tmp_path)
    finally:
        listed = mon.stop()
    ranks = _apps(p.stdout)
    assert len(ranks) == 2, p.stdout
    assert set(listed) == ranks, f"listed {listed}, the ranks are {sorted(ranks)} (torchrun's agent is not one)"
    assert all(listed[r] > 0 for r in ranks), listed


def test_a_tagged_inductor_program_is_the_only_process_listed(tmp_path: Path) -> None:
    mon = TaggedMonitor(tmp_path)
    try:
        p = _run([sys.executable, str(APP), "inductor"], mon.env, tmp_path)
    finally:
        listed = mon.stop()
    (app,) = _apps(p.stdout)
    assert set(listed) == {app}, f"listed {listed}; the program is pid {app} (Inductor's load checks are not)"
    assert listed[app] > 0


def test_pool_workers_that_their_pool_ends_with_sigterm_leave_every_execution(tmp_path: Path) -> None:
    """``with Pool()`` ends its workers with SIGTERM: each still leaves its final counts, so every
    step it ran is reported (docs/decisions/0096-final-counts-on-a-signal.md)."""
    mon = TaggedMonitor(tmp_path)
    # the final write's bound (5 s by default) is not what this tests: at load 6-8 a worker's final
    # write took longer and its counts were cut short (the suite must pass on a loaded machine)
    env = {**mon.env, "NEURON_EXPLORER_FINAL_WRITE_TIMEOUT_MS": "600000"}
    try:
        p = _run([sys.executable, str(APP), "pool"], env, tmp_path)
    finally:
        listed = mon.stop()
    steps: dict[int, int] = {}
    for pid in re.findall(r"^APP (\d+)$", p.stdout, re.M):
        steps[int(pid)] = steps.get(int(pid), 0) + 3
    assert sum(steps.values()) == 6, p.stdout
    # (the workers' stderr in the message: a final write cut short says so there, runtime/signals.py)
    assert {pid: listed.get(pid) for pid in steps} == steps, \
        f"listed {listed}, steps run {steps}; stderr: {p.stderr[-1500:]}"
