"""`neuron-explorer view --scheduler tcp://...` on a real Dask distributed cluster (a scheduler and two
worker processes on 127.0.0.1): the same dataset, warnings and exit code as a local run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ..conftest import EXAMPLES, clean_env, cli
from .cluster_util import Cluster, dataset_facts, files_under

pytest.importorskip("distributed")


def synth(root: Path, events: int, instances: int = 2, processes: int = 2) -> Path:
    sys.path.insert(0, str(EXAMPLES.parent))
    from bench.synth_capture import generate

    src = root / "cap"
    generate(str(src), instances=instances, processes=processes, events=events)
    return src


def damaged_session(src: Path) -> Path:
    """One more session whose trace_info.pb is garbage: both runs must skip it with one warning."""
    d = src / "i-damaged_pid_4242" / "20260101T000000Z"
    d.mkdir(parents=True)
    (d / "trace_info.pb").write_bytes(b"\xff" * 64)
    (d / "ntrace.pb").write_bytes(b"\x0a\xff\xff\xff\xff\x0f")
    return d


def executed_count(dask_worker) -> int:
    return dask_worker.state.executed_count


def warning_lines(stderr: str) -> list[str]:
    return sorted(line for line in stderr.splitlines() if line.startswith(("neuron-explorer: warning",
                                                                             "neuron-explorer: skipped")))


@pytest.mark.slow
def test_cluster_run_matches_local_run(tmp_path):
    src = synth(tmp_path, 30_000)
    damaged_session(src)
    local = cli("view", "-d", str(src), "--output-file", str(tmp_path / "local"))
    assert local.returncode == 1, local.stderr[-3000:]  # the damaged session is a warning
    assert "skipped" in local.stderr
    c = Cluster(2, log_dir=tmp_path)
    try:
        remote = cli("view", "-d", str(src), "--output-file", str(tmp_path / "cluster"), "--scheduler", c.address)
        with c.client() as client:  # the tasks really ran on both worker processes
            executed = client.run(executed_count)
    finally:
        c.close()
    assert remote.returncode == local.returncode, remote.stderr[-3000:]
    assert warning_lines(remote.stderr) == warning_lines(local.stderr)
    assert len(executed) == 2 and all(n > 0 for n in executed.values()), executed
    assert dataset_facts(str(tmp_path / "cluster")) == dataset_facts(str(tmp_path / "local"))
    assert files_under(tmp_path / "cluster") == files_under(tmp_path / "local")
    assert "wrote " + str(tmp_path / "cluster") in remote.stderr
    # nothing but the output beside it: the work area is gone
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_bad_scheduler_addresses_are_one_line(tmp_path):
    src = tmp_path / "cap"
    src.mkdir()
    for addr, words in (("ray://head:10001", "Ray is not supported"), ("http://head:8786", "tcp://HOST:8786"),
                        ("tcp://127.0.0.1:1", "cannot connect")):
        p = cli("view", "-d", str(src), "--output-file", str(tmp_path / "o"), "--scheduler", addr, timeout=120,
                env=clean_env(DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s"))
        assert p.returncode == 1, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "o").exists()
