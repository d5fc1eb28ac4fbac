"""The questions the System Trace Viewer asks of a prepared profile: overview, windows, counters, flows,
event details, summaries and search.

Why they look like this: every answer is sized by the screen, not by the profile. A window returns,
per visible row, the events at least a pixel long individually and the shorter ones merged per pixel
with a count; windows holding few events (an exact count from the index) are answered from the events,
wider ones from the pyramid. Times in responses are nanoseconds relative to the profile's origin
(``origin_ns``, sent once as a string) because Unix-epoch nanoseconds do not fit a JavaScript number
exactly. Only event details read Parquet (one row, from the one process's part when the leaf is known).
"""

from __future__ import annotations

import json
import math
from typing import Any

import duckdb
import numpy as np

from neuron_explorer.ui import coarse, index, wire
from neuron_explorer.ui.device import device_profile_for, device_profiles, profiled_execution
from neuron_explorer.ui.params import MAX_WINDOW_ROWS, BadRequest, NotFound, ns_per_px, window_args
from neuron_explorer.ui.profile import Profile
from neuron_explorer.ui.rows import DEFAULT_LAYOUT, MODES, Row, name_key
from neuron_explorer.ui.sql import files_sql, quote, records

SUMMARY_EXACT_MAX = 3_000_000  # events: above this a summary adds up pyramid buckets instead
NO_DEVICE_PROFILE = ("No device profile was captured for this execution (device profiles are "
                     "captured with the device profiling mode; see Device Profiles List).")


# ---------------------------------------------------------------- overview
def overview(p: Profile) -> dict[str, Any]:
    """Everything the viewer shows before the first window: names, processes, modes, index facts."""
    names: dict[str, int] = {}
    for lf in p.leaves:
        names[lf.name] = names.get(lf.name, 0) + lf.n
    return {
        "name": p.name, "display_name": p.display_name, "origin_ns": str(p.origin),
        "duration_ns": p.duration, "events": p.total_events, "modes": MODES, "default_mode": p.default_mode,
        "stored_grouping": {**p.stored_grouping, "mode": p.default_mode},
        "names": sorted(names.items(), key=lambda kv: name_key(kv[0])),
        "processes": [wire.record(m) for m in p.meta],
        "instances": sorted({lf.inst for lf in p.leaves} | {m["instance_id"] for m in p.meta}),
        "levels": p.levels, "prepare_s": round(p.prepare_s, 3), "index_ready": p.index_ready,
        "first_paint_from": p.first_paint_from,
        "index": {"bytes": p.index.nbytes() if p.index is not None else 0,
                  "build_s": round(p.index_build_s, 3) if p.index_build_s is not None else None},
        "device_profiles": len(device_profiles(p)),
        "warnings": warnings(p),
    }


def warnings(p: Profile) -> list[str]:
    """The ViewWarnings of the ingestion (none when the table is missing or unreadable)."""
    if not p.warn_file:
        return []
    try:
        return [r[0] for r in p.cursor().execute(f"SELECT message FROM read_parquet({quote(p.warn_file)})").fetchall()]
    except duckdb.Error:
        return []


# ---------------------------------------------------------------- rows and leaves
def pick_rows(p: Profile, mode: str, idxs: list[int], layout: str = DEFAULT_LAYOUT) -> list[tuple[int, Row]]:
    """The requested rows of a mode (BadRequest for an index out of range)."""
    rows = p.rows(mode, layout)
    out = []
    for i in idxs:
        if i < 0 or i >= len(rows):
            raise BadRequest(f"row {i} out of range (0..{len(rows) - 1})")
        out.append((i, rows[i]))
    return out


def leaf_map(picked: list[tuple[int, Row]]) -> tuple[list[int], list[int]]:
    """(leaves, row of each leaf) of the picked rows."""
    leaves, ridx = [], []
    for i, r in picked:
        for lf in r.leaves:
            leaves.append(lf)
            ridx.append(i)
    return leaves, ridx


def count_starting(p: Profile, leaves: list[int], t0: float, t1: float) -> int:
    """Events of these leaves starting in [t0, t1): exact, two binary searches per leaf."""
    if p.index is None:
        return 0
    return sum(hi - lo for _, lo, hi in p.index.count_starting(leaves, t0 - p.shift, t1 - p.shift))


# ---------------------------------------------------------------- windows
def window(p: Profile, mode: str, row_idx: list[int], t0: float, t1: float, px: int,
           layout: str = DEFAULT_LAYOUT) -> dict[str, Any]:
    """Events of the given rows in [t0, t1) (relative ns) aggregated to ``px`` pixel columns.

    In the "tracks" layout a row holds several event names: short events are merged per pixel *and
    name*, so a bucket says which name it stands for and the browser can stack the names in lanes."""
    t0, t1, px = window_args(t0, t1, px)
    picked = [(i, r) for i, r in pick_rows(p, mode, row_idx, layout) if r.kind == "events"]
    npp = ns_per_px(t0, t1, px)
    first_row: dict[int, int] = {}
    for lf, r in zip(*leaf_map(picked)):
        first_row.setdefault(lf, r)  # a row asked for twice is answered once
    leaves, ridx = list(first_row), list(first_row.values())
    res: dict[str, Any] = {"t0": t0, "t1": t1, "px": px, "ns_per_px": npp, "level": None,
                           "row": [], "s": [], "e": [], "c": [], "d": [], "id": [], "leaf": []}
    if not leaves:
        return res
    src, level = source_level(p, leaves, t0, t1, npp)
    if src is None:
        return res
    sh = src.base - p.origin  # index (or coarse) time = response time - sh
    if level is not None:
        items = src.gather_level(level, leaves, ridx, t0 - sh, t1 - sh)
        single = (items["c"] == 1) & (items["e"] - items["s"] >= npp)
        res["level"] = level if src is p.index else "coarse"
    else:
        assert p.index is not None  # (no level: the events themselves, from the index; source_level)
        items = p.index.gather_raw(leaves, ridx, t0 - sh, t1 - sh)
        single = items["d"] >= npp
        res["level"] = "raw"
    res["coarse"] = src is not p.index  # the index is still building: the browser asks again later
    if res["coarse"]:
        p.first_paint.set()  # the index build may start (see Profile._build_in_background)
    if layout == "tracks" and len(items["row"]):
        nn = max(len(p.names), 1)
        items["row"] = items["row"] * nn + p.leaf_name[items["leaf"]]
        out = index.aggregate(items, t0 - sh, npp, single, MAX_WINDOW_ROWS)
        out["row"] = out["row"] // nn
    else:
        out = index.aggregate(items, t0 - sh, npp, single, MAX_WINDOW_ROWS)
    if sh:
        out["s"] = out["s"] + sh
        out["e"] = out["e"] + sh
    for k in ("row", "c", "d", "s", "e", "leaf"):
        res[k] = out[k]  # int64 arrays: orjson writes them directly (OPT_SERIALIZE_NUMPY)
    res["id"] = wire.ids(out["id"])
    return res


WINDOW_ARRAYS = ("row", "s", "e", "c", "d", "id", "leaf")


def window_packed(p: Profile, mode: str, row_idx: list[int], t0: float, t1: float, px: int,
                  layout: str = DEFAULT_LAYOUT) -> wire.Packed:
    """``window`` as bytes (``format=bin``, decision 0175): the same header, and each per-item list as
    a typed array (``wire.packed``) the browser views in place: no JSON text of tens of thousands of
    numbers to parse, no string left in its heap."""
    return wire.packed(window(p, mode, row_idx, t0, t1, px, layout), WINDOW_ARRAYS)


def source_level(p: Profile, leaves: list[int], t0: float, t1: float,
                 npp: float) -> tuple["index.EventIndex | coarse.CoarseLevel | None", int | None]:
    """Where a window (or busy shares) over ``leaves`` is answered from: (the index, a pyramid level or
    None for the events themselves), or, while the index builds, (the coarse level, its level 0).
    (None, None) for a profile without events. One rule for windows and busy shares."""
    if p.index is None:
        return (p.coarse, coarse.LEVEL) if p.coarse is not None else (None, None)
    return p.index, _level_for(p, leaves, t0, t1, npp)


def _level_for(p: Profile, leaves: list[int], t0: float, t1: float, npp: float) -> int | None:
    """The pyramid level to answer from, or None to read the events (few enough of them)."""
    if not p.levels or count_starting(p, leaves, t0, t1) <= p.raw_budget:
        return None
    # too many events to read: the finest level no wider than a pixel (or level 0 when even
    # that is wider: then buckets span a few pixels, still with exact counts)
    level = 0
    for k, w in enumerate(p.levels):
        if w <= npp:
            level = k
    return level


def counters(p: Profile, mode: str, row_idx: list[int], t0: float, t1: float, px: int,
             layout: str = DEFAULT_LAYOUT) -> dict[str, Any]:
    """Counter tracks in the window, averaged per pixel (per process first, then summed)."""
    t0, t1, px = window_args(t0, t1, px)
    picked = [(i, r) for i, r in pick_rows(p, mode, row_idx, layout) if r.kind == "counter"]
    npp = ns_per_px(t0, t1, px)
    out: dict[str, Any] = {"t0": t0, "t1": t1, "px": px, "ns_per_px": npp, "rows": {}}
    if not picked:
        return out
    rs, insts, pids, cns = [], [], [], []
    for i, r in picked:
        for inst, pid, cn in r.series:
            rs.append(i)
            insts.append(inst)
            pids.append(pid)
            cns.append(cn)
    lo = p.origin + int(t0) - p.counter_gap
    hi = p.origin + math.ceil(t1) + p.counter_gap
    # every value from the request is a bound parameter, never SQL text
    sql = f"""
        WITH m AS (SELECT unnest($r::INTEGER[]) AS r, unnest($inst::VARCHAR[]) AS inst,
                          unnest($pid::BIGINT[]) AS pid, unnest($cn::VARCHAR[]) AS counter)
        SELECT r, counter, b, sum(v), sum(vmax) FROM (
            SELECT m.r, c.counter, c.pid, floor((c.ts - $origin - $t0) / $npp)::BIGINT AS b,
                   avg(c.value) AS v, max(c.value) AS vmax
            FROM {p.tag}_cnt c JOIN m ON c.inst = m.inst AND c.pid = m.pid AND c.counter = m.counter
            WHERE c.ts >= $lo AND c.ts <= $hi
            GROUP BY ALL) GROUP BY r, counter, b ORDER BY r, counter, b"""
    data = p.cursor().execute(sql, {"r": rs, "inst": insts, "pid": pids, "cn": cns, "origin": p.origin,
                                    "t0": t0, "npp": npp, "lo": lo, "hi": hi}).fetchall()
    rows: dict[int, dict[str, list]] = {}
    for r, cn, b, v, vmax in data:
        d = rows.setdefault(r, {}).setdefault(cn, [[], [], []])
        d[0].append(t0 + (b + 0.5) * npp)
        d[1].append(v)
        d[2].append(vmax)
    out["rows"] = {str(r): {cn: {"t": s[0], "v": s[1], "max": s[2]} for cn, s in series.items()}
                   for r, series in rows.items()}
    return out


# ---------------------------------------------------------------- details
def event(p: Profile, event_id: int, leaf: int | None = None) -> dict[str, Any]:
    """Every column of one event, its attributes, flows, process and model, and its device link."""
    if leaf is not None and 0 <= leaf < len(p.leaves):
        files = [f for inst, pid, f in p.ev_files if (inst, pid) == (p.leaves[leaf].inst, p.leaves[leaf].pid)]
    else:
        files = [f for _, _, f in p.ev_files]
    if not files:
        raise NotFound(f"event {event_id}")
    c = p.cursor()
    c.execute(f"SELECT * FROM read_parquet({files_sql(files)}) WHERE id = ? LIMIT 1", [int(event_id)])
    rows = records(c)
    if not rows:
        raise NotFound(f"event {event_id}")
    ev = rows[0]
    try:
        attrs = json.loads(ev.get("extra_attributes_json") or "{}")
    except ValueError:
        attrs = {"extra_attributes_json": ev.get("extra_attributes_json")}
    inst, pid = ev["instance_id"], int(ev.get("process_id") or 0)
    proc = p.process(inst, pid)
    out: dict[str, Any] = {
        "id": wire.id_value(int(ev["id"])), "name": ev.get("name"), "properties": _event_properties(ev),
        "attributes": attrs, "origin_ns": str(p.origin),
        "relative": {"start": int(ev["start_ts"]) - p.origin, "end": int(ev["end_ts"]) - p.origin},
        "process": wire.record(proc) if proc else None,
        "model": _model(p, inst, pid, ev.get("model_name")),
    }
    if ev.get("name") == "nc_exec_running":
        dp = device_profile_for(p, ev)
        out["device_profile"] = dp
        if dp is None:
            out["device_note"] = NO_DEVICE_PROFILE
            other = profiled_execution(p, ev)
            if other is not None:
                out["profiled_execution"] = other
                mode = other["mode"] or "device profiling"
                out["device_note"] = (f"This execution (exec_id {ev.get('exec_id')}) was not device-profiled: the "
                                      f"{mode} mode profiled execution {other['exec_id']} of the same graph "
                                      f"({'its first execution' if mode == 'model' else 'the range it was on'}), "
                                      f"device profile {other['profile_id']}.")
    return out


def _event_properties(ev: dict[str, Any]) -> dict[str, Any]:
    """An event's columns for display (``wire``: times, ids and list items as strings, since
    JavaScript numbers are doubles), without the attributes (shown apart) and the hive partition
    echoes."""
    props: dict[str, Any] = {}
    for k, v in ev.items():
        if k == "extra_attributes_json" or k in ("instance", "process"):
            continue
        props[k] = [str(x) for x in v] if isinstance(v, list) else wire.value(v, k)
    return props


def _model(p: Profile, inst: Any, pid: int, model_name: Any) -> dict[str, Any] | None:
    """The ProfileModels row of the graph an event ran or loaded."""
    if not model_name or not p.models_file:
        return None
    mc = p.cursor()
    mc.execute(f"SELECT * FROM read_parquet({quote(p.models_file)}) WHERE instance_id = ? AND process_id = ? "
               "AND model_name = ? LIMIT 1", [inst, pid, model_name])
    rows = records(mc)
    return wire.record(rows[0]) if rows else None


# ---------------------------------------------------------------- summary
def summary(p: Profile, mode: str, t0: float, t1: float, row_idx: list[int] | None = None,
            layout: str = DEFAULT_LAYOUT) -> dict[str, Any]:
    """Count, total and mean duration by event name of events starting in [t0, t1).

    Exact from the events when the range holds few enough of them; from the finest pyramid level
    otherwise (exact except for the two boundary buckets, flagged ``approximate``).
    """
    t0, t1, _ = window_args(t0, t1, 1)
    rows = p.rows(mode, layout)
    picked = pick_rows(p, mode, row_idx, layout) if row_idx else list(enumerate(rows))
    leaves, _ = leaf_map([(i, r) for i, r in picked if r.kind == "events"])
    out: dict[str, Any] = {"t0": t0, "t1": t1, "by_name": [], "count": 0, "approximate": False}
    if not leaves or p.index is None:
        return out
    agg, out["approximate"] = _totals_by_name(p, leaves, t0 - p.shift, t1 - p.shift)
    by: list[dict[str, Any]] = [
        {"name": n, "count": int(cnt), "total_ns": int(tot or 0), "mean_ns": (tot or 0) / cnt if cnt else 0}
        for n, (cnt, tot) in agg.items() if cnt]
    by.sort(key=lambda x: -x["total_ns"])
    out["by_name"] = by
    out["count"] = sum(x["count"] for x in by)
    return out


def _totals_by_name(p: Profile, leaves: list[int], t0i: float, t1i: float) -> tuple[dict[str, list[int]], bool]:
    """{name: [count, total duration]} of the events starting in [t0i, t1i) (index time), and whether
    it came from the pyramid."""
    idx = p.index
    assert idx is not None
    sl = idx.count_starting(leaves, t0i, t1i)
    agg: dict[str, list[int]] = {}
    if p.levels and sum(hi - lo for _, lo, hi in sl) > SUMMARY_EXACT_MAX:
        # finest pyramid level: exact but for the buckets straddling t0 and t1
        cs, ds = idx.a["p0_c"], idx.a["p0_d"]
        for lf, lo, hi in idx.level_starting(0, leaves, t0i, t1i):
            x = agg.setdefault(p.leaves[lf].name, [0, 0])
            x[0] += int(cs[lo:hi].sum(dtype=np.int64))
            x[1] += int(ds[lo:hi].sum(dtype=np.int64))
        return agg, True
    for lf, lo, hi in sl:
        x = agg.setdefault(p.leaves[lf].name, [0, 0])
        x[0] += hi - lo
        x[1] += int(idx.d[lo:hi].sum(dtype=np.int64))
    return agg, False
