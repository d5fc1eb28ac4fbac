"""Shared helpers for the neuron-monitor tests: private stats dirs, workload apps, free ports.

The test modules import this by name (pytest puts this directory on sys.path).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

WORKLOAD = Path(__file__).parent / "apps" / "workload.py"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bin_path(name: str) -> str:
    """A console script installed next to this interpreter."""
    p = Path(sys.executable).with_name(name)
    return str(p) if p.exists() else name


@pytest.fixture
def stats_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "stats"
    monkeypatch.setenv("NEURON_EXPLORER_STATS_DIR", str(d))
    return d


class Apps:
    """Starts workload processes and makes sure they are gone after the test."""

    def __init__(self, stats_dir: Path) -> None:
        self.stats_dir = stats_dir
        self.procs: list[subprocess.Popen] = []

    def start(self, tag: str | None, seconds: float = 30.0, *extra: str) -> subprocess.Popen:
        env = dict(os.environ, NEURON_EXPLORER_STATS_DIR=str(self.stats_dir))
        env.pop("NEURON_PROCESS_TAG", None)
        if tag is not None:
            env["NEURON_PROCESS_TAG"] = tag
        p = subprocess.Popen(
            [sys.executable, str(WORKLOAD), str(seconds), *extra],
            env=env, stdout=subprocess.PIPE, text=True,
        )
        self.procs.append(p)
        return p

    def wait_ready(self, timeout: float = 60.0) -> None:
        for p in self.procs:
            deadline = time.monotonic() + timeout
            line = p.stdout.readline() if p.stdout else ""
            assert line.strip() == "ready", f"workload {p.pid} did not start (got {line!r})"
            assert time.monotonic() < deadline

    def stop(self) -> None:
        stop_all(self.procs)


def stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every process still running, then wait (SIGKILL after 10 s)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.fixture
def apps(stats_dir: Path) -> Iterator[Apps]:
    a = Apps(stats_dir)
    yield a
    a.stop()


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(json.dumps(cfg))
    return path


FULL_RUNTIME_METRICS = [
    {"type": "neuroncore_counters"},
    {"type": "execution_stats"},
    {"type": "memory_used"},
    {"type": "neuron_runtime_vcpu_usage"},
]
FULL_SYSTEM_METRICS = [{"type": "vcpu_usage"}, {"type": "memory_info"}, {"type": "neuron_hw_counters"}]


def make_cert(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed key and certificate for 127.0.0.1 (skips the test without ``openssl``)."""
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate (Debian package 'openssl')")
    key, cert = tmp_path / "tls.key", tmp_path / "tls.crt"
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"openssl could not make a test certificate: {r.stderr.decode()[:200]}")
    return key, cert
