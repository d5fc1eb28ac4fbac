"""``system_profile.json``: the system events as Chrome trace-event JSON (chrome://tracing, Perfetto UI).

Streamed one process at a time.  Timestamps are microseconds since ``origin_ns`` (stored in the
file's ``metadata``) so that they keep sub-microsecond precision.
"""

from __future__ import annotations

import json
import os

import numpy as np

from neuron_explorer.util.atomic import AtomicFile
from neuron_explorer.analysis.device import DeviceProfileView
from neuron_explorer.analysis.events import ProcessEvents
from neuron_explorer.analysis.counters import process_counters

from neuron_explorer.exporters.chrome_trace import ChromeTraceWriter
from neuron_explorer.contracts.tracks import HOST, kinds_of_types, process_label, track_name


def assemble(path: str, pieces: list[str], metadata: dict, origin_ns: int) -> None:
    """Join per-process pieces (in order) into one Chrome trace file (``path`` is the user's
    output: see ``AtomicFile(output=True)``)."""
    f = AtomicFile(path, output=True)
    try:
        trace = ChromeTraceWriter(f.f)
        for p in pieces:
            with open(p, "rb") as src:
                trace.copy(src, os.path.getsize(p))
        trace.close(dict(metadata, origin_ns=origin_ns))
        f.commit()
    except BaseException:
        f.abort()
        raise


class JsonWriter:
    def __init__(self, path: str, origin_ns: int, piece: bool = False) -> None:
        """``piece``: write only the comma-separated events (a part that ``assemble`` joins)."""
        self.path = path
        self.origin_ns = origin_ns
        self.piece = piece
        self.f = AtomicFile(path, output=not piece)
        self.trace = ChromeTraceWriter(self.f.f, fragment=piece)
        self.events_written = 0

    def _emit(self, items: list[dict]) -> None:
        self.trace.add(items)

    def add(self, pe: ProcessEvents, first: bool = True, last: bool = True) -> None:
        """Add a chunk of a process's events (``first``/``last`` mark the process's chunks)."""
        pid = pe.index + 1
        items: list[dict] = []
        if first:
            items.append({"name": "process_name", "ph": "M", "pid": pid,
                          "args": {"name": process_label(pe.pid, pe.rank, pe.instance_id)}})
            self._named_tracks: set = set()
        c = pe.cols
        n = pe.n
        if n:
            kind = kinds_of_types(pe.type_names, pe.type_groups)[c["type"]]
            names = np.array(pe.type_names, dtype=object)[c["type"]]
            # a core's tracks get tids above any OS thread id: 1_000_000 + nc (events), 2_000_000 + nc (cc)
            tid = np.where(kind == HOST, c["thread_id"], kind * 1_000_000 + c["nc_idx"])
            for t in np.unique(tid).tolist():
                if t in self._named_tracks:
                    continue
                self._named_tracks.add(t)
                label = track_name(HOST, t) if t < 1_000_000 else track_name(t // 1_000_000, t % 1_000_000)
                items.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": t, "args": {"name": label}})
            ts = ((c["start_ts"] - self.origin_ns) / 1000.0).tolist()
            dur = ((c["end_ts"] - c["start_ts"]) / 1000.0).tolist()
            strings = pe.strings
            mnames = pe.model_names
            cols = {k: c[k].tolist() for k in ("model_id", "exec_id", "op", "seq", "bytes", "group", "dtype",
                                                "ret", "flow_id")}
            srcs = pe.type_sources
            typ = c["type"].tolist()
            names_l = names.tolist()
            tid_l = tid.tolist()
            extra = pe.extra_json.to_pylist()
            dprof = c["device_profile"].tolist()
            for i in range(n):
                args: dict = {}
                mid = cols["model_id"][i]
                if mid >= 0:
                    args["model_name"] = mnames.get(mid, f"model_{mid}")
                for k in ("exec_id", "seq", "bytes", "ret"):
                    v = cols[k][i]
                    if v >= 0:
                        args[k] = v
                for k in ("op", "group", "dtype"):
                    v = cols[k][i]
                    if v > 0:
                        args[k] = strings[v]
                if cols["flow_id"][i]:
                    args["flow_id"] = cols["flow_id"][i]
                if extra[i] is not None:
                    args.update(json.loads(extra[i]))
                if dprof[i] >= 0:
                    args["device_profile"] = pe.device_profiles[dprof[i]]
                ev = {"name": names_l[i], "cat": srcs[typ[i]], "ph": "X" if dur[i] > 0 else "i", "pid": pid,
                      "tid": tid_l[i], "ts": ts[i], "args": args}
                if dur[i] > 0:
                    ev["dur"] = dur[i]
                else:
                    ev["s"] = "t"
                items.append(ev)
        for name, (tsc, vals, _unit) in (process_counters(pe).items() if last else ()):
            for t, v in zip(((tsc - self.origin_ns) / 1000.0).tolist(), np.asarray(vals, dtype=np.float64).tolist()):
                items.append({"name": name, "ph": "C", "pid": pid, "ts": t, "args": {"value": v}})
        self._emit(items)
        self.events_written += n

    def close(self, metadata: dict) -> None:
        self.trace.close(dict(metadata, origin_ns=self.origin_ns))
        self.f.commit()

    def abort(self) -> None:
        self.f.abort()


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
