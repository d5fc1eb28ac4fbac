"""A SIGTERM that lands while the main thread is inside the import system still ends the process
by SIGTERM, after a whole final write (docs/decisions/0219-signal-inside-an-import.md).

The import system holds a lock while a finder looks for a module (and a module's own lock while
its body runs). A pool's worker met it: ``with Pool()`` sends SIGTERM as the worker's exit runs
``torch._dynamo``'s ``atexit`` hook, which imports ``tabulate``. Our handler parked the main thread
there, holding the lock, and the final write waited for it to import a module of its own: the
worker hung until its bound (here 600 s), and its last counts were lost.

The program below stalls in a finder (as one on a slow network file system would) until the test
closes its stdin, so the lock stays held for as long as the test likes: the process must die of
the signal while it is held, with the capture, the final counts for neuron-monitor and the NDET
log all whole."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neuron_explorer.analysis.reader import load_device_trace
from neuron_explorer.contracts import ndet_log as ndet_fmt, stats_files

from ..conftest import clean_env, monitor_heartbeat
from .helpers import sessions, type_counts

pytestmark = pytest.mark.slow

STEPS = 5
# a finder that holds the import system's lock until the test closes stdin, as one on a stalled
# network file system would; ``import_held()`` runs it
HOLD = """

class HoldTheImportLock:
    def find_spec(self, name, path=None, target=None):
        if name == "held_module":
            os.write(1, b"holding\\n")
            sys.stdin.buffer.read()
            os.write(1, b"released\\n")
        return None


def import_held():
    sys.meta_path.insert(0, HoldTheImportLock())
    try:
        import held_module  # noqa: F401
    except ImportError:
        pass
"""
PROGRAM = f"""
import atexit, os, sys

if sys.argv[2] == "jax":
    import jax, jax.numpy as jnp

    f = jax.jit(lambda x: jnp.tanh(x @ x.T))
    for _ in range({STEPS}):
        f(jnp.ones((8, 8))).block_until_ready()
else:
    import torch

    f = torch.compile(lambda x: torch.tanh(x @ x.T), backend="aot_eager")
    for _ in range({STEPS}):
        f(torch.randn(8, 8))
{{HOLD}}

if sys.argv[1] == "atexit":
    atexit.register(import_held)  # as torch._dynamo's atexit hook imports tabulate
else:
    import_held()
    os.write(1, b"went on\\n")
""".replace("{HOLD}", HOLD)


def _start(program: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    # unbuffered: a line read is exactly what the program wrote so far (select below sees the rest)
    return subprocess.Popen([sys.executable, "-c", program, *args], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)


def _expect(p: subprocess.Popen, line: bytes, timeout: float = 120.0) -> None:
    """The program's next line of output is ``line``; else fail (never hang) with its stderr."""
    ready = select.select([p.stdout], [], [], timeout)[0]
    got = p.stdout.readline() if ready else b"(nothing)"
    if got != line:
        p.kill()
        p.wait(timeout=60)
        pytest.fail(f"expected {line!r} from the program, got {got!r}; stderr: {p.stderr.read().decode()[-3000:]}")


def _wait_for_end(p: subprocess.Popen, since: str) -> None:
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the process still ran 120 s {since}")


def _reap(p: subprocess.Popen) -> tuple[bytes, bytes]:
    """The program killed if it still runs; the rest of its output and its stderr."""
    if p.poll() is None:
        p.kill()
    p.wait(timeout=60)
    return p.stdout.read(), p.stderr.read()


@pytest.mark.parametrize("framework,where,pure", [
    ("torch", "main", False), ("torch", "main", True), ("torch", "atexit", False), ("torch", "atexit", True),
    ("jax", "atexit", False)])
def test_a_sigterm_inside_an_import_ends_the_process_after_a_whole_final_write(tmp_path: Path, framework: str,
                                                                              where: str, pure: bool) -> None:
    out, ndet, stats = tmp_path / "out", tmp_path / "ndet", tmp_path / "stats"
    ndet.mkdir()
    # every tool at once, as the matrix's ``all`` setting: capture with a session device profile,
    # NDET, and the counters of a tagged process for neuron-monitor
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                    NEURON_RT_INSPECT_DEVICE_PROFILE="session",
                    NEURON_EXPLORER_FLUSH_PERIOD_MS="600000", NEURON_RT_DBG_NDET_LOG_LOCATION=str(ndet),
                    NEURON_RT_DBG_NDET_FLUSH_USEC="600000000", NEURON_EXPLORER_STATS_DIR=str(stats),
                    NEURON_PROCESS_TAG="held",
                    # far beyond the wait below: a write that waits for the held lock never ends
                    # the process, and the test fails on that, whatever the machine's load
                    NEURON_EXPLORER_FINAL_WRITE_TIMEOUT_MS="600000")
    if pure:
        env["NEURON_EXPLORER_PURE_PYTHON"] = "1"
    with monitor_heartbeat(stats):
        p = _start(PROGRAM, env, where, framework)
        try:
            _expect(p, b"holding\n")
            p.send_signal(signal.SIGTERM)
            _wait_for_end(p, "after SIGTERM, the import lock held")
        finally:
            rest, err = _reap(p)
    assert p.returncode == -signal.SIGTERM, err.decode()[-3000:]
    assert rest == b"", "the program went on after SIGTERM: " + rest.decode()
    (s,) = sessions(out)
    assert s.info.end_reason == "signal:SIGTERM"
    assert type_counts(s)["nc_exec_running"] == STEPS
    (ntff,) = out.glob("*/*/profile_nc_0_session_0.ntff")  # the session's device profile, whole
    assert len(load_device_trace(str(ntff)).trace.executions) == STEPS
    snap = json.loads(stats_files.snapshot_path(stats, p.pid).read_bytes())
    assert snap["final"] is True and sum(snap["executions"].values()) == STEPS
    (log,) = [f for f in ndet.iterdir() if f"_pid{p.pid}" in f.name]
    h = ndet_fmt.read_log(str(log)).header
    assert h["flush"]["final"] and h["flush"]["reason"] == "signal:SIGTERM"


LAZY_WRITE = """
import os, sys
import torch
from neuron_explorer.runtime.core import get_runtime

sys.path.insert(0, sys.argv[1])  # lazy_dep.py: imported by the final write only


class LazySink:  # a write that calls a library which imports lazily
    name = "lazy"

    def flush(self, rt, final, reason):
        if final:
            os.write(1, b"writing\\n")
            import lazy_dep
            lazy_dep.leave(reason)


get_runtime().add_sink(LazySink())
f = torch.compile(lambda x: torch.tanh(x @ x.T), backend="aot_eager")
for _ in range(3):
    f(torch.randn(8, 8))
{HOLD}

import_held()
""".replace("{HOLD}", HOLD)


@pytest.mark.parametrize("pure", [False, True], ids=["c", "pure-python"])
def test_a_final_write_that_imports_waits_for_the_interrupted_import_not_for_ever(tmp_path: Path, pure: bool) -> None:
    """The write needs the lock the main thread holds: the main thread, not parked inside the
    import, finishes it once the finder returns, and the write then goes through."""
    (tmp_path / "lazy_dep.py").write_text(
        f"def leave(reason):\n    open({str(tmp_path / 'left')!r}, 'w').write(reason)\n")
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"),
                    NEURON_EXPLORER_FLUSH_PERIOD_MS="600000", NEURON_EXPLORER_FINAL_WRITE_TIMEOUT_MS="600000")
    if pure:
        env["NEURON_EXPLORER_PURE_PYTHON"] = "1"
    p = _start(LAZY_WRITE, env, str(tmp_path))
    try:
        _expect(p, b"holding\n")
        p.send_signal(signal.SIGTERM)
        _expect(p, b"writing\n")  # the write began, and waits for the import lock
        p.stdin.close()  # the finder returns; our handler runs inside the import system
        _wait_for_end(p, "after its import ended: parked inside it")
    finally:
        _, err = _reap(p)
    assert p.returncode == -signal.SIGTERM, err.decode()[-3000:]
    assert (tmp_path / "left").read_text() == "signal:SIGTERM"
    (s,) = sessions(tmp_path / "out")
    assert s.info.end_reason == "signal:SIGTERM" and type_counts(s)["nc_exec_running"] == 3


HELD_AT_EXIT = """
import atexit, os, sys, time
import torch
from neuron_explorer.runtime.core import get_runtime

f = torch.compile(lambda x: torch.tanh(x @ x.T), backend="aot_eager")
for _ in range(3):
    f(torch.randn(8, 8))
stats = get_runtime().stats
publish = stats.publish


def slow_publish(final=False):  # the disk is slow for the final counts
    if final:
        os.write(1, b"writing\\n")
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.005)
    return publish(final=final)


stats.publish = slow_publish
{HOLD}

atexit.register(import_held)
""".replace("{HOLD}", HOLD)


def test_a_program_that_reaches_its_end_during_a_signals_final_write_waits_there(tmp_path: Path) -> None:
    """The signal caught the exit's hooks inside an import, so the main thread ran on; at the end of
    the program it waits for the final write, and the process still dies of the signal."""
    stats, go = tmp_path / "stats", tmp_path / "go"
    env = clean_env(NEURON_EXPLORER_STATS_DIR=str(stats), NEURON_PROCESS_TAG="held",
                    NEURON_EXPLORER_FINAL_WRITE_TIMEOUT_MS="600000")
    with monitor_heartbeat(stats):
        p = _start(HELD_AT_EXIT, env, str(go))
        try:
            _expect(p, b"holding\n")
            p.send_signal(signal.SIGTERM)
            _expect(p, b"writing\n")
            p.stdin.close()
            _expect(p, b"released\n")  # the main thread runs on to the program's end
            time.sleep(0.5)  # (a process that did not wait there would end now, its write cut short)
            go.touch()
            _wait_for_end(p, "after its final write could go on")
        finally:
            _, err = _reap(p)
    assert p.returncode == -signal.SIGTERM, err.decode()[-3000:]
    snap = json.loads(stats_files.snapshot_path(stats, p.pid).read_bytes())
    assert snap["final"] is True and sum(snap["executions"].values()) == 3
