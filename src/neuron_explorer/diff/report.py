"""The diff of two sides as one JSON-ready document (``SCHEMA``, docs/diff.md): every row an item
aligned across the sides (graph, its compilations, collective, region, a rank's own work per step,
a rank's device memory, the step and its parts), with its statistics on each side, the change, its interval
and the verdict, and where to look on each side (the occurrence nearest the median: rank, process,
start and end, event id), so that a viewer can put both timelines on the item.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from neuron_explorer.analysis import compare as cmp, steps as steps_mod

from . import dataset as dataset_mod
from .dataset import Occurrences, Side

SCHEMA = "neuron-explorer-diff/1"
MEMORY_FLOOR = 1 << 20  # bytes: a peak moving less than this is no change


def _order(occ: Occurrences) -> cmp.Order:
    """``compare.order`` of an item's values, found once (the rows, the pair's noise and ``at`` all
    read it)."""
    if occ.ranked is None:
        occ.ranked = cmp.order(occ.value)
    return occ.ranked


def _at(side: Side, occ: Occurrences, o: cmp.Order | None = None) -> dict[str, Any] | None:
    """The occurrence nearest the median (the first in time order of those as near): where a
    viewer jumps to.  ``o``: the values' ``order``, when known."""
    if not len(occ):
        return None
    o = _order(occ) if o is None else o
    v = occ.value
    assert o.median is not None and o.mid is not None
    lo, hi = o.mid
    if v.dtype == np.int64 and max(abs(lo), abs(hi)) < 2.0 ** 52:
        # integers: the nearest to the mean of the two middle values are those equal to either
        # (exactly as far, and every other value is further): no distance computed per value
        near = np.flatnonzero(v == lo) if lo == hi else np.flatnonzero((v == lo) | (v == hi))
    else:
        dist = np.abs(v - o.median)
        near = np.flatnonzero(dist == dist.min())
    if occ.order is not None and len(near) == len(v):  # every row: the first in time order
        near = occ.order[:1]
    elif occ.order is not None:  # the first in time order: the earliest start, of equal starts the first row
        first = occ.start[near]
        near = near[first == first.min()]
    i = int(near[0])
    proc = occ.proc_at(i)
    p = side.processes.get(proc)
    return {"rank": side.rank_of(proc), "instance_id": p.instance_id if p else None,
            "process_id": p.process_id if p else None, "start_ts": int(occ.start[i]), "end_ts": int(occ.end[i]),
            "id": int(occ.ids[i])}


def _side_stats(side: Side, occ: Occurrences | None, name: str | None = None,
                o: cmp.Order | None = None) -> dict[str, Any] | None:
    if occ is None:
        return None
    o = _order(occ) if o is None else o
    out: dict[str, Any] = {"name": name} if name is not None else {}
    out.update(cmp.stats(occ.value, o).as_dict())
    procs = occ.processes()
    out["ranks"] = sorted({side.rank_of(int(p)) for p in procs})
    out["total_ns"] = int(occ.value.sum())
    out["at"] = _at(side, occ, o)
    return out


def _row(kind: str, key: str, label: str, base: Side, cand: Side, ob: Occurrences | None, oc: Occurrences | None,
         th: cmp.Thresholds, names: tuple[str | None, str | None] = (None, None), **extra: Any) -> dict[str, Any]:
    empty = np.zeros(0, dtype=np.int64)
    vb, vc = (ob.value if ob is not None else empty), (oc.value if oc is not None else empty)
    # once per side, for the change and the side's figures
    orders = (_order(ob) if ob is not None else cmp.order(empty), _order(oc) if oc is not None else cmp.order(empty))
    samples = None
    if any(o is not None and o.order is not None for o in (ob, oc)):  # (rows not in time order)
        samples = (cmp.thin(vb, ob.order if ob is not None else None),
                   cmp.thin(vc, oc.order if oc is not None else None))
    change = cmp.compare(vb, vc, f"{kind}:{key}", th, floor_ns=extra.pop("floor_ns", None), orders=orders,
                         samples=samples)
    row: dict[str, Any] = {"kind": kind, "key": key, "label": label,
                           "baseline": _side_stats(base, ob, names[0], orders[0]),
                           "candidate": _side_stats(cand, oc, names[1], orders[1])}
    row.update(extra)
    row.update(change.as_dict())
    return row


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} B"


def graph_rows(base: Side, cand: Side, th: cmp.Thresholds) -> tuple[list[dict], list[dict], list[dict], list]:
    """Rows of matched graphs, and the new and vanished ones (each with its family: the stem it
    shares with a graph of the other side, e.g. a graph compiled again for new shapes)."""
    info = {s: [cmp.GraphInfo(n, str(m.get("kind") or ""), int(m.get("num_nodes") or -1), str(m.get("signature") or ""),
                              str(m.get("backend") or "")) for n, m in side.models.items()]
                + [cmp.GraphInfo(n) for n in side.graphs if n not in side.models]
            for s, side in (("b", base), ("c", cand))}
    m = cmp.match_graphs(info["b"], info["c"])
    rows = []
    for nb, nc, how in m.pairs:
        ob, oc = base.graphs.get(nb), cand.graphs.get(nc)
        if ob is None and oc is None:
            continue
        label = nb if nb == nc else f"{nb} -> {nc}"
        rows.append(_row("graph", cmp.stem(nb) if how == "structure" else nb, label, base, cand,
                         ob if ob is not None else _none(), oc if oc is not None else _none(), th, (nb, nc),
                         match=how))
    stems_b = {cmp.stem(n) for n in base.graphs}
    stems_c = {cmp.stem(n) for n in cand.graphs}
    new, vanished = [], []
    for n in m.new:
        if n in cand.graphs:
            new.append(_row("graph", n, n, base, cand, None, cand.graphs[n], th, (None, n), match=None,
                            family=cmp.stem(n), recompile=cmp.stem(n) in stems_b,
                            compile_ns=cand.compile_ns.get(n)))
    for n in m.vanished:
        if n in base.graphs:
            vanished.append(_row("graph", n, n, base, cand, base.graphs[n], None, th, (n, None), match=None,
                                 family=cmp.stem(n), recompile=cmp.stem(n) in stems_c,
                                 compile_ns=base.compile_ns.get(n)))
    return rows, new, vanished, m.pairs


def version_changes(base: Side, cand: Side, pairs: list[tuple[str, str, str]]) -> tuple[list[dict], list[dict]]:
    """Versions of a matched graph (one per signature it was compiled for) found on one side only:
    a graph compiled again for new shapes keeps its name, so its new versions are listed here."""
    new, vanished = [], []
    for nb, nc, _how in pairs:
        vb, vc = base.versions.get(nb, set()), cand.versions.get(nc, set())
        new += [{"graph": nc, "signature": sig, "recompile": True} for sig in sorted(vc - vb)]
        vanished += [{"graph": nb, "signature": sig, "recompile": True} for sig in sorted(vb - vc)]
    return new, vanished


def compile_rows(base: Side, cand: Side, pairs: list[tuple[str, str, str]]) -> list[dict]:
    """Per matched graph, its compilations (``model_load``) per process on each side.  Compiling
    is deterministic for a given program, so a different count per process is a change by itself
    (a recompile every step shows here), with no interval."""
    rows = []
    for nb, nc, _how in pairs:
        ob, oc = base.compiles.get(nb), cand.compiles.get(nc)
        if ob is None and oc is None:
            continue
        per: list[dict[str, Any] | None] = []
        for side, occ in ((base, ob), (cand, oc)):
            procs = 0 if occ is None else len(occ.processes())
            per.append(None if occ is None else {"count": len(occ), "processes": procs,
                                                 "per_process": round(len(occ) / max(procs, 1), 3),
                                                 "total_ns": int(occ.value.sum()), "at": _at(side, occ)})
        b, c = (float(x["per_process"]) if x else 0.0 for x in per)
        verdict = "more compiles" if c > b else "fewer compiles" if c < b else cmp.SAME
        rows.append({"kind": "compile", "key": nb if nb == nc else f"{nb}|{nc}",
                     "label": f"{nb} compilations per process", "family": cmp.stem(nb),
                     "baseline": per[0], "candidate": per[1], "delta_ns": None,
                     "delta_count": round(c - b, 3), "delta_pct": round(100 * (c - b) / b, 2) if b else None,
                     "ci_ns": None, "verdict": verdict, "significant": verdict != cmp.SAME})
    return rows


def _none() -> Occurrences:
    z = np.zeros(0, dtype=np.int64)
    return Occurrences(z, z, z, z, z)


def collective_rows(base: Side, cand: Side, th: cmp.Thresholds) -> list[dict]:
    """Collectives by op, group and size; one left over on each side with the same op and group is
    the same collective resized."""
    common = sorted(base.collectives.keys() & cand.collectives.keys())
    pairs: list[tuple[tuple[str, str, int] | None, tuple[str, str, int] | None, str | None]] = [
        (k, k, "size") for k in common]
    only_b = sorted(base.collectives.keys() - cand.collectives.keys())
    only_c = sorted(cand.collectives.keys() - base.collectives.keys())
    resized = cmp.match_resized(only_b, only_c)
    pairs += [(kb, kc, "resized") for kb, kc in resized]
    done_b = {kb for kb, _ in resized}
    done_c = {kc for _, kc in resized}
    pairs += [(k, None, None) for k in only_b if k not in done_b]
    pairs += [(None, k, None) for k in only_c if k not in done_c]
    rows = []
    for kb, kc, how in pairs:
        k = kb or kc
        assert k is not None
        op, group, nbytes = k
        size = _fmt_bytes(nbytes) if kb is None or kc is None or kb[2] == kc[2] else \
            f"{_fmt_bytes(kb[2])} -> {_fmt_bytes(kc[2])}"
        label = f"{op} [{group}] {size}" if nbytes or how == "resized" else f"{op} [{group}]"
        rows.append(_row("collective", f"{op}|{group}|{nbytes}", label, base, cand,
                         base.collectives.get(kb) if kb else None, cand.collectives.get(kc) if kc else None, th,
                         match=how, op=op, group=group,
                         bytes={"baseline": kb[2] if kb else None, "candidate": kc[2] if kc else None}))
    return rows


def _median(occ: Occurrences | None) -> float:
    return float(np.median(occ.value)) if occ is not None and len(occ) else 0.0


def region_rows(base: Side, cand: Side, th: cmp.Thresholds) -> list[dict]:
    rows = []
    for name in sorted(base.regions.keys() | cand.regions.keys()):
        wraps = base.region_graph.get(name) or cand.region_graph.get(name)
        rows.append(_row("region", name, name, base, cand, base.regions.get(name), cand.regions.get(name), th,
                         graph=wraps))
    return rows


def memory_rows(base: Side, cand: Side, th: cmp.Thresholds) -> list[dict]:
    """Device memory per rank: the level it holds (90th percentile of the samples) decides, since
    a spike falls between samples in one run and on one in the next; the peak is reported beside.
    A change must pass ``MEMORY_FLOOR``, the threshold's share of the level and twice the level's
    own noise (the larger of the two sides' half-to-half difference): where the samples fall within
    the steps moves the level by megabytes in an A/A pair (docs/decisions/0131-diff-noise-from-the-pair.md)."""
    def per_rank(side: Side) -> dict[int, tuple[int, int, int]]:
        return {side.rank_of(ix): (side.memory_level[ix], side.memory_peak[ix], side.memory_noise.get(ix, 0))
                for ix in side.memory_level}

    rb, rc = per_rank(base), per_rank(cand)
    rows = []
    for r in sorted(rb.keys() | rc.keys()):
        b, c = rb.get(r), rc.get(r)
        verdict = cmp.NEW if b is None else cmp.VANISHED if c is None else cmp.SAME
        delta = None if b is None or c is None else c[0] - b[0]
        if b is not None and c is not None and delta is not None and \
                abs(delta) >= max(MEMORY_FLOOR, th.min_change_pct / 100 * b[0], 2 * max(b[2], c[2])):
            verdict = "larger" if delta > 0 else "smaller"
        rows.append({"kind": "memory", "key": str(r), "label": f"rank {r} device memory held", "rank": r,
                     "baseline": None if b is None else {"level_bytes": b[0], "peak_bytes": b[1], "noise_bytes": b[2]},
                     "candidate": None if c is None else {"level_bytes": c[0], "peak_bytes": c[1], "noise_bytes": c[2]},
                     "delta_ns": None, "delta_bytes": delta,
                     "delta_pct": None if delta is None or b is None or not b[0] else round(100 * delta / b[0], 2),
                     "ci_ns": None, "verdict": verdict, "significant": verdict in ("larger", "smaller")})
    return rows


def impact(row: dict) -> float:
    """How much time a row's change is worth over the candidate's run: |delta| x occurrences (a new or
    vanished item: its whole time)."""
    if row["kind"] == "memory":
        return float(abs(row.get("delta_bytes") or 0))
    if row["kind"] == "compile":
        tb, tc = ((row[k] or {}).get("total_ns") or 0 for k in ("baseline", "candidate"))
        return float(abs(tc - tb))
    if row["verdict"] in (cmp.NEW, cmp.VANISHED):
        s = row["candidate"] or row["baseline"]
        return float(s.get("total_ns") or 0)
    s = row["candidate"] or {}
    return abs(row["delta_ns"] or 0) * (s.get("count") or 0)


PARTS = steps_mod.BREAKDOWN
STEP_COLUMNS = dataset_mod.STEP_COLUMNS  # (the per-step table of a side: ``Side.step_table``)


def _distinct_count(v: np.ndarray) -> int:
    """``len(numpy.unique(v))``: by a count where the values are small non-negative integers (at
    most twice the sample's length plus a constant: memory sized by the data held, not by a value
    read), else by ``numpy.unique``."""
    if not len(v):
        return 0
    lo, hi = int(v.min()), int(v.max())
    if lo >= 0 and hi < 2 * len(v) + 1024:
        return int(np.count_nonzero(np.bincount(v)))
    return int(len(np.unique(v)))


def step_section(base: Side, cand: Side, th: cmp.Thresholds,
                 user: cmp.Thresholds | None = None) -> tuple[list[dict], dict[str, Any]]:
    """The step rows (step time; each part, a change measured against the step; each rank's own
    work beyond the fastest rank's) and the per step and rank table of both sides, aligned by step
    number and rank.  A row's ``at`` names a step (``id`` is the step number).  ``th`` holds the
    bar raised to the pair's noise; the straggler rows are held to the user's (``user``): they are
    measured against the rank that changed least, which already takes out what the pair's
    environment did to every rank, and the pair's noise counted again would hide a slower rank whose
    extra work slows its job's other ranks on a shared CPU (docs/decisions/0131-diff-noise-from-the-pair.md)."""
    tb, tc = base.step_table, cand.step_table
    info: dict[str, Any] = {
        "method": {"baseline": sorted(base.step_methods), "candidate": sorted(cand.step_methods)},
        "baseline_steps": _distinct_count(tb.cols["number"]), "candidate_steps": _distinct_count(tc.cols["number"]),
    }
    if not len(tb) or not len(tc):
        info.update(verdict="no steps found on " + ("either side" if not len(tb) and not len(tc)
                                                    else "the baseline" if not len(tb) else "the candidate"),
                    baseline_median_ns=None, candidate_median_ns=None, delta_pct=None, ci_pct=None, per_step=None)
        return [], info
    # every step row of a side is over the same processes: found once
    db, dc = (np.unique(np.array([seg[0] for seg in t.segments], dtype=np.int64)) for t in (tb, tc))
    tb_wall = tb.occurrences("wall_ns", db)
    rows = [_row("step", "wall_ns", "step time", base, cand, tb_wall, tc.occurrences("wall_ns", dc), th)]
    med = _order(tb_wall).median or 0.0  # (``numpy.median``)
    floor = max(th.min_change_ns, th.min_change_pct / 100 * med)
    for part in PARTS:
        rows.append(_row("step_part", part, f"step {part[:-3].replace('_', ' ')}", base, cand,
                         tb.occurrences(part, db), tc.occurrences(part, dc), th, floor_ns=floor))
    ranks = sorted({seg[1] for seg in tb.segments} & {seg[1] for seg in tc.segments})
    if len(ranks) > 1:
        own = user or th
        rows += straggler_rows(base, cand, tb, tc, ranks, own, max(own.min_change_ns, own.min_change_pct / 100 * med))
    step = rows[0]
    ci = step["ci_ns"]
    info.update(verdict=step["verdict"], baseline_median_ns=step["baseline"]["median_ns"],
                candidate_median_ns=step["candidate"]["median_ns"], delta_ns=step["delta_ns"],
                delta_pct=step["delta_pct"],
                ci_pct=None if ci is None or not med else [round(100 * ci[0] / med, 2), round(100 * ci[1] / med, 2)],
                per_step=_per_step(tb, tc))
    return rows, info


def _rank_occ(t: dataset_mod.StepTable, rows: np.ndarray | slice, col: str) -> Occurrences:
    c = t.cols
    return Occurrences(c[col][rows], c["start_ns"][rows], c["end_ns"][rows], c["proc"][rows], c["number"][rows])


def straggler_rows(base: Side, cand: Side, tb: dataset_mod.StepTable, tc: dataset_mod.StepTable, ranks: list[int],
                   th: cmp.Thresholds, floor: float) -> list[dict]:
    """Per rank, its own work per step (the step's time in neither a collective nor a wait: what
    the others wait for).  A rank is a straggler change only when its change stands out: beyond
    the thresholds *and* beyond the change of the rank that changed least by as much, so that a
    change every rank shares (a slower graph) is not a straggler."""
    sb, sc = tb.rank_rows(), tc.rank_rows()
    rows = [_row("straggler", str(r), f"rank {r} own work per step", base, cand, _rank_occ(tb, sb[r], "own_ns"),
                 _rank_occ(tc, sc[r], "own_ns"), th, rank=r, subject=f"rank {r}", floor_ns=floor) for r in ranks]
    deltas = [r["delta_ns"] for r in rows if r["delta_ns"] is not None]
    if not deltas:
        return rows
    lo_d, hi_d = min(deltas), max(deltas)
    for r in rows:
        d = r["delta_ns"]
        if r["verdict"] in (cmp.SLOWER, cmp.FASTER) and d is not None:
            apart = d - lo_d if d > 0 else hi_d - d
            r["beyond_other_ranks_ns"] = round(apart)
            if apart < floor:
                r["verdict"], r["significant"] = cmp.SAME, False
    return rows


PER_STEP_LIMIT = 10_000  # (step, rank) pairs in the document; beyond it the table is cut (``truncated``)


def _first_by_key(t: dataset_mod.StepTable) -> tuple[np.ndarray, np.ndarray]:
    """A step table's distinct (number, rank) keys, sorted, and for each the row of its first step
    in time order (``numpy.unique``'s first index of the rows in time order)."""
    keys = t.cols["number"] * (1 << 20) + (t.cols["rank"] + 1)
    o = np.argsort(keys, kind="stable")
    k = keys[o]
    first = np.r_[True, k[1:] != k[:-1]] if len(k) else np.zeros(0, dtype=bool)
    if not first.all():  # a key more than once: the first of its rows in time order (lexsort is stable)
        o = np.lexsort((t.cols["start_ns"], keys))
        k = keys[o]
        first = np.r_[True, k[1:] != k[:-1]]
    return k[first], o[first]


def _common(a: np.ndarray, b: np.ndarray, limit: int) -> tuple[int, np.ndarray, np.ndarray]:
    """How many keys the sorted distinct keys ``a`` and ``b`` share, and where the first ``limit`` of
    them (in key order) are in each: ``numpy.intersect1d(a, b, assume_unique=True,
    return_indices=True)`` cut to ``limit``, by one ``searchsorted`` of ``a`` (sorted keys: each search
    starts where the last ended) instead of a sort of both."""
    if not len(a) or not len(b):
        z = np.zeros(0, dtype=np.int64)
        return 0, z, z
    pos = np.searchsorted(b, a)
    hit = b[np.minimum(pos, len(b) - 1)] == a
    ia = np.flatnonzero(hit)
    return len(ia), ia[:limit], pos[ia[:limit]]


def _consecutive(t: dataset_mod.StepTable) -> dict[int, tuple[int, int, int]] | None:
    """Per rank, (its first row, its first step number, its count of steps) where every rank is
    one process whose step numbers are consecutive integers in row order (the usual table: then
    each (number, rank) key is one row, and a rank's keys are a range); None otherwise, or for a
    rank outside the keys' ``[-1, 2 ** 20 - 1)``."""
    num = t.cols["number"]
    out: dict[int, tuple[int, int, int]] = {}
    for _proc, rank, lo, hi in t.segments:
        if rank in out or not -1 <= rank < (1 << 20) - 1 or hi <= lo:
            return None
        if hi - lo > 1 and not (np.diff(num[lo:hi]) == 1).all():
            return None
        out[rank] = (lo, int(num[lo]), hi - lo)
    return out


def _common_ranges(rb: dict[int, tuple[int, int, int]], rc: dict[int, tuple[int, int, int]],
                   limit: int) -> tuple[int, np.ndarray, np.ndarray]:
    """``_common`` of two tables' keys (their rows: ``_first_by_key``'s) where each rank's keys are a
    range (``_consecutive``): the ranges intersected per rank, and the first ``limit`` common keys
    in (number, rank) order found from them, not from millions of keys sorted."""
    ranks = sorted(rb.keys() & rc.keys())
    lo = np.array([max(rb[r][1], rc[r][1]) for r in ranks], dtype=np.int64)
    hi = np.array([min(rb[r][1] + rb[r][2], rc[r][1] + rc[r][2]) for r in ranks], dtype=np.int64)
    keep = hi > lo
    rk, lo, hi = np.array(ranks, dtype=np.int64)[keep], lo[keep], hi[keep]
    total = int((hi - lo).sum())
    if not total:
        z = np.zeros(0, dtype=np.int64)
        return 0, z, z
    # the smallest number ``upto`` such that the keys below it are at least ``limit`` (or all)
    a, b = int(lo.min()), int(hi.max())
    while a < b:
        mid = (a + b) // 2
        if int(np.clip(mid - lo, 0, hi - lo).sum()) >= limit:
            b = mid
        else:
            a = mid + 1
    top = np.minimum(hi, a)
    size = np.maximum(top - lo, 0)
    nums = np.repeat(lo - np.concatenate(([0], np.cumsum(size)[:-1])), size) + np.arange(int(size.sum()))
    of = np.repeat(np.arange(len(rk)), size)
    o = np.lexsort((rk[of], nums))[:limit]  # (number, then rank)
    nums, of = nums[o], of[o]
    row_b = np.array([rb[int(r)][0] - rb[int(r)][1] for r in rk], dtype=np.int64)[of] + nums
    row_c = np.array([rc[int(r)][0] - rc[int(r)][1] for r in rk], dtype=np.int64)[of] + nums
    return total, row_b, row_c


def _per_step(tb: dataset_mod.StepTable, tc: dataset_mod.StepTable) -> dict[str, Any]:
    """Steps present on both sides (same number and rank), as columns, in step then rank order."""
    ranges = _consecutive(tb), _consecutive(tc)
    if ranges[0] is not None and ranges[1] is not None:
        total, ib, ic = _common_ranges(ranges[0], ranges[1], PER_STEP_LIMIT)
    else:
        (kb, rb), (kc, rc) = _first_by_key(tb), _first_by_key(tc)
        total, ib, ic = _common(kb, kc, PER_STEP_LIMIT)
        ib, ic = rb[ib], rc[ic]
    cols = ("start_ns", "end_ns") + STEP_COLUMNS
    return {"step": tb.cols["number"][ib].tolist(), "rank": tb.cols["rank"][ib].tolist(), "pairs": total,
            "truncated": total > PER_STEP_LIMIT,
            "baseline": {c: tb.cols[c][ib].tolist() for c in cols},
            "candidate": {c: tc.cols[c][ic].tolist() for c in cols}}


def gate(info: dict[str, Any], pct: float) -> dict[str, Any]:
    """``--fail-if-slower PCT``: failed when the lower end of the step time's interval is more than
    PCT percent of the baseline median (slower by more than PCT with confidence); not evaluated
    (``failed`` None) without steps on both sides."""
    ci = info.get("ci_pct")
    if info.get("baseline_median_ns") is None:
        return {"fail_if_slower_pct": pct, "failed": None, "reason": info["verdict"]}
    if ci is None:
        return {"fail_if_slower_pct": pct, "failed": None, "reason": "too few steps for an interval"}
    failed = ci[0] > pct
    return {"fail_if_slower_pct": pct, "failed": failed,
            "reason": f"step time {info['delta_pct']:+.1f}%, 95% interval [{ci[0]:+.1f}%, {ci[1]:+.1f}%]"}


def pair_noise(base: Side, cand: Side) -> float | None:
    """``compare.item_shift`` over the items both sides hold under the same key: graphs by name,
    collectives by op, group and size, regions that are not a graph seen from the framework (it
    would count its graph twice)."""
    items = [(base.graphs[n], cand.graphs[n]) for n in base.graphs.keys() & cand.graphs.keys()]
    items += [(base.collectives[k], cand.collectives[k]) for k in base.collectives.keys() & cand.collectives.keys()]
    items += [(base.regions[n], cand.regions[n]) for n in base.regions.keys() & cand.regions.keys()
              if not (base.region_graph.get(n) or cand.region_graph.get(n))]
    return cmp.shift_of((_order(b), _order(c)) for b, c in items)


def build(base: Side, cand: Side, th: cmp.Thresholds | None = None,
          gate_pct: float | None = None) -> dict[str, Any]:
    """The whole diff document.  The threshold every row is held to is the user's, raised to the
    pair's own noise (``pair_noise``, ``compare.noise_bar``)."""
    user = th or cmp.Thresholds()
    shift = pair_noise(base, cand)
    bar = cmp.noise_bar(shift, user)
    th = replace(user, min_change_pct=100.0 * bar)
    step_rows, step_info = step_section(base, cand, th, user)
    graphs, new, vanished, pairs = graph_rows(base, cand, th)
    new_versions, vanished_versions = version_changes(base, cand, pairs)
    rows = (step_rows + graphs + new + vanished + compile_rows(base, cand, pairs) + collective_rows(base, cand, th)
            + region_rows(base, cand, th) + memory_rows(base, cand, user))
    # a region that is a graph seen from the framework is not a second change
    changes = [r for r in rows if r["significant"] and not (r["kind"] == "region" and r.get("graph"))
               and r["kind"] not in ("step", "step_part")]
    changes.sort(key=impact, reverse=True)
    return {
        "schema": SCHEMA,
        "baseline": _describe(base),
        "candidate": _describe(cand),
        "settings": {"confidence": th.confidence, "resamples": th.resamples, "seed": th.seed,
                     "min_change_pct": user.min_change_pct, "min_change_ns": th.min_change_ns,
                     "min_samples": cmp.MIN_SAMPLES, "noise_factor": th.noise_factor},
        "noise": {"item_shift_pct": None if shift is None else round(100.0 * float(np.expm1(shift)), 2),
                  "bar_pct": round(100.0 * bar, 2)},
        "step": step_info,
        "gate": None if gate_pct is None else gate(step_info, gate_pct),
        "rows": rows,
        "new_graphs": [{"graph": r["key"], "signature": None, "recompile": r["recompile"]} for r in new] + new_versions,
        "vanished_graphs": [{"graph": r["key"], "signature": None, "recompile": r["recompile"]} for r in vanished]
        + vanished_versions,
        "changes": [{"kind": r["kind"], "key": r["key"], "label": r["label"], "verdict": r["verdict"],
                     "subject": _subject(r)} for r in changes],
        "warnings": [f"baseline: {w}" for w in base.warnings] + [f"candidate: {w}" for w in cand.warnings],
    }


def _subject(row: dict) -> str:
    """What a change is about, one name per cause: a graph family (recompiles and the graph they
    replace are one cause), a collective, a region, a rank (a straggler seen by its own work and by
    its late arrivals is one cause)."""
    if row.get("subject"):
        return str(row["subject"])
    if row["kind"] in ("graph", "compile"):
        return "graph " + str(row.get("family") or cmp.stem(row["key"]))
    return f"{row['kind']} {row['key']}"


def _describe(side: Side) -> dict[str, Any]:
    return {"path": side.path, "processes": len(side.processes),
            "ranks": sorted({p.rank for p in side.processes.values()}),
            "instances": sorted({p.instance_id for p in side.processes.values()}), "events": side.events}
