"""``attach`` on a process that runs neuron-monitor's counters (a monitor on the host, as in the
Kubernetes recipe): the window uses the counters' hooks and rings, which the watcher keeps empty
between requests, and the counters go on counting."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from installed import make_installed_python
from monitor_helpers import stop_all, write_config
from test_attach import APPS, attach, job_env, summary


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> str:
    return make_installed_python(tmp_path_factory.mktemp("installed"))


@pytest.mark.slow
def test_attach_to_a_process_with_monitor_counters(python, tmp_path):
    env = job_env(tmp_path)
    cfg = write_config(tmp_path / "monitor.json", {"period": "1s", "neuron_runtimes": [{"metrics": [
        {"type": "execution_stats"}]}]})
    procs = [subprocess.Popen([python, "-m", "neuron_explorer.monitor.cli", "-c", str(cfg)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)]
    try:
        # the monitor announces itself (before the job starts, so that the job finds it): waited on
        # the announcement, not on the clock (decision 0153)
        alive = Path(env["XDG_RUNTIME_DIR"]) / "neuron-explorer" / "stats" / "monitor.alive"
        deadline = time.monotonic() + 60
        while not alive.exists():
            assert procs[0].poll() is None and time.monotonic() < deadline, "neuron-monitor did not announce itself"
            time.sleep(0.05)
        job = subprocess.Popen([python, str(APPS / "idle_job.py"), str(tmp_path / "release")], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(job)
        pid = int(job.stdout.readline())
        deadline = time.monotonic() + 60
        seen = 0
        while time.monotonic() < deadline and not seen:  # the monitor reports the job: counters run
            line = procs[0].stdout.readline()
            for a in json.loads(line)["neuron_runtime_data"]:
                if a["pid"] == pid:
                    seen = a["report"]["execution_stats"]["execution_summary"]["completed"]
        assert seen
        out = tmp_path / "out"
        r = attach(python, env, "--pid", str(pid), "--steps", "3", "-o", str(out))
        assert r.returncode == 0, r.stdout + r.stderr
        assert re.search(rf"pid {pid}: profile written to \S+ \(steps (\d+)-(\d+)\)", r.stdout)
        (tmp_path / "release").touch()
        stdout, err = job.communicate(timeout=120)
    finally:
        (tmp_path / "release").touch()
        stop_all(procs)
    assert job.returncode == 0 and err == ""
    s = summary(python, env, out)
    (p,) = s["profiles"]
    (core,) = p["cores"]
    by_kind = sorted(g["executions"] for g in core["top_graphs"])
    assert by_kind == [3, 3, 3], core["top_graphs"]  # forward, backward, optimizer step: 3 steps
    first, last = map(int, re.search(r"steps (\d+)-(\d+)", r.stdout).groups())
    assert s["steps"]["per_process"][0]["number"] == list(range(first, last + 1))
    assert json.loads(stdout.splitlines()[-1])["runtime"] is True  # (the counters' runtime)
