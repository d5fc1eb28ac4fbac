"""What a .pftrace means, rebuilt from the packets with the perfetto package's protos and the rules of
the trace format (no trace processor here): sequences, their incremental-state resets, interned
names, packet defaults (track, clock) and sequence-scoped incremental clocks tied to the trace clock
by clock snapshots.  The rebuilt slices are compared with the events `view` writes to Parquet: the
same absolute start and end of every event, its name, track, arguments and flows."""

from __future__ import annotations

import json
import zlib
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

BOOTTIME = 6
SEQ_CLEARED, SEQ_NEEDS_STATE = 1, 2


@dataclass
class Slice:
    track: int
    name: str
    start: int
    end: int  # == start for instants
    args: dict
    flows: tuple
    instant: bool
    seq: int


@dataclass
class Decoded:
    tracks: dict = field(default_factory=dict)  # uuid -> TrackDescriptor
    slices: list = field(default_factory=list)
    counters: dict = field(default_factory=lambda: defaultdict(list))  # track uuid -> [(ts, value)]
    stats: dict = field(default_factory=lambda: defaultdict(int))

    def track_name(self, uuid: int) -> str:
        return self.tracks[uuid].name

    def process_of(self, uuid: int) -> int:
        """The uuid of the process track a track belongs to."""
        td = self.tracks[uuid]
        while td.HasField("parent_uuid"):
            td = self.tracks[td.parent_uuid]
        return td.uuid


def _packets(data: bytes, stats=None):
    """Packets in file order; a ``compressed_packets`` packet (zlib-deflated Trace bytes, and
    nothing else) stands for the packets it holds, in place."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    t = pb.Trace()
    t.ParseFromString(data)
    for pk in t.packet:
        if pk.HasField("compressed_packets"):
            assert pk.ListFields()[0][0].name == "compressed_packets" and len(pk.ListFields()) == 1
            if stats is not None:
                stats["compressed_packets"] += 1
            yield from _packets(zlib.decompress(pk.compressed_packets))
        else:
            yield pk


def decode(data: bytes) -> Decoded:
    """Rebuild tracks, slices and counter samples, enforcing the format's rules as it goes.

    Timestamps are resolved in file order (incremental clocks depend on it); then, like the trace
    processor, events are ordered by timestamp (file order among equal ones) before a slice end is
    matched with the innermost open slice of its track."""
    out = Decoded()
    state: dict[int, dict] = {}  # sequence -> incremental state
    clocks: dict[tuple[int, int], dict] = {}  # (sequence, clock id) -> {"last", "to_boot", "incremental"}
    timed: list[tuple[int, int, int, object, int, dict]] = []  # (ts, file position, track, event, seq, state)
    for pk in _packets(data, out.stats):
        seq = pk.trusted_packet_sequence_id
        if pk.sequence_flags & SEQ_CLEARED:
            assert seq, "incremental state cleared on sequence 0"
            state[seq] = {"names": {}, "dbg": {}, "str": {}, "defaults": None}
        if pk.HasField("trace_packet_defaults"):
            assert seq in state, "defaults before the sequence was cleared"
            state[seq]["defaults"] = pk.trace_packet_defaults
        if pk.HasField("interned_data"):
            st = state[seq]
            for e in pk.interned_data.event_names:
                st["names"][e.iid] = e.name
            for e in pk.interned_data.debug_annotation_names:
                st["dbg"][e.iid] = e.name
            for e in pk.interned_data.debug_annotation_string_values:
                st["str"][e.iid] = e.str.decode()
        if pk.HasField("clock_snapshot"):
            boot = [c.timestamp for c in pk.clock_snapshot.clocks if c.clock_id == BOOTTIME]
            assert len(boot) == 1
            for c in pk.clock_snapshot.clocks:
                if 64 <= c.clock_id < 128:
                    assert seq, "a sequence-scoped clock needs a sequence"
                    # the first timestamp after the snapshot is relative to the snapshot's value
                    clocks[(seq, c.clock_id)] = {"last": c.timestamp, "to_boot": boot[0] - c.timestamp,
                                                 "incremental": c.is_incremental}
            out.stats["clock_snapshots"] += 1
            continue
        if pk.HasField("track_descriptor"):
            td = pk.track_descriptor
            assert td.uuid not in out.tracks, f"track {td.uuid} declared twice"
            out.tracks[td.uuid] = td
        if not pk.HasField("track_event"):
            continue
        te = pk.track_event
        st = state.get(seq)
        defaults = st["defaults"] if st else None
        needs = bool(pk.sequence_flags & SEQ_NEEDS_STATE)
        if defaults is not None or te.HasField("name_iid") or te.debug_annotations:
            assert needs, "a packet that uses incremental state must say so"
            assert st is not None, "incremental state used before it was set"
        # timestamp: packet clock, else the sequence's default clock, else the trace clock
        clock = pk.timestamp_clock_id or (defaults.timestamp_clock_id if defaults is not None else 0) or BOOTTIME
        if 64 <= clock < 128:
            ck = clocks[(seq, clock)]
            if ck["incremental"]:
                ck["last"] += pk.timestamp
                ts = ck["last"] + ck["to_boot"]
            else:
                ts = pk.timestamp + ck["to_boot"]
        else:
            assert clock == BOOTTIME
            ts = pk.timestamp
        if te.HasField("track_uuid"):
            track = te.track_uuid
        else:
            assert defaults is not None and defaults.track_event_defaults.HasField("track_uuid")
            track = defaults.track_event_defaults.track_uuid
        assert track in out.tracks, "event on an undeclared track"
        if te.type == 4:  # counter
            out.counters[track].append((ts, te.double_counter_value))
            continue
        timed.append((ts, len(timed), track, te, seq, st))
    open_slices: dict[int, list] = defaultdict(list)  # track -> stack of open slices
    for ts, _, track, te, seq, st in sorted(timed, key=lambda e: (e[0], e[1])):
        if te.type == 2:  # slice end: closes the innermost open slice of its track
            assert open_slices[track], f"end without a begin on track {track} at {ts}"
            open_slices[track].pop().end = ts
            continue
        args = {}
        for d in te.debug_annotations:
            nm = st["dbg"][d.name_iid]
            args[nm] = st["str"][d.string_value_iid] if d.HasField("string_value_iid") else d.int_value
        sl = Slice(track, st["names"][te.name_iid], ts, ts, args, tuple(te.flow_ids), te.type == 3, seq)
        out.slices.append(sl)
        if te.type == 1:
            open_slices[track].append(sl)
    assert not any(open_slices.values()), "slices left open"
    return out


# ---------------------------------------------------------------------------------------- tests

def _view(src, fmt, dst):
    from neuron_explorer.view.pipeline import ViewOptions, run

    return run(ViewOptions(directory=str(src), output_format=fmt, output_file=str(dst), progress=False, jobs=1))


def _write_samples(session_dir, rank):
    """CPU and memory samples through the real encoders, on the session's monotonic clock."""
    import os

    from neuron_explorer.capture import writer
    from neuron_explorer.capture.samplers import HostSampler
    from neuron_explorer.util.atomic import atomic_write

    hs = HostSampler(os.getpid(), 0.25, cpu=True, mem=True, max_samples=100, ncpu=2)
    for i in range(40):
        t = 1_000_000_000_000 + i * 250_000_000 + rank * 1_000 + 7
        # (unread samples, NaN, which outputs leave out: the main thread's shares in the even
        # samples, the process's in the sixth)
        hs.record_cpu(t, [10.0 + i, 50.5 - i], float("nan") if i == 5 else 3.25 * i,
                      (2.5 * i, 0.5 * i) if i % 2 else (float("nan"),) * 2)
        hs.record_mem(t + 11, (1_000_000 + i, 2_000_000 + i, 8 << 30, (4 << 30) + i, (4 << 30) - i))
    atomic_write(os.path.join(session_dir, "cpu_util.pb"), writer.encode_cpu_util(hs))
    atomic_write(os.path.join(session_dir, "host_mem.pb"), writer.encode_host_mem(hs))


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A 2-instance, 3-process capture written by the real capture writer (bench.synth_capture)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.synth_capture import write_process

    root = tmp_path_factory.mktemp("synth")
    cap = root / "cap"
    for rank, (inst, skew) in enumerate((("i-0000000000000000a", 0), ("i-0000000000000000a", 0),
                                         ("i-0000000000000000b", 3_000_000))):
        d = write_process(str(cap), inst, rank, 3, 20_000 + rank, 4_000, skew, seed=rank)
        _write_samples(d, rank)
    pq = root / "pq"
    _view(cap, "parquet", pq)
    js = root / "t.json"
    _view(cap, "json", js)
    origin = json.load(open(js))["metadata"]["origin_ns"]
    pf = root / "t.pftrace"
    _view(cap, "perfetto", pf)
    return cap, pq, origin, pf


def _parquet_events(pq):
    import duckdb

    con = duckdb.connect()
    return con.execute(f"""select process_id, name, start_ts, end_ts, nc_idx, thread_id, model_name, flow_id
                           from read_parquet('{pq}/SystemProfileEvents/**/*.parquet', hive_partitioning=true)
                           """).fetchall()


def test_incremental_timestamps_rebuild_every_events_absolute_start_and_end(synthetic):
    cap, pq, origin, pf = synthetic
    d = decode(pf.read_bytes())
    assert d.stats["clock_snapshots"] > 0 and d.stats["compressed_packets"] > 0
    truth = _parquet_events(pq)
    assert len(d.slices) == len(truth)
    pid_of = {}
    for uuid, td in d.tracks.items():
        if td.HasField("process"):
            pid_of[uuid] = int(td.name.split(" pid ")[1].split()[0])
    got = sorted((pid_of[d.process_of(s.track)], s.name, s.start + origin, s.end + origin) for s in d.slices)
    want = sorted((r[0], r[1], r[2], r[3] if r[3] > r[2] else r[2]) for r in truth)
    assert got == want


def test_names_tracks_arguments_and_flows_survive(synthetic):
    cap, pq, origin, pf = synthetic
    d = decode(pf.read_bytes())
    names = {d.track_name(s.track).split(" #")[0] for s in d.slices}
    assert {"nc_0/neuron_hw", "nc_1/cc", "1000/neuron_rt", "1002/neuron_rt"} <= names
    procs = [td for td in d.tracks.values() if td.HasField("process")]
    assert len(procs) == 3 and "[t0 " in procs[0].name
    by_name = defaultdict(list)
    for s in d.slices:
        by_name[s.name].append(s)
    ex = by_name["nc_exec_running"][0]
    assert ex.args["model_name"].startswith("train_step_") and "exec_id" in ex.args and ex.flows
    cc = by_name["cc_running"][0]
    assert {"op", "group", "dtype", "seq", "bytes"} <= set(cc.args) and cc.flows
    # every exec flow joins a host call and a core execution of one process
    flows = defaultdict(list)
    for s in d.slices:
        for f in s.flows:
            flows[f].append(s)
    exec_flows = [v for v in flows.values() if {s.name for s in v} == {"nrt_execute", "nc_exec_running"}]
    assert len(exec_flows) == len(by_name["nc_exec_running"])
    assert all(len({d.process_of(s.track) for s in v}) == 1 for v in exec_flows)
    # each collective's flow spans the three ranks
    cc_flows = [v for v in flows.values() if {s.name for s in v} == {"cc_running"}]
    assert cc_flows and all(len({d.process_of(s.track) for s in v}) == 3 for v in cc_flows)
    # arguments agree with Parquet
    truth = _parquet_events(pq)
    models = sorted(r[6] for r in truth if r[1] == "nc_exec_running")
    assert sorted(s.args["model_name"] for s in by_name["nc_exec_running"]) == models


def test_counter_tracks_hold_the_samples_at_their_times(synthetic):
    import duckdb

    cap, pq, origin, pf = synthetic
    d = decode(pf.read_bytes())
    con = duckdb.connect()
    rows = con.execute(f"""select counter, count(*), min(ts), max(ts)
                           from read_parquet('{pq}/SystemProfileCounters/**/*.parquet', hive_partitioning=true)
                           group by 1""").fetchall()
    got = defaultdict(list)
    for uuid, samples in d.counters.items():
        assert d.tracks[uuid].HasField("counter")
        got[d.tracks[uuid].name].extend(samples)
    assert rows
    for name, count, lo, hi in rows:
        s = got[name]
        assert len(s) == count
        assert min(t for t, _ in s) + origin == lo and max(t for t, _ in s) + origin == hi


def test_unread_samples_are_left_out_of_every_output(synthetic):
    """A sample the sampler could not read (NaN) is in no output: the Parquet counters, Chrome
    JSON's ``C`` events (where NaN is no JSON value) and Perfetto's counter tracks hold the read
    ones only (decision 0203)."""
    import math

    import duckdb

    cap, pq, origin, pf = synthetic
    rows = dict(duckdb.connect().execute(f"""select counter, count(*) from read_parquet(
        '{pq}/SystemProfileCounters/**/*.parquet', hive_partitioning=true) where process_id = 20000
        group by 1""").fetchall())
    assert rows["cpu_util.process"] == 39 and rows["cpu_util.main_thread"] == 20, rows
    assert rows["cpu_util.main_thread_wait"] == 20 and rows["cpu_util.cpu0"] == 40, rows
    js = cap.parent / "t.json"
    values = [v for e in json.loads(js.read_text(), parse_constant=lambda c: float("nan"))["traceEvents"]
              if e.get("ph") == "C" for v in e.get("args", {}).values() if isinstance(v, float)]
    assert values and not any(math.isnan(v) for v in values)
    d = decode(pf.read_bytes())
    assert not any(math.isnan(v) for samples in d.counters.values() for _, v in samples)
