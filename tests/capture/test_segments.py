"""Append-only event segments (decision 0111): what the flushes append reads back as what one
whole write of the same events holds, the bounded ring stays bounded (on disk too), a torn last
block is skipped with a warning, and a failed append is cut back and retried."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from neuron_explorer.analysis.reader import load_session
from neuron_explorer.capture import segments as seg, writer
from neuron_explorer.capture.segments import SegmentWriter
from neuron_explorer.capture.store import CoreStore, enabled_mask
from neuron_explorer.contracts import events as ev
from neuron_explorer.contracts.layout import make_session_dir, parse_segment_name
from neuron_explorer.runtime.config import CaptureConfig
from neuron_explorer.runtime.core import Runtime
from neuron_explorer.runtime.identity import ProcessIdentity

MASK = enabled_mask([True] * len(ev.EVENT_TYPES))
READ = ev.EVENT_TYPES[11]  # nrt_tensor_read: plain-number arguments
assert READ.name == "nrt_tensor_read"
BASE = 1_000_000_000_000


def rows(lo: int, n: int, nc: int) -> np.ndarray:
    """``n`` drained ring rows numbered from ``lo`` (their start time and first argument)."""
    r = np.zeros((n, ev.RECORD_WIDTH), dtype=np.int64)
    r[:, 0] = READ.id
    r[:, 1] = BASE + np.arange(lo, lo + n) * 10
    r[:, 2] = r[:, 1] + 5
    r[:, 3] = 7 + nc
    r[:, 4] = np.arange(lo, lo + n)
    return r


def runtime(tmp_path, capacity: int) -> Runtime:
    cfg = CaptureConfig(output_dir=str(tmp_path), max_events_per_nc=capacity)
    rt = Runtime(cfg, ProcessIdentity("i-seg", "host", 4242, -1, -1, 1, 0, "4242"))
    rt.anchors = [(BASE, BASE + 1_790_000_000_000_000_000, "start")]
    rt.end_reason = "exit"
    return rt


def incremental(tmp_path, capacity: int, flushes: list[dict[int, int]]) -> tuple[str, dict[int, CoreStore]]:
    """A session written by one append per flush; ``flushes``: new events per core."""
    rt = runtime(tmp_path / "inc", capacity)
    d = make_session_dir(rt.config.output_dir, "i-seg", 4242, rt.anchors[0][1])
    sw, cores, done = SegmentWriter(d), {}, {}
    for f in flushes:
        for nc, n in f.items():
            st = cores.setdefault(nc, CoreStore(nc, capacity))
            st.add(rows(done.get(nc, 0), n, nc), MASK, done.get(nc, 0) + n)
            done[nc] = done.get(nc, 0) + n
        writer.write_session(d, rt, cores, segments=sw)
    sw.close()
    return d, cores


def whole(tmp_path, capacity: int, totals: dict[int, int]) -> str:
    """The same events kept by a store and written at once (ntrace.pb inline, the old way)."""
    rt = runtime(tmp_path / "whole", capacity)
    d = make_session_dir(rt.config.output_dir, "i-seg", 4242, rt.anchors[0][1])
    cores = {}
    for nc, n in totals.items():
        cores[nc] = st = CoreStore(nc, capacity)
        st.add(rows(0, n, nc), MASK, n)
    writer.write_session(d, rt, cores)
    return d


def segment_files(d: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for name in sorted(os.listdir(d)):
        nk = parse_segment_name(name)
        if nk:
            out.setdefault(nk[0], []).append(name)
    return out


def same_events(a: str, b: str) -> None:
    sa, sb = load_session(a), load_session(b)
    assert not sa.warnings and not sb.warnings
    assert sa.num_events == sb.num_events
    for k in sb.events:
        np.testing.assert_array_equal(sa.events[k], sb.events[k], err_msg=k)
    assert [(c.nc_idx, c.recorded, c.kept, c.dropped) for c in sa.info.cores] == \
           [(c.nc_idx, c.recorded, c.kept, c.dropped) for c in sb.info.cores]


def test_appended_flushes_read_back_as_one_write_of_the_same_events(tmp_path):
    flushes = [{0: 5, 3: 2}, {0: 1}, {}, {3: 40, 0: 7}]
    d, _ = incremental(tmp_path, 1000, flushes)
    assert segment_files(d) == {0: ["ntrace_nc0_000000.pb"], 3: ["ntrace_nc3_000000.pb"]}
    same_events(d, whole(tmp_path, 1000, {0: 13, 3: 42}))


def test_the_ring_bound_holds_in_what_is_read_and_on_disk(tmp_path):
    """Capacity 100: segments close at 25 events and the oldest go once the newer hold 100, so
    disk keeps at most 125 events a core, and the reader the newest 100, as the store did."""
    flushes = [{0: 7, 1: 30}] * 40  # 280 and 1200 events recorded
    d, cores = incremental(tmp_path, 100, flushes)
    for nc, names in segment_files(d).items():
        on_disk = sum(len(seg_events(os.path.join(d, n))) for n in names)
        assert 100 <= on_disk <= 125 + 30, (nc, on_disk)
    assert cores[1].kept == 100 and cores[1].dropped == 1100 and cores[1].rows == 0  # nothing held after a write
    same_events(d, whole(tmp_path, 100, {0: 280, 1: 1200}))


def seg_events(path: str) -> np.ndarray:
    from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb

    m = pb.EventSegment()
    with open(path, "rb") as f:
        m.ParseFromString(f.read())
    assert m.format_version == writer.FORMAT_VERSION
    return np.concatenate([np.frombuffer(b.a, "<i8") for b in m.blocks])


def test_a_torn_last_block_is_skipped_with_one_warning(tmp_path):
    d, _ = incremental(tmp_path, 1000, [{0: 10}, {0: 10}, {0: 10}])
    p = os.path.join(d, "ntrace_nc0_000000.pb")
    size = os.path.getsize(p)
    for cut in (size - 1, size - 300, size - 700):  # inside the last block's columns, its tag or length
        with open(p, "r+b") as f:
            f.truncate(cut)
        s = load_session(d)
        assert len(s.warnings) == 1 and "cut short" in s.warnings[0] and p in s.warnings[0], s.warnings
        assert s.num_events in (20, 10) and list(s.events["a"]) == list(range(s.num_events))


def test_a_failed_append_is_cut_back_and_the_events_written_at_the_next_flush(tmp_path, monkeypatch):
    rt = runtime(tmp_path, 1000)
    d = make_session_dir(rt.config.output_dir, "i-seg", 4242, rt.anchors[0][1])
    sw, st = SegmentWriter(d), CoreStore(0, 1000)
    st.add(rows(0, 10, 0), MASK, 10)
    writer.write_session(d, rt, {0: st}, segments=sw)
    st.add(rows(10, 10, 0), MASK, 20)
    real = os.writev

    def half_then_full(fd, bufs):
        os.write(fd, bytes(bufs[0])[: len(bufs[0]) // 2 + 1])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(seg.os, "writev", half_then_full)
    with pytest.raises(OSError):
        writer.write_session(d, rt, {0: st}, segments=sw)
    assert st.rows == 10 and load_session(d).num_events == 10  # cut back: the file is whole
    monkeypatch.setattr(seg.os, "writev", real)
    writer.write_session(d, rt, {0: st}, segments=sw)
    s = load_session(d)
    assert not s.warnings and list(s.events["a"]) == list(range(20))


def test_a_segment_named_for_another_core_is_refused(tmp_path):
    from neuron_explorer.analysis.pbfile import ProfileError

    d, _ = incremental(tmp_path, 1000, [{0: 3}])
    os.rename(os.path.join(d, "ntrace_nc0_000000.pb"), os.path.join(d, "ntrace_nc5_000000.pb"))
    with pytest.raises(ProfileError, match="holds events of core 0, not of core 5"):
        load_session(d)
