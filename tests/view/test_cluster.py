"""`neuron-explorer view --scheduler tcp://...` on a real Dask distributed cluster (a scheduler and two
worker processes on 127.0.0.1): the same dataset, warnings and exit code as a local run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import EXAMPLES, clean_env, cli, shared_dir
from .cluster_util import Cluster, dataset_facts, files_under
from .conftest import damaged_session

pytest.importorskip("distributed")


def synth(root: Path, events: int, instances: int = 2, processes: int = 2) -> Path:
    sys.path.insert(0, str(EXAMPLES.parent))
    from bench.synth_capture import generate

    src = root / "cap"
    generate(str(src), instances=instances, processes=processes, events=events)
    return src


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
        other = {fmt: (cli("view", "-d", str(src), "--output-format", fmt, *out("c"), "--scheduler", c.address),
                       cli("view", "-d", str(src), "--output-format", fmt, *out("l")))
                 for fmt, out in (("json", lambda k: ["--output-file", str(tmp_path / f"{k}.json")]),
                                  ("summary-text", lambda k: []))}
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
    # the other formats too: the same bytes, the same summary
    for fmt, (c_run, l_run) in other.items():
        assert (c_run.returncode, c_run.stdout) == (l_run.returncode, l_run.stdout), (fmt, c_run.stderr[-2000:])
    assert (tmp_path / "c.json").read_bytes() == (tmp_path / "l.json").read_bytes()
    # nothing but the output beside it: the work area is gone
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("addr, words", [
    ("ray://head:10001", "Ray is not supported"), ("http://head:8786", "tcp://HOST:8786"),
    ("tcp://127.0.0.1:abc", "port 'abc' is not a TCP port from 1 to 65535"),  # issue 29 item 10
    ("tcp://[::1", "unclosed '['"), ("tcp://::1:8786", "IPv6 host goes in brackets"),
    ("tcp://head", "no port"), ("tcp://head:0", "port '0'"), ("tcp://:8786", "not a host name"),
    ("", "expected a Dask scheduler address")])
def test_a_malformed_scheduler_address_is_a_one_line_usage_error(tmp_path, addr, words):
    """Checked before Dask is imported: a malformed address made distributed.Client raise a
    40-line traceback from its constructor, then block in its finalizer (60 s at the default
    connect timeout), and exit 1."""
    src = tmp_path / "cap"
    src.mkdir()
    p = cli("view", "-d", str(src), "--output-file", str(tmp_path / "o"), "--scheduler", addr, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "--scheduler" in lines[0], p.stderr
    assert not (tmp_path / "o").exists() and sorted(q.name for q in tmp_path.iterdir()) == ["cap"]


def test_a_scheduler_that_does_not_answer_is_one_line_and_exit_1(tmp_path):
    src = tmp_path / "cap"
    src.mkdir()
    p = cli("view", "-d", str(src), "--output-file", str(tmp_path / "o"), "--scheduler", "tcp://127.0.0.1:1",
            timeout=120, env=clean_env(DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s"))
    assert p.returncode == 1, p.stderr  # (the address is right: the cluster is not there)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot connect" in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def big_capture(tmp_path_factory) -> tuple[Path, Path]:
    """Four processes of 1M events (about a second each to convert): long enough to kill a worker
    mid-conversion; and the local run's dataset to compare with.  Made once per run whichever xdist
    worker asks first (``shared_dir``); its tests only read them."""
    def build(root: Path) -> None:
        src = synth(root, 1_000_000)
        local = cli("view", "-d", str(src), "--output-file", str(root / "local"), "--jobs", "1", timeout=600)
        assert local.returncode == 0, local.stderr[-3000:]

    root = shared_dir(tmp_path_factory, "cluster_big_capture", build)[0]
    return root / "cap", root / "local"


def executing(dask_worker) -> list[str]:
    return [str(ts.key) for ts in dask_worker.state.executing]


def kill_mid_conversion(c: Cluster, view: subprocess.Popen, after: float = 0.3) -> str:
    """SIGKILL the worker process that is converting a profile, ``after`` seconds into it (partial
    files written); returns the task's key ("" if the run ended first)."""
    with c.client() as client:
        pids = client.run(os.getpid)
        deadline = time.monotonic() + 300
        while view.poll() is None and time.monotonic() < deadline:
            for addr, keys in client.run(executing).items():
                conv = [k for k in keys if k.startswith("neuron-explorer-convert-")]
                if conv:
                    time.sleep(after)
                    os.kill(pids[addr], signal.SIGKILL)
                    return conv[0]
            time.sleep(0.02)
    return ""


def start_view(src: Path | str, out: Path | str, address: str, env: dict | None = None) -> subprocess.Popen:
    """The view command on the cluster, with its progress bar on (shown at once)."""
    env = dict(env or clean_env(), NEURON_EXPLORER_PROGRESS_DELAY_S="0")
    return subprocess.Popen([sys.executable, "-m", "neuron_explorer", "view", "-d", str(src), "--output-file", str(out),
                             "--scheduler", address, "--progress"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def run_and_kill(src: Path | str, out: Path | str, log_dir: Path, cluster_env: dict | None = None,
                 view_env: dict | None = None, after: float = 0.3) -> tuple[str, int, str, Cluster]:
    """A cluster run whose converting worker is killed: (killed task, exit status, stderr, cluster).
    The workers hold every conversion open a while after its files are written (``hold_convert``),
    so the kill, ``after`` seconds into one, always lands while it runs."""
    c = Cluster(2, env=cluster_env, log_dir=log_dir, preload=Path(__file__).with_name("hold_convert.py"))
    try:
        view = start_view(src, out, c.address, env=view_env)
        killed = kill_mid_conversion(c, view, after)
        _, err = view.communicate(timeout=600)
    finally:
        c.close()
    return killed, view.returncode, err, c


@pytest.mark.slow
def test_worker_killed_mid_conversion_is_retried(tmp_path, big_capture):
    src, local = big_capture
    killed, rc, err, c = run_and_kill(src, tmp_path / "cluster", tmp_path)
    assert killed, "the run ended before a conversion could be interrupted"
    assert -signal.SIGKILL in (c.workers[0].returncode, c.workers[1].returncode)
    assert rc == 0, err[-3000:]
    # the progress bar of a local run, counting the cluster's tasks as they finish
    assert "neuron-explorer: indexing [" in err and "4/4 processes 100%" in err, err[-2000:]
    assert "neuron-explorer: writing parquet [##############################] 4/4 processes 100%" in err
    assert dataset_facts(str(tmp_path / "cluster")) == dataset_facts(str(local))
    assert files_under(tmp_path / "cluster") == files_under(local)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.slow
def test_lost_run_leaves_the_earlier_output(tmp_path, big_capture):
    """With no retries allowed, the killed task fails the run: one line, exit 1; the earlier output
    of ours is left as it was and the work area is removed."""
    src, local = big_capture
    shutil.copytree(local, tmp_path / "cluster")
    killed, rc, err, _ = run_and_kill(src, tmp_path / "cluster", tmp_path,
                                      cluster_env={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"})
    assert killed
    assert rc == 1, err[-3000:]
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "a worker died too many times" in errors[0] and "Traceback" not in err, err
    assert files_under(tmp_path / "cluster") == files_under(local)
    assert dataset_facts(str(tmp_path / "cluster")) == dataset_facts(str(local))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
