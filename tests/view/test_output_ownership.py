"""`view` replaces only what it wrote, keeps the output directory's permissions, refuses an empty
display name and cleans up after runs that were killed (issue 29, item 8).

Every run is the real command line in a subprocess over a synthetic capture (fast).  Runs that
stage work in the temporary directory get a private ``TMPDIR``, so that the tests see, and clean
up, only their own staging directories.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import clean_env, cli
from .test_output_safety import _capture, _one_line_error, _tree

OWNER = ".neuron-explorer-owner.json"


@pytest.fixture
def cap(tmp_path: Path) -> Path:
    return _capture(tmp_path / "cap", events=200)


def _view(*args: str, tmpdir: Path | None = None, umask: int | None = None, **kw) -> subprocess.CompletedProcess:
    env = clean_env(**({"TMPDIR": str(tmpdir)} if tmpdir else {}))
    return subprocess.run([sys.executable, "-m", "neuron_explorer", "view", *args], env=env, capture_output=True,
                          text=True, timeout=240, umask=-1 if umask is None else umask, **kw)


# ---------------------------------------------------------------- files a user added to an output


def test_files_a_user_added_to_an_earlier_output_are_named_and_nothing_is_deleted(cap, tmp_path):
    pq = tmp_path / "out"
    cli("view", "-d", str(cap), "--output-file", str(pq), check=True)
    (pq / "notes.txt").write_text("my notes")
    (pq / "analysis").mkdir()
    (pq / "analysis" / "r.csv").write_text("a,b\n1,2\n")
    before = _tree(tmp_path)
    r = cli("view", "-d", str(cap), "--output-file", str(pq))
    _one_line_error(r, 2, str(pq), "2 files not written by neuron-explorer view", "notes.txt", "analysis/r.csv")
    assert _tree(tmp_path) == before  # nothing deleted, nothing written (no work area beside it either)


def test_a_file_slipped_into_a_table_directory_is_foreign_too(cap, tmp_path):
    pq = tmp_path / "out"
    cli("view", "-d", str(cap), "--output-file", str(pq), check=True)
    part = next((pq / "SystemProfileEvents").glob("instance=*/process=*"))
    (part / "README").write_text("what these files are")
    (pq / "SystemProfileEvents" / "query.sql").write_text("select 1")
    before = _tree(tmp_path)
    r = cli("view", "-d", str(cap), "--output-file", str(pq))
    _one_line_error(r, 2, "2 files not written", "SystemProfileEvents/query.sql",
                    f"SystemProfileEvents/{part.parent.name}/{part.name}/README")
    assert _tree(tmp_path) == before


def test_many_foreign_files_are_counted_and_a_few_named(cap, tmp_path):
    pq = tmp_path / "out"
    cli("view", "-d", str(cap), "--output-file", str(pq), check=True)
    for i in range(12):
        (pq / f"plot{i:02d}.png").write_bytes(b"png")
    os.symlink("/etc/hostname", pq / "link")  # (we never write symlinks: not ours)
    r = cli("view", "-d", str(cap), "--output-file", str(pq))
    _one_line_error(r, 2, "13 files not written by neuron-explorer view (link, plot00.png, plot01.png, plot02.png, "
                          "plot03.png and 8 more)")
    assert len(list(pq.glob("plot*.png"))) == 12 and (pq / "link").is_symlink()


def test_an_output_without_foreign_files_is_still_replaced(cap, tmp_path):
    pq = tmp_path / "out"
    cli("view", "-d", str(cap), "--output-file", str(pq), check=True)
    cli("view", "-d", str(cap), "--output-file", str(pq), check=True)
    assert (pq / ".neuron-explorer-view.json").is_file() and not list(pq.rglob(OWNER))


# ---------------------------------------------------------------- the output directory's mode


def test_a_replaced_output_keeps_its_mode_and_a_new_one_gets_the_umask_mode(cap, tmp_path):
    pq = tmp_path / "out"
    r = _view("-d", str(cap), "--output-file", str(pq), umask=0o022)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(pq).st_mode) == 0o755  # what mkdir gives under the umask, not mkdtemp's 0700
    os.chmod(pq, 0o750)
    r = _view("-d", str(cap), "--output-file", str(pq), umask=0o022)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(pq).st_mode) == 0o750  # the user's choice is kept
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o711)
    os.chmod(empty, 0o711)
    assert _view("-d", str(cap), "--output-file", str(empty), umask=0o077).returncode == 0
    assert stat.S_IMODE(os.stat(empty).st_mode) == 0o711
    other = tmp_path / "other"
    assert _view("-d", str(cap), "--output-file", str(other), umask=0o027).returncode == 0
    assert stat.S_IMODE(os.stat(other).st_mode) == 0o750


def test_an_ingestion_gets_the_umask_mode(cap, tmp_path):
    ws = tmp_path / "ws"
    r = _view("-d", str(cap), "--ingest-only", "--data-path", str(ws), "--display-name", "run-a", umask=0o022)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(ws / "run-a").st_mode) == 0o755


# ---------------------------------------------------------------- --display-name ''


@pytest.mark.parametrize("mode", [["--ingest-only", "--data-path", "WS"], ["--output-file", "OUT"]])
def test_an_empty_display_name_is_refused(cap, tmp_path, mode):
    args = [str(tmp_path / "ws") if a == "WS" else str(tmp_path / "out") if a == "OUT" else a for a in mode]
    before = _tree(tmp_path)
    r = cli("view", "-d", str(cap), *args, "--display-name", "")
    _one_line_error(r, 2, "--display-name ''", "is empty")
    assert _tree(tmp_path) == before


# ---------------------------------------------------------------- staging left by killed runs


def _wait_for(pred, what: str, timeout: float = 120.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _owned_by(parent: Path, pattern: str, pid: int) -> list[Path]:
    """The staging directories in ``parent`` whose owner file names ``pid`` (the owner file is
    written right after the directory is made: waiting for it avoids killing in between)."""
    out = []
    for d in parent.glob(pattern):
        try:
            if json.loads((d / OWNER).read_text())["pid"] == pid:
                out.append(d)
        except (OSError, ValueError):
            pass
    return out


def test_a_view_killed_while_writing_to_a_fifo_leaves_nothing_after_the_next_run(cap, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    leftovers = []
    for _ in range(2):  # two killed runs: each leaves its whole staged output under TMPDIR
        p = subprocess.Popen([sys.executable, "-m", "neuron_explorer", "view", "-d", str(cap),
                              "--output-format", "json", "--output-file", str(fifo)], env=clean_env(TMPDIR=str(tmp)),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        leftovers += _wait_for(lambda pid=p.pid: _owned_by(tmp, "neuron-explorer-view.*.tmp", pid),
                               "the staging directory")
        p.send_signal(signal.SIGKILL)  # (no reader on the FIFO: the run is blocked or still converting)
        p.wait(30)
    # the second run removed the first one's (they do not pile up, one per run); its own stays until
    assert len(leftovers) == 2 and not leftovers[0].exists() and leftovers[1].is_dir()
    r = _view("-d", str(cap), "--output-format", "summary-json", "--output-file", str(tmp_path / "s.json"), tmpdir=tmp)
    assert r.returncode == 0, r.stderr  # (a summary stages nothing: nothing is swept)
    assert leftovers[1].is_dir()
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    r = _view("-d", str(cap), "--output-format", "json", "--output-file", str(fifo), tmpdir=tmp)
    out, _ = reader.communicate(timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(out)["traceEvents"]
    assert sorted(tmp.iterdir()) == []  # the dead runs' staging is gone, and this run's own


_KILLED_BEFORE_RENAME = r'''
import os, signal, sys
from neuron_explorer.exporters import parquet
from neuron_explorer.cli import main

def assemble(path, pieces, run):  # the dataset is complete in its work area: killed before the rename
    parquet.write_tables(run.work, pieces, run.warnings)
    print("ready", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

parquet.assemble = assemble
sys.exit(main(sys.argv[1:]))
'''


def test_a_parquet_run_killed_before_the_rename_leaves_its_work_area_only_until_the_next_run(cap, tmp_path):
    pq = tmp_path / "out"
    cli("view", "-d", str(cap), "--output-file", str(pq), check=True)
    first = _tree(pq)
    (tmp_path / ".out.mine.tmp").mkdir()  # the user's, named like a work area: no owner file
    (tmp_path / ".out.mine.tmp" / "keep").write_text("x")
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", _KILLED_BEFORE_RENAME, "view", "-d", str(cap), "--output-file",
                            str(pq)], env=clean_env(), capture_output=True, text=True, timeout=240)
        assert p.returncode == -signal.SIGKILL and p.stdout == "ready\n", p.stderr
    # the second killed run removed the first one's work area; its own is left until the next run
    stale = [d for d in tmp_path.glob(".out.*.tmp") if d.name != ".out.mine.tmp"]
    assert len(stale) == 1 and (stale[0] / OWNER).is_file() and (stale[0] / "ProfileMetadata.parquet").is_file()
    assert _tree(pq) == first  # the earlier output is intact
    cli("view", "-d", str(cap), "--output-file", str(pq), check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.mine.tmp", "cap", "out"]
    assert (tmp_path / ".out.mine.tmp" / "keep").read_text() == "x"


def test_the_sweep_removes_only_staging_of_dead_runs_we_wrote(cap, tmp_path):
    """Named like ours but not removable: no owner file, a live owner (this test), another host's
    owner, another boot's (another machine of the same name, or before a reboot), another pid
    namespace's (a container sharing the directory), a symlink to a dead run's directory, a plain
    file; only the dead run's own goes."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()

    def staged(name: str, owner: dict | None) -> Path:
        d = tmp / name
        d.mkdir()
        (d / "piece").write_text(name)
        if owner is not None:
            (d / OWNER).write_text(json.dumps({"written_by": "neuron-explorer", "host": socket.gethostname(),
                                               "boot": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
                                               "pidns": os.readlink("/proc/self/ns/pid"), "start": "", **owner}))
        return d

    gone = staged("neuron-explorer-view.dead.tmp", {"pid": int(dead)})
    kept = [staged("neuron-explorer-view.noowner.tmp", None),
            staged("neuron-explorer-view.live.tmp", {"pid": os.getpid()}),
            staged("neuron-explorer-view.elsewhere.tmp", {"pid": int(dead), "host": "another-host"}),
            staged("neuron-explorer-view.container.tmp", {"pid": int(dead), "pidns": "pid:[1]"}),
            staged("neuron-explorer-view.otherboot.tmp", {"pid": int(dead), "boot": "another-boot"}),
            staged("neuron-explorer-view.bad.tmp", {"pid": "x"}),
            staged("other-tool.dead.tmp", {"pid": int(dead)})]
    target = staged("target-of-link", {"pid": int(dead)})
    (tmp / "neuron-explorer-view.link.tmp").symlink_to(target)
    (tmp / "neuron-explorer-view.file.tmp").write_text("a file")
    before = {p.name for p in tmp.iterdir()}
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.DEVNULL)
    r = _view("-d", str(cap), "--output-format", "json", "--output-file", str(fifo), tmpdir=tmp)
    reader.wait(60)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in tmp.iterdir()} == before - {gone.name}
    for d in kept + [target]:
        assert (d / "piece").read_text() == d.name


# ---------------------------------------------------------------- a trace at the default name

PYTORCH_TRACE = b'{\n  "schemaVersion": 1,\n  "traceEvents": []\n}\n'


@pytest.mark.parametrize("fmt,name", [("json", "system_profile.json"), ("perfetto", "system_profile.pftrace")])
def test_a_trace_at_the_default_name_is_replaced_only_when_view_wrote_it(cap, tmp_path, fmt, name):
    """No --output-file: ``./system_profile.json`` (``.pftrace``) may be another program's trace;
    it is refused, named, with nothing written; a trace ``view`` wrote there is replaced, and a name
    the user gives is the user's choice (decision 0093)."""
    work = tmp_path / "work"
    work.mkdir()
    theirs = work / name
    theirs.write_bytes(PYTORCH_TRACE)
    from neuron_explorer.exporters import chrome_json, perfetto

    ours = chrome_json.ours if fmt == "json" else perfetto.ours
    r = _view("-d", str(cap), "--output-format", fmt, cwd=work)
    _one_line_error(r, 2, f"{name} exists and was not written by neuron-explorer view", "--output-file")
    assert theirs.read_bytes() == PYTORCH_TRACE
    assert sorted(p.name for p in work.iterdir()) == [name]  # no device profile written either
    theirs.unlink()
    assert _view("-d", str(cap), "--output-format", fmt, cwd=work).returncode == 0 and ours(str(theirs))
    r = _view("-d", str(cap), "--output-format", fmt, cwd=work)  # ours: replaced
    assert r.returncode == 0 and ours(str(theirs)), r.stderr
    (work / "mine").write_bytes(PYTORCH_TRACE)
    assert _view("-d", str(cap), "--output-format", fmt, "--output-file", str(work / "mine")).returncode == 0
    assert ours(str(work / "mine"))


def test_a_json_trace_of_an_earlier_view_is_recognised_as_ours(tmp_path):
    """Traces written before the metadata named the tool opened it with ``clock_offsets``."""
    from neuron_explorer.exporters import chrome_json

    old = tmp_path / "old.json"
    old.write_bytes(b'{"displayTimeUnit":"ns","traceEvents":[{"ph":"X"}],"metadata":{"clock_offsets":{},"warnings":[]}}')
    assert chrome_json.ours(str(old))
    other = tmp_path / "other.json"
    other.write_bytes(b'{"displayTimeUnit":"ns","traceEvents":[],"metadata":{"tool":"neuron-det","x":1}}')
    assert not chrome_json.ours(str(other))
