"""`view` never destroys what it did not write, writes through special files instead of replacing
them, keeps names read from a capture inside its output, and reports a bad port or a write failure
in one line (issue #13, items 1, 2, 4 and part of 14).

Captures are synthetic (written through the real capture writer, `bench.synth_capture`), so these
tests are fast; `view` runs as the real command line in a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

from neuron_explorer.capture.device import OpTable, write_device_trace
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb

from ..conftest import clean_env, cli


def _capture(root: Path, instances: tuple[str, ...] = ("i-0001",), events: int = 400) -> Path:
    from bench.synth_capture import write_process

    world = 2 * len(instances)
    for i, inst in enumerate(instances):
        for r in range(2):
            rank = 2 * i + r
            write_process(str(root), inst, rank, world, 5000 + rank, events, 0, rank)
    return root


@pytest.fixture
def cap(tmp_path: Path) -> Path:
    return _capture(tmp_path / "cap")


def _tree(root: Path) -> dict[str, str]:
    """{relative path: sha256 (files) or 'dir'/'link -> target'} of everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link -> " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "special"
    return out


def _one_line_error(r: subprocess.CompletedProcess, code: int, *words: str) -> None:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code, r.stderr
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], lines[0]


# ---------------------------------------------------------------- item 1: directories we did not write


def test_an_existing_directory_that_view_did_not_write_is_refused_and_kept(cap, tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("precious")
    (user / "sub").mkdir()
    (user / "sub" / "data.bin").write_bytes(b"\x00" * 10)
    before = _tree(tmp_path)
    r = cli("view", "-d", str(cap), "--output-file", str(user))
    _one_line_error(r, 2, str(user), "not written by neuron-explorer view")
    assert _tree(tmp_path) == before  # nothing removed, nothing left behind (no work area either)


def test_an_output_that_is_contains_or_lies_inside_a_capture_session_is_refused(cap, tmp_path):
    session = next(p.parent for p in cap.rglob("ntrace.pb"))
    before = _tree(tmp_path)
    for fmt, out, what in (("parquet", cap, "contains"), ("parquet", session, "is"),
                           ("parquet", session / "pq", "lies inside"), ("json", session / "t.json", "lies inside"),
                           ("summary-text", session / "trace_info.pb", "lies inside"),
                           ("perfetto", session / "ntrace.pb", "lies inside")):
        r = cli("view", "-d", str(cap), "--output-format", fmt, "--output-file", str(out))
        _one_line_error(r, 2, str(out), f"{what} the capture session")
    assert _tree(tmp_path) == before


def test_a_symlink_to_a_capture_is_not_a_way_around_the_session_check(cap, tmp_path):
    session = next(p.parent for p in cap.rglob("ntrace.pb"))
    (tmp_path / "link").symlink_to(session)
    before = _tree(tmp_path)
    r = cli("view", "-d", str(cap), "--output-file", str(tmp_path / "link"))
    _one_line_error(r, 2, "is the capture session")
    assert _tree(tmp_path) == before


def test_view_replaces_its_own_earlier_output_and_nothing_beside_it(cap, tmp_path):
    pq = tmp_path / "pq"
    # names the old code removed or reused: <out>.parts and <out>.tmp belong to the user here
    for n in ("pq.parts", "pq.tmp"):
        (tmp_path / n).mkdir()
        (tmp_path / n / "keep.txt").write_text(n)
    cli("view", "-d", str(cap), "--output-file", str(pq), check=True)
    assert (pq / ".neuron-explorer-view.json").is_file()
    first = _tree(pq)
    (pq / "ViewWarnings.parquet").write_bytes(b"stale")  # the rerun must replace the whole dataset
    r = cli("view", "-d", str(cap), "--output-file", str(pq), check=True)
    assert "wrote" in r.stderr
    again = _tree(pq)  # (ProfileMetadata's versions_json keeps protobuf's map order: not compared)
    assert again.keys() == first.keys() and again["ViewWarnings.parquet"] == first["ViewWarnings.parquet"]
    for n in ("pq.parts", "pq.tmp"):
        assert (tmp_path / n / "keep.txt").read_text() == n
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap", "pq", "pq.parts", "pq.tmp"]  # no temp dirs left


def test_an_output_of_an_earlier_version_or_an_empty_directory_may_be_replaced(cap, tmp_path):
    pq = tmp_path / "pq"
    cli("view", "-d", str(cap), "--output-file", str(pq), check=True)
    (pq / ".neuron-explorer-view.json").unlink()  # as written before the marker existed
    cli("view", "-d", str(cap), "--output-file", str(pq), check=True)
    assert (pq / ".neuron-explorer-view.json").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    cli("view", "-d", str(cap), "--output-file", str(empty), check=True)
    assert (empty / "ProfileMetadata.parquet").is_file()
    # the earlier-version layout with one foreign file in it is not ours any more
    (pq / ".neuron-explorer-view.json").unlink()
    (pq / "mine.txt").write_text("x")
    r = cli("view", "-d", str(cap), "--output-file", str(pq))
    _one_line_error(r, 2, "not written by neuron-explorer view")
    assert (pq / "mine.txt").read_text() == "x"


@pytest.mark.parametrize("name, problem", [("..", "'.' or '..'"), (".", "'.' or '..'"), ("ABS", "'/'"),
                                           ("a/b", "'/'"), ("   ", "empty"), ("", "empty"),
                                           (".hidden", "starts with '.'"), ("a\\b", "'\\'")])
def test_display_name_must_be_one_component_inside_the_workspace(cap, tmp_path, name, problem):
    if name == "ABS":  # an absolute path (the old code wrote the profile there)
        name = str(tmp_path / "elsewhere")
    ws = tmp_path / "area" / "ws"
    ws.mkdir(parents=True)
    (ws / "other-run").mkdir()
    (ws / "other-run" / "x").write_text("keep")
    before = _tree(tmp_path)
    r = cli("view", "-d", str(cap), "--ingest-only", "--data-path", str(ws), "--display-name", name)
    _one_line_error(r, 2, "--display-name", problem)
    assert _tree(tmp_path) == before  # (the parent of the workspace and the absolute path included)


def test_display_name_names_a_directory_inside_the_workspace(cap, tmp_path):
    ws = tmp_path / "ws"
    r = cli("view", "-d", str(cap), "--ingest-only", "--data-path", str(ws), "--display-name", "run a%1", check=True)
    assert r.returncode == 0
    assert sorted(p.name for p in ws.iterdir()) == ["run a%1"]
    rows = duckdb.connect().execute(
        f"select distinct display_name from '{ws}/run a%1/ProfileMetadata.parquet'").fetchall()
    assert rows == [("run a%1",)]


def test_a_name_derived_from_the_capture_directory_is_a_visible_workspace_entry(tmp_path):
    from neuron_explorer.ui.paths import list_profile_dirs

    cap = _capture(tmp_path / ".hidden cap", events=100)
    ws = tmp_path / "ws"
    cli("view", "-d", str(cap), "--ingest-only", "--data-path", str(ws), check=True)
    assert list_profile_dirs(ws) == ["%2Ehidden%20cap"]


# ---------------------------------------------------------------- item 2: special files


def _json_ok(data: bytes) -> dict:
    doc = json.loads(data)
    assert any(e.get("ph") == "X" for e in doc["traceEvents"])
    return doc


def test_a_fifo_output_is_written_through_and_stays_a_fifo(cap, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader():
        with open(fifo, "rb") as f:
            got.append(f.read())

    for fmt in ("json", "summary-json"):
        t = threading.Thread(target=reader, daemon=True)  # (blocked for good if the FIFO was replaced)
        t.start()
        r = cli("view", "-d", str(cap), "--output-format", fmt, "--output-file", str(fifo))
        assert r.returncode == 0, r.stderr
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
        t.join(60)
        assert not t.is_alive()
    _json_ok(got[0])
    assert json.loads(got[1])["processes"] if "processes" in json.loads(got[1]) else json.loads(got[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap", "pipe"]  # no temp files beside it


def test_a_symlink_output_replaces_its_target_and_stays_a_link(cap, tmp_path):
    real = tmp_path / "real" / "trace.json"
    real.parent.mkdir()
    real.write_text("old")
    os.chmod(real, 0o600)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", str(link))
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    _json_ok(real.read_bytes())
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o600  # the user's permissions are kept
    assert sorted(p.name for p in real.parent.iterdir()) == ["trace.json"]


def test_a_symlink_to_proc_self_fd_1_writes_to_standard_output(cap, tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to("/proc/self/fd/1")
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", str(link))
    assert r.returncode == 0, r.stderr
    _json_ok(r.stdout.encode())
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"


def test_dash_streams_single_file_formats_to_stdout_and_is_refused_for_parquet(cap, tmp_path):
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    _json_ok(r.stdout.encode())
    r = subprocess.run([sys.executable, "-m", "neuron_explorer", "view", "-d", str(cap), "--output-format",
                        "perfetto", "--output-file", "-"], capture_output=True, env=clean_env(), cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0 and r.stdout[:1] == b"\x0a", r.stderr  # a TracePacket field
    r = cli("view", "-d", str(cap), "--output-format", "summary-text", "--output-file", "-", cwd=tmp_path)
    assert r.returncode == 0 and "summary" in r.stdout
    r = cli("view", "-d", str(cap), "--output-file", "-", cwd=tmp_path)
    _one_line_error(r, 2, "parquet output is a directory", "'-'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap"]


def test_an_output_path_that_cannot_be_looked_up_is_a_one_line_usage_error(cap, tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for out, reason in ((loop, "Too many levels of symbolic links"), (tmp_path / ("n" * 300), "File name too long")):
        r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", str(out))
        _one_line_error(r, 2, reason)


def test_a_socket_output_is_refused(cap, tmp_path):
    path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    try:
        r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", str(path))
        _one_line_error(r, 2, "is a socket")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        s.close()


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="creating or writing a device node needs root")


@root_only
def test_a_character_device_output_stays_a_device(cap, tmp_path):
    dev = tmp_path / "null"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a second /dev/null
    for fmt in ("json", "perfetto", "summary-text"):
        r = cli("view", "-d", str(cap), "--output-format", fmt, "--output-file", str(dev))
        assert r.returncode == 0, r.stderr
        assert stat.S_ISCHR(os.lstat(dev).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap", "null"]


@root_only
def test_dev_null_stays_the_null_device(cap, tmp_path):
    try:
        for fmt in ("json", "perfetto", "summary-json"):
            r = cli("view", "-d", str(cap), "--output-format", fmt, "--output-file", "/dev/null", cwd=tmp_path)
            assert r.returncode == 0, r.stderr
            st = os.lstat("/dev/null")
            assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    finally:  # never leave the machine without /dev/null, even when this test fails
        if not stat.S_ISCHR(os.lstat("/dev/null").st_mode):
            os.unlink("/dev/null")
            os.mknod("/dev/null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
            os.chmod("/dev/null", 0o666)
    assert not list(Path("/dev").glob(".null.*.tmp"))


# ---------------------------------------------------------------- item 4: names read from files


def _rewrite_instance(session: Path, instance_id: str) -> None:
    p = session / "trace_info.pb"
    m = pb.TraceInfo()
    m.ParseFromString(p.read_bytes())
    m.instance_id = instance_id
    p.write_bytes(m.SerializeToString())


def test_a_crafted_instance_id_cannot_write_outside_the_output(tmp_path):
    box = tmp_path / "box"  # the output's parent: nothing may appear beside the output
    box.mkdir()
    cap = _capture(tmp_path / "cap", instances=("i-a", "i-b", "i-c", "i-d"), events=100)
    sessions = sorted(p.parent for p in cap.rglob("trace_info.pb"))
    escape = "x/" + "../" * 12 + str(tmp_path / "escaped").lstrip("/")
    crafted = [escape, "..", "x_..", "x%2F..", "a/b", "a_b", "a%2Fb"]
    too_long = "../../" + "y" * 400  # longer than any host name: refused at load (one warning, exit 1)
    for s, iid in zip(sessions, crafted + [too_long]):
        _rewrite_instance(s, iid)
    pq = box / "pq"
    r = cli("view", "-d", str(cap), "--output-file", str(pq))
    assert r.returncode == 1, r.stderr
    assert [ln for ln in r.stderr.splitlines() if "skipped" in ln and "instance" in ln and str(sessions[-1]) in ln]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["box", "cap"]
    assert sorted(p.name for p in box.iterdir()) == ["pq"]
    parts = sorted((pq / "SystemProfileEvents").iterdir())
    assert len(parts) == len(crafted)  # one directory per id: none collide
    for p in parts:
        assert p.resolve().parent == (pq / "SystemProfileEvents").resolve() and len(p.name) < 255
    # the data keeps the real values, and hive readers decode the partition back to them
    rows = duckdb.sql(f"""select instance_id, instance, count(*)
                          from read_parquet('{pq}/SystemProfileEvents/**/*.parquet', hive_partitioning=true)
                          group by all""").fetchall()
    assert sorted(r[0] for r in rows) == sorted(crafted)
    assert all(inst == iid for iid, inst, _ in rows)
    # the UI reads partition values from the directory names: they decode to the real ids too
    from neuron_explorer.ui.paths import table_files

    got = {inst for inst, _, _ in table_files(pq.parent, pq, "SystemProfileEvents")}
    assert set(crafted) <= got
    counters = duckdb.sql(f"select distinct instance_id from '{pq}/SystemProfileCounters/**/*.parquet'").fetchall() \
        if (pq / "SystemProfileCounters").exists() else []
    assert {c for (c,) in counters} <= set(crafted)


def test_device_profile_files_get_safe_collision_free_names(tmp_path):
    cap = _capture(tmp_path / "cap", events=100)
    session = sorted(p.parent for p in cap.rglob("trace_info.pb"))[0]
    stems = ["a b%", "a%20b%25", "..", "x"]
    for k, stem in enumerate(stems):
        t = OpTable()
        x = t.add_execution(k, 0, "train_step_forward", "neff_1234567", 1_000_000_000_000 + k, 1_000_000_100_000 + k)
        t.add_op(1_000_000_000_000 + k, 1_000_000_050_000 + k, "aten::mm", "compute", x, flops=10.0)
        write_device_trace(str(session / f"{stem}_instid_0_vnc_0.ntff"), t, instance_id="i-0001", pid=5000,
                           nc_idx=0, mode="model", device_kind="cpu", source="torch")
    out = tmp_path / "views"
    out.mkdir()
    for fmt, name in (("json", "t.json"), ("perfetto", "t.pftrace"), ("parquet", "pq")):
        r = cli("view", "-d", str(cap), "--output-format", fmt, "--output-file", str(out / name))
        assert r.returncode == 0, r.stderr
    for ext in ("json", "pftrace"):
        files = sorted(p.name for p in out.glob(f"device_profile_model_*.{ext}"))
        assert len(files) == len(stems), files
        # (no graph of the process has these hashes: the file's own stem stands for the model id)
        assert f"device_profile_model_a%20b%25.{ext}" in files
        assert f"device_profile_model_a%2520b%2525.{ext}" in files
    ids = {r[0] for r in duckdb.sql(f"select profile_id from '{out}/pq/DeviceProfiles.parquet'").fetchall()}
    assert ids == set(stems)  # the table keeps the real ids
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap", "views"]


def test_safe_component_is_one_component_bounded_and_one_to_one():
    from neuron_explorer.util.names import safe_component

    names = ["i-0123456789abcdef0", "host.example", ".", "..", "...", "a/b", "a_b", "a%2Fb", "a%b", "a\x00b",
             "/", "x/../../etc", "héllo", "h%C3%A9llo", " ", "\udcff", "~", "a" * 500, "a" * 499 + "b", "CON"]
    enc = [safe_component(n) for n in names]
    assert len(set(enc)) == len(names)
    for e in enc:
        assert "/" not in e and "\x00" not in e and e not in (".", "..") and 0 < len(e.encode()) <= 200
    assert safe_component("i-0123456789abcdef0") == "i-0123456789abcdef0"  # ordinary ids are unchanged
    with pytest.raises(ValueError):
        safe_component("")


def test_capture_file_names_stay_in_the_session_directory():
    from neuron_explorer.contracts.layout import model_ntff_name, neff_file_name

    for name in (model_ntff_name("../../x", 0), neff_file_name("a/b", 1)):
        assert "/" not in name and name not in (".", "..")
    assert model_ntff_name("123", 2) == "123_instid_0_vnc_2.ntff"
    assert neff_file_name("123", 2) == "neff_123_vnc_2.neff"


# ---------------------------------------------------------------- item 14: one-line errors


@pytest.mark.parametrize("port", ["70000", "0", "-1", "http"])
def test_a_bad_port_is_a_one_line_usage_error(tmp_path, port):
    r = cli("view", "--ui", "--data-path", str(tmp_path / "ws"), "--port", port)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith("accepted: a TCP port from 1 to 65535, e.g. 3001")


# A real full disk: a small tmpfs mounted in a private mount namespace (it disappears with the
# process, so nothing is left mounted on the machine), filled up with a filler file.
FULL_DISK_DRIVER = r'''
import hashlib, json, os, subprocess, sys

cap, mnt, fmt, leave, report, jobs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt]).returncode != 0:
    sys.exit(77)
name = {"parquet": "pq", "json": "t.json", "perfetto": "t.pftrace", "summary-text": "summary.txt"}[fmt]
out = os.path.join(mnt, name)
filler = os.path.join(mnt, "filler")


def view():
    r = subprocess.run([sys.executable, "-m", "neuron_explorer", "view", "-d", cap, "--output-format", fmt,
                        "--output-file", out, "--no-progress", "--jobs", jobs], capture_output=True, text=True)
    return {"rc": r.returncode, "stderr": r.stderr, "tree": tree()}


def tree():
    got = {}
    for dirpath, dirnames, filenames in os.walk(mnt):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            if p != filler:
                got[os.path.relpath(p, mnt)] = ("dir" if os.path.isdir(p)
                                                else hashlib.sha256(open(p, "rb").read()).hexdigest())
    return got


def fill():
    st = os.statvfs(mnt)
    size = st.f_bavail * st.f_frsize - leave
    with open(filler, "ab") as f:
        try:
            while size > 0:
                n = min(size, 1 << 20)
                f.write(b"\0" * n)
                size -= n
            f.flush()
        except OSError:
            pass


steps = []
fill()
steps.append(view())  # full disk, nothing there before
os.unlink(filler)
steps.append(view())  # room: this output is the earlier one below
fill()
steps.append(view())  # full again
json.dump({"out": out, "steps": steps}, open(report, "w"))
'''


def _in_private_mount_namespace(cmd: list[str]) -> list[str]:
    import shutil as sh

    if sh.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    return ["unshare", "-m", "--propagation", "private", *cmd] if os.geteuid() == 0 else ["unshare", "-rm", *cmd]


@pytest.mark.parametrize("fmt, leave, jobs", [
    ("parquet", 0, 1), ("parquet", 96 << 10, 1), ("json", 0, 1), ("json", 96 << 10, 1), ("perfetto", 0, 1),
    ("perfetto", 64 << 10, 1), ("summary-text", 0, 1),
    pytest.param("parquet", 96 << 10, 2, marks=pytest.mark.slow),  # the error comes back from a worker process
])
def test_a_full_disk_is_one_line_and_leaves_the_earlier_output_intact(tmp_path, fmt, leave, jobs):
    cap = _capture(tmp_path / "cap", events=10_000)
    mnt = tmp_path / "small"
    mnt.mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(FULL_DISK_DRIVER)
    report = tmp_path / "report.json"
    p = subprocess.run(_in_private_mount_namespace([sys.executable, str(driver), str(cap), str(mnt), fmt, str(leave),
                                                    str(report), str(jobs)]),
                       capture_output=True, text=True, env=clean_env(), timeout=240)
    if p.returncode == 77 or (p.returncode != 0 and not report.exists()):
        pytest.skip(f"cannot mount a small tmpfs here: {p.stderr.strip()[-300:]}")
    rep = json.loads(report.read_text())
    line = f"neuron-explorer: error: cannot write {rep['out']}: No space left on device"
    no_room, room, full_again = rep["steps"]
    assert room["rc"] == 0 and room["tree"], room["stderr"]
    for step in (no_room, full_again):
        assert step["rc"] == 1, step["stderr"]
        assert step["stderr"].strip().splitlines() == [line]
    assert no_room["tree"] == {}  # nothing half-written left behind, no work area
    assert full_again["tree"] == room["tree"]  # the earlier output, byte for byte, and nothing else
