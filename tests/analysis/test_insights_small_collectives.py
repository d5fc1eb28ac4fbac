"""``small_collectives``: the calls a 25 MiB bucket would save times the step's per-call cost,
the interquartile mean over the steady steps (decision 0174); few small calls are no finding."""

from __future__ import annotations

import numpy as np

from neuron_explorer.analysis import insights
from neuron_explorer.analysis.steps import BREAKDOWN, COUNTS

EXTRA = ("wall_ns", "collective_ns", "own_ns", "compute_own_ns", "optimizer_ns", "small_collective_call_ns", "flops")


def _proc(rank: int, calls: int, call_ns: np.ndarray, nbytes: int) -> dict:
    """A rank's steps of ``calls`` small all-reduces of ``nbytes`` in all, each call costing
    ``call_ns`` of its step (the first step is warm-up)."""
    n = len(call_ns)
    wall = np.full(n, 40_000_000, dtype=np.int64)
    num = np.arange(n, dtype=np.int64)
    start = num * 40_000_000
    d: dict = {"instance_id": "vm", "pid": 10 + rank, "rank": rank, "device_kind": "cpu", "method": "optimizer",
               "boundary": "SGD", "number": num, "start_ns": start, "end_ns": start + wall}
    for c in BREAKDOWN + COUNTS + EXTRA:
        d[c] = np.zeros(n, dtype=np.int64)
    busy = calls * call_ns.astype(np.int64)
    d.update(wall_ns=wall, compute_ns=wall, own_ns=wall - busy, compute_own_ns=wall - busy, collective_ns=busy,
             collectives=np.full(n, calls), small_collectives=np.full(n, calls),
             collective_bytes=np.full(n, nbytes), small_collective_bytes=np.full(n, nbytes),
             small_collective_call_ns=call_ns.astype(np.int64), executions=np.full(n, 3))
    return d


def test_impact_is_the_calls_saved_times_the_call_cost():
    rng = np.random.default_rng(174)
    # the warm-up step (not counted), then calls of 0.2-0.3 ms, 1.5 ms in 6 steps a loaded host
    # slowed, and one step a stall hit (the middle half of 20: the eight slowest 0.2-0.3 ms, two 1.5 ms)
    costs = [np.concatenate(([9e6], rng.uniform(0.2e6, 0.3e6, 13), [1.5e6] * 6, [40e6])) for _ in range(3)]
    doc = insights.analyse([_proc(r, 24, c, 200_000) for r, c in enumerate(costs)])
    top = {i["id"]: i for i in doc["insights"]}["small_collectives"]
    expect = np.median([np.sort(c[1:].astype(np.int64))[5:15].mean() * 23 for c in costs])  # (24 of 200 KB: 1 bucket)
    assert abs(top["impact_ns_per_step"] - expect) <= 1
    assert (0.2e6 * 8 + 1.5e6 * 2) / 10 * 23 <= expect <= (0.3e6 * 8 + 1.5e6 * 2) / 10 * 23
    assert top["title"] == "24 collectives under 1 MiB per step" and top["confidence"]["level"] == "high"
    assert top["evidence"]["figures"]["small_collectives"] == 24


def test_bytes_that_fill_buckets_save_fewer_calls_and_few_calls_none():
    call = np.full(10, 1e6)
    # 60 MiB in 40 calls: three 25 MiB buckets, 37 calls saved
    doc = insights.analyse([_proc(0, 40, call, 60 << 20)])
    assert {i["id"]: i["impact_ns_per_step"] for i in doc["insights"]}["small_collectives"] == 37_000_000
    doc = insights.analyse([_proc(0, insights.SMALL_COLLECTIVES_MIN - 1, call, 4096)])
    assert "small_collectives" not in {i["id"] for i in doc["insights"]}
