"""The capture writer under concurrency and failure: session directories, multi-file writes."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading

import pytest

from neuron_explorer.contracts.layout import make_session_dir
from neuron_explorer.util.atomic import atomic_write_all

from ..conftest import clean_env
from .helpers import sessions


def test_a_failed_multi_file_write_leaves_the_previous_complete_set(tmp_path):
    a, b = tmp_path / "ntrace.pb", tmp_path / "trace_info.pb"
    atomic_write_all([(str(a), lambda: b"old a"), (str(b), lambda: [b"old ", b"b"])])

    def disk_full():
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_write_all([(str(a), lambda: b"new a"), (str(b), disk_full)])
    # not a new ntrace.pb beside an old trace_info.pb: both old, and no temporary file left
    assert a.read_bytes() == b"old a" and b.read_bytes() == b"old b"
    assert sorted(os.listdir(tmp_path)) == ["ntrace.pb", "trace_info.pb"]


def _race(out: str, barrier, n: int, q) -> None:
    barrier.wait()
    try:
        q.put([make_session_dir(out, "i-0", 4242, 1_700_000_000_000_000_000) for _ in range(n)])
    except Exception as e:  # noqa: BLE001 - reported to the test
        q.put(repr(e))


def test_processes_racing_for_the_same_session_directory_each_get_their_own(tmp_path):
    """Same instance, pid and millisecond (pid reuse in containers, a shared volume)."""
    ctx = multiprocessing.get_context("fork")
    procs, per = 8, 25
    barrier, q = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=_race, args=(str(tmp_path), barrier, per, q)) for _ in range(procs)]
    for p in ps:
        p.start()
    results = [q.get(timeout=60) for _ in ps]
    for p in ps:
        p.join(timeout=60)
    errors = [r for r in results if isinstance(r, str)]
    assert not errors, errors
    paths = [path for r in results for path in r]
    assert len(set(paths)) == procs * per
    assert len(os.listdir(tmp_path / "i-0_pid_4242")) == procs * per


def test_threads_racing_for_the_same_session_directory_each_get_their_own(tmp_path):
    barrier = threading.Barrier(16)
    got: list = []

    def run():
        barrier.wait()
        try:
            got.extend(make_session_dir(str(tmp_path), "i-0", 7, 1_700_000_000_000_000_000) for _ in range(20))
        except Exception as e:  # noqa: BLE001
            got.append(e)

    ts = [threading.Thread(target=run) for _ in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not [g for g in got if isinstance(g, Exception)]
    assert len(set(got)) == 16 * 20


def test_the_flush_thread_spawns_no_process(tmp_path, out_dir):
    """platform.platform() runs `uname -p`: a child process forked from the flush thread."""
    shim = tmp_path / "bin"
    shim.mkdir()
    log = tmp_path / "uname.log"
    (shim / "uname").write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexec /usr/bin/env -u PATH /bin/uname \"$@\"\n")
    (shim / "uname").chmod(0o755)
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir),
                    NEURON_EXPLORER_FLUSH_PERIOD_MS="100", PATH=f"{shim}:{os.environ['PATH']}")
    p = subprocess.run([sys.executable, "-c", "import time, torch; time.sleep(0.6)"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert not log.exists(), log.read_text()
    (s,) = sessions(out_dir)
    u = os.uname()
    assert s.info.versions["platform"] == f"{u.sysname}-{u.release}-{u.machine}"
