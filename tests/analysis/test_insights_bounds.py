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


def test_the_optimizer_share_fires_at_a_quarter_of_the_step_and_counts_beyond_a_tenth():
    def doc(opt_ns: int) -> dict:
        procs = [_proc(r, 40, None) for r in range(2)]
        for p in procs:
            p["optimizer_ns"] = np.full(40, opt_ns, dtype=np.int64)
        return insights.analyse(procs)

    ids = [[i["id"] for i in doc(ns)["insights"]] for ns in (900_000, 1_000_000, 2_000_000)]
    assert "optimizer_share" not in ids[0] and "optimizer_share" in ids[1] and "optimizer_share" in ids[2]
    found = next(i for i in doc(2_000_000)["insights"] if i["id"] == "optimizer_share")
    assert found["impact_ns_per_step"] == 2_000_000 - 400_000  # beyond 10% of the 4 ms step
    assert found["title"] == "the optimizer step takes 50% of each step"
    assert found["confidence"]["ranks"] == 2 and found["confidence"]["level"] == "high"


def test_a_small_straggler_needs_enough_steady_steps_to_stand_out_of_their_spread():
    """The same 0.6 ms excess on rank 1, in steps that vary by ~1.5 ms: five steps cannot tell it
    from the spread (step_noise_ns above it), four hundred can (docs/summary.md, noise threshold)."""
    def doc(n: int) -> dict:
        rng = np.random.default_rng(5)
        procs = [_proc(r, n, None, slow_own=600_000 if r == 1 else 0) for r in range(2)]
        jitter = rng.normal(0, 1_500_000, n).clip(-2_500_000, 2_500_000).astype(np.int64)
        for p in procs:
            p["wall_ns"] = p["wall_ns"] + 1_000_000 + jitter  # (the same per step on both ranks)
            p["idle_ns"] = p["wall_ns"] - p["own_ns"]
        return insights.analyse(procs)

    few, many = doc(6), doc(400)
    assert few["noise_threshold"]["step_noise_ns"] > 600_000 and "straggler" not in [i["id"] for i in few["insights"]]
    assert many["noise_threshold"]["step_noise_ns"] < 300_000
    top = many["insights"][0]
    assert top["id"] == "straggler" and top["evidence"]["ranks"] == [1]
    assert abs(top["impact_ns_per_step"] - 600_000) < 1000


def test_the_sign_test_asks_more_steps_than_chance_gives():
    """A finding that noise can produce must show in more steady steps than a coin would
    (docs/summary.md, "Sign test"): a 2-rank straggler late in every one of 5 steady steps is not
    named (p = 2/32), in 6 it is (2/64); a data-loading cost in 3 of 5 steps is not, in 5 of 5 it
    is; a compile in one step of five is (not tested: a compile is no noise)."""
    def straggler(n: int) -> dict:
        return insights.analyse([_proc(r, n, None, slow_own=900_000 if r == 1 else 0) for r in range(2)])

    few, enough = straggler(6), straggler(7)
    assert "straggler" not in [i["id"] for i in few["insights"]]
    top = enough["insights"][0]
    assert top["id"] == "straggler" and abs(top["confidence"]["p_value"] - 2 / 64) < 1e-3
    assert enough["noise_threshold"]["alpha"] == insights.ALPHA

    def one(col: str, steps_with: list[int]) -> list[dict]:
        p = _proc(0, 6, None)
        for j in steps_with:
            p[col][j] = 1_000_000
        return insights.analyse([p])["insights"]

    assert [i["id"] for i in one("data_loading_ns", [1, 3, 5])] == []
    found = one("data_loading_ns", [1, 2, 3, 4, 5])
    assert [i["id"] for i in found] == ["data_loading"] and abs(found[0]["confidence"]["p_value"] - 1 / 32) < 1e-3
    found = one("compile_ns", [3])
    assert [i["id"] for i in found] == ["recompilation"] and found[0]["confidence"]["p_value"] is None
    assert insights._sign_p(12, 15) <= insights.ALPHA < insights._sign_p(11, 15)


def test_the_first_iterations_graphs_are_warm_up_and_a_later_compile_is_a_recompile():
    """Compiles in the first steps up to the first step that compiles nothing are warm-up (the
    first iteration's backward or optimizer, registered across the step boundary the detector
    drew inside it: the LSTM's matrix cell under the pure-Python path, where that first
    registration took 8 ms of a loaded host); a compile after a step without one is a recompile,
    and a program that compiles in every step keeps every step but its first."""
    def found(steps_with: list[int], n: int = 40) -> list[dict]:
        p = _proc(0, n, None)
        for j in steps_with:
            p["compile_ns"][j] = 9_000_000
            p["compiles"][j] = 1
        return [i for i in insights.analyse([p])["insights"] if i["id"] == "recompilation"]

    assert found([0, 1]) == [] and found([0, 1, 2]) == []
    assert [i["evidence"]["steps"] for i in found([1])] == [[1]]  # step 0 compiled nothing
    later = found([0, 1, 5])
    assert len(later) == 1 and later[0]["evidence"]["steps"] == [5]
    assert later[0]["impact_ns_per_step"] == 9_000_000 // 38  # mean over the 38 steps after warm-up
    every = found(list(range(8)), n=8)
    assert len(every) == 1 and every[0]["impact_ns_per_step"] == 9_000_000


def test_a_straggler_whose_main_thread_waited_for_a_cpu_has_its_host_cpu_named():
    """Decision 0203: rank 1 0.9 ms slower a step (3.9 against 3 ms of own time), its process under
    the 120% bar.  Its host CPU is named when its main thread waited for a CPU, beyond the others'
    wait, for at least half that excess, and its other threads ran at least as much as its main
    thread and twice as much, relative to it, as the others' did; a rank that waited as long while
    its other threads did not outrun it is computing more on a loaded host; without the columns
    (an older capture, or no sample inside its steps) the cause is as before."""
    def job(proc: tuple[float, float] | None, main: tuple[float, float] = (75.0, 20.0),
            wait: tuple[float, float] = (2.0, 60.0), sampled: bool = True) -> dict:
        procs = [_proc(r, 12, None, slow_own=900_000 if r == 1 else 0) for r in range(2)]
        for i, p in enumerate(procs):
            p["cpu_host_pct"] = np.full(12, 60.0)
            p["cpu_process_pct"] = np.full(12, 95.0)
            if proc is not None:
                p["cpu_process_pct"] = np.full(12, proc[i] if sampled else -1.0)
                p["cpu_main_pct"] = np.full(12, main[i] if sampled else -1.0)
                p["cpu_wait_pct"] = np.full(12, wait[i] if sampled else -1.0)
        top = insights.analyse(procs)["insights"][0]
        assert top["id"] == "straggler" and top["evidence"]["ranks"] == [1], top
        return top

    # a 4 ms step: rank 0's main thread runs 3 ms (75%), waits 0.08 ms (2%), its other threads 1.5%
    # of a CPU; rank 1's main thread runs 0.8 ms (20%) and waits 2.4 ms (60%) while its other
    # threads run 60% of a CPU (process 80%)
    starved = job((76.5, 80.0))
    figs = starved["evidence"]["figures"]
    assert starved["title"] == "rank 1 is a straggler: its host CPU is saturated"
    assert figs["cpu_wait_pct"] == 60.0 and figs["cpu_wait_pct_others"] == 2.0
    assert figs["cpu_main_pct"] == 20.0 and figs["cpu_main_pct_others"] == 75.0
    assert figs["cpu_other_threads_pct"] == 60.0 and figs["cpu_other_threads_pct_others"] == 1.5
    assert figs["cpu_wait_excess_ns"] == 2_320_000 and figs["own_excess_ns"] == 900_000
    assert "waited for a CPU 60% of each step against 2%" in starved["recommendation"]
    assert "other threads ran 60% of a CPU against 2%" in starved["recommendation"]
    computed = "rank 1 is a straggler: its compute is slower"
    assert job((76.5, 22.0))["title"] == computed  # waited as long, its other threads 2% of a CPU
    assert job((76.5, 38.0))["title"] == computed  # other threads 18%: less than its main thread's 20%
    assert job((76.5, 41.0))["title"] == starved["title"]  # 21%: more
    # (rank 0's other threads outran its main thread too, 160% against 75%: rank 1's 3x is not twice that)
    assert job((235.0, 80.0))["title"] == computed
    few = job((76.5, 80.0), wait=(2.0, 13.0))  # waited 0.44 ms more: under half of 0.9
    assert few["title"] == computed and few["evidence"]["figures"]["cpu_wait_excess_ns"] == 440_000
    for top in (job(None), job((76.5, 80.0), sampled=False)):
        assert top["title"] == computed and "cpu_wait_pct" not in top["evidence"]["figures"]
