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

A process is read a chunk at a time (``add_session``) and written a window at a time (``_Stream``):
lanes, clocks and interned state carry over, and an event that arrives after its sequence's clock
has passed it is written with an absolute time (docs/decisions/perfetto-chunked-writer.md), so
memory does not grow with the events of a process.
"""

from __future__ import annotations

import collections
import os
import time
import zlib

import numpy as np

try:  # Intel ISA-L's deflate: the same zlib stream, ~5x less CPU than zlib at level 1 and smaller
    from isal import isal_zlib as _deflate
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
    _deflate = zlib

from neuron_explorer.util import pbwire as pbenc
from neuron_explorer.util.atomic import AtomicFile
from neuron_explorer.util.alloc import keep_freed_memory
from neuron_explorer.analysis.counters import process_counters
from neuron_explorer.analysis.events import ProcessEvents
from neuron_explorer.util.pbwire import Rows
from neuron_explorer.contracts.tracks import COLLECTIVE, HOST, TRACK_NAMES, kinds_of_types, process_label

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
CHUNK_ROWS = 32_768  # rows encoded at a time (a byte matrix of a few MB)
MIN_CHUNK_ROWS = 1_024
# events read from a capture at a time: memory stays flat, and a quarter of pipeline.CHUNK halves
# the page faults of a fresh worker (its temporaries are reused, not faulted in) for little overhead
READ_EVENTS = 65_536
MAX_RUNS = 64  # core runs read side by side; beyond, the capture is read in file order
P_CLOCK_ID = 58  # TracePacket.timestamp_clock_id: set on late packets, which carry absolute times
_TIME_BITS = 63 - SEQ_BITS - 2  # (slot, time, end/begin) sort keys in an int64

ANNOTATIONS = ("model_name", "exec_id", "op", "seq", "bytes", "group", "dtype", "ret")
_DBG_IID = {nm: i + 1 for i, nm in enumerate(ANNOTATIONS)}
_EMPTY = np.zeros(0, dtype=np.int64)


def sequence_id(index: int, slot: int) -> int:
    """Packet sequence id of a process's slot: the bits of ``slot`` (SEQ_BITS) and ``index`` (21)
    interleaved, plus one, so small traces keep 1-byte ids and every (process, slot) differs."""
    assert 0 <= slot < (1 << SEQ_BITS)
    return int(_sequence_ids(index)[slot])


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


def _distinct(v: np.ndarray) -> np.ndarray:
    """Sorted distinct values of non-negative ints (a count when their range is small)."""
    if len(v) and int(v.max()) < 4 * len(v) + 4096:
        return np.flatnonzero(np.bincount(v))
    return np.unique(v)


def _row_ranges(slot_sorted: np.ndarray):
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


def _sequence_ids(index: int) -> np.ndarray:
    """sequence_id(index, slot) for every slot."""
    assert 0 <= index < (1 << 21)
    slot = np.arange(SHARED_SLOT + 1, dtype=np.int64)
    out = np.zeros(SHARED_SLOT + 1, dtype=np.int64)
    bit = 0
    for k in range(21):
        if k < SEQ_BITS:
            out |= ((slot >> k) & 1) << bit
            bit += 1
        out |= ((index >> k) & 1) << bit
        bit += 1
    return out + 1


class _Group:
    """A track and its lanes: ``busy`` holds the end of the last slice of each lane."""

    __slots__ = ("name", "busy", "tracks")

    def __init__(self, name: str) -> None:
        self.name = name
        self.busy: list[int] = []
        self.tracks: list[int] = []  # track index of each lane


class _Stream:
    """One process's events, pushed a piece at a time (in any order) and written a window at a time,
    so memory follows the pieces held, not the process.

    ``release(w)`` writes the held events that start before ``w``.  Kept across windows: the lanes
    of every track (a slice takes the lowest lane whose slices all end by its start, so lanes never
    overlap whatever order events come in), every sequence's clock (the time of its last packet),
    what each sequence has interned, and the slice ends not due yet.  Within a window a sequence's
    packets are written in time order (an end at t before a begin at t) as deltas of its clock; an
    event that starts before its sequence's clock (it came too late) is written after them with an
    absolute trace-clock time (``timestamp_clock_id``), its end too when that is also before the
    clock, else its end joins the others on the clock.  Late packets then never share a timestamp
    with a packet of their track written after them that they must precede."""

    def __init__(self, w: "PerfettoWriter", seq_index: int, pid_uuid: int, type_names: list[str]) -> None:
        self.w = w
        self.seq_ids = _sequence_ids(seq_index)
        self.pid_uuid = pid_uuid
        self.type_names = type_names
        self.annotate = None  # (columns, rows) -> [(name iid, value field, present, values)]
        self.groups: list[_Group] = []
        self.group_of: dict = {}
        self.uuids: list[int] = []
        self.declared = np.zeros(SHARED_SLOT + 1, dtype=bool)
        self.clock = np.zeros(SHARED_SLOT + 1, dtype=np.int64)
        self.names_in: dict[int, set] = {}  # slot -> types whose names are interned there
        self.nstr = np.zeros(SHARED_SLOT + 1, dtype=np.int64)  # slot -> strings interned there
        self.strings: list[tuple[str, int]] = []  # debug string values, in iid order
        self.name_iid = np.zeros(len(type_names) + 1, dtype=np.int64)  # type -> iid (0: none yet)
        self.parts: list[dict] = []  # held events
        self.end_t = self.end_s = self.end_k = _EMPTY  # slice ends not written: time, slot, track
        self.n = 0

    # ---- input
    def group(self, key, name: str) -> int:
        g = self.group_of.get(key)
        if g is None:
            g = self.group_of[key] = len(self.groups)
            self.groups.append(_Group(name))
        return g

    def sval(self, text: str) -> int:
        self.strings.append((text, len(self.strings) + 1))
        return len(self.strings)

    def push(self, cols: dict[str, np.ndarray]) -> None:
        """Events to hold until released: "start", "end" (relative to the origin), "gid" (group),
        "typ", "flow" and the columns ``annotate`` reads."""
        n = len(cols["start"])
        if n:
            self.parts.append(cols)
            self.n += n

    def release(self, before: int | None = None) -> None:
        """Write the held events that start before ``before`` (all: None)."""
        if not self.parts:
            if before is None and len(self.end_t):
                self._window(None, None, None)
            return
        cat = self.parts[0] if len(self.parts) == 1 else {
            k: np.concatenate([p[k] for p in self.parts]) for k in self.parts[0]}
        self.parts = []
        sel = None
        if before is not None:
            due = cat["start"] < before
            k = int(np.count_nonzero(due))
            if k == 0:
                self.parts = [cat]
                return
            if k < len(due):  # the few held back are copied; the window reads the rest in place
                self.parts = [{c: v[~due] for c, v in cat.items()}]
                sel = np.flatnonzero(due)
        self._window(cat, sel, before)

    # ---- lanes
    def _new_lane(self, grp: _Group) -> None:
        lane = len(grp.tracks)
        u = self.w._uuid()
        self.w._track(u, grp.name if lane == 0 else f"{grp.name} #{lane + 1}", parent=self.pid_uuid)
        grp.tracks.append(len(self.uuids))
        self.uuids.append(u)

    def _lanes(self, grp: _Group, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Track of each event of one group (sorted by start); instants stay on the first lane."""
        lane = np.zeros(len(s), dtype=np.int64)
        sl = e > s
        if sl.any():
            ss, es = s[sl], e[sl]
            busy = grp.busy
            run = np.maximum.accumulate(es)
            k = -1
            if len(ss) == 1 or bool(np.all(ss[1:] >= run[:-1])):
                # they do not overlap: all take the lowest lane free at the first start, when the
                # lanes below it stay busy past the last start (a long slice keeps its lane)
                first, last = int(ss[0]), int(ss[-1])
                k = next((j for j, t in enumerate(busy) if t <= first), len(busy))
                if all(t > last for t in busy[:k]):
                    if k == len(busy):
                        busy.append(0)
                    busy[k] = int(run[-1])
                    lane[sl] = k
                else:
                    k = -1
            if k < 0:
                ls = np.empty(len(ss), dtype=np.int64)
                for i, (a, b) in enumerate(zip(ss.tolist(), es.tolist())):
                    for k, t in enumerate(busy):
                        if t <= a:
                            break
                    else:
                        k = len(busy)
                        busy.append(0)
                    busy[k] = b
                    ls[i] = k
                lane[sl] = ls
        while len(grp.tracks) < int(lane.max()) + 1:
            self._new_lane(grp)
        return np.asarray(grp.tracks, dtype=np.int64)[lane]

    # ---- one window
    def _window(self, ev: dict | None, sel: np.ndarray | None, before: int | None) -> None:
        """Write the events ``sel`` of ``ev`` (all: None) and the slice ends due before ``before``."""
        if ev is None:
            start = end = gid = typ = _EMPTY
        elif sel is None:
            start, end, gid, typ = ev["start"], ev["end"], ev["gid"], ev["typ"]
        else:
            start, end, gid, typ = ev["start"][sel], ev["end"][sel], ev["gid"][sel], ev["typ"][sel]
        n = len(start)
        # ---- lanes, a group at a time in start order
        trk = np.empty(n, dtype=np.int64)
        slice_ = end > start
        if n:
            # by (group, start, instants before slices): each track's slices then rarely need a
            # second look (see _simple)
            og = np.argsort(gid.astype(np.uint16) if len(self.groups) <= 1 << 16 else gid, kind="stable")
            lo, hi = int(start.min()), int(start.max())
            sk = ((start - lo) << 1) | slice_ if hi - lo < 1 << 61 else start
            k_g, g_g = sk[og], gid[og]
            if n > 1 and bool(np.any((k_g[1:] < k_g[:-1]) & (g_g[1:] == g_g[:-1]))):
                if len(self.groups) <= 1 << 10 and hi - lo < 1 << 51:  # nearly sorted: one merge sort
                    og = og[np.argsort((g_g << 52) | k_g, kind="stable")]
                else:
                    og = np.lexsort((sk, gid))
                g_g = gid[og]
            s_g = start[og]
            bounds = np.flatnonzero(np.r_[True, g_g[1:] != g_g[:-1], True]).tolist()
            for a, b in zip(bounds[:-1], bounds[1:]):
                idx = og[a:b]
                trk[idx] = self._lanes(self.groups[int(g_g[a])], s_g[a:b], end[idx])
        else:
            og = _EMPTY
        slot = np.minimum(trk + 1, SHARED_SLOT)
        clk = self.clock[slot]
        late = self.declared[slot] & (start < clk)
        any_late = bool(late.any())
        # ---- begins on their sequence's clock (in group order), and the slice ends due now
        ob = og[~late[og]] if any_late else og
        if n and not any_late and self._simple(ev, sel, og, start, end, slot, trk, typ, before):
            self.w.events_written += n
            return
        to_pool = slice_[ob]  # (late events' ends that are not late join below)
        et, es, ek = end[ob][to_pool], slot[ob][to_pool], trk[ob][to_pool]
        if any_late:
            lp = np.flatnonzero(late & slice_ & (end >= clk))
            et, es, ek = np.r_[et, end[lp]], np.r_[es, slot[lp]], np.r_[ek, trk[lp]]
        if len(self.end_t):
            et, es, ek = np.r_[self.end_t, et], np.r_[self.end_s, es], np.r_[self.end_k, ek]
        if before is not None:
            due = et < before
            if not due.all():
                self.end_t, self.end_s, self.end_k = et[~due], es[~due], ek[~due]
                et, es, ek = et[due], es[due], ek[due]
            else:
                self.end_t = self.end_s = self.end_k = _EMPTY
        else:
            self.end_t = self.end_s = self.end_k = _EMPTY
        tb, sb = start[ob], slot[ob]
        nb, ne = len(ob), len(et)
        # ---- each sequence's packets in time order: one int64 key per (slot, time, end before
        # begin), merged with one stable sort (times become dense ranks when their span is too wide)
        new: dict[int, int] = {}
        if nb + ne:
            t_all = np.concatenate([tb, et])
            s_all = np.concatenate([sb, es])
            lo, hi = int(t_all.min()), int(t_all.max())
            rk = t_all - lo if hi - lo < (1 << _TIME_BITS) else np.unique(t_all, return_inverse=True)[1]
            key = (s_all << (_TIME_BITS + 2)) | (rk << 1)
            key[:nb] |= 1
            perm = np.argsort(key, kind="stable")
            isb = perm < nb
            t_m, s_m = t_all[perm], s_all[perm]
            first = np.r_[True, s_m[1:] != s_m[:-1]]
            fs = s_m[first]
            undecl = ~self.declared[fs]
            if undecl.any():  # each new sequence's clock starts at its first packet
                base = np.maximum(t_m[first][undecl], 0)
                self.clock[fs[undecl]] = base
                new = dict(zip(fs[undecl].tolist(), base.tolist()))
            prev = np.empty_like(t_m)
            prev[1:] = t_m[:-1]
            prev[first] = self.clock[fs]
            delta = t_m - prev
            last = np.r_[s_m[1:] != s_m[:-1], True]
            self.clock[s_m[last]] = t_m[last]
            ob = ob[perm[isb]]  # begins in (slot, time) order
            sb = s_m[isb]
            d_b = delta[isb]
            ie = perm[~isb] - nb  # ends in (slot, time) order
            es, ek, d_e = es[ie], ek[ie], delta[~isb]
            row = np.cumsum(isb)[~isb] - 1  # the begin each end follows in the merged order
            att = (row >= 0) & (sb[np.maximum(row, 0)] == es) if nb else np.zeros(ne, dtype=bool)
        ol = np.flatnonzero(late)
        if len(ol) > 1:
            ol = ol[np.lexsort((start[ol], slot[ol]))]
        self._declare(new, np.concatenate([sb, slot[ol]]), np.concatenate([typ[ob], typ[ol]]))
        uu = np.asarray(self.uuids, dtype=np.int64)
        glob = (lambda i: i) if sel is None else (lambda i: sel[i])
        # ---- ends that come first on their sequence in this window, then the begins (each with the
        # ends that follow it), then the late events
        if ne:
            lead = ~att
            if lead.any():
                self._ends(es[lead], ek[lead], d_e[lead], uu)
        if nb:
            na = np.bincount(row[att], minlength=nb)
            self._rows(ev, glob(ob), sb, trk[ob], ~slice_[ob], typ[ob], d_b, False, na, np.cumsum(na) - na, ek[att],
                       d_e[att], uu)
        if len(ol):
            ab = (slice_ & (end < clk))[ol]
            self._rows(ev, glob(ol), slot[ol], trk[ol], ~slice_[ol], typ[ol], start[ol], True, ab.astype(np.int64),
                       np.arange(len(ol)),
                       trk[ol], end[ol], uu)
        self.w.events_written += n

    def _simple(self, ev, sel, ob, start, end, slot, trk, typ, before) -> bool:
        """The usual window, written without merging begins and ends: no late event, and on every
        sequence each slice ends by the time the next event begins (or is the last and ends after
        the window), and the ends still due from earlier windows come before the sequence's first
        event here.  Then each slice's end directly follows its begin.  False (nothing written)
        when that does not hold."""
        nb = len(ob)
        sb = slot[ob]
        if nb > 1 and bool(np.any(sb[1:] < sb[:-1])):
            ob = ob[np.argsort(sb.astype(np.uint16), kind="stable")]
            sb = slot[ob]
        if sb[-1] == SHARED_SLOT:
            return False
        tb, eb = start[ob], end[ob]
        sl = eb > tb
        held = sl & (eb >= before) if before is not None else np.zeros(nb, dtype=bool)
        same = sb[1:] == sb[:-1]
        if bool(np.any(same & ((tb[1:] < np.maximum(eb, tb)[:-1]) | held[:-1]))):
            return False
        first = np.r_[True, ~same]
        fslot = sb[first]
        lt = ls = lk = _EMPTY
        keep = None
        if len(self.end_t):
            due = self.end_t < before if before is not None else np.ones(len(self.end_t), dtype=bool)
            if due.any():
                fst = np.full(SHARED_SLOT + 1, np.iinfo(np.int64).max, dtype=np.int64)
                fst[fslot] = tb[first]
                lt, ls, lk = self.end_t[due], self.end_s[due], self.end_k[due]
                if bool(np.any(lt > fst[ls])):
                    return False
                keep = ~due
        # ---- from here on the window is written
        new: dict[int, int] = {}
        undecl = ~self.declared[fslot]
        if undecl.any():  # each new sequence's clock starts at its first packet
            base = np.maximum(tb[first][undecl], 0)
            self.clock[fslot[undecl]] = base
            new = dict(zip(fslot[undecl].tolist(), base.tolist()))
        ld = _EMPTY
        if len(lt):  # ends due from earlier windows, in (slot, time) order, chained from the clocks
            o = np.lexsort((lt, ls))
            lt, ls, lk = lt[o], ls[o], lk[o]
            lf = np.r_[True, ls[1:] != ls[:-1]]
            prev = np.empty_like(lt)
            prev[1:] = lt[:-1]
            prev[lf] = self.clock[ls[lf]]
            ld = lt - prev
            ll = np.r_[ls[1:] != ls[:-1], True]
            self.clock[ls[ll]] = lt[ll]
        own = sl & ~held
        lastt = np.where(own, eb, tb)  # each row's last packet
        prev = np.empty_like(tb)
        prev[1:] = lastt[:-1]
        prev[first] = self.clock[fslot]
        d_b = tb - prev
        last = np.r_[~same, True]
        self.clock[sb[last]] = lastt[last]
        tk = trk[ob]
        if keep is not None:
            self.end_t, self.end_s, self.end_k = self.end_t[keep], self.end_s[keep], self.end_k[keep]
        if held.any():
            self.end_t = np.r_[self.end_t, eb[held]]
            self.end_s = np.r_[self.end_s, sb[held]]
            self.end_k = np.r_[self.end_k, tk[held]]
        typ_o = typ[ob]
        self._declare(new, sb, typ_o)
        uu = np.asarray(self.uuids, dtype=np.int64)
        if len(lt):
            self._ends(ls, lk, ld, uu)
        self._rows(ev, ob if sel is None else sel[ob], sb, tk, ~sl, typ_o, d_b, False, own.astype(np.int64),
                   np.arange(nb), tk,
                   eb - tb, uu)
        return True

    def _declare(self, new: dict[int, int], b_slot: np.ndarray, b_typ: np.ndarray) -> None:
        """Incremental state of the sequences written in this window: new ones get their defaults,
        clock snapshot and interned names; others get the names and strings they lack."""
        w = self.w
        need: dict[int, list[int]] = {}
        used: set[int] = set()
        if len(b_typ):
            nt = len(self.type_names) + 1
            for t in _distinct(b_typ).tolist():
                if not self.name_iid[t]:
                    self.name_iid[t] = int(self.name_iid.max()) + 1
            for p in _distinct(b_slot * nt + b_typ).tolist():
                s, t = divmod(p, nt)
                used.add(s)
                have = self.names_in.setdefault(s, set())
                if t not in have:
                    have.add(t)
                    need.setdefault(s, []).append(t)
        ns = len(self.strings)
        dbg = _interned(ID_DEBUG_NAMES, _DBG_IID.items())
        for s in sorted(used | set(new)):
            names = _interned(ID_EVENT_NAMES, ((self.type_names[t], int(self.name_iid[t])) for t in need.get(s, ())))
            strs = _interned(ID_DEBUG_STRINGS, self.strings[int(self.nstr[s]):]) if self.nstr[s] < ns else b""
            self.nstr[s] = ns
            seq = pbenc.varint_field(P_SEQ_ID, int(self.seq_ids[s]))
            if s in new:
                self.declared[s] = True
                defaults = pbenc.varint_field(DEF_CLOCK_ID, CLOCK_EVENTS)
                if s < SHARED_SLOT:
                    defaults += pbenc.length_delimited(
                        DEF_TRACK_EVENT, pbenc.varint_field(TED_TRACK_UUID, self.uuids[s - 1]))
                w._packet(seq + pbenc.varint_field(P_SEQ_FLAGS, SEQ_CLEARED)
                          + pbenc.length_delimited(P_DEFAULTS, defaults)
                          + pbenc.length_delimited(P_INTERNED, names + dbg + strs))
                t0 = new[s]
                clocks = (pbenc.length_delimited(CS_CLOCKS, pbenc.varint_field(CLK_ID, CLOCK_EVENTS)
                                                 + pbenc.varint_field(CLK_TS, t0)
                                                 + pbenc.varint_field(CLK_INCREMENTAL, 1))
                          + pbenc.length_delimited(CS_CLOCKS, pbenc.varint_field(CLK_ID, CLOCK_BOOTTIME)
                                                   + pbenc.varint_field(CLK_TS, t0)))
                w._packet(seq + pbenc.length_delimited(P_CLOCK_SNAPSHOT, clocks))
            elif names or strs:
                w._packet(seq + pbenc.varint_field(P_SEQ_FLAGS, SEQ_NEEDS_STATE)
                          + pbenc.length_delimited(P_INTERNED, names + strs))

    def _ends(self, slot, track, ts, uu) -> None:
        """Slice ends on their sequence's clock, one packet a row."""
        m = len(slot)
        te = Rows(m).const(pbenc.varint_field(TE_TYPE, SLICE_END))
        sh = slot == SHARED_SLOT
        if sh.any():
            te.field_varint(TE_TRACK_UUID, uu[track], sh)
        pk = Rows(m).field_varint(P_SEQ_ID, self.seq_ids[slot]).const(pbenc.varint_field(P_SEQ_FLAGS, SEQ_NEEDS_STATE))
        pk.message(P_TRACK_EVENT, te).field_varint(P_TIMESTAMP, ts)
        self.w.f.write(Rows(m).message(TRACE_PACKET, pk).encode())

    def _rows(self, ev: dict, order, slot_o, trk_o, inst_o, typ_o, ts_b, absolute: bool, n_after, first_after,
              e_track, ts_e, uu) -> None:
        """Begin (or instant) packets of the events ``order`` of ``ev`` (sorted by slot; ``trk_o``,
        ``inst_o``, ``typ_o``: their tracks, instant flags and types), each followed by its
        ``n_after`` ends (from ``first_after`` in the end arrays).  ``absolute``: times on the trace
        clock instead of the sequence's."""
        flags = pbenc.varint_field(P_SEQ_FLAGS, SEQ_NEEDS_STATE)
        if absolute:
            flags += pbenc.varint_field(P_CLOCK_ID, CLOCK_BOOTTIME)
        end_type = pbenc.varint_field(TE_TYPE, SLICE_END)
        for lo, hi in _row_ranges(slot_o):
            m = hi - lo
            e = order[lo:hi]
            s_r = slot_o[lo:hi]
            te = Rows(m).field_varint(TE_TYPE, np.where(inst_o[lo:hi], INSTANT, SLICE_BEGIN))
            te.field_varint(TE_NAME_IID, self.name_iid[typ_o[lo:hi]])
            for iid, field, pr, vals in self.annotate(ev, e):
                da = Rows(m).field_varint(DA_NAME_IID, iid).field_varint(field, vals, pr)
                te.message(TE_DEBUG, da, pr)
            fl = ev["flow"][e]
            te.field_fixed64(TE_FLOW_IDS, fl, fl != 0)
            sh = s_r == SHARED_SLOT
            shared = bool(sh.any())
            if shared:
                te.field_varint(TE_TRACK_UUID, uu[trk_o[lo:hi]], sh)
            seq_r = self.seq_ids[s_r]
            pk = Rows(m).field_varint(P_SEQ_ID, seq_r).const(flags)
            pk.message(P_TRACK_EVENT, te).field_varint(P_TIMESTAMP, ts_b[lo:hi])
            out = Rows(m).message(TRACE_PACKET, pk)
            na = n_after[lo:hi]
            fa = first_after[lo:hi]
            for k in range(int(na.max()) if m else 0):
                pr = na > k
                j = np.where(pr, fa + k, 0)
                te_e = Rows(m).const(end_type, pr)
                if shared:
                    te_e.field_varint(TE_TRACK_UUID, uu[e_track[j]], pr & sh)
                pe_ = Rows(m).field_varint(P_SEQ_ID, seq_r, pr).const(flags, pr)
                pe_.message(P_TRACK_EVENT, te_e, pr).field_varint(P_TIMESTAMP, ts_e[j], pr)
                out.message(TRACE_PACKET, pe_, pr)
            self.w.f.write(out.encode())


class PerfettoWriter:
    def __init__(self, path: str, origin_ns: int, uuid_base: int = 0, first: bool = True,
                 output: bool = False) -> None:
        """``uuid_base`` keeps track ids unique when pieces written separately are concatenated
        (Perfetto traces concatenate); ``first`` marks the piece that names the time origin;
        ``output``: ``path`` is a user-facing output (see ``AtomicFile``), not a piece."""
        self.path = path
        self.origin_ns = origin_ns
        self.file = AtomicFile(path, output=output)
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

    # ---- system events
    def _open(self, pe: ProcessEvents) -> "_Stream":
        """Declare the process and return the stream its events are pushed to."""
        pid_uuid = self._uuid()
        pname = process_label(pe.pid, pe.rank, pe.instance_id)
        if self._first:
            pname += f" [t0 {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(self.origin_ns / 1e9))}Z]"
            self._first = False
        self._track(pid_uuid, pname, pid=pe.index + 1, pname=pname)
        st = _Stream(self, pe.index, pid_uuid, list(pe.type_names))
        kind_of_type = np.r_[kinds_of_types(pe.type_names, pe.type_groups), HOST]
        st.kind_of_type = kind_of_type
        st.str_iid = np.zeros(len(pe.strings) + 1, dtype=np.int64)  # string id -> iid (0: none yet)
        st.model_iid = np.zeros(1, dtype=np.int64)  # model id -> iid of its name
        iid = _DBG_IID

        def annotate(ev, e):
            """(name iid, value field, present, values) of the rows ``e`` that have any, in
            ANNOTATIONS' order."""
            sid = st.str_iid
            out = []
            mid = ev["model_id"][e]
            pr = mid >= 0
            if pr.any():
                out.append((iid["model_name"], DA_STRING_IID, pr, st.model_iid[np.maximum(mid, 0)]))
            x = ev["exec_id"][e]
            pr = x >= 0
            if pr.any():
                out.append((iid["exec_id"], DA_INT, pr, x))
            for name in ("op", "seq", "bytes", "group", "dtype", "ret"):
                v = ev[name][e]
                if name == "seq":
                    pr = (v >= 0) & (kind_of_type[ev["typ"][e]] == COLLECTIVE)
                else:
                    pr = v > 0 if name != "bytes" else v >= 0
                if pr.any():
                    out.append((iid[name], DA_STRING_IID if name in ("op", "group", "dtype") else DA_INT, pr,
                                sid[np.maximum(v, 0)] if name in ("op", "group", "dtype") else v))
            return out

        st.annotate = annotate
        return st

    def _push(self, st: "_Stream", pe: ProcessEvents) -> None:
        """One piece of a process's events: the track group of each, the strings its annotations
        name (interned as first seen), and the columns the stream holds."""
        n = pe.n
        if not n:
            return
        c = pe.cols
        typ = c["type"]
        kind = st.kind_of_type[typ]
        kk = np.where(kind == HOST, c["thread_id"], c["nc_idx"]) * 4 + kind
        names = TRACK_NAMES
        lo, hi = int(kk.min()), int(kk.max())
        if hi - lo < 4 * n + 4096:  # few groups: a table over the key's range
            uk = np.flatnonzero(np.bincount(kk - lo)) + lo
            lut = np.zeros(hi - lo + 1, dtype=np.int64)
            lut[uk - lo] = [st.group(k, names[k & 3].format(k >> 2)) for k in uk.tolist()]
            gid = lut[kk - lo]
        else:
            uk, inv = np.unique(kk, return_inverse=True)
            gid = np.array([st.group(k, names[k & 3].format(k >> 2)) for k in uk.tolist()], dtype=np.int64)[inv]
        mid = c["model_id"]
        if int(mid.max()) >= 0:
            ids = _distinct(mid[mid >= 0])
            if int(ids[-1]) >= len(st.model_iid):
                st.model_iid = np.r_[st.model_iid, np.zeros(int(ids[-1]) + 1 - len(st.model_iid), dtype=np.int64)]
            for u in ids[st.model_iid[ids] == 0].tolist():
                st.model_iid[u] = st.sval(pe.model_names.get(u, f"model_{u}"))
        for col in ("op", "group", "dtype"):
            ids = c[col]
            if int(ids.max()) > 0:
                ids = _distinct(ids[ids > 0])
                for u in ids[st.str_iid[ids] == 0].tolist():
                    st.str_iid[u] = st.sval(pe.strings[u])
        cols = {k: c[k] for k in ("model_id", "exec_id", "op", "seq", "bytes", "group", "dtype", "ret")}
        cols.update(start=c["start_ts"] - self.origin_ns, end=c["end_ts"] - self.origin_ns, gid=gid, typ=typ,
                    flow=c["flow_id"])
        st.push(cols)

    def _close_stream(self, st: "_Stream", pe: ProcessEvents) -> None:
        st.release(None)
        self._counters(pe, sequence_id(pe.index, 0), st.pid_uuid)

    def add(self, pe: ProcessEvents) -> None:
        """A whole process's events."""
        st = self._open(pe)
        self._push(st, pe)
        self._close_stream(st, pe)

    def add_session(self, s, build, chunk: int = READ_EVENTS) -> int:
        """A process read ``chunk`` events at a time: ``build(session restricted to [lo, hi), lo)``
        gives each piece's ProcessEvents.  A capture holds each core's ring after the other's, each
        nearly in time order, so the cores' runs are read side by side, the next piece from the run
        that is furthest behind, and events are released once every run has read past them.
        Returns the number of events written."""
        from dataclasses import replace

        keep_freed_memory()  # also set at the worker's start (pipeline.convert_process)
        runs = _core_runs(s, chunk)
        if not runs:  # no events: the process and its counters still appear
            pe = build(s, 0)
            self._close_stream(self._open(pe), pe)
            return 0
        piece = max(chunk // len(runs), 1)
        pos = [a for a, _ in runs]
        frontier = [-(1 << 62)] * len(runs)  # a run's next events start after this (as far as we know)
        st = first = None
        done = 0
        while live := [i for i, (_, b) in enumerate(runs) if pos[i] < b]:
            i = min(live, key=frontier.__getitem__)
            a = pos[i]
            b = pos[i] = min(a + piece, runs[i][1])
            pe = build(s if (a, b) == (0, s.num_events) else
                       replace(s, events={k: v[a:b] for k, v in s.events.items()}), a)
            if st is None:
                st, first = self._open(pe), pe
            self._push(st, pe)
            done += pe.n
            if b < runs[i][1]:
                tail = pe.cols["start_ts"][-max(1, pe.n // 64):]  # (a ring drains by end time)
                frontier[i] = int(tail.min()) - self.origin_ns
            else:
                frontier[i] = 1 << 62
            st.release(min(frontier))
            _drop_pages(s, a, b)
        self._close_stream(st, first)
        return done

    # ---- device profiles
    def add_device(self, v) -> None:
        """One device profile: a process whose tracks are the engines/streams of its ops."""
        t = v.dp.trace
        ops = v.dp.ops
        strings = list(t.strings)
        pid_uuid = self._uuid()
        pname = f"device profile {v.profile_id} ({t.device_kind})"
        self._track(pid_uuid, pname, pid=1, pname=pname)
        n = v.n
        st = _Stream(self, 0, pid_uuid, strings)
        st.annotate = lambda ev, e: ((_DBG_IID["exec_id"], DA_INT, True, ev["exec_id"][e]),
                                     (_DBG_IID["bytes"], DA_INT, ev["bytes"][e] >= 0, ev["bytes"][e]))
        if n:
            uk, inv = np.unique(np.asarray(ops["track"], dtype=np.int64), return_inverse=True)
            gid = np.array([st.group(k, strings[k]) for k in uk.tolist()], dtype=np.int64)[inv]
            st.push({"start": v.start_ts - self.origin_ns, "end": v.end_ts - self.origin_ns, "gid": gid,
                     "typ": np.asarray(ops["name"], dtype=np.int64), "flow": np.zeros(n, dtype=np.int64),
                     "exec_id": np.asarray(v.exec_ids, dtype=np.int64),
                     "bytes": np.asarray(ops["nbytes"], dtype=np.int64)})
        st.release(None)

    def _counters(self, pe: ProcessEvents, seq: int, parent: int) -> None:
        """Counter samples on the process's slot-0 sequence, with absolute trace-clock timestamps."""
        for name, (ts, vals, unit) in process_counters(pe).items():
            if not len(ts):
                continue
            u = self._uuid()
            self._track(u, name, parent=parent, counter_unit=2 if unit == "bytes" else 0,
                        unit_name="%" if unit == "percent" else None)
            m = len(ts)
            te = Rows(m).field_varint(TE_TYPE, COUNTER).field_varint(TE_TRACK_UUID, u)
            te.field_fixed64(TE_DOUBLE_COUNTER, np.asarray(vals, dtype=np.float64).view(np.uint64))
            pk = Rows(m).field_varint(P_TIMESTAMP, ts - self.origin_ns).field_varint(P_SEQ_ID, seq).message(P_TRACK_EVENT, te)
            self.f.write(memoryview(Rows(m).message(TRACE_PACKET, pk).encode()))

    def close(self) -> None:
        self.f.close()
        self.file.commit()

    def abort(self) -> None:
        self.f.discard()
        self.file.abort()


def _core_runs(s, chunk: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of events recorded on one core (a capture writes the cores' rings one after
    the other); one range when there are more than MAX_RUNS."""
    n = s.num_events
    if not n:
        return []
    nc = s.events["nc_idx"]
    cuts: list[int] = []
    for lo in range(0, n, chunk):
        c = nc[lo:lo + chunk + 1]
        cuts.extend((np.flatnonzero(c[1:] != c[:-1]) + lo + 1).tolist())
        if len(cuts) >= MAX_RUNS:
            cuts = []
            break
    _drop_pages(s, 0, n)
    b = [0] + cuts + [n]
    return list(zip(b[:-1], b[1:]))


def _drop_pages(s, lo: int, hi: int) -> None:
    """Drop the pages of events [lo, hi) of a memory-mapped process from resident memory (they stay
    in the page cache), as Session.release does for a prefix."""
    import mmap

    if getattr(s, "mapped", None) is None or hi <= lo:
        return
    mm, layout = s.mapped
    page = mmap.PAGESIZE
    for off, size in layout.values():
        a = -(-(off + lo * size) // page) * page
        b = (off + hi * size) // page * page
        if b > a:
            try:
                mm.madvise(mmap.MADV_DONTNEED, a, b - a)
            except (OSError, ValueError, AttributeError):
                return


def assemble(path: str, pieces: list[str]) -> None:
    """Concatenate per-process pieces into one trace (a Perfetto trace is a sequence of packets);
    ``path`` is the user's output (see ``AtomicFile(output=True)``)."""
    import shutil

    f = AtomicFile(path, output=True)
    try:
        for p in pieces:
            with open(p, "rb") as src:
                shutil.copyfileobj(src, f.f, 1 << 20)
        f.commit()
    except BaseException:
        f.abort()
        raise
