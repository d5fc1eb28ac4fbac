"""Area selection (tracks x time): per-track, per-rank and per-name statistics, and the collectives in
the area with who arrived last.

Why not sum durations: the first version added up the durations of every event starting in the range
over every track, so an 80 ms range over 16 ranks read "total 1.088 s". Here a track's figure is its
*busy time* inside the range (the union of its events' intervals clipped to the range, as
``util.intervals``: nested or overlapping events count once) and its share of the range; durations are
described by min / p50 / p99 / max of the events overlapping the range. The collective table applies
the CLI summary's straggler rule (``contracts.stragglers``) to the collectives starting in the range, over
every rank that took part, keyed by the collective's flow id (``view`` derives it from group, op and
sequence number, the CLI's key).
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from neuron_explorer.contracts.stragglers import arrivals, summarize
from neuron_explorer.ui import wire
from neuron_explorer.ui.busy import COLLECTIVE, COMPUTE, HOST, MARKER, REGION, is_collective, leaf_role
from neuron_explorer.ui.params import window_args
from neuron_explorer.ui.profile import Profile
from neuron_explorer.ui.queries import pick_rows
from neuron_explorer.ui.sql import files_sql
from neuron_explorer.util.intervals import merge, union_length

AREA_EXACT_MAX = 3_000_000  # events: above this, counts and busy time come from pyramid level 0
COLLECTIVES_MAX = 50_000  # collectives compared at most (the earliest in the range)
TABLE_ROWS = 500  # collective rows sent (the widest spreads)


def _stats(s: np.ndarray, e: np.ndarray, t0: float, t1: float) -> dict[str, Any]:
    """count, busy time in [t0, t1) and duration percentiles of events (s, e) overlapping it."""
    n = len(s)
    if not n:
        return {"count": 0, "busy_ns": 0, "busy_pct": 0.0, "min_ns": None, "p50_ns": None, "p99_ns": None,
                "max_ns": None}
    d = e - s
    busy = union_length(np.maximum(s, t0), np.minimum(e, t1))
    q = np.quantile(d, [0.5, 0.99], method="inverted_cdf")
    return {"count": int(n), "busy_ns": int(busy), "busy_pct": round(100.0 * busy / max(t1 - t0, 1), 3),
            "min_ns": int(d.min()), "p50_ns": int(q[0]), "p99_ns": int(q[1]), "max_ns": int(d.max())}


def _events(p: Profile, leaf: int, t0i: float, t1i: float) -> tuple[np.ndarray, np.ndarray]:
    idx = p.index
    assert idx is not None
    sl = idx.raw_slices([leaf], t0i, t1i)
    if not sl:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    _, a, b = sl[0]
    s = idx.s[a:b].astype(np.int64)
    e = s + idx.d[a:b].astype(np.int64)
    keep = e >= np.ceil(t0i)
    return s[keep], e[keep]


def _approx(p: Profile, leaves: list[int], t0i: float, t1i: float) -> dict[str, Any]:
    """Count and busy time from pyramid level 0 (buckets whose first event starts in the range)."""
    idx = p.index
    assert idx is not None
    c, d = idx.a["p0_c"], idx.a["p0_d"]
    n = busy = 0
    for _lf, lo, hi in idx.level_starting(0, leaves, t0i, t1i):
        n += int(c[lo:hi].sum(dtype=np.int64))
        busy += int(d[lo:hi].sum(dtype=np.int64))
    span = max(t1i - t0i, 1)
    busy = min(busy, int(span))
    return {"count": n, "busy_ns": busy, "busy_pct": round(100.0 * busy / span, 3), "min_ns": None, "p50_ns": None,
            "p99_ns": None, "max_ns": None}


def area(p: Profile, mode: str, layout: str, row_idx: list[int] | None, t0: float, t1: float) -> dict[str, Any]:
    """Statistics of the events overlapping [t0, t1) on the selected rows (all rows when none):
    ``tracks`` (one per row), ``ranks`` (one per process: the union over its selected tracks) and
    ``names`` (one per event name over the selected tracks); ``approximate`` when the area holds more
    than ``AREA_EXACT_MAX`` events (then no percentiles)."""
    t0, t1, _ = window_args(t0, t1, 1)
    rows = p.rows(mode, layout)
    picked = [(i, r) for i, r in (pick_rows(p, mode, row_idx, layout) if row_idx else enumerate(rows))
              if r.kind == "events"]
    out: dict[str, Any] = {"t0": t0, "t1": t1, "tracks": [], "ranks": [], "names": [], "approximate": False,
                           "count": 0}
    if not picked or p.index is None:
        return out
    t0i, t1i = t0 - p.shift, t1 - p.shift
    all_leaves = sorted({lf for _, r in picked for lf in r.leaves})
    n = sum(hi - lo for _, lo, hi in p.index.count_starting(all_leaves, t0i, t1i))
    approx = bool(p.levels) and n > AREA_EXACT_MAX
    out["approximate"] = approx
    ev: dict[int, tuple[np.ndarray, np.ndarray]] = {} if approx else {lf: _events(p, lf, t0i, t1i) for lf in all_leaves}

    def stats(leaves: list[int]) -> dict[str, Any]:
        if approx:
            return _approx(p, leaves, t0i, t1i)
        s = np.concatenate([ev[lf][0] for lf in leaves])
        e = np.concatenate([ev[lf][1] for lf in leaves])
        return _stats(s, e, t0i, t1i)

    for i, r in picked:
        lf0 = p.leaves[r.leaves[0]]
        out["tracks"].append({"row": i, "label": r.label, "group": r.group, "rank": p.rank(lf0.leaf),
                              **stats(r.leaves)})
    procs: dict[tuple[str, int], list[int]] = {}
    names: dict[str, list[int]] = {}
    for lf in all_leaves:
        procs.setdefault((p.leaves[lf].inst, p.leaves[lf].pid), []).append(lf)
        names.setdefault(p.leaves[lf].name, []).append(lf)
    for (inst, pid), leaves in sorted(procs.items(), key=lambda kv: (p.rank(kv[1][0]), kv[0])):
        row = {"instance": inst, "pid": pid, "rank": p.rank(leaves[0]), **stats(leaves)}
        row.update(_breakdown(p, leaves, ev, t0i, t1i, approx))
        out["ranks"].append(row)
    for name, leaves in sorted(names.items()):
        st = stats(leaves)
        if not approx:  # a name's total: durations inside the range, summed over its tracks
            st["total_in_range_ns"] = int(sum(int((np.minimum(ev[lf][1], t1i) - np.maximum(ev[lf][0], t0i)).sum())
                                              for lf in leaves))
        out["names"].append({"name": name, **st})
    out["count"] = sum(x["count"] for x in out["names"])
    return out


def _breakdown(p: Profile, leaves: list[int], ev: dict[int, tuple[np.ndarray, np.ndarray]], t0i: float,
               t1i: float, approx: bool) -> dict[str, Any]:
    """A rank's time in the area split as decision 0123 says: ``compute`` (the union of its core
    executions), ``cc_exposed`` (collective time no execution overlaps), ``idle`` (neither), and apart,
    never counted as busy, ``host`` (runtime calls) and ``region`` (framework regions); each in ns and
    % of the area. ``busy_pct`` of a rank is its compute share."""
    span = max(t1i - t0i, 1)
    by: dict[str, list[int]] = {COMPUTE: [], COLLECTIVE: [], HOST: [], REGION: [], MARKER: []}
    for lf in leaves:
        by[leaf_role(p.leaves[lf])].append(lf)
    if approx:
        got = {r: _approx(p, lv, t0i, t1i)["busy_ns"] if lv else 0 for r, lv in by.items()}
        comp, cc = got[COMPUTE], got[COLLECTIVE]
        exposed = max(0, min(cc, int(span) - comp))
        host, region = got[HOST], got[REGION]
    else:
        def runs(lv: list[int]) -> tuple[np.ndarray, np.ndarray]:
            if not lv:
                z = np.zeros(0, dtype=np.int64)
                return z, z
            s = np.concatenate([ev[lf][0] for lf in lv])
            e = np.concatenate([ev[lf][1] for lf in lv])
            return merge(np.maximum(s, int(np.ceil(t0i))), np.minimum(e, int(t1i)))
        cs, ce = runs(by[COMPUTE])
        ks, ke = runs(by[COLLECTIVE])
        comp = int(np.maximum(ce - cs, 0).sum())
        cc = int(np.maximum(ke - ks, 0).sum())
        both = union_length(np.concatenate([cs, ks]), np.concatenate([ce, ke]))
        exposed = both - comp
        hs, he = runs(by[HOST])
        rs, re_ = runs(by[REGION])
        host, region = int(np.maximum(he - hs, 0).sum()), int(np.maximum(re_ - rs, 0).sum())
    idle = max(int(span) - comp - exposed, 0)
    pct = (lambda x: round(100.0 * x / span, 3))
    return {"compute_ns": comp, "compute_pct": pct(comp), "cc_exposed_ns": exposed, "cc_exposed_pct": pct(exposed),
            "idle_ns": idle, "idle_pct": pct(idle), "host_ns": host, "host_pct": pct(host), "region_ns": region,
            "region_pct": pct(region), "busy_ns": comp, "busy_pct": pct(comp), "has_compute": bool(by[COMPUTE])}


def collectives(p: Profile, mode: str, layout: str, row_idx: list[int] | None, t0: float, t1: float,
                limit: int = TABLE_ROWS) -> dict[str, Any]:
    """The collectives starting in [t0, t1) on the selected rows (all when none), compared across every
    rank that took part: per collective the first and last arrival and the spread, widest first, and
    the CLI's straggler summary over them."""
    t0, t1, _ = window_args(t0, t1, 1)
    idx = p.index
    none = np.zeros(0, dtype=np.int64)
    out: dict[str, Any] = {"t0": t0, "t1": t1, "collectives": [], "summary": summarize(arrivals(none, none, none)),
                           "compared_capped": False}
    if idx is None:
        return out
    rows = pick_rows(p, mode, row_idx, layout) if row_idx else list(enumerate(p.rows(mode, layout)))
    leaves = sorted({lf for _, r in rows if r.kind == "events" for lf in r.leaves if is_collective(p.leaves[lf].name)})
    sl = idx.count_starting(leaves, t0 - p.shift, t1 - p.shift)
    fns = np.concatenate([np.asarray(idx.fn[lo:hi]) for _, lo, hi in sl]) if sl else np.zeros(0, dtype=np.int64)
    fns = np.unique(fns[fns >= 0])
    out["compared_capped"] = len(fns) > COLLECTIVES_MAX
    fns = fns[:COLLECTIVES_MAX]
    if not len(fns):
        return out
    lens = (idx.fx_off[fns + 1] - idx.fx_off[fns]).astype(np.int64)
    pos = np.concatenate([np.asarray(idx.fx_pos[int(idx.fx_off[f]):int(idx.fx_off[f + 1])]) for f in fns.tolist()])
    pos = pos.astype(np.int64)
    keys = np.repeat(fns.astype(np.int64), lens)
    leaf = idx.leaf_of(pos)
    rank_of_leaf = np.array([p.rank(lf) for lf in range(len(p.leaves))], dtype=np.int64)
    ranks = rank_of_leaf[leaf]
    ok = ranks >= 0  # as the CLI: events of processes without a rank are not compared
    keys, pos, ranks = keys[ok], pos[ok], ranks[ok]
    tab = arrivals(keys, idx.s[pos].astype(np.int64), ranks)

    def describe(key: int) -> dict[str, Any]:
        return {"flow_id": str(int(idx.fx_id[key]))}

    out["summary"] = summarize(tab, describe)
    order = np.argsort(-tab.spread, kind="stable")[:limit]
    # each collective's arrivals (rank, event id, leaf, start), so a row selects it on every rank
    by_key: dict[int, list[list[Any]]] = {}
    for k, q, r in zip(keys.tolist(), pos.tolist(), ranks.tolist()):
        by_key.setdefault(int(k), []).append([int(r), wire.id_value(int(idx.id[q])),
                                              int(idx.leaf_of(np.array([q]))[0]), int(idx.s[q]) + p.shift])
    for j in order.tolist():
        key = int(tab.key[j])
        last = int(pos[tab.last_index[j]])
        out["collectives"].append({
            "flow_id": str(int(idx.fx_id[key])), "name": p.leaves[int(idx.leaf_of(np.array([last]))[0])].name,
            "ranks": int(tab.ranks[j]), "first_rank": int(tab.first_rank[j]), "last_rank": int(tab.last_rank[j]),
            "first_start": int(tab.first_start[j]) + p.shift, "last_start": int(tab.last_start[j]) + p.shift,
            "spread_ns": int(tab.spread[j]), "last_id": wire.id_value(int(idx.id[last])),
            "last_leaf": int(idx.leaf_of(np.array([last]))[0]), "last_end": int(idx.s[last] + idx.d[last]) + p.shift,
            "arrivals": sorted(by_key.get(key, []), key=lambda a: a[3])})
    _name_collectives(p, out["collectives"])
    return out


def _name_collectives(p: Profile, rows: list[dict[str, Any]]) -> None:
    """Add ``op``, ``group``, ``seq`` and ``bytes`` (the columns ``view`` writes for collectives) to
    each row, read for the rows' last arrivals in one query: a row then says which collective it is
    instead of its event name. Stores without those columns leave them out."""
    if not rows or not p.ev_files:
        return
    ids = sorted({int(r["last_id"]) for r in rows})
    c = p.cursor()
    try:
        files = files_sql([f for _, _, f in p.ev_files])
        c.execute(f"SELECT id, op, group_ranks, seq, bytes FROM read_parquet({files}, union_by_name = true) "
                  "WHERE id IN (SELECT unnest(?))", [ids])
    except duckdb.BinderException:
        return  # a store written before these columns
    got = {int(r[0]): r[1:] for r in c.fetchall()}
    for r in rows:
        a = got.get(int(r["last_id"]))
        if a is None:
            continue
        op, group, seq, nbytes = a
        r.update({"op": op, "group": group, "seq": None if seq is None else int(seq),
                  "bytes": None if nbytes is None else int(nbytes)})
