"""The per-row moving-block bootstrap as ``analysis.compare`` computed it before it worked on ranks
(decision 0146): ``numpy.quantile`` over the float resamples of each row.  Kept here only as the
reference the faster one must equal, number for number, on real diff data."""

from __future__ import annotations

from unittest import mock

import numpy as np

from neuron_explorer.analysis import compare as cmp
from neuron_explorer.diff import report
from neuron_explorer.diff.dataset import Occurrences, Side, StepTable


def block_quantiles(values: np.ndarray, reps: int, rng: np.random.Generator,
                    qs: tuple[float, ...] = (0.5, 0.25)) -> np.ndarray:
    n = len(values)
    block = max(1, int(round(n ** (1 / 3))))
    k = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=(reps, k))
    idx = (starts[:, :, None] + np.arange(block)).reshape(reps, k * block)[:, :n]
    return np.quantile(values[idx], qs, axis=1)


def assert_diff_as_reference(base: Side, cand: Side) -> dict:
    """The diff document of ``base`` and ``cand`` is the same with the reference bootstrap, every
    interval and verdict; returns it.  Fails unless some row was actually bootstrapped."""
    doc = report.build(base, cand)
    with mock.patch.object(cmp, "_block_quantiles", block_quantiles):
        ref = report.build(base, cand)
    assert any(r.get("q25_ci_ns") for r in doc["rows"]), "no row was bootstrapped"
    for got, want in zip(doc["rows"], ref["rows"]):
        assert got == want, (got["kind"], got["key"])
    assert doc == ref
    return doc


# ---- the step rows and collectives as decision 0167's code made them (before decision 0168): the
# step table gathered into time order, ``at`` by the distance of every value to the median, the
# collectives' instances by ``numpy.unique`` and ``ufunc.at``.  The faster code must give the
# same rows, to the bit.

def _at(side: Side, occ: Occurrences, med: float | None = None) -> dict | None:
    if not len(occ):
        return None
    med = np.median(occ.value) if med is None else med
    i = int(np.argmin(np.abs(occ.value - med)))
    p = side.processes.get(int(occ.proc[i]))
    return {"rank": side.rank_of(int(occ.proc[i])), "instance_id": p.instance_id if p else None,
            "process_id": p.process_id if p else None, "start_ts": int(occ.start[i]), "end_ts": int(occ.end[i]),
            "id": int(occ.ids[i])}


def _side_stats(side: Side, occ: Occurrences, o: cmp.Order) -> dict:
    out: dict = dict(cmp.stats(occ.value, o).as_dict())
    out["ranks"] = sorted({side.rank_of(int(p)) for p in np.unique(occ.proc)})
    out["total_ns"] = int(occ.value.sum())
    out["at"] = _at(side, occ, o.median)
    return out


def _row(kind: str, key: str, label: str, base: Side, cand: Side, ob: Occurrences, oc: Occurrences,
         th: cmp.Thresholds, **extra) -> dict:
    vb, vc = np.asarray(ob.value, dtype=np.float64), np.asarray(oc.value, dtype=np.float64)
    orders = cmp.order(vb), cmp.order(vc)  # (floats: the path integers skip)
    change = cmp.compare(vb, vc, f"{kind}:{key}", th, floor_ns=extra.pop("floor_ns", None), orders=orders)
    row = {"kind": kind, "key": key, "label": label, "baseline": _side_stats(base, ob, orders[0]),
           "candidate": _side_stats(cand, oc, orders[1])}
    row.update(extra)
    row.update(change.as_dict())
    return row


def sorted_table(t: StepTable) -> dict[str, np.ndarray]:
    """A side's step table as it was held: every column gathered into time order."""
    o = np.argsort(t.cols["start_ns"], kind="stable")
    return {k: v[o] for k, v in t.cols.items()}


def _occ(t: dict[str, np.ndarray], col: str, sel=None) -> Occurrences:
    s = slice(None) if sel is None else sel
    return Occurrences(t[col][s], t["start_ns"][s], t["end_ns"][s], t["proc"][s], t["number"][s])


def step_rows(base: Side, cand: Side, th: cmp.Thresholds) -> tuple[list[dict], dict]:
    """``report.step_section``'s rows (the straggler rows held to ``th``) and per-step table."""
    tb, tc = sorted_table(base.step_table), sorted_table(cand.step_table)
    rows = [_row("step", "wall_ns", "step time", base, cand, _occ(tb, "wall_ns"), _occ(tc, "wall_ns"), th)]
    med = float(np.median(tb["wall_ns"]))
    floor = max(th.min_change_ns, th.min_change_pct / 100 * med)
    for part in report.PARTS:
        rows.append(_row("step_part", part, f"step {part[:-3].replace('_', ' ')}", base, cand, _occ(tb, part),
                         _occ(tc, part), th, floor_ns=floor))
    ranks = sorted(set(tb["rank"].tolist()) & set(tc["rank"].tolist()))
    strag = [_row("straggler", str(r), f"rank {r} own work per step", base, cand, _occ(tb, "own_ns", tb["rank"] == r),
                  _occ(tc, "own_ns", tc["rank"] == r), th, rank=r, subject=f"rank {r}", floor_ns=floor)
             for r in ranks] if len(ranks) > 1 else []
    deltas = [r["delta_ns"] for r in strag if r["delta_ns"] is not None]
    for r in strag if deltas else []:
        d = r["delta_ns"]
        if r["verdict"] in (cmp.SLOWER, cmp.FASTER) and d is not None:
            apart = d - min(deltas) if d > 0 else max(deltas) - d
            r["beyond_other_ranks_ns"] = round(apart)
            if apart < floor:
                r["verdict"], r["significant"] = cmp.SAME, False
    rows += strag
    kb, kc = (t["number"] * (1 << 20) + (t["rank"] + 1) for t in (tb, tc))
    common, ib, ic = np.intersect1d(kb, kc, return_indices=True)
    ib, ic = ib[:report.PER_STEP_LIMIT], ic[:report.PER_STEP_LIMIT]
    cols = ("start_ns", "end_ns") + report.STEP_COLUMNS
    per_step = {"step": tb["number"][ib].tolist(), "rank": tb["rank"][ib].tolist(), "pairs": len(common),
                "truncated": len(common) > report.PER_STEP_LIMIT,
                "baseline": {c: tb[c][ib].tolist() for c in cols}, "candidate": {c: tc[c][ic].tolist() for c in cols}}
    return rows, {"baseline_steps": len(np.unique(tb["number"])), "candidate_steps": len(np.unique(tc["number"])),
                  "per_step": per_step}


def collectives(colls: dict) -> dict[tuple[str, str, int], Occurrences]:
    """``dataset._collectives`` of ``(op, group) -> (bytes, seq, rank, start, end, proc, ids)``."""
    out = {}
    for (op, group), (nbytes, seq, _rank, start, end, proc, ids) in colls.items():
        key = seq * 1_000_003 + nbytes if (seq >= 0).all() else np.arange(len(seq))
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        n = len(first)
        last_start = np.full(n, np.iinfo(np.int64).min)
        first_end = np.full(n, np.iinfo(np.int64).max)
        np.maximum.at(last_start, inv, start)
        np.minimum.at(first_end, inv, end)
        order = np.lexsort((start, inv))
        last_of = order[np.r_[np.flatnonzero(np.diff(inv[order])), len(order) - 1]]
        transfer = np.maximum(first_end - last_start, 0)
        inst_bytes = nbytes[last_of]
        for b in np.unique(inst_bytes):
            m = inst_bytes == b
            out[(op, group, int(b))] = Occurrences.build(
                transfer[m], last_start[m], np.maximum(first_end[m], last_start[m]), proc[last_of][m], ids[last_of][m])
    return out
