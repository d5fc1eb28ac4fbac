"""``attach --monitor``: one request through two neuron-monitors (two "hosts" on 127.0.0.1, each with
its own instance id, stats and on-demand directories) reaches the job of each host; both profiles
hold the same steps and ``view`` puts them on one time line.  Without the token nothing happens."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from installed import make_installed_python
from monitor_helpers import stop_all, write_config
from test_attach import APPS, attach, summary

from tests.conftest import free_port


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> str:
    return make_installed_python(tmp_path_factory.mktemp("installed"))


def host_env(tmp_path: Path, name: str) -> dict[str, str]:
    xdg = tmp_path / f"xdg-{name}"
    xdg.mkdir(mode=0o700)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "XDG_", "PYTHONPATH"))}
    e.update(XDG_RUNTIME_DIR=str(xdg), OMP_NUM_THREADS="1", NEURON_EXPLORER_INSTANCE_ID=name)
    return e


def post(port: int, path: str, body: dict, headers: dict) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=json.dumps(body), headers=headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def wait_listed(ports: list[int], pids: list[int], headers: dict, timeout: float = 120) -> None:
    """Until each monitor listens and has found its host's job (it was a fixed 3 s: waiting on
    that state holds at any load, decision 0153)."""
    deadline = time.monotonic() + timeout
    for port, pid in zip(ports, pids):
        while True:
            try:
                code, got = post(port, "/v1/targets", {"pids": None, "tag": None}, headers)
                if code == 200 and pid in [t[0] for t in got["targets"]]:
                    break
            except OSError:
                pass  # not listening yet
            assert time.monotonic() < deadline, f"the monitor on port {port} never listed pid {pid}"
            time.sleep(0.1)


@pytest.mark.slow
def test_attach_through_two_monitors(python, tmp_path):
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123456789abcdef\n")
    token.chmod(0o600)
    cfg = write_config(tmp_path / "monitor.json", {"period": "1s", "neuron_runtimes": [{"metrics": [
        {"type": "execution_stats"}]}]})
    procs, ports, jobs = [], [], []
    try:
        for name in ("host-a", "host-b"):
            env = host_env(tmp_path, name)
            port = free_port()
            procs.append(subprocess.Popen([python, "-m", "neuron_explorer.monitor.cli", "-c", str(cfg),
                                           "--control-port", str(port), "--control-token-file", str(token)],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            ports.append(port)
            job = subprocess.Popen([python, str(APPS / "idle_job.py"), str(tmp_path / "release")], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(job)
            jobs.append((name, job, int(job.stdout.readline())))
        ok_headers = {"Content-Type": "application/json", "X-Neuron-Explorer-Token": token.read_text().strip()}
        wait_listed(ports, [pid for _, _, pid in jobs], ok_headers)
        # no token, a wrong one, a browser's form post: refused, nothing written
        no_token = {"Content-Type": "application/json"}
        assert post(ports[0], "/v1/targets", {"pids": None, "tag": None}, no_token)[0] == 403
        assert post(ports[0], "/v1/targets", {}, {**ok_headers, "X-Neuron-Explorer-Token": "x" * 32})[0] == 403
        assert post(ports[0], "/v1/targets", {}, {**ok_headers, "Content-Type": "text/plain"})[0] == 415
        code, got = post(ports[0], "/v1/send", {"request": {"format": "x"}}, ok_headers)
        assert code == 400 and "format" in got["error"]
        code, got = post(ports[0], "/v1/targets", {"pids": None, "tag": None}, ok_headers)
        assert code == 200 and [t[0] for t in got["targets"]] == [jobs[0][2]]  # host a's job only
        endpoints = ",".join(f"127.0.0.1:{p}" for p in ports)
        out = tmp_path / "out"
        bad = tmp_path / "bad-token"
        bad.write_text("f" * 32)
        bad.chmod(0o600)
        r = attach(python, host_env(tmp_path, "requester"), "--monitor", endpoints, "--token-file", str(bad),
                   "--all", "--steps", "3", "-o", str(out))
        assert r.returncode == 1 and r.stderr.count("wrong or missing token") == 2, r.stdout + r.stderr
        r = attach(python, host_env(tmp_path, "requester2"), "--monitor", endpoints, "--token-file", str(token),
                   "--all", "--steps", "3", "-o", str(out))
        assert r.returncode == 0, r.stdout + r.stderr
        lines = re.findall(r"pid (\d+) on 127\.0\.0\.1:(\d+): profile written to (\S+) \(steps (\d+)-(\d+)\)", r.stdout)
        assert sorted((int(p), int(port)) for p, port, *_ in lines) == sorted(
            (pid, port) for (_, _, pid), port in zip(jobs, ports))
        assert len({(a, b) for *_, a, b in lines}) == 1  # the same steps on both hosts
        (tmp_path / "release").touch()
        for _, job, _ in jobs:
            job.wait(120)
    finally:
        (tmp_path / "release").touch()
        stop_all(procs)
    assert all(job.returncode == 0 for _, job, _ in jobs)
    s = summary(python, host_env(tmp_path, "viewer"), out)
    assert sorted(p["instance_id"] for p in s["profiles"]) == ["host-a", "host-b"]
    assert sorted(s["clock_offsets"]) == ["host-a", "host-b"]  # (each on its wall clock: no collective joins them)
    # on view's one time line the two windows start together: the same steps, aligned at one instant
    starts = [p["start_ns"][0] for p in s["steps"]["per_process"]]
    assert len(starts) == 2 and abs(starts[0] - starts[1]) < 500_000_000, starts
    for p in s["profiles"]:
        (core,) = p["cores"]
        assert sorted(g["executions"] for g in core["top_graphs"]) == [3, 3, 3]
