"""The column-wise protobuf encoder and the .pftrace writer on crafted events: nested, overlapping,
back-to-back and zero-length events, instants at slice edges, unsorted input, more tracks than a
process has sequences, device profiles.  Every trace is decoded with the perfetto package's protos
(tests/view/test_perfetto_semantics.decode) and must give back exactly the events written."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from neuron_explorer.analysis.events import ProcessEvents
from neuron_explorer.exporters.perfetto import SHARED_SLOT, PerfettoWriter, sequence_id
from neuron_explorer.util import pbwire as pbenc

from .test_perfetto_semantics import decode

ORIGIN = 1_700_000_000_000_000_000


def test_rows_encoder_writes_what_protobuf_reads():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 50))
        pres = [rng.random(n) < rng.random() for _ in range(4)]
        vals = [rng.integers(0, 1 << int(rng.integers(1, 63)), n) for _ in range(4)]
        kind = rng.integers(1, 4, n)
        te = pbenc.Rows(n).field_varint(9, kind).field_varint(10, vals[0], pres[0])
        te.field_fixed64(47, vals[1], pres[1])
        da = pbenc.Rows(n).field_varint(1, 3).field_varint(4, vals[2], pres[2])
        te.message(4, da, pres[3])
        pk = pbenc.Rows(n).field_varint(8, vals[3]).field_varint(10, 5).message(11, te)
        t = pb.Trace()
        t.ParseFromString(pbenc.Rows(n).message(1, pk).encode().tobytes())
        assert len(t.packet) == n
        for i, p in enumerate(t.packet):
            assert p.timestamp == vals[3][i] and p.trusted_packet_sequence_id == 5
            e = p.track_event
            assert e.type == kind[i]
            assert e.HasField("name_iid") == pres[0][i] and (not pres[0][i] or e.name_iid == vals[0][i])
            assert list(e.flow_ids) == ([vals[1][i]] if pres[1][i] else [])
            assert len(e.debug_annotations) == int(pres[3][i])
            if pres[3][i]:
                d = e.debug_annotations[0]
                assert d.name_iid == 3 and d.HasField("int_value") == pres[2][i]
                assert not pres[2][i] or d.int_value == vals[2][i]


def test_varints_of_mixed_lengths_are_padded_and_still_read_back():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    v = np.arange(100, 200)  # 1 and 2 bytes as varints: padded to 2, rows of one length
    pk = pbenc.Rows(len(v)).field_varint(8, v).field_varint(10, 1)
    data = pbenc.Rows(len(v)).message(1, pk).encode()
    assert len(data) == len(v) * 7
    t = pb.Trace()
    t.ParseFromString(data.tobytes())
    assert [p.timestamp for p in t.packet] == v.tolist()
    w = np.r_[np.zeros(99, dtype=np.int64), 1 << 40]  # padding would cost 5 bytes a row: kept short
    pk = pbenc.Rows(len(w)).field_varint(8, w)
    data = pbenc.Rows(len(w)).message(1, pk).encode()
    assert len(data) == 99 * 4 + 9
    t.ParseFromString(data.tobytes())
    assert [p.timestamp for p in t.packet] == w.tolist()


def test_sequence_ids_are_small_for_small_traces_and_never_collide():
    ids = {sequence_id(i, s) for i in range(64) for s in range(SHARED_SLOT + 1)}
    assert len(ids) == 64 * (SHARED_SLOT + 1) and 0 not in ids and max(ids) < 1 << 32
    assert max(sequence_id(i, s) for i in range(4) for s in range(8)) < 128
    assert sequence_id((1 << 21) - 1, SHARED_SLOT) < 1 << 32


def _process(events, index=0, pid=4242):
    """ProcessEvents for (name, thread, start, end, exec_id, flow) tuples, times relative to ORIGIN."""
    names = sorted({e[0] for e in events})
    n = len(events)
    col = lambda k: np.array([e[k] for e in events], dtype=np.int64)  # noqa: E731
    cols = {"type": np.array([names.index(e[0]) for e in events], dtype=np.int64),
            "start_ts": col(2) + ORIGIN, "end_ts": col(3) + ORIGIN, "thread_id": col(1),
            "nc_idx": np.zeros(n, dtype=np.int64), "exec_id": col(4), "flow_id": col(5),
            "model_id": np.where(col(4) >= 0, col(4) % 2, -1)}
    for c in ("ret", "seq", "bytes"):
        cols[c] = np.full(n, -1, dtype=np.int64)
    for c in ("op", "dtype", "group"):
        cols[c] = np.zeros(n, dtype=np.int64)
    session = SimpleNamespace(info=None, cpu=None, mem=None, instance_id="i-test", pid=pid)
    return ProcessEvents(session, index, 0, n, cols, names, ["software"] * len(names), ["runtime"] * len(names),
                         [""], {0: "fwd", 1: "bwd"})


def _write(tmp_path, pes, name="t.pftrace"):
    path = tmp_path / name
    w = PerfettoWriter(str(path), ORIGIN, uuid_base=1 << 16)
    for pe in pes:
        w.add(pe)
    w.close()
    return decode(path.read_bytes())


def _got(d):
    return Counter((d.track_name(s.track).split(" #")[0], s.name, s.start, s.end, s.args.get("exec_id", -1),
                    s.flows[0] if s.flows else 0) for s in d.slices)


def _want(events):
    return Counter((f"{e[1]}/neuron_rt", e[0], e[2], max(e[2], e[3]), e[4], e[5]) for e in events)


def test_nested_overlapping_back_to_back_and_instant_events_come_back_exactly(tmp_path):
    ev = [
        ("outer", 7, 1_000, 9_000, 1, 11),
        ("inner", 7, 2_000, 3_000, -1, 0),   # nested: own lane
        ("next", 7, 3_000, 4_000, 2, 12),    # starts where inner ends
        ("next", 7, 4_000, 4_000, -1, 0),    # zero length: an instant
        ("mark", 7, 9_000, 9_000, -1, 0),    # instant at the outer slice's end
        ("mark", 7, 1_000, 1_000, -1, 0),    # instant at the outer slice's start
        ("late", 7, 9_000, 9_500, 3, 13),    # back to back with outer
        ("late", 7, 9_200, 9_800, 4, 14),    # partial overlap
        ("same", 7, 5_000, 6_000, -1, 0),
        ("same", 7, 5_000, 6_000, -1, 0),    # identical twins
        ("other", 8, 500, 100_000_000_000, -1, 0),  # another thread, a long slice
        ("other", 8, 100_000_000_000, 100_000_000_001, -1, 0),
    ]
    order = np.random.default_rng(3).permutation(len(ev))  # not in start order
    events = [ev[i] for i in order]
    d = _write(tmp_path, [_process(events)])
    assert _got(d) == _want(events)
    # lanes: slices of one track never overlap, so every end closes the slice begun last
    by_track = {}
    for s in d.slices:
        if not s.instant:
            by_track.setdefault(s.track, []).append((s.start, s.end))
    for spans in by_track.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_random_events_on_many_threads_including_more_tracks_than_sequences(tmp_path):
    rng = np.random.default_rng(11)
    events = []
    for t in range(SHARED_SLOT + 40):  # one track per thread, so the last ones share a sequence
        k = 1 if t < SHARED_SLOT - 5 else 6
        for _ in range(k):
            s = int(rng.integers(0, 50_000))
            events.append(("op", 1000 + t, s, s + int(rng.integers(0, 3_000)), int(rng.integers(-1, 5)), 0))
    d = _write(tmp_path, [_process(events)])
    assert _got(d) == _want(events)
    shared = [s for s in d.slices if s.seq == sequence_id(0, SHARED_SLOT)]
    assert len({s.track for s in shared}) > 1


def test_two_processes_in_one_trace_keep_their_own_sequences_and_tracks(tmp_path):
    a = [("run", 1, 10 * i, 10 * i + 5, i, (1 << 40) | i) for i in range(50)]
    b = [("run", 1, 10 * i + 1, 10 * i + 9, i, (2 << 40) | i) for i in range(50)]
    pa, pb_ = _process(a, index=0, pid=1), _process(b, index=1, pid=2)
    d = _write(tmp_path, [pa, pb_])
    procs = {uuid: td for uuid, td in d.tracks.items() if td.HasField("process")}
    assert len(procs) == 2
    for pid, evs in ((1, a), (2, b)):
        (uuid,) = [u for u, td in procs.items() if td.process.pid == (1 if pid == 1 else 2)]
        mine = [s for s in d.slices if d.process_of(s.track) == uuid]
        assert sorted((s.start, s.end) for s in mine) == sorted((e[2], e[3]) for e in evs)
    assert not {s.seq for s in d.slices if s.flows[0] >> 40 == 1} & {s.seq for s in d.slices if s.flows[0] >> 40 == 2}


def test_device_profile_trace(tmp_path):
    rng = np.random.default_rng(5)
    n = 3000
    strings = ["", "engine0", "engine1", "matmul", "copy"]
    start = ORIGIN + np.sort(rng.integers(0, 10_000_000, n))
    dur = rng.integers(0, 20_000, n)
    ops = {"track": rng.integers(1, 3, n), "name": rng.integers(3, 5, n), "nbytes": rng.integers(-1, 1 << 20, n)}
    trace = SimpleNamespace(strings=strings, device_kind="cpu")
    v = SimpleNamespace(profile_id="42_nc0_session0", dp=SimpleNamespace(trace=trace, ops=ops), n=n,
                        start_ts=start, end_ts=start + dur, exec_ids=rng.integers(0, 3, n))
    path = tmp_path / "device.pftrace"
    w = PerfettoWriter(str(path), ORIGIN)
    w.add_device(v)
    w.close()
    d = decode(path.read_bytes())
    got = Counter((d.track_name(s.track).split(" #")[0], s.name, s.start, s.end, s.args["exec_id"],
                   s.args.get("bytes", -1)) for s in d.slices)
    want = Counter((strings[t], strings[nm], s - ORIGIN, e - ORIGIN, x, b)
                   for t, nm, s, e, x, b in zip(ops["track"].tolist(), ops["name"].tolist(), start.tolist(),
                                                (start + dur).tolist(), v.exec_ids.tolist(), ops["nbytes"].tolist()))
    assert got == want


@pytest.mark.parametrize("n", [0, 1])
def test_tiny_processes(tmp_path, n):
    events = [("one", 3, 100, 200, 0, 0)][:n]
    d = _write(tmp_path, [_process(events)])
    assert _got(d) == _want(events)
