"""Shared helpers: run real processes (python, torchrun) with capture variables set."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment minus any capture/NDET variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NEURON_RT_", "NEURON_EXPLORER_", "NEURON_PROCESS_TAG", "XLA_"))}
    env["NEURON_EXPLORER_QUIET"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def run(cmd: list[str], env: dict[str, str], cwd: str | Path | None = None, timeout: float = 240,
        check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} failed with {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr[-4000:]}")
    return p


def torchrun(nproc: int, script: str | Path, args: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script), *args]
    return run(cmd, env, **kw)


def cli(*args: str, env: dict[str, str] | None = None, check: bool = False, **kw) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "neuron_explorer", *args], env or clean_env(), check=check, **kw)


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    d = tmp_path / "output"
    return d


def pytest_configure(config: pytest.Config) -> None:
    """Keep the test runner itself out of neuron-monitor discovery.

    In-process tests import torch and JAX, which makes the runner a framework process that watches
    for a monitor (``neuron_explorer.discovery``).  A test that announces a monitor in its stats
    directory would then start the runtime inside the runner: its hooks on the runner's torch, and
    a snapshot of the runner in that directory (seen in CI: ``test_counters_publish_nothing...``
    found ``<runner pid>.json``).  Setting ``NEURON_EXPLORER_STATS=0`` here is not an option: the
    monitor tests hand ``os.environ`` to the workloads they start."""
    from neuron_explorer import discovery

    discovery._check = lambda framework: None  # type: ignore[assignment]
