"""``system_profile.pftrace``: a Perfetto protobuf trace, streamed one process at a time.

Each instance/process becomes a Perfetto process; cores and threads become tracks under it
(hardware events on ``nc_<n>/neuron_hw``, runtime events on ``<tid>/neuron_rt``, collectives on
``nc_<n>/cc``); event and argument names are interned once per process sequence; flows link a host
call to its core execution and the ranks of one collective; CPU and memory samples are counter
tracks.  Events are encoded column-wise (``pbenc``), not one protobuf object per event.

Timestamps are nanoseconds since ``origin_ns`` (a wall-clock instant written in the trace's first
track name and in the view metadata), which keeps them short on the wire.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from . import pbenc
from ..capture.writer import AtomicFile
from .events import ProcessEvents
from .pbenc import Batch

# Field numbers (perfetto_trace.proto)
TRACE_PACKET = 1
P_TIMESTAMP, P_SEQ_ID, P_TRACK_EVENT, P_INTERNED, P_SEQ_FLAGS, P_TRACK_DESC = 8, 10, 11, 12, 13, 60
TE_TYPE, TE_NAME_IID, TE_TRACK_UUID, TE_DEBUG, TE_FLOW_IDS, TE_DOUBLE_COUNTER = 9, 10, 11, 4, 47, 44
DA_NAME_IID, DA_INT, DA_STRING_IID = 1, 4, 17
ID_EVENT_NAMES, ID_DEBUG_NAMES, ID_DEBUG_STRINGS = 2, 3, 29
TD_UUID, TD_NAME, TD_PROCESS, TD_PARENT, TD_COUNTER = 1, 2, 3, 5, 8
PD_PID, PD_NAME = 1, 6
CD_UNIT, CD_UNIT_NAME = 3, 6
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
SEQ_CLEARED, SEQ_NEEDS_STATE = 1, 2

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


class PerfettoWriter:
    def __init__(self, path: str, origin_ns: int, uuid_base: int = 0, first: bool = True) -> None:
        """``uuid_base`` keeps track ids unique when pieces written separately are concatenated
        (Perfetto traces concatenate); ``first`` marks the piece that names the time origin."""
        self.path = path
        self.origin_ns = origin_ns
        self.f = AtomicFile(path)
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

    def add(self, pe: ProcessEvents) -> None:
        seq = pe.index + 1
        pid_uuid = self._uuid()
        rank = f" rank {pe.rank}" if pe.rank >= 0 else ""
        pname = f"{pe.instance_id} pid {pe.pid}{rank}"
        if self._first:
            pname += f" [t0 {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(self.origin_ns / 1e9))}Z]"
            self._first = False
        self._track(pid_uuid, pname, pid=pe.index + 1, pname=pname)
        c = pe.cols
        n = pe.n
        # ---- interned names for this sequence
        names = sorted(set(pe.type_names[t] for t in np.unique(c["type"]).tolist())) if n else []
        name_iid = {nm: i + 1 for i, nm in enumerate(names)}
        dbg_iid = {nm: i + 1 for i, nm in enumerate(ANNOTATIONS)}
        str_values: dict[str, int] = {}

        def sval(text: str) -> int:
            i = str_values.get(text)
            if i is None:
                i = str_values[text] = len(str_values) + 1
            return i

        # ---- tracks: one per (kind, key, lane)
        hw = np.array([g == "hardware" for g in pe.type_groups], dtype=bool)
        tname = np.array(pe.type_names, dtype=object)
        is_cc = np.isin(tname, ["cc_running", "cc_exec_barrier"])
        typ = c["type"]
        track_of = np.zeros(n, dtype=np.int64)
        track_names: dict[int, str] = {}
        if n:
            kind = np.where(is_cc[typ], 2, np.where(hw[typ], 1, 0))
            key = np.where(kind == 0, c["thread_id"], c["nc_idx"])
            order = np.lexsort((c["start_ts"], key, kind))
            k_s, key_s = kind[order], key[order]
            bounds = np.flatnonzero(np.r_[True, (k_s[1:] != k_s[:-1]) | (key_s[1:] != key_s[:-1]), True])
            for a, b in zip(bounds[:-1], bounds[1:]):
                idx = order[a:b]
                kd, ky = int(k_s[a]), int(key_s[a])
                base = {0: f"{ky}/neuron_rt", 1: f"nc_{ky}/neuron_hw", 2: f"nc_{ky}/cc"}[kd]
                st_, en_ = c["start_ts"][idx], c["end_ts"][idx]
                inst = en_ <= st_  # instants never nest: they stay on the first lane
                lanes = np.zeros(len(idx), dtype=np.int64)
                lanes[~inst] = _lanes(st_[~inst], en_[~inst])
                for lane in range(int(lanes.max()) + 1):
                    u = self._uuid()
                    track_names[u] = base if lane == 0 else f"{base} #{lane + 1}"
                    track_of[idx[lanes == lane]] = u
        for u, nm in track_names.items():
            self._track(u, nm, parent=pid_uuid)

        # ---- annotations (only where meaningful)
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
                present = c[col] > 0
                vals = np.zeros(n, dtype=np.int64)
                if present.any():
                    uniq = np.unique(c[col][present])
                    lut = {int(u): sval(strs[int(u)]) for u in uniq}
                    vals[present] = [lut[int(v)] for v in c[col][present]]
                ann_rows.append((col, present, vals, True))
            ann_rows.append(("seq", cc & (c["seq"] >= 0), c["seq"], False))
            ann_rows.append(("bytes", c["bytes"] >= 0, c["bytes"], False))
            ann_rows.append(("ret", c["ret"] > 0, c["ret"], False))

        # ---- interned data packet (clears incremental state for this sequence)
        idata = b"".join(pbenc.length_delimited(ID_EVENT_NAMES, pbenc.varint_field(1, i) +
                                                pbenc.length_delimited(2, nm.encode())) for nm, i in name_iid.items())
        idata += b"".join(pbenc.length_delimited(ID_DEBUG_NAMES, pbenc.varint_field(1, i) +
                                                 pbenc.length_delimited(2, nm.encode())) for nm, i in dbg_iid.items())
        idata += b"".join(pbenc.length_delimited(ID_DEBUG_STRINGS, pbenc.varint_field(1, i) +
                                                 pbenc.length_delimited(2, t.encode())) for t, i in str_values.items())
        self._packet(pbenc.varint_field(P_SEQ_ID, seq) + pbenc.length_delimited(P_INTERNED, idata) +
                     pbenc.varint_field(P_SEQ_FLAGS, SEQ_CLEARED))

        if n:
            self._events(pe, seq, track_of, name_iid, dbg_iid, ann_rows)
        self._counters(pe, seq, pid_uuid)

    def _events(self, pe, seq, track_of, name_iid, dbg_iid, ann_rows, chunk: int = 262_144) -> None:
        """Encode the process's events in chunks so the encoder's arrays stay small."""
        for lo in range(0, pe.n, chunk):
            hi = min(lo + chunk, pe.n)
            c = {k: v[lo:hi] for k, v in pe.cols.items()}
            rows = [(nm, pr[lo:hi], vals[lo:hi], is_s) for nm, pr, vals, is_s in ann_rows]
            self._encode_events(pe, c, hi - lo, seq, track_of[lo:hi], name_iid, dbg_iid, rows)
        self.events_written += pe.n

    def _encode_events(self, pe, c, n, seq, track_of, name_iid, dbg_iid, ann_rows) -> None:
        type_iid = np.array([name_iid.get(nm, 0) for nm in pe.type_names], dtype=np.int64)
        start = c["start_ts"] - self.origin_ns
        end = c["end_ts"] - self.origin_ns
        instant = end <= start
        # begin (or instant) packets
        te = Batch(n).varint(TE_TYPE, np.where(instant, INSTANT, SLICE_BEGIN)).varint(TE_TRACK_UUID, track_of)
        te.varint(TE_NAME_IID, type_iid[c["type"]])
        for name, present, vals, is_string in ann_rows:
            k = int(present.sum())
            if not k:
                continue
            da = Batch(k).varint(DA_NAME_IID, dbg_iid[name])
            da.varint(DA_STRING_IID if is_string else DA_INT, vals[present])
            te.message(TE_DEBUG, da, present=present)
        flows = c["flow_id"] != 0
        te.fixed64(TE_FLOW_IDS, c["flow_id"], present=flows)
        begins = Batch(n).varint(P_TIMESTAMP, start).varint(P_SEQ_ID, seq).message(P_TRACK_EVENT, te)
        begins.varint(P_SEQ_FLAGS, SEQ_NEEDS_STATE)
        enc_b = Batch(n).message(TRACE_PACKET, begins).encode()
        # end packets for slices
        sl = ~instant
        k = int(sl.sum())
        te_e = Batch(k).varint(TE_TYPE, SLICE_END).varint(TE_TRACK_UUID, track_of[sl])
        # end packets reference no interned data, so they need no sequence flags
        ends = Batch(k).varint(P_TIMESTAMP, end[sl]).varint(P_SEQ_ID, seq).message(P_TRACK_EVENT, te_e)
        enc_e = Batch(k).message(TRACE_PACKET, ends).encode()
        self.f.write(memoryview(enc_b.data))
        self.f.write(memoryview(enc_e.data))

    def add_device(self, v) -> None:
        """One device profile: a process whose tracks are the engines/streams of its ops."""
        t = v.dp.trace
        ops = v.dp.ops
        strings = list(t.strings)
        seq = 1
        pid_uuid = self._uuid()
        pname = f"device profile {v.profile_id} ({t.device_kind})"
        self._track(pid_uuid, pname, pid=1, pname=pname)
        n = v.n
        order = np.lexsort((v.start_ts, ops["track"]))
        track_of = np.zeros(n, dtype=np.int64)
        for tid in np.unique(ops["track"]).tolist():
            idx = order[ops["track"][order] == tid]
            lanes = _lanes(v.start_ts[idx], v.end_ts[idx])
            for lane in range(int(lanes.max()) + 1 if len(lanes) else 0):
                u = self._uuid()
                self._track(u, strings[tid] if lane == 0 else f"{strings[tid]} #{lane + 1}", parent=pid_uuid)
                track_of[idx[lanes == lane]] = u
        names = sorted({strings[i] for i in np.unique(ops["name"]).tolist()})
        name_iid = {nm: i + 1 for i, nm in enumerate(names)}
        dbg_iid = {nm: i + 1 for i, nm in enumerate(ANNOTATIONS)}
        idata = b"".join(pbenc.length_delimited(ID_EVENT_NAMES, pbenc.varint_field(1, i) +
                                                pbenc.length_delimited(2, nm.encode())) for nm, i in name_iid.items())
        idata += b"".join(pbenc.length_delimited(ID_DEBUG_NAMES, pbenc.varint_field(1, i) +
                                                 pbenc.length_delimited(2, nm.encode())) for nm, i in dbg_iid.items())
        self._packet(pbenc.varint_field(P_SEQ_ID, seq) + pbenc.length_delimited(P_INTERNED, idata) +
                     pbenc.varint_field(P_SEQ_FLAGS, SEQ_CLEARED))

        class _Ops:  # the shape _encode_events expects
            type_names = strings

        cols = {"type": ops["name"].astype(np.int64), "start_ts": v.start_ts, "end_ts": v.end_ts,
                "flow_id": np.zeros(n, dtype=np.int64)}
        type_iid_names = {s_: name_iid.get(s_, 0) for s_ in strings}
        rows = [("exec_id", np.ones(n, dtype=bool), v.exec_ids, False),
                ("bytes", ops["nbytes"] >= 0, ops["nbytes"], False)]
        _Ops.type_names = [s_ if type_iid_names.get(s_) else "" for s_ in strings]
        self._encode_events(_Ops, cols, n, seq, track_of, name_iid, dbg_iid, rows)
        self.events_written += n

    def _counters(self, pe: ProcessEvents, seq: int, parent: int) -> None:
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
            te = Batch(m).varint(TE_TYPE, COUNTER).varint(TE_TRACK_UUID, u)
            te.fixed64(TE_DOUBLE_COUNTER, np.asarray(vals, dtype=np.float64).view(np.uint64))
            pk = Batch(m).varint(P_TIMESTAMP, ts + off).varint(P_SEQ_ID, seq).message(P_TRACK_EVENT, te)
            self.f.write(memoryview(Batch(m).message(TRACE_PACKET, pk).encode().data))

    def close(self) -> None:
        self.f.commit()

    def abort(self) -> None:
        self.f.abort()


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
