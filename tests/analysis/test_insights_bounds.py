"""``analysis.insights`` over many steps: the document's lists stay bounded and say what they
left out, and steps figured on a sample still pair across ranks (docs/summary.md)."""

from __future__ import annotations

import json

import numpy as np

from neuron_explorer.analysis import insights
from neuron_explorer.analysis.steps import BREAKDOWN, COUNTS, figured_sample

EXTRA = ("wall_ns", "collective_ns", "own_ns", "compute_own_ns", "optimizer_ns", "flops")


def _proc(rank: int, n: int, cap: int | None, slow_own: int = 0) -> dict:
    """One rank's steps: 4 ms each, a 3 ms own share (``slow_own`` more on the straggler),
    the others waiting that long in collectives; figured on ``figured_sample`` when ``cap``."""
    num = np.arange(n, dtype=np.int64)
    start = num * 4_000_000
    wall = np.full(n, 4_000_000, dtype=np.int64)
    wall[n // 3] = 9_000_000  # an outlier step
    d: dict = {"instance_id": "vm", "pid": 100 + rank, "rank": rank, "device_kind": "cpu", "method": "cycle",
               "boundary": "f"}
    pick = figured_sample(num, wall, cap) if cap else np.arange(n)
    if cap:
        d.update(every_number=num, every_start_ns=start, every_end_ns=start + wall)
    d.update(number=num[pick], start_ns=start[pick], end_ns=(start + wall)[pick])
    for c in BREAKDOWN + COUNTS + EXTRA:
        d[c] = np.zeros(len(pick), dtype=np.int64)
    d["wall_ns"] = wall[pick]
    d["own_ns"] = np.full(len(pick), 3_000_000 + slow_own)
    d["compute_own_ns"] = d["own_ns"].copy()
    d["compute_ns"] = d["own_ns"].copy()
    d["idle_ns"] = wall[pick] - d["own_ns"]
    return d


def test_many_steps_give_bounded_lists_and_a_paired_straggler():
    n = 20_000
    procs = [_proc(r, n, 2000, slow_own=900_000 if r == 3 else 0) for r in range(4)]
    doc = insights.analyse(procs)
    st = doc["steps"]
    assert st["count"] == n and len(st["per_step"]) <= insights.MAX_LISTED_STEPS
    assert st["omitted"]["steps"] == n - len(st["per_step"]) and st["figured"]["steps"] < n
    assert n // 3 in st["variation"]["outliers"] and st["variation"]["outlier_count"] == 1
    listed = [r["number"] for r in st["per_step"]]
    assert listed == sorted(listed) and n // 3 in listed and all(r["ranks"] == 4 for r in st["per_step"])
    for p in st["per_process"]:
        assert p["steps_total"] == n and "every_number" not in p and set(p["number"]) <= set(listed)
    top = doc["insights"][0]
    assert top["id"] == "straggler" and top["evidence"]["ranks"] == [3]
    assert abs(top["impact_ns_per_step"] - 900_000) < 1000
    assert len(json.dumps(doc)) < 2_000_000


def test_few_steps_are_all_listed():
    procs = [_proc(r, 50, None) for r in range(2)]
    st = insights.analyse(procs)["steps"]
    assert len(st["per_step"]) == 50 and "omitted" not in st and "figured" not in st
    assert all(len(p["number"]) == 50 and "steps_total" not in p for p in st["per_process"])
