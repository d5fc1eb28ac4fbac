"""``system_profile.json``: the system events as Chrome trace-event JSON (chrome://tracing, Perfetto UI).

Streamed one process at a time.  Timestamps are microseconds since ``origin_ns`` (stored in the
file's ``metadata``) so that they keep sub-microsecond precision.
"""

from __future__ import annotations

import json
import os

import numpy as np

from neuron_explorer.util.atomic import AtomicFile
from neuron_explorer.analysis.events import ProcessEvents
from neuron_explorer.analysis.counters import process_counters

from neuron_explorer.util.jsonfast import dumps_bytes as _dumps
from neuron_explorer.contracts.tracks import HOST, kinds_of_types, process_label, track_name


HEADER = b'{"displayTimeUnit":"ns","traceEvents":['


def footer(metadata: dict, origin_ns: int) -> bytes:
    return b'],"metadata":' + _dumps(dict(metadata, origin_ns=origin_ns)) + b"}"


def assemble(path: str, pieces: list[str], metadata: dict, origin_ns: int) -> None:
    """Join per-process pieces (in order) into one Chrome trace file (``path`` is the user's
    output: see ``AtomicFile(output=True)``)."""
    import shutil

    f = AtomicFile(path, output=True)
    try:
        f.write(HEADER)
        first = True
        for p in pieces:
            if os.path.getsize(p) == 0:
                continue
            if not first:
                f.write(b",")
            with open(p, "rb") as src:
                shutil.copyfileobj(src, f.f, 1 << 20)
            first = False
        f.write(footer(metadata, origin_ns))
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
        if not piece:
            self.f.write(HEADER)
        self.first = True
        self.events_written = 0

    def _emit(self, items: list[dict]) -> None:
        if not items:
            return
        chunk = b",".join(_dumps(x) for x in items)
        if not self.first:
            self.f.write(b",")
        self.f.write(chunk)
        self.first = False

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
        if not self.piece:
            self.f.write(footer(metadata, self.origin_ns))
        self.f.commit()

    def abort(self) -> None:
        self.f.abort()
