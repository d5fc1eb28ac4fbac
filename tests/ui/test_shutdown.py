"""Stopping the UI server while a profile's index is being built in the background.

The build runs in a daemon thread, often inside DuckDB's C++ code. When the interpreter finalised
with that thread still there, the thread was unwound by a forced exception that DuckDB's code
swallowed: the process aborted ("terminate called ... exception not rethrown", status 134) after a
plain Ctrl-C. The server now waits briefly for background work, then leaves without finalising the
interpreter; the half-built index it leaves in the cache is removed by the next open.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from tests.ui.helpers import start_server  # noqa: E402

P = "run-a"

# The real server, with one change: the index build first runs a query that takes minutes inside
# DuckDB, so SIGTERM is certain to find the build thread in C++ code.
SLOW_BUILD = textwrap.dedent("""
    import sys
    from neuron_explorer.ui import profile, server, workspace

    workspace.COARSE_MIN_EVENTS = 0  # the small test profile takes the large profiles' path
    profile.FIRST_PAINT_GRACE_S = 0.0
    real = profile.Profile._build_index

    def slow(self, out_dir):
        print("index build started", file=sys.stderr, flush=True)
        self.cursor().execute("SELECT sum(range) FROM range(10000000000000)").fetchall()
        return real(self, out_dir)

    profile.Profile._build_index = slow
    sys.exit(server.main(sys.argv[1:]))
""")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_line(p: subprocess.Popen, text: str, timeout: float) -> list[str]:
    seen, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        line = p.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"{text!r} not printed; stderr: {''.join(seen)[-2000:]}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_during_an_index_build_exits_cleanly(ui_workspace: Path, tmp_path: Path, sig: int) -> None:
    script = tmp_path / "slow_server.py"
    script.write_text(SLOW_BUILD)
    cache = tmp_path / "cache"
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), PYTHONPATH=os.pathsep.join(sys.path))
    port = _free_port()
    p, url = start_server(ui_workspace, port, env, argv=[sys.executable, str(script)])
    try:
        urllib.request.urlopen(url + f"api/profiles/{P}/status", timeout=30).read()  # starts the preparation
        _wait_for_line(p, "index build started", 60)
        p.send_signal(sig)
        rc = p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = p.stderr.read()
    assert "terminate called" not in err
    if sig == signal.SIGTERM:
        # uvicorn shuts down, then raises the signal again: the process ends by it, as a program
        # without a handler would (never 134, SIGABRT's)
        assert rc == -signal.SIGTERM, f"exit {rc}: {err[-2000:]}"
    else:
        assert rc == 0, f"exit {rc}: {err[-2000:]}"
        assert f"without waiting for the index of {P}" in err
    # the build's temporary directory is left behind by the exit, and removed by the next open
    ui_cache = cache / "neuron-explorer" / "ui"
    assert [x for x in ui_cache.iterdir() if x.name.endswith(".tmp")], list(ui_cache.iterdir())
    from neuron_explorer.ui.workspace import Workspace

    ws = Workspace(ui_workspace, cache_dir=ui_cache)
    ws.profile(P)
    ws.profile(P).wait_index()
    assert not [x for x in ui_cache.iterdir() if x.name.endswith(".tmp")], list(ui_cache.iterdir())


def test_an_open_removes_only_the_build_directories_of_ended_processes(ui_workspace: Path, tmp_path: Path) -> None:
    from neuron_explorer.ui.workspace import Workspace

    cache = tmp_path / "cache"
    Workspace(ui_workspace, cache_dir=cache).profile(P).wait_index()
    (idx,) = [x for x in cache.iterdir() if x.name.endswith(".idx")]
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    dead_pid = int(ended.stdout)
    orphan = cache / f"{idx.name}.{dead_pid}.a1b2c3.tmp"
    running = cache / f"{idx.name}.{os.getpid()}.d4e5f6.tmp"  # a build of a live process (this one)
    other_user = cache / f"{idx.name}.1.g7h8i9.tmp"  # pid 1: alive, maybe not ours to signal
    not_ours = cache / "notes.tmp"  # not a build directory's name: never touched
    for d in (orphan, running, other_user, not_ours):
        d.mkdir()
        (d / "part").write_bytes(b"x")
    Workspace(ui_workspace, cache_dir=cache).profile(P).wait_index()  # loaded from the cache
    assert not orphan.exists()
    assert running.is_dir() and other_user.is_dir() and not_ours.is_dir() and idx.is_dir()


def test_build_directory_names_are_parsed_safely(tmp_path: Path) -> None:
    """``orphaned_build`` reads a pid out of a directory name: any name gives an answer, never an error."""
    import random

    from neuron_explorer.ui.index import EventIndex

    rng = random.Random(7)
    alphabet = "ab.-_x0123456789idxtmp\u00e9\u00b2\u0663 "
    names = ["p-1.idx.999999999.a.tmp", "p-1.idx.99999999999999999999999999.a.tmp", "p-1.idx..tmp",
             "p-1.idx.0.a.tmp", "p-1.idx.\u00b2.a.tmp", "p-1.idx.\u0663.a.tmp", ".idx.1.tmp", "x.tmp", "p-1.idx",
             "p-1.idx.12.a.tmp.tmp"]
    names += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) + rng.choice(["", ".tmp"])
              for _ in range(300)]
    for name in names:
        d = tmp_path / name
        try:
            d.mkdir()
        except (OSError, ValueError):
            continue
        got = EventIndex.orphaned_build(d)
        assert isinstance(got, bool)
        if got:  # only <...>.idx.<pid>.<...>.tmp of a pid that does not exist
            pid = name.rsplit(".idx.", 1)[1].split(".", 1)[0]
            assert name.endswith(".tmp") and pid.isascii() and pid.isdigit() and not os.path.exists(f"/proc/{int(pid)}")
    assert EventIndex.orphaned_build(tmp_path / "p-1.idx.999999999.a.tmp") is True  # pid_max is far below
    assert EventIndex.orphaned_build(tmp_path / "p-1.idx.99999999999999999999999999.a.tmp") is False
    (tmp_path / "f.idx.999999999.b.tmp").write_text("a file, not a build directory")
    assert EventIndex.orphaned_build(tmp_path / "f.idx.999999999.b.tmp") is False
