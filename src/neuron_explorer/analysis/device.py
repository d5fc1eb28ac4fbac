"""Device profiles in `view`: aligned op tables, per-profile summaries, links from the system trace.

Every ``.ntff`` of a session becomes one device profile with an id that is unique in the output
(``<pid>_nc<nc>_<graph hash or session k>``).  Its ops are placed on the wall clock like the
session's system events (the device clock is mapped through the file's sync points, which on the
CPU are identity), and each ``nc_exec_running`` whose execution was profiled gets the profile id,
so a viewer can drill down from the system trace.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from neuron_explorer.analysis.pbfile import ProfileError
from neuron_explorer.analysis.reader import DeviceProfile, Session, load_device_trace, wall_offset_ns
from neuron_explorer.util.intervals import union_length
from neuron_explorer.util.names import printable


@dataclass
class DeviceProfileView:
    profile_id: str
    session: Session
    dp: DeviceProfile
    start_ts: np.ndarray
    end_ts: np.ndarray
    exec_ids: np.ndarray  # per op
    offset_ns: int = 0  # device clock -> wall clock
    summary: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.start_ts)


def _profile_id(s: Session, dp: DeviceProfile) -> str:
    stem = os.path.basename(dp.path)[: -len(".ntff")]
    if "_instid_" in stem:
        tag = stem.split("_instid_")[0]
    elif "_session_" in stem:
        tag = "session" + stem.rsplit("_session_", 1)[1]
    else:
        tag = stem
    return f"{s.pid}_nc{dp.trace.nc_idx}_{tag}"




def load(s: Session, clock_offset_ns: int, warnings: list[tuple[str, str]]) -> list[DeviceProfileView]:
    """The session's device profiles; a damaged one is left out and added to ``warnings`` as
    (message, path), which the caller prints (printing here too showed each one twice)."""
    out = []
    wall = wall_offset_ns(s)
    for path in s.device_paths:
        try:
            dp = load_device_trace(path, wall)
        except ProfileError as e:
            warnings.append((str(e), printable(path)))
            continue
        t = dp.trace
        # device clock -> host monotonic through the sync points (identity when there are none)
        off = wall + clock_offset_ns + dp.host_offset_ns
        ex_ids = np.array([e.exec_id for e in t.executions], dtype=np.int64)
        exec_ids = ex_ids[dp.ops["exec_idx"]] if len(ex_ids) else np.zeros(t.ops.count, dtype=np.int64)
        v = DeviceProfileView(_profile_id(s, dp), s, dp, dp.ops["start_ns"] + off, dp.ops["end_ns"] + off, exec_ids,
                              off)
        v.summary = summarize(v)
        out.append(v)
    return out


def summarize(v: DeviceProfileView) -> dict:
    t = v.dp.trace
    ops = v.dp.ops
    ex = t.executions
    exec_time = int(sum(max(e.end_ns - e.start_ns, 0) for e in ex))
    flops = float(np.nansum(ops["flops"])) if v.n else 0.0
    strings = t.strings
    tracks = {}
    for tid in np.unique(ops["track"]).tolist():
        m = ops["track"] == tid
        busy = union_length(ops["start_ns"][m], ops["end_ns"][m])
        tracks[strings[tid] or "?"] = 100.0 * busy / exec_time if exec_time else None
    achieved = flops / (exec_time / 1e9) if exec_time and flops else None
    models = sorted({e.model_name for e in ex})
    return {
        "profile_id": v.profile_id, "file": v.dp.path,
        "instance_id": v.session.instance_id, "process_id": v.session.pid,
        "nc_idx": int(t.nc_idx), "mode": t.mode, "device_kind": t.device_kind, "source": t.source,
        "model_name": models[0] if len(models) == 1 else ",".join(models),
        "executions": len(ex), "exec_id_first": int(min((e.exec_id for e in ex), default=-1)),
        "exec_id_last": int(max((e.exec_id for e in ex), default=-1)), "ops": v.n,
        "total_time_ns": exec_time, "flops": flops, "achieved_flops_per_s": achieved,
        "track_active_pct_json": json.dumps(tracks),
        "peak_flops_per_s": t.peak_flops or None,
        "mfu": (achieved / t.peak_flops) if achieved and t.peak_flops else None,
    }


def exec_links(views: list[DeviceProfileView]) -> dict[int, str]:
    """exec_id -> profile id, for the executions that a device profile holds."""
    links: dict[int, str] = {}
    for v in views:
        for e in v.dp.trace.executions:
            links.setdefault(int(e.exec_id), v.profile_id)
    return links


def events_table(v: DeviceProfileView, flow_base: int):
    """The profile's ops as an Arrow table (DeviceProfileEvents), every column built from buffers
    (``util.arrays``: ``pa.array`` would import pandas, decision 0050)."""
    import pyarrow as pa

    from neuron_explorer.util.arrays import dictionary, numeric, repeated

    t = v.dp.trace
    ops = v.dp.ops
    strings = list(t.strings)
    n = v.n
    ex = t.executions
    model_names = [e.model_name for e in ex]
    flows = flow_base | (v.exec_ids & ((1 << 40) - 1))
    cols = {
        "profile_id": repeated(v.profile_id, n),
        "instance_id": repeated(v.session.instance_id, n),
        "process_id": numeric(np.full(n, v.session.pid, dtype=np.int64)),
        "nc_idx": numeric(np.full(n, t.nc_idx, dtype=np.int32)),
        "model_name": dictionary(ops["exec_idx"], model_names or [""]),
        "exec_id": numeric(v.exec_ids),
        "name": dictionary(ops["name"], strings),
        "track": dictionary(ops["track"], strings),
        "start_ts": numeric(v.start_ts),
        "end_ts": numeric(v.end_ts),
        "duration_ns": numeric(v.end_ts - v.start_ts),
        "flops": numeric(ops["flops"], null=np.isnan(ops["flops"])),
        "bytes": numeric(ops["nbytes"], null=ops["nbytes"] < 0),
        "detail": dictionary(ops["detail"], strings),
        "source_location": dictionary(ops["source"], strings),
        "flow_id": numeric(flows),
    }
    return pa.Table.from_arrays(list(cols.values()), names=list(cols))
