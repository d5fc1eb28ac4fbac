"""``system_profile.pftrace``: a Perfetto protobuf trace, streamed one process at a time.

Each instance/process becomes a Perfetto process; cores and threads become tracks under it
(hardware events on ``nc_<n>/neuron_hw``, runtime events on ``<tid>/neuron_rt``, collectives on
``nc_<n>/cc``; overlapping events get extra lanes ``... #2``); flows link a host call to its core
execution and the ranks of one collective; CPU and memory samples are counter tracks.  Events are
encoded column-wise (``pbenc``), not one protobuf object per event.

Every track's events are written on their own packet sequence, whose defaults name the track and a
sequence-scoped incremental clock (see docs/decisions/perfetto-incremental-timestamps.md): a packet
carries the nanoseconds since the previous packet of its sequence, not the absolute time, and no
track id.  A clock snapshot ties each sequence's clock to the trace clock at its first event, so
absolute times are that instant plus the deltas: nanoseconds since ``origin_ns`` (a wall-clock
instant written in the trace's first process name and in the view metadata).  Event names,
argument names and string values are interned per sequence.  Packets are deflated in blocks of
1 MiB into ``compressed_packets`` packets, as Perfetto's own service does when asked to compress.
"""

from __future__ import annotations

import collections
import heapq
import os
import time
import zlib

import numpy as np

try:  # Intel ISA-L's deflate: the same zlib stream, ~5x less CPU than zlib at level 1 and smaller
    from isal import isal_zlib as _deflate
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
    _deflate = zlib

from . import pbenc
from ..capture.writer import AtomicFile
from .events import ProcessEvents
from .pbenc import Rows

# Field numbers (perfetto_trace.proto)
TRACE_PACKET = 1
P_TIMESTAMP, P_CLOCK_SNAPSHOT, P_SEQ_ID, P_TRACK_EVENT, P_INTERNED, P_SEQ_FLAGS = 8, 6, 10, 11, 12, 13
P_DEFAULTS, P_TRACK_DESC = 59, 60
TE_TYPE, TE_NAME_IID, TE_TRACK_UUID, TE_DEBUG, TE_FLOW_IDS, TE_DOUBLE_COUNTER = 9, 10, 11, 4, 47, 44
DA_NAME_IID, DA_INT, DA_STRING_IID = 1, 4, 17
ID_EVENT_NAMES, ID_DEBUG_NAMES, ID_DEBUG_STRINGS = 2, 3, 29
TD_UUID, TD_NAME, TD_PROCESS, TD_PARENT, TD_COUNTER = 1, 2, 3, 5, 8
PD_PID, PD_NAME = 1, 6
CD_UNIT, CD_UNIT_NAME = 3, 6
DEF_CLOCK_ID, DEF_TRACK_EVENT, TED_TRACK_UUID = 58, 11, 11
CS_CLOCKS, CLK_ID, CLK_TS, CLK_INCREMENTAL = 1, 1, 2, 3
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
SEQ_CLEARED, SEQ_NEEDS_STATE = 1, 2
P_COMPRESSED = 50
CLOCK_BOOTTIME = 6  # the trace clock: timestamps without a clock id are in it
CLOCK_EVENTS = 64  # sequence-scoped, incremental (ids 64..127 are scoped to their sequence)

# packet sequences: a process has 2**SEQ_BITS of them (slot 0 carries the counters, slots
# 1..SHARED_SLOT-1 one track each, SHARED_SLOT the tracks beyond, whose events name their track);
# the id interleaves the bits of the process index and the slot (see sequence_id)
SEQ_BITS = 10
SHARED_SLOT = (1 << SEQ_BITS) - 1
COMPRESS_BYTES = 1 << 20  # packets deflated together into one compressed_packets packet
COMPRESS_LEVEL = 1  # deflate level (0-3 with isal); None writes the packets as they are (4x larger)
COMPRESS_THREADS = max(1, min(2, os.cpu_count() or 1))
_PACKET_TAG = pbenc.length_delimited(TRACE_PACKET, b"")[:-1]
_COMPRESSED_TAG = pbenc.length_delimited(P_COMPRESSED, b"")[:-1]
CHUNK_ROWS = 32_768  # events encoded at a time (a byte matrix of a few MB)
MIN_CHUNK_ROWS = 1_024

ANNOTATIONS = ("model_name", "exec_id", "op", "seq", "bytes", "group", "dtype", "ret")


def _lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane per event so that events in one lane never overlap (events sorted by start)."""
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    run_end = np.maximum.accumulate(end)
    if n == 1 or bool(np.all(start[1:] >= run_end[:-1])):
        return np.zeros(n, dtype=np.int64)
    lanes = np.zeros(n, dtype=np.int64)
    free: list[tuple[int, int]] = []  # (end, lane)
    next_lane = 0
    busy: list[tuple[int, int]] = []
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        while busy and busy[0][0] <= s:
            _, lane = heapq.heappop(busy)
            heapq.heappush(free, (lane, lane))
        if free:
            _, lane = heapq.heappop(free)
        else:
            lane = next_lane
            next_lane += 1
        lanes[i] = lane
        heapq.heappush(busy, (e, lane))
    return lanes


def sequence_id(index: int, slot: int) -> int:
    """Packet sequence id of a process's slot: the bits of ``slot`` (SEQ_BITS) and ``index`` (21)
    interleaved, plus one, so small traces keep 1-byte ids and every (process, slot) differs."""
    assert 0 <= slot < (1 << SEQ_BITS) and 0 <= index < (1 << 21)
    out, bit = 0, 0
    for k in range(21):
        if k < SEQ_BITS:
            out |= ((slot >> k) & 1) << bit
            bit += 1
        out |= ((index >> k) & 1) << bit
        bit += 1
    return out + 1


class _Sink:
    """Packets gathered into blocks of COMPRESS_BYTES; each block is deflated (zlib, which releases
    the GIL) on a small thread pool into one ``compressed_packets`` packet while the next events
    are encoded, and the blocks are written in order."""

    def __init__(self, f) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.f = f
        self.parts: list = []
        self.size = 0
        self.pool = ThreadPoolExecutor(max_workers=COMPRESS_THREADS, thread_name_prefix="pftrace-deflate")
        self.pending: collections.deque = collections.deque()

    @staticmethod
    def _packet(parts: list) -> bytes:
        c = _deflate.compressobj(COMPRESS_LEVEL)
        z = [c.compress(p) for p in parts]
        z.append(c.flush())
        size = sum(len(b) for b in z)
        head = _COMPRESSED_TAG + pbenc.encode_varint_scalar(size)
        return b"".join([_PACKET_TAG, pbenc.encode_varint_scalar(len(head) + size), head] + z)

    def write(self, data) -> None:
        if len(data):
            self.parts.append(data)
            self.size += len(data)
            if self.size >= COMPRESS_BYTES:
                self.flush()

    def flush(self) -> None:
        if self.parts and COMPRESS_LEVEL is None:
            for p in self.parts:
                self.f.write(p)
            self.parts, self.size = [], 0
        elif self.parts:
            self.pending.append(self.pool.submit(self._packet, self.parts))
            self.parts, self.size = [], 0
        while len(self.pending) > 2 * COMPRESS_THREADS:
            self.f.write(self.pending.popleft().result())

    def close(self) -> None:
        try:
            self.flush()
            while self.pending:
                self.f.write(self.pending.popleft().result())
        finally:
            self.discard()

    def discard(self) -> None:
        """Drop what is not written yet and stop the threads."""
        self.parts, self.size = [], 0
        for fut in self.pending:
            fut.cancel()
        self.pending.clear()
        self.pool.shutdown(wait=True)


def _interned(kind: int, items) -> bytes:
    return b"".join(pbenc.length_delimited(kind, pbenc.varint_field(1, i) + pbenc.length_delimited(2, s.encode()))
                    for s, i in items)


def _sequence_order(slot: np.ndarray, start: np.ndarray, end: np.ndarray, instant: np.ndarray):
    """Packet order of every sequence: events sorted by (slot, start, position), and each slice end
    attached to the last begin of its sequence that precedes it (an end at t comes before a begin
    at t).  Returns (order, end events sorted, the row each end follows)."""
    n = len(start)
    if n and bool(np.all(start[1:] >= start[:-1])):
        order = np.argsort(slot.astype(np.uint16), kind="stable")
    else:
        order = np.lexsort((start, slot))
    s_o = slot[order]
    # one int64 key per (slot, time); times become dense ranks when their span is too wide
    lo = int(min(start.min(), end.min())) if n else 0
    hi = int(max(start.max(), end.max())) if n else 0
    if hi - lo < (1 << (62 - SEQ_BITS)):
        kb = (s_o.astype(np.int64) << (62 - SEQ_BITS)) | (start[order] - lo)
        t_end = end - lo
    else:
        uniq, inv = np.unique(np.concatenate([start, end]), return_inverse=True)
        kb = (s_o.astype(np.int64) << (62 - SEQ_BITS)) | inv[:n][order]
        t_end = inv[n:].astype(np.int64)
    slices = order[~instant[order]]  # slices in begin order
    ke = (slot[slices].astype(np.int64) << (62 - SEQ_BITS)) | t_end[slices]
    if len(ke) > 1 and not bool(np.all(ke[1:] >= ke[:-1])):
        o2 = np.argsort(ke, kind="stable")
        slices, ke = slices[o2], ke[o2]
    follows = np.searchsorted(kb, ke, side="left") - 1
    return order, slices, follows


def _distinct(v: np.ndarray) -> np.ndarray:
    """Sorted distinct values of non-negative ints (a count when their range is small)."""
    if len(v) and int(v.max()) < 4 * len(v) + 4096:
        return np.flatnonzero(np.bincount(v))
    return np.unique(v)


def _chunks(slot_sorted: np.ndarray):
    """Row ranges to encode at a time: cut where the sequence changes (a track's events share one
    shape, so each range's byte matrix stays narrow) and every CHUNK_ROWS; runs of small
    sequences are kept together."""
    n = len(slot_sorted)
    cuts = np.flatnonzero(slot_sorted[1:] != slot_sorted[:-1]) + 1
    bounds = [0]
    for b in cuts.tolist() + [n]:
        while b - bounds[-1] > CHUNK_ROWS:
            bounds.append(bounds[-1] + CHUNK_ROWS)
        if b - bounds[-1] >= MIN_CHUNK_ROWS or b == n:
            bounds.append(b)
    return zip(bounds[:-1], bounds[1:])


class PerfettoWriter:
    def __init__(self, path: str, origin_ns: int, uuid_base: int = 0, first: bool = True) -> None:
        """``uuid_base`` keeps track ids unique when pieces written separately are concatenated
        (Perfetto traces concatenate); ``first`` marks the piece that names the time origin."""
        self.path = path
        self.origin_ns = origin_ns
        self.file = AtomicFile(path)
        self.f = _Sink(self.file.f)
        self.next_uuid = uuid_base + 1
        self.events_written = 0
        self._first = first

    def _uuid(self) -> int:
        u = self.next_uuid
        self.next_uuid += 1
        return u

    def _packet(self, body: bytes) -> None:
        self.f.write(pbenc.length_delimited(TRACE_PACKET, body))

    def _track(self, uuid: int, name: str, parent: int | None = None, pid: int | None = None,
               pname: str | None = None, counter_unit: int | None = None, unit_name: str | None = None) -> None:
        td = pbenc.varint_field(TD_UUID, uuid) + pbenc.length_delimited(TD_NAME, name.encode())
        if parent is not None:
            td += pbenc.varint_field(TD_PARENT, parent)
        if pid is not None:
            pd = pbenc.varint_field(PD_PID, pid) + pbenc.length_delimited(PD_NAME, (pname or name).encode())
            td += pbenc.length_delimited(TD_PROCESS, pd)
        if counter_unit is not None:
            cd = pbenc.varint_field(CD_UNIT, counter_unit)
            if unit_name:
                cd += pbenc.length_delimited(CD_UNIT_NAME, unit_name.encode())
            td += pbenc.length_delimited(TD_COUNTER, cd)
        self._packet(pbenc.length_delimited(P_TRACK_DESC, td))

    def _lane_tracks(self, groups, start, end, parent: int):
        """``groups``: (base name, event indices sorted by start).  Declares one track per lane and
        returns (track index per event, uuid per track)."""
        track = np.zeros(len(start), dtype=np.int64)
        uuids: list[int] = []
        for base, idx in groups:
            st_, en_ = start[idx], end[idx]
            inst = en_ <= st_  # instants never nest: they stay on the first lane
            lanes = np.zeros(len(idx), dtype=np.int64)
            lanes[~inst] = _lanes(st_[~inst], en_[~inst])
            for lane in range(int(lanes.max()) + 1 if len(idx) else 0):
                u = self._uuid()
                self._track(u, base if lane == 0 else f"{base} #{lane + 1}", parent=parent)
                track[idx[lanes == lane]] = len(uuids)
                uuids.append(u)
        return track, uuids

    def add(self, pe: ProcessEvents) -> None:
        pid_uuid = self._uuid()
        rank = f" rank {pe.rank}" if pe.rank >= 0 else ""
        pname = f"{pe.instance_id} pid {pe.pid}{rank}"
        if self._first:
            pname += f" [t0 {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(self.origin_ns / 1e9))}Z]"
            self._first = False
        self._track(pid_uuid, pname, pid=pe.index + 1, pname=pname)
        c = pe.cols
        n = pe.n
        seq_index = pe.index
        start = c["start_ts"] - self.origin_ns
        end = c["end_ts"] - self.origin_ns
        # ---- tracks: one per (kind, key, lane)
        hw = np.array([g == "hardware" for g in pe.type_groups], dtype=bool)
        tname = np.array(pe.type_names, dtype=object)
        is_cc = np.isin(tname, ["cc_running", "cc_exec_barrier"])
        typ = c["type"]
        groups = []
        if n:
            kind = np.where(is_cc[typ], 2, np.where(hw[typ], 1, 0))
            key = np.where(kind == 0, c["thread_id"], c["nc_idx"])
            order = np.lexsort((c["start_ts"], key, kind))
            k_s, key_s = kind[order], key[order]
            bounds = np.flatnonzero(np.r_[True, (k_s[1:] != k_s[:-1]) | (key_s[1:] != key_s[:-1]), True])
            for a, b in zip(bounds[:-1], bounds[1:]):
                kd, ky = int(k_s[a]), int(key_s[a])
                groups.append(({0: f"{ky}/neuron_rt", 1: f"nc_{ky}/neuron_hw", 2: f"nc_{ky}/cc"}[kd], order[a:b]))
        track, uuids = self._lane_tracks(groups, start, end, pid_uuid)

        # ---- annotations (only where meaningful)
        str_values: dict[str, int] = {}

        def sval(text: str) -> int:
            i = str_values.get(text)
            if i is None:
                i = str_values[text] = len(str_values) + 1
            return i

        model_id = c["model_id"]
        ann_rows: list[tuple[str, np.ndarray, np.ndarray, bool]] = []  # name, present mask, values, is_string
        if n:
            mnames = np.array([sval(pe.model_names.get(i, f"model_{i}")) if i >= 0 else 0
                               for i in range(int(model_id.max()) + 1)] if model_id.max() >= 0 else [0], dtype=np.int64)
            has_model = model_id >= 0
            ann_rows.append(("model_name", has_model, mnames[np.where(has_model, model_id, 0)], True))
            ann_rows.append(("exec_id", c["exec_id"] >= 0, c["exec_id"], False))
            cc = is_cc[typ]
            strs = pe.strings
            for col in ("op", "group", "dtype"):
                ids = c[col]
                present = ids > 0
                vals = np.zeros(n, dtype=np.int64)
                if present.any():
                    counts = np.bincount(np.maximum(ids, 0))
                    counts[0] = 0
                    lut = np.zeros(len(counts), dtype=np.int64)
                    for u in np.flatnonzero(counts).tolist():
                        lut[u] = sval(strs[u])
                    vals = lut[np.maximum(ids, 0)]
                ann_rows.append((col, present, vals, True))
            ann_rows.append(("seq", cc & (c["seq"] >= 0), c["seq"], False))
            ann_rows.append(("bytes", c["bytes"] >= 0, c["bytes"], False))
            ann_rows.append(("ret", c["ret"] > 0, c["ret"], False))
        self._write_events(seq_index, uuids, track, typ, pe.type_names, start, end, c["flow_id"], ann_rows,
                           str_values)
        self.events_written += n
        self._counters(pe, sequence_id(seq_index, 0), pid_uuid)

    def _write_events(self, seq_index: int, uuids: list[int], track: np.ndarray, typ: np.ndarray,
                      type_names: list[str], start: np.ndarray, end: np.ndarray, flow_id: np.ndarray,
                      ann_rows, str_values: dict[str, int]) -> None:
        """Declare one sequence per track (interned names, defaults, clock) and write the events."""
        n = len(start)
        if not n:
            return
        ntracks = len(uuids)
        slot_of_track = np.minimum(np.arange(ntracks, dtype=np.int64) + 1, SHARED_SLOT)
        slot = slot_of_track[track]
        # ---- packet order within each sequence, and each packet's delta from the one before it
        instant = end <= start
        order, slices, follows = _sequence_order(slot, start, end, instant)
        ne = len(slices)
        n_after = np.bincount(follows, minlength=n) if ne else np.zeros(n, dtype=np.int64)
        first_after = np.cumsum(n_after) - n_after  # index in slices of the first end after row i
        b_time = start[order]
        e_time = end[slices]
        last_time = b_time.copy()  # time of the last packet of each row
        has = n_after > 0
        last_time[has] = e_time[first_after[has] + n_after[has] - 1]
        s_o = slot[order]
        new_seq = np.r_[True, s_o[1:] != s_o[:-1]]
        prev = np.r_[0, last_time[:-1]]
        base = np.maximum(b_time[new_seq], 0)  # each sequence's clock starts at its first event
        prev[new_seq] = base
        d_begin = b_time - prev
        rank_after = np.arange(ne) - first_after[follows] if ne else np.zeros(0, dtype=np.int64)
        prev_e = np.where(rank_after == 0, b_time[follows], np.r_[0, e_time[:-1]]) if ne else e_time
        d_end = e_time - prev_e
        del last_time, has, prev, rank_after, prev_e, e_time, follows

        # ---- one sequence per track: interned names, defaults (track, clock) and the clock snapshot
        nt = len(type_names) + 1
        used: dict[int, list[int]] = {}
        for p in _distinct(slot * nt + typ).tolist():
            used.setdefault(p // nt, []).append(p % nt)
        names = sorted({type_names[t] for t in _distinct(typ).tolist()})
        name_iid = {nm: i + 1 for i, nm in enumerate(names)}
        type_iid = np.array([name_iid.get(nm, 0) for nm in type_names], dtype=np.int64)
        dbg_iid = {nm: i + 1 for i, nm in enumerate(ANNOTATIONS)}
        common = _interned(ID_DEBUG_NAMES, dbg_iid.items()) + _interned(ID_DEBUG_STRINGS, str_values.items())
        base_of_slot = dict(zip(s_o[new_seq].tolist(), base.tolist()))
        for s in sorted(used):
            seq = pbenc.varint_field(P_SEQ_ID, sequence_id(seq_index, s))
            defaults = pbenc.varint_field(DEF_CLOCK_ID, CLOCK_EVENTS)
            if s < SHARED_SLOT:
                defaults += pbenc.length_delimited(DEF_TRACK_EVENT, pbenc.varint_field(TED_TRACK_UUID, uuids[s - 1]))
            names_s = sorted({type_names[t] for t in used[s]})
            idata = _interned(ID_EVENT_NAMES, ((nm, name_iid[nm]) for nm in names_s)) + common
            self._packet(seq + pbenc.varint_field(P_SEQ_FLAGS, SEQ_CLEARED)
                         + pbenc.length_delimited(P_DEFAULTS, defaults) + pbenc.length_delimited(P_INTERNED, idata))
            t0 = base_of_slot[s]
            clocks = (pbenc.length_delimited(CS_CLOCKS, pbenc.varint_field(CLK_ID, CLOCK_EVENTS)
                                             + pbenc.varint_field(CLK_TS, t0) + pbenc.varint_field(CLK_INCREMENTAL, 1))
                      + pbenc.length_delimited(CS_CLOCKS, pbenc.varint_field(CLK_ID, CLOCK_BOOTTIME)
                                               + pbenc.varint_field(CLK_TS, t0)))
            self._packet(seq + pbenc.length_delimited(P_CLOCK_SNAPSHOT, clocks))

        # ---- the events, in sequence order, a range of rows at a time
        seq_of_slot = np.zeros(SHARED_SLOT + 1, dtype=np.int64)
        for k in used:
            seq_of_slot[k] = sequence_id(seq_index, k)
        seq_o = seq_of_slot[s_o]
        shared = s_o == SHARED_SLOT
        uuid_arr = np.asarray(uuids, dtype=np.int64) if shared.any() else None
        anns = [(dbg_iid[name], present, vals, DA_STRING_IID if is_string else DA_INT)
                for name, present, vals, is_string in ann_rows if present.any()]
        flags = pbenc.varint_field(P_SEQ_FLAGS, SEQ_NEEDS_STATE)
        end_type = pbenc.varint_field(TE_TYPE, SLICE_END)

        for lo, hi in _chunks(s_o):
            rows = slice(lo, hi)
            m = hi - lo
            ev = order[rows]  # the events of these rows; arguments are gathered a range at a time
            te = Rows(m).field_varint(TE_TYPE, np.where(instant[ev], INSTANT, SLICE_BEGIN))
            te.field_varint(TE_NAME_IID, type_iid[typ[ev]])
            for iid, present, vals, field in anns:
                pr = present[ev]
                da = Rows(m).field_varint(DA_NAME_IID, iid).field_varint(field, vals[ev], pr)
                te.message(TE_DEBUG, da, pr)
            fl = flow_id[ev]
            te.field_fixed64(TE_FLOW_IDS, fl, fl != 0)
            sh = shared[rows]
            if uuid_arr is not None:
                te.field_varint(TE_TRACK_UUID, uuid_arr[track[ev]], sh)
            seq_r = seq_o[rows]
            pk = Rows(m).field_varint(P_SEQ_ID, seq_r).const(flags)
            pk.message(P_TRACK_EVENT, te).field_varint(P_TIMESTAMP, d_begin[rows])
            out = Rows(m).message(TRACE_PACKET, pk)
            # the ends that follow each begin in its sequence
            na = n_after[rows]
            fa = first_after[rows]
            for k in range(int(na.max())):
                pr = na > k
                j = np.where(pr, fa + k, 0)
                te_e = Rows(m).const(end_type, pr)
                if uuid_arr is not None:
                    te_e.field_varint(TE_TRACK_UUID, uuid_arr[track[slices[j]]], pr & sh)
                pe_ = Rows(m).field_varint(P_SEQ_ID, seq_r, pr).const(flags, pr)
                pe_.message(P_TRACK_EVENT, te_e, pr).field_varint(P_TIMESTAMP, d_end[j], pr)
                out.message(TRACE_PACKET, pe_, pr)
            self.f.write(out.encode())

    def add_device(self, v) -> None:
        """One device profile: a process whose tracks are the engines/streams of its ops."""
        t = v.dp.trace
        ops = v.dp.ops
        strings = list(t.strings)
        pid_uuid = self._uuid()
        pname = f"device profile {v.profile_id} ({t.device_kind})"
        self._track(pid_uuid, pname, pid=1, pname=pname)
        n = v.n
        start = v.start_ts - self.origin_ns
        end = v.end_ts - self.origin_ns
        order = np.lexsort((v.start_ts, ops["track"]))
        groups = []
        for tid in np.unique(ops["track"]).tolist():
            groups.append((strings[tid], order[ops["track"][order] == tid]))
        track, uuids = self._lane_tracks(groups, start, end, pid_uuid)
        rows = [("exec_id", np.ones(n, dtype=bool), v.exec_ids, False),
                ("bytes", ops["nbytes"] >= 0, ops["nbytes"], False)]
        self._write_events(0, uuids, track, ops["name"].astype(np.int64), strings, start, end,
                           np.zeros(n, dtype=np.int64), rows, {})
        self.events_written += n

    def _counters(self, pe: ProcessEvents, seq: int, parent: int) -> None:
        """Counter samples on the process's slot-0 sequence, with absolute trace-clock timestamps."""
        from .reader import wall_offset_ns

        s = pe.session
        off = wall_offset_ns(s) + pe.clock_offset_ns - self.origin_ns
        series = counter_series(s)
        for name, (ts, vals, unit) in series.items():
            if not len(ts):
                continue
            u = self._uuid()
            self._track(u, name, parent=parent, counter_unit=2 if unit == "bytes" else 0,
                        unit_name="%" if unit == "percent" else None)
            m = len(ts)
            te = Rows(m).field_varint(TE_TYPE, COUNTER).field_varint(TE_TRACK_UUID, u)
            te.field_fixed64(TE_DOUBLE_COUNTER, np.asarray(vals, dtype=np.float64).view(np.uint64))
            pk = Rows(m).field_varint(P_TIMESTAMP, ts + off).field_varint(P_SEQ_ID, seq).message(P_TRACK_EVENT, te)
            self.f.write(memoryview(Rows(m).message(TRACE_PACKET, pk).encode()))

    def close(self) -> None:
        self.f.close()
        self.file.commit()

    def abort(self) -> None:
        self.f.discard()
        self.file.abort()


def assemble(path: str, pieces: list[str]) -> None:
    """Concatenate per-process pieces into one trace (a Perfetto trace is a sequence of packets)."""
    import shutil

    f = AtomicFile(path)
    try:
        for p in pieces:
            with open(p, "rb") as src:
                shutil.copyfileobj(src, f.f, 1 << 20)
        f.commit()
    except BaseException:
        f.abort()
        raise


def counter_series(s) -> dict[str, tuple[np.ndarray, np.ndarray, str]]:
    """{counter name: (monotonic ts, values, unit)} from a session's samplers."""
    from .reader import _arr

    out: dict[str, tuple[np.ndarray, np.ndarray, str]] = {}
    if s.cpu is not None:
        ts = _arr(s.cpu.ts_ns, "i8", s.path, "cpu_util.ts_ns")
        pct = _arr(s.cpu.cpu_percent, "f4", s.path, "cpu_util.cpu_percent")
        ncpu = max(int(s.cpu.num_cpus), 1)
        if len(ts) and len(pct) == len(ts) * ncpu:
            pct = pct.reshape(len(ts), ncpu)
            out["cpu_util.process"] = (ts, _arr(s.cpu.process_percent, "f4", s.path, "process_percent")[: len(ts)],
                                       "percent")
            out["cpu_util.host_mean"] = (ts, pct.mean(axis=1), "percent")
            for i in range(ncpu):
                out[f"cpu_util.cpu{i}"] = (ts, pct[:, i], "percent")
    if s.mem is not None:
        ts = _arr(s.mem.ts_ns, "i8", s.path, "host_mem.ts_ns")
        for name in ("process_rss", "process_vms", "host_used", "host_available"):
            v = _arr(getattr(s.mem, name), "i8", s.path, name)
            if len(v) == len(ts) and len(ts):
                out[f"host_mem.{name}"] = (ts, v, "bytes")
    return out
