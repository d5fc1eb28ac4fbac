"""Lanes and clocks: one process's events placed on tracks and written a window at a time.

Every track's events are written on their own packet sequence, whose defaults name the track and a
sequence-scoped incremental clock (docs/decisions/0017-perfetto-incremental-timestamps.md): a packet
carries the nanoseconds since the previous packet of its sequence, not the absolute time, and no
track id.  A clock snapshot ties each sequence's clock to the trace clock at its first event.
Overlapping slices of one track go to extra lanes (``name #2``...), each a track of its own.

A process is pushed a piece at a time and written a window at a time (``Stream.release``): lanes,
clocks and interned state carry over, and an event that arrives after its sequence's clock has
passed it is written with an absolute time (docs/decisions/0019-perfetto-chunked-writer.md), so memory
does not grow with the events of a process.
"""

from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from neuron_explorer.exporters.perfetto.wire import (
    ANNOTATION_IID,
    CLK_ID,
    CLK_INCREMENTAL,
    CLK_TS,
    CLOCK_BOOTTIME,
    CLOCK_EVENTS,
    CS_CLOCKS,
    DA_NAME_IID,
    DEF_CLOCK_ID,
    DEF_TRACK_EVENT,
    ID_DEBUG_NAMES,
    ID_DEBUG_STRINGS,
    ID_EVENT_NAMES,
    INSTANT,
    P_CLOCK_ID,
    P_CLOCK_SNAPSHOT,
    P_DEFAULTS,
    P_INTERNED,
    P_SEQ_FLAGS,
    P_SEQ_ID,
    P_TIMESTAMP,
    P_TRACK_EVENT,
    SEQ_BITS,
    SEQ_CLEARED,
    SEQ_NEEDS_STATE,
    SHARED_SLOT,
    SLICE_BEGIN,
    SLICE_END,
    TE_DEBUG,
    TE_FLOW_IDS,
    TE_NAME_IID,
    TE_TRACK_UUID,
    TE_TYPE,
    TED_TRACK_UUID,
    TRACE_PACKET,
    interned,
    packet,
    sequence_ids,
)
from neuron_explorer.util import pbwire
from neuron_explorer.util.pbwire import Rows

CHUNK_ROWS = 32_768  # rows encoded at a time (a byte matrix of a few MB)
MIN_CHUNK_ROWS = 1_024
_TIME_BITS = 63 - SEQ_BITS - 2  # (slot, time, end/begin) sort keys in an int64
_EMPTY = np.zeros(0, dtype=np.int64)

# (event columns, rows) -> [(annotation name iid, value field, present, values)]
Annotate = Callable[[dict, np.ndarray], list]


class PacketSink(Protocol):
    """Where encoded packets go (``compress.CompressedSink`` is one)."""

    def write(self, data: bytes | memoryview | np.ndarray) -> None: ...


class TraceOut(Protocol):
    """What a stream writes through: the trace's packet sink, its track declarations and its event
    count (``writer.PerfettoWriter`` is one).  Named here, below the writer, so that lanes never
    import the writer that imports them."""

    events_written: int

    @property
    def sink(self) -> PacketSink: ...

    def new_track(self, name: str, parent: int | None = None) -> int: ...


def distinct(v: np.ndarray) -> np.ndarray:
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


class TrackGroup:
    """A track and its lanes: ``busy`` holds the end of the last slice of each lane."""

    __slots__ = ("name", "busy", "tracks")

    def __init__(self, name: str) -> None:
        self.name = name
        self.busy: list[int] = []
        self.tracks: list[int] = []  # track index of each lane


class _Batch:
    """The events of one window with their tracks and sequence slots."""

    __slots__ = ("ev", "sel", "start", "end", "typ", "slice_", "trk", "slot")
    ev: dict  # the window's event columns ({}: none)
    sel: np.ndarray | None  # the window's rows of them (None: all)
    start: np.ndarray
    end: np.ndarray
    typ: np.ndarray
    slice_: np.ndarray  # (end > start: a slice, else an instant)
    trk: np.ndarray  # track of each event (Stream._assign_lanes)
    slot: np.ndarray  # its sequence slot

    def __init__(self, ev: dict | None, sel: np.ndarray | None) -> None:
        self.ev, self.sel = ({} if ev is None else ev), sel
        if ev is None:
            self.start = self.end = self.typ = _EMPTY
        elif sel is None:
            self.start, self.end, self.typ = ev["start"], ev["end"], ev["typ"]
        else:
            self.start, self.end, self.typ = ev["start"][sel], ev["end"][sel], ev["typ"][sel]
        self.slice_ = self.end > self.start

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """Rows of ``ev`` of the window's events ``idx``."""
        return idx if self.sel is None else self.sel[idx]


class Stream:
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

    def __init__(self, w: TraceOut, seq_index: int, pid_uuid: int, type_names: list[str],
                 annotate: Annotate) -> None:
        self.w = w
        self.seq_ids = sequence_ids(seq_index)
        self.pid_uuid = pid_uuid
        self.type_names = type_names
        self.annotate = annotate
        self.groups: list[TrackGroup] = []
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
        """Index of the track group ``key`` (a new one named ``name`` when first seen)."""
        g = self.group_of.get(key)
        if g is None:
            g = self.group_of[key] = len(self.groups)
            self.groups.append(TrackGroup(name))
        return g

    def sval(self, text: str) -> int:
        """Intern a debug string value; returns its iid."""
        self.strings.append((text, len(self.strings) + 1))
        return len(self.strings)

    def push(self, cols: dict[str, np.ndarray]) -> None:
        """Events to hold until released: "start", "end" (relative to the origin), "gid" (group),
        "typ", "flow" (optionally "flow2", a second flow id) and the columns ``annotate`` reads."""
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
    def _new_lane(self, grp: TrackGroup) -> None:
        lane = len(grp.tracks)
        u = self.w.new_track(grp.name if lane == 0 else f"{grp.name} #{lane + 1}", parent=self.pid_uuid)
        grp.tracks.append(len(self.uuids))
        self.uuids.append(u)

    def _lanes(self, grp: TrackGroup, s: np.ndarray, e: np.ndarray) -> np.ndarray:
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
                    k = next((j for j, t in enumerate(busy) if t <= a), len(busy))
                    if k == len(busy):
                        busy.append(0)
                    busy[k] = b
                    ls[i] = k
                lane[sl] = ls
        while len(grp.tracks) < int(lane.max()) + 1:
            self._new_lane(grp)
        return np.asarray(grp.tracks, dtype=np.int64)[lane]

    def _assign_lanes(self, b: _Batch, gid: np.ndarray) -> np.ndarray:
        """Each event's track, a group at a time in start order; returns the events in (group,
        start, instants before slices) order, in which each track's slices rarely need a second
        look and the usual window's rows are nearly in sequence order already."""
        start, end = b.start, b.end
        n = len(start)
        b.trk = np.empty(n, dtype=np.int64)
        if not n:
            return _EMPTY
        og = np.argsort(gid.astype(np.uint16) if len(self.groups) <= 1 << 16 else gid, kind="stable")
        lo, hi = int(start.min()), int(start.max())
        sk = ((start - lo) << 1) | b.slice_ if hi - lo < 1 << 61 else start
        k_g, g_g = sk[og], gid[og]
        if n > 1 and bool(np.any((k_g[1:] < k_g[:-1]) & (g_g[1:] == g_g[:-1]))):
            if len(self.groups) <= 1 << 10 and hi - lo < 1 << 51:  # nearly sorted: one merge sort
                og = og[np.argsort((g_g << 52) | k_g, kind="stable")]
            else:
                og = np.lexsort((sk, gid))
            g_g = gid[og]
        s_g = start[og]
        bounds = np.flatnonzero(np.r_[True, g_g[1:] != g_g[:-1], True]).tolist()
        for a, c in zip(bounds[:-1], bounds[1:]):
            idx = og[a:c]
            b.trk[idx] = self._lanes(self.groups[int(g_g[a])], s_g[a:c], end[idx])
        return og

    # ---- clocks
    def _advance(self, slots: np.ndarray, times: np.ndarray, ends: np.ndarray | None = None):
        """Deltas of packets sorted by (slot, time), each from the previous packet of its sequence
        (the sequence's clock for its first), and the clocks moved to each sequence's last packet.
        ``ends``: where each row's last packet is when a row is a begin followed by its own end.
        A sequence met for the first time starts its clock at its first packet; returns (deltas,
        {slot: clock start} of those)."""
        after = times if ends is None else ends
        first = np.r_[True, slots[1:] != slots[:-1]]
        fs = slots[first]
        new: dict[int, int] = {}
        undecl = ~self.declared[fs]
        if undecl.any():
            base = np.maximum(times[first][undecl], 0)
            self.clock[fs[undecl]] = base
            new = dict(zip(fs[undecl].tolist(), base.tolist()))
        prev = np.empty_like(times)
        prev[1:] = after[:-1]
        prev[first] = self.clock[fs]
        last = np.r_[slots[1:] != slots[:-1], True]
        self.clock[slots[last]] = after[last]
        return times - prev, new

    # ---- one window
    def _window(self, ev: dict | None, sel: np.ndarray | None, before: int | None) -> None:
        """Write the events ``sel`` of ``ev`` (all: None) and the slice ends due before ``before``.

        One engine with a fast branch: in the usual window no event is late and each slice ends
        before the next event of its sequence begins, so a slice's end directly follows its begin
        and the packets are written without merging begins and ends (``_in_order``, a third less
        CPU for the whole conversion); otherwise begins and ends are merged per sequence."""
        b = _Batch(ev, sel)
        og = self._assign_lanes(b, _EMPTY if ev is None else ev["gid"] if sel is None else ev["gid"][sel])
        b.slot = np.minimum(b.trk + 1, SHARED_SLOT)
        clk = self.clock[b.slot]
        late = self.declared[b.slot] & (b.start < clk)
        n = len(b.start)
        plan = self._in_order(b, og, before) if n and not late.any() else None
        if plan is not None:
            self._write_in_order(b, *plan)
        else:
            self._write_merged(b, og, late, clk, before)
        self.w.events_written += n

    def _in_order(self, b: _Batch, ob: np.ndarray, before: int | None):
        """(rows in sequence order, their slices whose end is not due, the held ends due now) when
        on every sequence each slice ends by the time the next event begins (or is the last and
        ends after the window), the ends still due from earlier windows come before the
        sequence's first event here, and no row is on the shared sequence; else None."""
        nb = len(ob)
        sb = b.slot[ob]
        if nb > 1 and bool(np.any(sb[1:] < sb[:-1])):
            ob = ob[np.argsort(sb.astype(np.uint16), kind="stable")]
            sb = b.slot[ob]
        if sb[-1] == SHARED_SLOT:
            return None
        tb, eb = b.start[ob], b.end[ob]
        held = (b.slice_[ob] & (eb >= before)) if before is not None else np.zeros(nb, dtype=bool)
        same = sb[1:] == sb[:-1]
        if bool(np.any(same & ((tb[1:] < np.maximum(eb, tb)[:-1]) | held[:-1]))):
            return None
        due = None
        if len(self.end_t):
            due = self.end_t < before if before is not None else np.ones(len(self.end_t), dtype=bool)
            if due.any():
                first = np.r_[True, ~same]
                fst = np.full(SHARED_SLOT + 1, np.iinfo(np.int64).max, dtype=np.int64)
                fst[sb[first]] = tb[first]
                if bool(np.any(self.end_t[due] > fst[self.end_s[due]])):
                    return None
            else:
                due = None
        return ob, held, due

    def _write_in_order(self, b: _Batch, ob: np.ndarray, held: np.ndarray, due: np.ndarray | None) -> None:
        """The fast branch: held ends due now first (they come before their sequence's events
        here), then each row's begin followed by its own end unless that is held."""
        sb, tb, eb, tk = b.slot[ob], b.start[ob], b.end[ob], b.trk[ob]
        lt = ls = lk = ld = _EMPTY
        if due is not None:  # ends due from earlier windows, in (slot, time) order
            lt, ls, lk = self.end_t[due], self.end_s[due], self.end_k[due]
            o = np.lexsort((lt, ls))
            lt, ls, lk = lt[o], ls[o], lk[o]
            ld, _ = self._advance(ls, lt)
            self.end_t, self.end_s, self.end_k = self.end_t[~due], self.end_s[~due], self.end_k[~due]
        own = b.slice_[ob] & ~held
        d_b, new = self._advance(sb, tb, np.where(own, eb, tb))
        if held.any():
            self.end_t = np.r_[self.end_t, eb[held]]
            self.end_s = np.r_[self.end_s, sb[held]]
            self.end_k = np.r_[self.end_k, tk[held]]
        typ_o = b.typ[ob]
        self._declare(new, sb, typ_o)
        uu = np.asarray(self.uuids, dtype=np.int64)
        if len(lt):
            self._ends(ls, lk, ld, uu)
        self._rows(b.ev, b.rows(ob), sb, tk, ~b.slice_[ob], typ_o, d_b, False, own.astype(np.int64),
                   np.arange(len(ob)), tk, eb - tb, uu)

    def _due_ends(self, b: _Batch, ob: np.ndarray, late: np.ndarray, clk: np.ndarray, before: int | None):
        """The slice ends to write in this window on their sequence's clock: those of this window's
        slices, of late slices that end after their clock, and the held ones; those not due
        before ``before`` are held again.  Returns (time, slot, track) of the due ones."""
        to_pool = b.slice_[ob]
        et, es, ek = b.end[ob][to_pool], b.slot[ob][to_pool], b.trk[ob][to_pool]
        if late.any():
            lp = np.flatnonzero(late & b.slice_ & (b.end >= clk))
            et, es, ek = np.r_[et, b.end[lp]], np.r_[es, b.slot[lp]], np.r_[ek, b.trk[lp]]
        if len(self.end_t):
            et, es, ek = np.r_[self.end_t, et], np.r_[self.end_s, es], np.r_[self.end_k, ek]
        self.end_t = self.end_s = self.end_k = _EMPTY
        if before is not None:
            due = et < before
            if not due.all():
                self.end_t, self.end_s, self.end_k = et[~due], es[~due], ek[~due]
                et, es, ek = et[due], es[due], ek[due]
        return et, es, ek

    def _write_merged(self, b: _Batch, og: np.ndarray, late: np.ndarray, clk: np.ndarray,
                      before: int | None) -> None:
        """The general branch: each sequence's begins and due ends merged in time order (an end at
        t before a begin at t), then the late events with absolute times."""
        ob = og[~late[og]] if late.any() else og
        et, es, ek = self._due_ends(b, ob, late, clk, before)
        sb = b.slot[ob]
        nb, ne = len(ob), len(et)
        new: dict[int, int] = {}
        if nb + ne:
            # one int64 key per (slot, time, end before begin), merged with one stable sort (times
            # become dense ranks when their span is too wide)
            t_all = np.concatenate([b.start[ob], et])
            s_all = np.concatenate([sb, es])
            lo, hi = int(t_all.min()), int(t_all.max())
            rk = t_all - lo if hi - lo < (1 << _TIME_BITS) else np.unique(t_all, return_inverse=True)[1]
            key = (s_all << (_TIME_BITS + 2)) | (rk << 1)
            key[:nb] |= 1
            perm = np.argsort(key, kind="stable")
            isb = perm < nb
            s_m = s_all[perm]
            delta, new = self._advance(s_m, t_all[perm])
            ob = ob[perm[isb]]  # begins in (slot, time) order
            sb = s_m[isb]
            d_b = delta[isb]
            ie = perm[~isb] - nb  # ends in (slot, time) order
            es, ek, d_e = es[ie], ek[ie], delta[~isb]
            row = np.cumsum(isb)[~isb] - 1  # the begin each end follows in the merged order
            att = (row >= 0) & (sb[np.maximum(row, 0)] == es) if nb else np.zeros(ne, dtype=bool)
        ol = np.flatnonzero(late)
        if len(ol) > 1:
            ol = ol[np.lexsort((b.start[ol], b.slot[ol]))]
        self._declare(new, np.concatenate([sb, b.slot[ol]]), np.concatenate([b.typ[ob], b.typ[ol]]))
        uu = np.asarray(self.uuids, dtype=np.int64)
        # ends that come first on their sequence in this window, then the begins (each with the
        # ends that follow it), then the late events
        if ne and (~att).any():
            self._ends(es[~att], ek[~att], d_e[~att], uu)
        if nb:
            na = np.bincount(row[att], minlength=nb)
            self._rows(b.ev, b.rows(ob), sb, b.trk[ob], ~b.slice_[ob], b.typ[ob], d_b, False, na,
                       np.cumsum(na) - na, ek[att], d_e[att], uu)
        if len(ol):
            ab = (b.slice_ & (b.end < clk))[ol]
            self._rows(b.ev, b.rows(ol), b.slot[ol], b.trk[ol], ~b.slice_[ol], b.typ[ol], b.start[ol], True,
                       ab.astype(np.int64), np.arange(len(ol)), b.trk[ol], b.end[ol], uu)

    # ---- packets
    def _declare(self, new: dict[int, int], b_slot: np.ndarray, b_typ: np.ndarray) -> None:
        """Incremental state of the sequences written in this window: new ones get their defaults,
        clock snapshot and interned names; others get the names and strings they lack."""
        need: dict[int, list[int]] = {}
        used: set[int] = set()
        if len(b_typ):
            nt = len(self.type_names) + 1
            for t in distinct(b_typ).tolist():
                if not self.name_iid[t]:
                    self.name_iid[t] = int(self.name_iid.max()) + 1
            for p in distinct(b_slot * nt + b_typ).tolist():
                s, t = divmod(p, nt)
                used.add(s)
                have = self.names_in.setdefault(s, set())
                if t not in have:
                    have.add(t)
                    need.setdefault(s, []).append(t)
        ns = len(self.strings)
        dbg = interned(ID_DEBUG_NAMES, ANNOTATION_IID.items())
        write = self.w.sink.write
        for s in sorted(used | set(new)):
            names = interned(ID_EVENT_NAMES, ((self.type_names[t], int(self.name_iid[t])) for t in need.get(s, ())))
            strs = interned(ID_DEBUG_STRINGS, self.strings[int(self.nstr[s]):]) if self.nstr[s] < ns else b""
            self.nstr[s] = ns
            seq = pbwire.varint_field(P_SEQ_ID, int(self.seq_ids[s]))
            if s in new:
                self.declared[s] = True
                defaults = pbwire.varint_field(DEF_CLOCK_ID, CLOCK_EVENTS)
                if s < SHARED_SLOT:
                    defaults += pbwire.length_delimited(
                        DEF_TRACK_EVENT, pbwire.varint_field(TED_TRACK_UUID, self.uuids[s - 1]))
                write(packet(seq + pbwire.varint_field(P_SEQ_FLAGS, SEQ_CLEARED)
                             + pbwire.length_delimited(P_DEFAULTS, defaults)
                             + pbwire.length_delimited(P_INTERNED, names + dbg + strs)))
                t0 = new[s]
                clocks = (pbwire.length_delimited(CS_CLOCKS, pbwire.varint_field(CLK_ID, CLOCK_EVENTS)
                                                  + pbwire.varint_field(CLK_TS, t0)
                                                  + pbwire.varint_field(CLK_INCREMENTAL, 1))
                          + pbwire.length_delimited(CS_CLOCKS, pbwire.varint_field(CLK_ID, CLOCK_BOOTTIME)
                                                    + pbwire.varint_field(CLK_TS, t0)))
                write(packet(seq + pbwire.length_delimited(P_CLOCK_SNAPSHOT, clocks)))
            elif names or strs:
                write(packet(seq + pbwire.varint_field(P_SEQ_FLAGS, SEQ_NEEDS_STATE)
                             + pbwire.length_delimited(P_INTERNED, names + strs)))

    def _ends(self, slot, track, ts, uu) -> None:
        """Slice ends on their sequence's clock, one packet a row."""
        m = len(slot)
        te = Rows(m).const(pbwire.varint_field(TE_TYPE, SLICE_END))
        sh = slot == SHARED_SLOT
        if sh.any():
            te.field_varint(TE_TRACK_UUID, uu[track], sh)
        pk = Rows(m).field_varint(P_SEQ_ID, self.seq_ids[slot]).const(pbwire.varint_field(P_SEQ_FLAGS, SEQ_NEEDS_STATE))
        pk.message(P_TRACK_EVENT, te).field_varint(P_TIMESTAMP, ts)
        self.w.sink.write(Rows(m).message(TRACE_PACKET, pk).encode())

    def _rows(self, ev: dict, order, slot_o, trk_o, inst_o, typ_o, ts_b, absolute: bool, n_after, first_after,
              e_track, ts_e, uu) -> None:
        """Begin (or instant) packets of the events ``order`` of ``ev`` (sorted by slot; ``trk_o``,
        ``inst_o``, ``typ_o``: their tracks, instant flags and types), each followed by its
        ``n_after`` ends (from ``first_after`` in the end arrays).  ``absolute``: times on the trace
        clock instead of the sequence's."""
        flags = pbwire.varint_field(P_SEQ_FLAGS, SEQ_NEEDS_STATE)
        if absolute:
            flags += pbwire.varint_field(P_CLOCK_ID, CLOCK_BOOTTIME)
        end_type = pbwire.varint_field(TE_TYPE, SLICE_END)
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
            if "flow2" in ev:  # a framework region's flow (analysis.framework): a second id
                fl = ev["flow2"][e]
                if fl.any():
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
            self.w.sink.write(out.encode())
