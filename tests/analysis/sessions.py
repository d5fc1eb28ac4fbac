"""Hand-made ``analysis.reader.Session`` objects: the event columns a reader would have loaded, built
from (type name, start, end, core, {argument: value}) tuples with the capture's own type table."""

from __future__ import annotations

import numpy as np

from neuron_explorer.analysis.reader import Session
from neuron_explorer.contracts.columns import EVENT_COLUMNS
from neuron_explorer.contracts.events import EVENT_TYPES
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb


def session(events: list[tuple], strings: list[str] = ("",), path: str = "/cap/i-a_pid_7/20240101T000000000Z",
            info: pb.TraceInfo | None = None, models: list | None = None) -> Session:
    """A session holding ``events``: (type name, start ns, end ns, nc, {arg name: value}); string
    arguments (``*_str``) are given as strings and interned into ``strings``."""
    strings = list(strings)
    names = [t.name for t in EVENT_TYPES]
    cols: dict[str, list[int]] = {c.name: [] for c in EVENT_COLUMNS}
    for name, start, end, nc, *rest in events:
        t = EVENT_TYPES[names.index(name)]
        args = rest[0] if rest else {}
        row = {"type": t.id, "start_ns": start, "end_ns": end, "nc_idx": nc, "thread_id": 100}
        for slot, arg in zip("abcde", t.args):
            v = args.get(arg, 0) if arg else 0
            if arg.endswith("_str"):
                if v == 0:
                    v = ""
                if v not in strings:
                    strings.append(v)
                v = strings.index(v)
            row[slot] = v
        for c in EVENT_COLUMNS:
            cols[c.name].append(row.get(c.name, 0))
    return Session(path=path, info=info, events={c.name: np.array(cols[c.name], dtype=c.dtype).astype(
        np.dtype(c.dtype).newbyteorder("=")) for c in EVENT_COLUMNS}, type_names=names,
        type_args=[list(t.args) for t in EVENT_TYPES], strings=strings, models=list(models or []))


def trace_info(**fields) -> pb.TraceInfo:
    anchors = fields.pop("anchors", [])
    cores = fields.pop("cores", [])
    info = pb.TraceInfo(**fields)
    for mono, wall in anchors:
        info.anchors.add(monotonic_ns=mono, wall_ns=wall)
    for nc, dropped in cores:
        info.cores.add(nc_idx=nc, dropped=dropped)
    return info
