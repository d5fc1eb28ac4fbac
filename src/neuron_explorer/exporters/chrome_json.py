"""``system_profile.json``: the system events as Chrome trace-event JSON (chrome://tracing, Perfetto UI).

Streamed one process at a time: each process writes a piece (its comma-separated events) that
``assemble`` joins into one trace.  Timestamps are microseconds since ``origin_ns`` (stored in the
file's ``metadata``) so that they keep sub-microsecond precision.  Device profiles become files of
their own (``device_profile_model_<id>.json``).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa

from neuron_explorer.analysis.counters import process_counters
from neuron_explorer.analysis.device import DeviceProfileView
from neuron_explorer.analysis.events import ProcessEvents
from neuron_explorer.contracts.tracks import (
    HOST,
    kinds_of_types,
    label_tid,
    process_label,
    secondary_labels,
    track_name,
)
from neuron_explorer.exporters.chrome_trace import ChromeTraceWriter, written_by
from neuron_explorer.exporters.interface import Piece, ProcessTarget, ProcessWriter, RunInfo
from neuron_explorer.util.atomic import AtomicFile
from neuron_explorer.util.jsonfast import BACKEND, dumps_bytes

try:
    from neuron_explorer.exporters import _pqenc
except ImportError:  # pragma: no cover - without the C extension every chunk takes the Python path
    _pqenc = None  # type: ignore[assignment]

# a core's tracks get tids above any OS thread id: 1_000_000 + nc (events), 2_000_000 + nc (cc)
CORE_TID = 1_000_000
_INT_ARGS = ("exec_id", "seq", "bytes", "ret")
_STRING_ARGS = ("op", "group", "dtype")
# flow ids with this bit link a collective's slices on every rank (analysis.events.collective_flow_ids);
# the others link a host call and its core execution inside one process
COLLECTIVE_FLOW = 1 << 62
_ROLES = ("", "flow_out", "flow_in")  # (0: neither)


def open_process(target: ProcessTarget) -> "JsonProcess":
    return JsonProcess(target)


TOOL = "neuron-explorer view"  # the first key of the trace's metadata: the file's mark (``ours``)


def ours(path: str) -> bool:
    """Whether ``path`` is a ``view`` JSON trace (``chrome_trace.written_by``; a trace written
    before the mark opened its metadata with ``clock_offsets``)."""
    return written_by(path, TOOL, legacy_key="clock_offsets")


def assemble(path: str, pieces: list[Piece], run: RunInfo) -> None:
    """Join the processes' pieces (in order) into one Chrome trace file (``path`` is the user's
    output: see ``AtomicFile(output=True)``); the metadata records the clock offsets and warnings."""
    metadata = {"tool": TOOL, "clock_offsets": {k: vars(v) for k, v in run.offsets.items()},
                "warnings": [m for m, _ in run.warnings], "origin_ns": run.origin_ns}
    f = AtomicFile(path, output=True)
    try:
        trace = ChromeTraceWriter(f.f)
        for p in pieces:
            if p.path is not None:
                with open(p.path, "rb") as src:
                    trace.copy(src, os.path.getsize(p.path))
        _collective_flows(trace, pieces, run.origin_ns)
        trace.close(metadata)
        f.commit()
    except BaseException:
        f.abort()
        raise


def _collective_flows(trace: ChromeTraceWriter, pieces: list[Piece], origin_ns: int) -> None:
    """Each collective's slices on every rank chained in time order by flow events v1: ``s`` on
    the first, ``t`` on the middle ones, ``f`` (``bp: e``) on the last, each placed just inside its
    slice (1 ns after its start) on the slice's thread, so it binds to that slice as its enclosing
    one.  Memory: 40 bytes per collective slice of the run."""
    parts = []
    for p in pieces:
        if p.flows is not None:
            a = np.load(p.flows)
            parts.append(np.concatenate([a, np.full((len(a), 1), p.flow_pid, dtype=np.int64)], axis=1))
    if not parts:
        return
    a = np.concatenate(parts)
    a = a[np.lexsort((a[:, 4], a[:, 1], a[:, 0]))]  # by flow, then start, then pid
    flow, start, end = a[:, 0], a[:, 1], a[:, 2]
    first = np.r_[True, flow[1:] != flow[:-1]]
    last = np.r_[flow[1:] != flow[:-1], True]
    keep = ~(first & last)  # a flow needs two slices
    if _pqenc is not None:  # (rendered in C: the Python path's bytes, ~30 ns a flow event)
        kind = np.where(first, 0, np.where(last, 2, 1))[keep]
        at = (start + np.minimum((end - start) // 2, 1) - origin_ns)[keep]
        trace.add_block([_pqenc.chrome_flows(_int64(kind), _int64(flow[keep]), _int64(a[keep, 4]),
                                             _int64(a[keep, 3]), _int64(at), trace.sep)])  # (none: nothing)
        return
    ph = np.where(first, '"s"', np.where(last, '"f","bp":"e"', '"t"'))[keep].tolist()
    ts = ((start + np.minimum((end - start) // 2, 1) - origin_ns) / 1000.0)[keep].tolist()
    ids, tids, pids = flow[keep].tolist(), a[keep, 3].tolist(), a[keep, 4].tolist()
    for lo in range(0, len(ph), 65_536):  # rendered from a template: ~40% of the events' encoding
        hi = min(lo + 65_536, len(ph))
        trace.add_encoded([f'{{"name":"collective","cat":"flow","ph":{ph[i]},"id":"0x{ids[i]:x}","pid":{pids[i]},'
                           f'"tid":{tids[i]},"ts":{ts[i]!r}}}'.encode() for i in range(lo, hi)])


class JsonProcess(ProcessWriter):
    """One process's events as a piece of the trace: its name, its tracks' names as they appear,
    its events (one Python object per event, so a chunk is a quarter of the Parquet writer's),
    then its counters."""

    chunk = 65_536  # the writer holds one Python object per event of a chunk (~1 KB each)

    def __init__(self, target: ProcessTarget) -> None:
        super().__init__(target)
        self.path = self.piece_path()
        self.file = AtomicFile(self.path)
        self.trace = ChromeTraceWriter(self.file.f, fragment=True)
        self.named: set[int] = set()  # tids whose name is written
        self.cc_flows: list[np.ndarray] = []  # (flow id, start, end, tid) of collective slices
        self.last: ProcessEvents | None = None

    def add_devices(self, views: list[DeviceProfileView]) -> None:
        for v in views:
            f = self.device_path(v, "json")
            write_device(f, v, self.target.origin_ns)
            self.device_files.append(f)

    def add(self, pe: ProcessEvents) -> None:
        """A chunk of the process's events (the first one names the process)."""
        pid = self.target.shown_pid
        items: list[dict] = []
        if self.last is None:
            label = self.target.group_label or process_label(pe.pid, pe.rank, pe.instance_id)
            items.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}})
        self.last = pe
        if pe.n:
            self._events(pe, pid, items)
        else:
            self.trace.add(items)

    def _tracks(self, pe: ProcessEvents, pid: int, items: list[dict]) -> np.ndarray:
        """The thread id of each event of the chunk; names the tracks not seen before (``items``).
        By default host events go on their OS thread, hardware events and collectives on their
        core's tracks; a custom secondary grouping puts each distinct combination of its fields on
        a track whose id follows from its label (``label_tid``)."""
        c = pe.cols
        sec = self.target.grouping.secondary
        if sec is not None:
            srcs = np.array(pe.type_sources, dtype=object)[c["type"]].tolist()
            idx, labels = secondary_labels(sec, pe.instance_id, pe.pid, c["thread_id"], c["nc_idx"], srcs)
            tids = [label_tid(lb) for lb in labels]
            for t, lb in zip(tids, labels):
                if t not in self.named:
                    self.named.add(t)
                    items.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": t, "args": {"name": lb}})
            return np.asarray(tids, dtype=np.int64)[idx]
        kind = kinds_of_types(pe.type_names, pe.type_groups)[c["type"]]
        key = np.where(kind == HOST, c["thread_id"], c["nc_idx"])
        tid = np.where(kind == HOST, key, kind * CORE_TID + key)
        # (a track is named from its first event's kind and key: a tid is ambiguous once a thread
        # id or core index reaches CORE_TID, and decoding it failed past 3 * CORE_TID)
        uniq, first = np.unique(tid, return_index=True)
        for t, i in zip(uniq.tolist(), first.tolist()):
            if t not in self.named:
                self.named.add(t)
                label = track_name(int(kind[i]), int(key[i]))
                items.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": t, "args": {"name": label}})
        return tid

    def _events(self, pe: ProcessEvents, pid: int, head: list[dict]) -> None:
        """Write the chunk: ``head`` and the names of tracks not seen before, the events (a
        ``sep``-joined block from ``_pqenc.chrome_events`` when it reproduces them, else one
        object each from ``_render``), then the framework flow arrows."""
        c = pe.cols
        items = head
        tid = self._tracks(pe, pid, items)
        code = self._flows(pe, tid)
        # in time order, and a host call before the core execution it starts when they start
        # together, so that a reader meets each flow's start first (docs/decisions/0034)
        order = np.lexsort((code != 1, c["start_ts"]))
        block = self._encode(pe, pid, tid, code, order) if _pqenc is not None else None
        if block is None:
            items += self._render(pe, pid, tid, code, order)
        flows = _framework_flows(pe, pid, tid, self.target.origin_ns, code)
        self.trace.add(items)
        if block is not None:
            self.trace.add_block(block)
        self.trace.add(flows)

    def _encode(self, pe: ProcessEvents, pid: int, tid: np.ndarray, code: np.ndarray,
                order: np.ndarray) -> list[bytes] | None:
        """The chunk's events rendered in C (docs/decisions/0112): every string encoded once
        (type names and categories, and the model names, string arguments and device profiles
        the chunk uses), the columns as int64 indices into those tables.  None when the columns
        are not what the C encoder reproduces exactly (``_render`` then renders the chunk)."""
        c = pe.cols
        origin = self.target.origin_ns
        if len(pe.type_names) != len(pe.type_sources) or not -(1 << 63) <= origin < (1 << 63):
            return None
        fsid = c.get("framework_stream_id")
        ints = [c[k] for k in ("start_ts", "end_ts", "type", "model_id") + _INT_ARGS + _STRING_ARGS
                + ("flow_id", "device_profile")] + [tid] + ([fsid] if fsid is not None else [])
        if not all(a.dtype.kind == "i" or (a.dtype.kind == "u" and a.dtype.itemsize < 8) for a in ints):
            return None  # (a float or uint64 column: printed as Python prints it)
        mid = c["model_id"]
        models = np.unique(mid[mid >= 0])
        model_idx = np.where(mid >= 0, np.searchsorted(models, mid), -1)
        sids = [c[k] for k in _STRING_ARGS]
        used = np.unique(np.concatenate([v[v > 0] for v in sids]))
        dp = c["device_profile"]
        if (len(used) and used[-1] >= len(pe.strings)) or (pe.n and dp.max() >= len(pe.device_profiles)):
            return None  # (an index out of range: the Python path raises its error)
        str_idx = [np.where(v > 0, np.searchsorted(used, v), -1) for v in sids]
        extra = pe.extra_json
        eoff = edata = evalid = None
        if len(extra) != pe.n:
            return None
        if extra.null_count < len(extra):
            if extra.type != pa.string():
                return None
            o = extra.offset
            eoff = np.frombuffer(extra.buffers()[1], dtype=np.int32, count=o + pe.n + 1)[o:]
            edata = extra.buffers()[2] or b""
            bits = extra.buffers()[0]  # (unpacked here: Arrow's to_numpy would import pandas)
            evalid = (np.ones(pe.n, dtype=np.uint8) if bits is None else
                      np.unpackbits(np.frombuffer(bits, dtype=np.uint8), count=o + pe.n, bitorder="little")[o:])
        i64 = _int64
        cols = (i64(order), i64(c["start_ts"]), i64(c["end_ts"]), i64(c["type"]), i64(tid), i64(model_idx),
                *(i64(c[k]) for k in _INT_ARGS), *(i64(v) for v in str_idx), i64(c["flow_id"]),
                None if fsid is None else i64(fsid), i64(dp), i64(code))
        tables = ([dumps_bytes(x) for x in pe.type_names], [dumps_bytes(x) for x in pe.type_sources],
                  [dumps_bytes(pe.model_names.get(m, f"model_{m}")) for m in models.tolist()],
                  [dumps_bytes(pe.strings[v]) for v in used.tolist()], [dumps_bytes(x) for x in pe.device_profiles])
        return _pqenc.chrome_events(pe.n, cols, tables, origin, dumps_bytes(pid), eoff, edata, evalid,
                                    BACKEND == "json", self.trace.sep)

    def _render(self, pe: ProcessEvents, pid: int, tid: np.ndarray, code: np.ndarray,
                order_a: np.ndarray) -> list[dict]:
        """The chunk's events as one object each (what ``_encode`` reproduces in C)."""
        c = pe.cols
        items: list[dict] = []
        origin = self.target.origin_ns
        ts = ((c["start_ts"] - origin) / 1000.0).tolist()
        dur = ((c["end_ts"] - c["start_ts"]) / 1000.0).tolist()
        names = np.array(pe.type_names, dtype=object)[c["type"]].tolist()
        cols = {k: c[k].tolist() for k in ("model_id", "flow_id", "device_profile") + _INT_ARGS + _STRING_ARGS}
        cols["framework_stream_id"] = (c["framework_stream_id"] if "framework_stream_id" in c
                                       else np.full(pe.n, -1, dtype=np.int64)).tolist()
        srcs, typ, tid_l = pe.type_sources, c["type"].tolist(), tid.tolist()
        extra = pe.extra_json.to_pylist()
        role = code.tolist()
        for i in order_a.tolist():
            ev = {"name": names[i], "cat": srcs[typ[i]], "ph": "X" if dur[i] > 0 else "i", "pid": pid,
                  "tid": tid_l[i], "ts": ts[i], "args": _args(pe, cols, extra, i)}
            if dur[i] > 0:
                ev["dur"] = dur[i]
                if role[i]:
                    ev["bind_id"] = f"0x{cols['flow_id'][i]:x}"
                    ev[_ROLES[role[i]]] = True
            else:
                ev["s"] = "t"
            items.append(ev)
        return items

    def _flows(self, pe: ProcessEvents, tid: np.ndarray) -> np.ndarray:
        """Flow arrows (docs/decisions/0034-json-flow-arrows.md).  A flow inside the process (a host
        call and its core execution) is bound to its slices directly, flow events v2: the host
        side's slice has ``flow_out``, the core side's ``flow_in``; returns that role per event
        (an index of ``_ROLES``).  A collective's flow spans processes, so its slices are kept aside (flow id,
        start, end, thread) for ``assemble`` to chain in time order."""
        c = pe.cols
        flow = c["flow_id"]
        sliced = c["end_ts"] > c["start_ts"]
        cc = ((flow & COLLECTIVE_FLOW) != 0) & sliced
        if cc.any():
            self.cc_flows.append(np.stack([flow[cc], c["start_ts"][cc], c["end_ts"][cc], tid[cc]], axis=1))
        local = (flow != 0) & ~cc & sliced
        fsid = c.get("framework_stream_id")
        if fsid is not None:  # a region in its execution's flow: an arrow of its own (_framework_flows)
            local &= fsid != c["id"]
        code = np.zeros(pe.n, dtype=np.int8)
        if local.any():
            dev = kinds_of_types(pe.type_names, pe.type_groups)[c["type"]] != HOST
            code[local] = np.where(dev[local], 2, 1)
        return code

    def close(self) -> Piece:
        """The process's counters end its piece."""
        pe = self.last
        if pe is not None:
            pid = self.target.shown_pid
            origin = self.target.origin_ns
            self.trace.add([{"name": name, "ph": "C", "pid": pid, "ts": t, "args": {"value": v}}
                            for name, (tsc, vals, _unit) in process_counters(pe).items()
                            for t, v in zip(((tsc - origin) / 1000.0).tolist(),
                                            np.asarray(vals, dtype=np.float64).tolist())])
        self.file.commit()
        flows = None
        if self.cc_flows:
            flows = self.path + ".flows.npy"
            self.written.append(flows)
            np.save(flows, np.concatenate(self.cc_flows))
        return Piece(path=self.path, device_files=self.device_files, flows=flows,
                     flow_pid=self.target.shown_pid)

    def abort(self) -> None:
        self.file.abort()


def _framework_flows(pe: ProcessEvents, pid: int, tid: np.ndarray, origin_ns: int, role: np.ndarray) -> list[dict]:
    """Flow arrows between framework regions and host calls (``analysis.framework``), as Chrome's
    flow events v1: ``issued`` from a region to each host call it issued (start bound to the region,
    finish to the call), and ``ran`` from a host call to each region that ran inside its execution
    (start bound to the call, finish to the region).  Each arrow's id is the hex event id of the one
    event it exists for (the importers key v1 flows by id, category and name, and read "0x" ids as
    numbers).  ``role``: ``_flows``'s, 1 on host calls."""
    c = pe.cols
    fsid = c.get("framework_stream_id")
    if fsid is None:
        return []
    ids = c["id"]
    out: list[dict] = []
    ts = (c["start_ts"] - origin_ns) / 1000.0  # (an arrow's ends as the events show them)

    def arrow(name: str, fid: str, a: int, b: int) -> None:
        out.append({"name": name, "cat": "framework", "ph": "s", "id": fid, "pid": pid, "tid": int(tid[a]),
                    "ts": float(ts[a])})
        out.append({"name": name, "cat": "framework", "ph": "f", "bp": "e", "id": fid, "pid": pid,
                    "tid": int(tid[b]), "ts": float(ts[b])})

    f2 = c.get("flow_id2")
    if f2 is not None and f2.any():
        regions = np.flatnonzero((f2 != 0) & (fsid == ids))
        region_of = dict(zip(fsid[regions].tolist(), regions.tolist()))
        for i in np.flatnonzero((f2 != 0) & (fsid != ids)).tolist():
            r = region_of.get(int(fsid[i]))
            if r is not None:  # (else the region is in another chunk of the process)
                arrow("issued", f"0x{int(ids[i]):x}", r, i)  # (one a call: its event id)
    flow = c["flow_id"]
    ran = np.flatnonzero((flow != 0) & (fsid == ids))
    if len(ran):
        hosts = np.flatnonzero(role == 1)
        host_of = dict(zip(flow[hosts].tolist(), hosts.tolist()))
        for r in ran.tolist():
            h = host_of.get(int(flow[r]))
            if h is not None:
                arrow("ran", f"0x{int(ids[r]):x}", h, r)  # (one a region: its event id)
    return out


def _int64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _args(pe: ProcessEvents, cols: dict[str, list], extra: list, i: int) -> dict:
    """The args of event ``i``: its argument columns that have a value, its extra attributes and
    the device profile that holds its execution."""
    args: dict = {}
    mid = cols["model_id"][i]
    if mid >= 0:
        args["model_name"] = pe.model_names.get(mid, f"model_{mid}")
    for k in _INT_ARGS:
        v = cols[k][i]
        if v >= 0:
            args[k] = v
    for k in _STRING_ARGS:
        v = cols[k][i]
        if v > 0:
            args[k] = pe.strings[v]
    if cols["flow_id"][i]:
        args["flow_id"] = cols["flow_id"][i]
    if cols["framework_stream_id"][i] >= 0:
        args["framework_stream_id"] = cols["framework_stream_id"][i]
    if extra[i] is not None:
        args.update(json.loads(extra[i]))
    if cols["device_profile"][i] >= 0:
        args["device_profile"] = pe.device_profiles[cols["device_profile"][i]]
    return args


def device_events(v: DeviceProfileView, origin_ns: int) -> list[dict]:
    """A device profile's events: one process whose threads are the profile's tracks (engines,
    streams), its executions on thread 0, its ops as complete events."""
    t = v.dp.trace
    strings = list(t.strings)
    ops = v.dp.ops
    track_ids = {tid: i + 1 for i, tid in enumerate(np.unique(ops["track"]).tolist())}
    evs: list[dict] = [{"name": "process_name", "ph": "M", "pid": 1,
                        "args": {"name": f"device profile {v.profile_id} ({t.device_kind})"}}]
    for tid, i in track_ids.items():
        evs.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": i, "args": {"name": strings[tid]}})
    for e in t.executions:
        evs.append({"name": e.model_name, "ph": "X", "pid": 1, "tid": 0, "cat": "execution",
                    "ts": (e.start_ns + v.offset_ns - origin_ns) / 1000.0,
                    "dur": max(e.end_ns - e.start_ns, 0) / 1000.0, "args": {"exec_id": e.exec_id, "neff": e.neff_name}})
    st = ((v.start_ts - origin_ns) / 1000.0).tolist()
    du = ((v.end_ts - v.start_ts) / 1000.0).tolist()
    fl = ops["flops"].tolist()
    nb = ops["nbytes"].tolist()
    for i in range(v.n):
        args = {"exec_id": int(v.exec_ids[i]), "detail": strings[ops["detail"][i]]}
        if fl[i] == fl[i]:
            args["flops"] = fl[i]
        if nb[i] >= 0:
            args["bytes"] = nb[i]
        evs.append({"name": strings[ops["name"][i]], "ph": "X", "pid": 1, "tid": track_ids[int(ops["track"][i])],
                    "ts": st[i], "dur": du[i], "args": args})
    return evs


def write_device(path: str, v: DeviceProfileView, origin_ns: int) -> None:
    """A device profile as its own Chrome trace (``device_profile_model_<id>.json``), its summary as
    the metadata."""
    f = AtomicFile(path, output=True)
    try:
        trace = ChromeTraceWriter(f.f)
        trace.add(device_events(v, origin_ns))
        trace.close(dict(v.summary, origin_ns=origin_ns))
        f.commit()
    except BaseException:
        f.abort()
        raise
