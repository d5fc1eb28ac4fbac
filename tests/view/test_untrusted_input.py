"""Hostile input: numbers that would size memory, files that are not files, damaged profiles next
to an intact one (issue #13, items 5, 8 and the wrapping timestamps of 14).

Every test runs the real command in a subprocess whose address space is capped, and checks what a
user sees: the exit status, one line naming the file, and the intact profile still converted in
every format.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from neuron_explorer.contracts.env import parse_nc_filter
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb
from neuron_explorer.runtime.config import IndexRanges
from neuron_explorer.util.names import printable

from ..conftest import clean_env
from .conftest import copy_capture, neuron_explorer, run_bounded

MB = 1 << 20
FORMATS = ("parquet", "json", "perfetto", "summary-text")


# -- helpers -------------------------------------------------------------------------------------

def edit(path: Path, msg_type, change) -> None:
    """Rewrite a capture file through its schema: ``change(message)``."""
    m = msg_type()
    m.ParseFromString(path.read_bytes())
    change(m)
    path.write_bytes(m.SerializeToString())


def set_column(block, name: str, dtype: str, change) -> None:
    """``change(column, types)`` on one ``EventColumns`` block."""
    a = np.frombuffer(getattr(block, name), dtype=dtype).copy()
    change(a, np.frombuffer(block.type, dtype="<u2"))
    setattr(block, name, a.tobytes())


def edit_events(session: Path, change, first_only: bool = False) -> Path:
    """``change(block)`` on the session's event blocks: those of its segment files
    (``ntrace_nc*_*.pb``, decision 0111), else ntrace.pb's inline events; returns the first file
    changed."""
    segs = sorted(session.glob("ntrace_nc*_*.pb"))
    if not segs:
        edit(session / "ntrace.pb", pb.SystemTrace, lambda m: change(m.events))
        return session / "ntrace.pb"
    for p in segs[:1] if first_only else segs:
        edit(p, pb.EventSegment, lambda m: [change(b) for b in (m.blocks[:1] if first_only else m.blocks)])
    return segs[0]


def pid_of(session: Path) -> int:
    m = pb.TraceInfo()
    m.ParseFromString((session / "trace_info.pb").read_bytes())
    return int(m.pid)


def view(root: Path, fmt: str, out: Path, *extra: str, **kw):
    args = ["view", "-d", str(root), "--output-format", fmt, *extra]
    if not fmt.startswith("summary"):
        args += ["--output-file", str(out)]
    return neuron_explorer(*args, **kw)


def converted_pids(fmt: str, out: Path, r) -> set[int]:
    """The processes whose events the output holds, read back the way a user's tools would."""
    if fmt == "parquet":
        rows = duckdb.connect().execute(
            f"select distinct process_id from read_parquet('{out}/SystemProfileEvents/**/*.parquet', "
            "hive_partitioning=true)").fetchall()
        return {int(p) for (p,) in rows}
    if fmt == "json":
        d = json.loads(out.read_text())
        return {int(m.group(1)) for e in d["traceEvents"] if e.get("name") == "process_name"
                for m in [re.search(r"pid (\d+)", e["args"]["name"])] if m}
    if fmt == "perfetto":
        from .test_perfetto_semantics import _packets

        names = [pk.track_descriptor.process.process_name for pk in _packets(out.read_bytes())
                 if pk.HasField("track_descriptor") and pk.track_descriptor.HasField("process")]
        return {int(m.group(1)) for n in names for m in [re.search(r"pid (\d+)", n)] if m}
    return {int(p) for p in re.findall(r"^instance \S+\s+pid (\d+)", r.stdout, re.M)}


def assert_skipped_and_rest_converted(r, fmt: str, out: Path, named: str, intact_pid: int, why: str) -> None:
    assert not r.timed_out and "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if named in ln]
    assert len(lines) == 1 and why in lines[0], r.stderr
    assert converted_pids(fmt, out, r) == {intact_pid}
    if fmt == "parquet":
        msgs = [m for (m,) in duckdb.connect().execute(f"select message from '{out}/ViewWarnings.parquet'").fetchall()]
        assert any(named in m for m in msgs)
    elif fmt == "json":
        assert any(named in w for w in json.loads(out.read_text())["metadata"]["warnings"])
    elif fmt == "summary-text":
        assert named in r.stdout.split("warnings (")[1]


# -- item 5: ranges are kept as ranges -----------------------------------------------------------

def test_index_ranges_hold_wide_ranges_without_their_members():
    r = parse_nc_filter("0,1,2-5,9-99999999999")
    assert str(r) == "0-5,9-99999999999" and r.size == 99999999997
    assert [x in r for x in (0, 5, 6, 8, 9, 99999999999, 10**11)] == [True, True, False, False, True, True, False]
    assert np.int32(3) in r and "3" not in r
    assert r.mask(np.array([0, 6, 9, 2**31 - 1], dtype=np.int32)).tolist() == [True, False, True, True]
    with pytest.raises(TypeError):
        sorted(r)  # no iteration: a wide range must fail here, not allocate
    with pytest.raises(ValueError):
        r.members()
    assert IndexRanges.parse("3,1-2,2") == IndexRanges(((1, 3),))


def test_a_huge_core_range_in_the_environment_costs_no_memory_at_start_up(tmp_path):
    """NEURON_RT_INSPECT_EVENT_FILTER_NC=0-99999999999 used to build a set of 10^11 ints in every
    process started with capture on (0-4999999 alone cost 579 MB)."""
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"),
                    NEURON_RT_INSPECT_EVENT_FILTER_NC="0-99999999999")
    # one event recorded (a clock sync point): a process that records nothing and runs no framework
    # leaves no profile
    code = ("import neuron_explorer.runtime.core as c; rt = c.get_runtime(); rt.sync_point(rt.core()); "
            "print(rt.config.nc_filter)")
    r = run_bounded([sys.executable, "-c", code], env=env, address_space=2 << 30)
    assert r.returncode == 0 and r.stdout.strip() == "0-99999999999", r.stderr
    assert r.maxrss < 150 * MB
    (info,) = (tmp_path / "out").glob("*/*/trace_info.pb")
    m = pb.TraceInfo()
    m.ParseFromString(info.read_bytes())
    assert m.config["enabled_ncs"] == "0-99999999999" and not m.enabled_ncs  # recorded as typed


def test_neuron_config_keeps_a_wide_core_range_as_a_range():
    code = ("import resource, torch\n"
            "from neuron_explorer.torch import NeuronConfig\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "c = NeuronConfig(capture_enabled_for_nc='0-99999999999')\n"
            "grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before\n"
            "print(c.capture_config().nc_filter, 7 in c.nc_filter, grew)\n")
    r = run_bounded([sys.executable, "-c", code], address_space=8 << 30, timeout=120)
    assert r.returncode == 0, r.stderr
    text, inside, grew_kb = r.stdout.split()
    assert text == "0-99999999999" and inside == "True" and int(grew_kb) < 50 * 1024


def test_view_core_filter_with_a_huge_range_keeps_memory_flat(small_capture, tmp_path):
    r = view(small_capture, "summary-json", tmp_path, "--system-trace-filter-neuron-core", "1-99999999999",
             address_space=2 << 30)
    assert r.returncode == 0 and r.maxrss < 300 * MB, r.stderr
    events = {c["nc_idx"]: c["events"] for p in json.loads(r.stdout)["profiles"] for c in p["cores"]}
    assert events[0] == 0 and events[1] > 0  # rank 1's core kept, rank 0's filtered out


def test_ndet_ranks_with_a_huge_range_keeps_memory_flat(tmp_path):
    """``neuron-det --ranks 0-9999999`` cost 608 MB before any log was read."""
    r = run_bounded([sys.executable, "-m", "neuron_explorer.ndet.cli", "--log-prefix", str(tmp_path / "none"),
                     "--ranks", "0-99999999999"], address_space=2 << 30)
    assert r.returncode == 2 and "no NDET logs" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.maxrss < 150 * MB
    r = run_bounded([sys.executable, "-m", "neuron_explorer.ndet.cli", "--log-prefix", str(tmp_path),
                     "--ranks", "3-1"])
    assert r.returncode == 2 and "--ranks '3-1'" in r.stderr and "0-3" in r.stderr


def test_an_event_type_id_in_the_hundreds_of_millions_does_not_size_memory(small_capture, tmp_path):
    """An ntrace.pb declaring type id 2*10^8 made view and check allocate 5.7 GB."""
    root, victim, intact = copy_capture(small_capture, tmp_path / "cap")
    edit(victim / "ntrace.pb", pb.SystemTrace, lambda m: setattr(m.event_types[0], "id", 200_000_000))
    for fmt in ("summary-text", "parquet"):
        r = view(root, fmt, tmp_path / f"out.{fmt}")
        assert r.maxrss < 300 * MB
        assert_skipped_and_rest_converted(r, fmt, tmp_path / f"out.{fmt}", str(victim / "ntrace.pb"), pid_of(intact),
                                          "id 200000000")
    r = neuron_explorer("check", "-d", str(root))
    assert r.returncode == 1 and r.maxrss < 300 * MB and "id 200000000" in r.stdout


@pytest.mark.parametrize("name", ["trace_info.pb", "ntrace.pb"])
def test_a_capture_file_linked_to_dev_zero_is_not_read(small_capture, tmp_path, name):
    root, victim, intact = copy_capture(small_capture, tmp_path / "cap")
    (victim / name).unlink()
    (victim / name).symlink_to("/dev/zero")
    r = view(root, "summary-text", tmp_path, timeout=60)
    assert r.maxrss < 300 * MB
    assert_skipped_and_rest_converted(r, "summary-text", tmp_path, str(victim / name), pid_of(intact),
                                      "not a regular file (a character device)")
    r = neuron_explorer("check", "-d", str(root), timeout=60)
    assert r.returncode == 1 and f"{victim / name}: not a regular file" in r.stdout


def test_a_huge_file_in_place_of_trace_info_is_not_read_into_memory(small_capture, tmp_path):
    """A 1 GB regular file (sparse: it costs no disk) is mapped, and rejected from its first bytes."""
    root, victim, intact = copy_capture(small_capture, tmp_path / "cap")
    with open(victim / "trace_info.pb", "r+b") as f:
        f.truncate(1 << 30)
    r = view(root, "summary-text", tmp_path, address_space=16 << 30, timeout=60)
    assert r.maxrss < 300 * MB
    assert_skipped_and_rest_converted(r, "summary-text", tmp_path, str(victim / "trace_info.pb"), pid_of(intact),
                                      "not a valid TraceInfo protobuf")


# -- issue 29 item 9: foreign files fail at their first bytes; newer formats are refused ------------

GB = 1 << 30


def _sparse_zeros(path: Path) -> None:
    """6 GB of nothing (a sparse file: it costs no disk)."""
    path.unlink()
    with open(path, "wb") as f:
        f.truncate(6 * GB)


def _zeros(path: Path) -> None:
    path.write_bytes(bytes(10 * MB))


def _real_header_then_sparse(path: Path) -> None:
    """A real ntrace.pb grown to 6 GB: a valid start, then zeros (what a disk-full or a copy that
    preallocated its target leaves)."""
    with open(path, "r+b") as f:
        f.truncate(6 * GB)


def _huge_string_table(path: Path) -> None:
    """A valid header and one string declared 1 GB long, its bytes a sparse hole: the tables are
    bounded before anything is copied or parsed."""
    head = path.read_bytes()[:2]  # format_version
    n = GB
    length = bytearray()
    while True:
        length.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            break
    path.write_bytes(head + b"\x1a" + bytes(length))
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size + GB)


FOREIGN = {"sparse 6 GB of zeros": (_sparse_zeros, "not a valid capture file (no SystemTrace header"),
           "10 MB of zeros": (_zeros, "not a valid capture file (no SystemTrace header"),
           "a real start then a sparse 6 GB": (_real_header_then_sparse, "field number 0"),
           "a 1 GB string table": (_huge_string_table, "tables take more than 256 MB")}


@pytest.mark.parametrize("foreign", list(FOREIGN))
def test_a_foreign_ntrace_file_is_refused_at_once_and_the_rest_converted(small_capture, tmp_path, foreign):
    """A 6 GB sparse ntrace.pb was still being read after 10 minutes at 1.4 GB RSS (10 MB of zeros:
    18 s): each is now refused from its first bytes.  (The address space is left large enough to
    map the file, as a user's is, so that nothing but the check stops the read; the timeout is a
    hang guard, not a measure of speed.)"""
    root, victim, intact = copy_capture(small_capture, tmp_path / "cap")
    damage, why = FOREIGN[foreign]
    damage(victim / "ntrace.pb")
    for fmt in ("summary-text", "parquet"):
        out = tmp_path / f"out.{fmt}"
        r = view(root, fmt, out, address_space=16 * GB, timeout=120)
        assert r.maxrss < 300 * MB, r.maxrss
        assert_skipped_and_rest_converted(r, fmt, out, str(victim / "ntrace.pb"), pid_of(intact), why)
    r = neuron_explorer("check", "-d", str(root), address_space=16 * GB, timeout=120)
    assert r.returncode == 1 and not r.timed_out and r.maxrss < 300 * MB, r.stderr
    assert f"error: {victim / 'ntrace.pb'}: " in r.stdout and why in r.stdout


NEWER = 99


def _newer(path: Path, msg_type) -> None:
    edit(path, msg_type, lambda m: setattr(m, "format_version", NEWER))


@pytest.mark.parametrize("name,msg_type", [("ntrace.pb", pb.SystemTrace), ("trace_info.pb", pb.TraceInfo),
                                           ("cpu_util.pb", pb.CpuUtil), ("host_mem.pb", pb.HostMem),
                                           ("*.ntff", pb.DeviceTrace), ("*.neff", pb.NeffFile)])
def test_a_newer_format_version_is_refused_naming_both_versions(small_capture, tmp_path, name, msg_type):
    """``format_version: 99`` was read silently as the current format."""
    from neuron_explorer.capture.writer import FORMAT_VERSION  # (also where the version was before issue 29)

    root, victim, intact = copy_capture(small_capture, tmp_path / "cap")
    path = sorted(victim.glob(name))[0]
    _newer(path, msg_type)
    why = (f"{msg_type.__name__} format version {NEWER} is newer than this neuron-explorer reads "
           f"(version {FORMAT_VERSION})")
    r = view(root, "summary-json", tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if str(path) in ln]
    assert len(lines) == 1 and why in lines[0], r.stderr
    converted = {p["pid"] for p in json.loads(r.stdout)["profiles"]}
    # a newer trace costs the profile; a newer optional file only itself
    assert converted == ({pid_of(intact)} if name in ("trace_info.pb", "ntrace.pb") else
                         {pid_of(intact), pid_of(victim)})
    r = neuron_explorer("check", "-d", str(root))
    assert r.returncode == 1 and f"error: {path}: {why}" in r.stdout, r.stdout


@pytest.mark.parametrize("name", ["trace_info.pb", "ntrace.pb", "cpu_util.pb", "host_mem.pb", "x.ntff", "x.neff"])
def test_a_fifo_in_a_profile_does_not_hang_view_or_check(small_capture, tmp_path, name):
    root, victim, intact = copy_capture(small_capture, tmp_path / "cap")
    if (victim / name).exists():
        (victim / name).unlink()
    os.mkfifo(victim / name)
    r = view(root, "summary-json", tmp_path, timeout=30)
    assert not r.timed_out and "Traceback" not in r.stderr and r.returncode == 1, r.stderr
    assert f"{victim / name}: not a regular file (a FIFO)" in r.stderr
    converted = {p["pid"] for p in json.loads(r.stdout)["profiles"]}
    # a damaged trace file costs the profile; a damaged optional file only itself
    assert converted == ({pid_of(intact)} if name in ("trace_info.pb", "ntrace.pb") else
                         {pid_of(intact), pid_of(victim)})
    r = neuron_explorer("check", "-d", str(root), timeout=30)
    assert not r.timed_out and r.returncode == 1 and "a FIFO" in r.stdout


# -- item 8: one damaged profile is one warning; the rest is converted ------------------------------

def _emptied_strings(v: Path) -> tuple[Path, str]:
    edit(v / "ntrace.pb", pb.SystemTrace, lambda m: m.ClearField("strings"))
    return v / "ntrace.pb", "outside the file's table of 0 strings"


def _string_id_out_of_range(v: Path) -> tuple[Path, str]:
    cc = [et.id for et in _types(v) if et.name == "cc_running"][0]
    edit_events(v, lambda b: set_column(b, "a", "<i8", lambda a, t: a.__setitem__(t == cc, 10**12)))
    return v / "ntrace.pb", "refers to string 1000000000000"


def _extreme_clock_anchor(v: Path) -> tuple[Path, str]:
    def change(m):
        for a in m.anchors:
            a.wall_ns, a.monotonic_ns = 2**63 - 1, -(2**63)
    edit(v / "trace_info.pb", pb.TraceInfo, change)
    return v / "trace_info.pb", "not a plausible clock reading"


def _nul_in_instance_id(v: Path) -> tuple[Path, str]:
    edit(v / "trace_info.pb", pb.TraceInfo, lambda m: setattr(m, "instance_id", "i-abc\x00def"))
    return v / "trace_info.pb", "holds control characters"


def _non_utf8_directory_name(v: Path) -> tuple[Path, str]:
    new = os.fsencode(v) + b"\xff"
    os.rename(v, new)
    return Path(os.fsdecode(new)), "not valid UTF-8"


def _timestamp_near_int64_max(v: Path) -> tuple[Path, str]:
    """Item 14: a start time 10 ns below INT64_MAX wrapped silently once the wall offset was added."""
    edit_events(v, lambda b: set_column(b, "start_ns", "<i8", lambda a, t: a.__setitem__(0, 2**63 - 10)),
                first_only=True)
    return v / "ntrace.pb", "fall outside 1970-2116"


def _types(v: Path):
    m = pb.SystemTrace()
    m.ParseFromString((v / "ntrace.pb").read_bytes())
    return list(m.event_types)


DAMAGES = {f.__name__.lstrip("_"): f for f in (_emptied_strings, _string_id_out_of_range, _extreme_clock_anchor,
                                                _nul_in_instance_id, _non_utf8_directory_name,
                                                _timestamp_near_int64_max)}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_profile_is_one_warning_and_the_rest_is_converted(small_capture, tmp_path, damage, fmt):
    root, victim, intact = copy_capture(small_capture, tmp_path / "cap")
    named, why = DAMAGES[damage](victim)
    out = tmp_path / f"out.{fmt}"
    r = view(root, fmt, out)
    assert_skipped_and_rest_converted(r, fmt, out, printable(str(named)), pid_of(intact), why)


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_check_reports_what_view_skips(small_capture, tmp_path, damage):
    root, victim, intact = copy_capture(small_capture, tmp_path / "cap")
    named, why = DAMAGES[damage](victim)
    r = neuron_explorer("check", "-d", str(root))
    assert r.returncode == 1 and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    errors = [ln for ln in r.stdout.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and printable(str(named)) in errors[0] and why in errors[0]
    assert f"ok: {intact}:" in r.stdout


def test_sampler_timestamps_near_int64_max_cost_the_samples_only(small_capture, tmp_path):
    root, victim, intact = copy_capture(small_capture, tmp_path / "cap")

    def change(m):
        ts = np.frombuffer(m.ts_ns, dtype="<i8").copy()
        ts[-1] = 2**63 - 1
        m.ts_ns = ts.tobytes()
    edit(victim / "cpu_util.pb", pb.CpuUtil, change)
    for fmt in FORMATS:
        out = tmp_path / f"out.{fmt}"
        r = view(root, fmt, out)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert f"{victim / 'cpu_util.pb'}: sample timestamps" in r.stderr
        assert converted_pids(fmt, out, r) == {pid_of(intact), pid_of(victim)}
    r = neuron_explorer("check", "-d", str(root))
    assert r.returncode == 1 and f"error: {victim / 'cpu_util.pb'}: sample timestamps" in r.stdout


def test_device_op_times_near_int64_max_cost_that_device_profile_only(small_capture, tmp_path):
    root, victim, intact = copy_capture(small_capture, tmp_path / "cap")
    ntff = sorted(victim.glob("*.ntff"))[0]

    def change(m):
        st = np.frombuffer(m.ops.start_ns, dtype="<i8").copy()
        st[0] = 2**63 - 5
        m.ops.start_ns = st.tobytes()
    edit(ntff, pb.DeviceTrace, change)
    out = tmp_path / "out.json"
    r = view(root, "json", out)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{ntff}: op timestamps" in r.stderr
    assert converted_pids("json", out, r) == {pid_of(intact), pid_of(victim)}
    r = neuron_explorer("check", "-d", str(root))
    assert r.returncode == 1 and f"error: {ntff}: op timestamps" in r.stdout


def test_an_unreadable_process_directory_is_a_warning_not_a_silent_skip(small_capture, tmp_path):
    """Tests run as root, who reads anything: the commands run without the capabilities that let
    root ignore permissions (setpriv), as an ordinary user would."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    root, victim, intact = copy_capture(small_capture, tmp_path / "cap")
    hidden = victim.parent  # <instance>_pid_<pid>
    hidden.chmod(0)
    try:
        drop = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]
        probe = run_bounded([*drop, sys.executable, "-c", f"import os; os.listdir({str(hidden)!r})"])
        if probe.returncode == 0:
            pytest.skip("setpriv could not drop root's permission override here")
        for fmt in ("summary-text", "parquet"):
            out = tmp_path / f"out.{fmt}"
            r = run_bounded([*drop, sys.executable, "-m", "neuron_explorer", "view", "-d", str(root),
                             "--output-format", fmt]
                            + ([] if fmt.startswith("summary") else ["--output-file", str(out)]))
            assert_skipped_and_rest_converted(r, fmt, out, str(hidden), pid_of(intact), "cannot list directory")
        r = run_bounded([*drop, sys.executable, "-m", "neuron_explorer", "check", "-d", str(root)])
        assert r.returncode == 1 and f"error: {hidden}: cannot list directory" in r.stdout
    finally:
        hidden.chmod(0o755)


def test_a_clock_offset_beyond_decades_is_not_applied():
    """Item 14: instance offsets are added to every timestamp; one estimated from damaged times
    (instances 2**61 ns apart) would push them past int64 once the time origin is subtracted."""
    from neuron_explorer.analysis import align

    keys = np.arange(8, dtype=np.int64)
    end = np.full(8, 10**12, dtype=np.int64)
    times = {"i-a": [(keys, end - 10, end)], "i-b": [(keys, end - 10 - (1 << 61), end - (1 << 61))],
             "i-c": [(keys, end - 10 - 5_000, end - 5_000)]}
    offsets = align.estimate_offsets(times)
    assert offsets["i-b"].method == "none" and offsets["i-b"].offset_ns == 0
    assert offsets["i-c"].method == "collectives" and offsets["i-c"].offset_ns == 5_000
