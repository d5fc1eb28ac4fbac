"""Step numbers tied across ranks by their collectives (``analysis.stepalign``): in process, no
capture.  The end-to-end case (a rank whose ring lost its first steps) is in
tests/analysis/test_step_alignment_ddp.py."""

from __future__ import annotations

import random

import numpy as np

from neuron_explorer.analysis import insights, stepalign
from neuron_explorer.analysis.steps import BREAKDOWN, COUNTS
from tests.fuzzing import examples, seed

STRINGS = ["0,1", "all_reduce", "broadcast"]


def _rank(first_step: int, steps: int, per_step: int = 4, step_ns: int = 1000, seq0: int = 0):
    """One rank of a data-parallel job whose capture holds steps ``first_step..`` (counted from 0,
    as ``analysis.steps`` counts them): ``per_step`` all-reduces a step, their seq running on."""
    k = np.arange(steps, dtype=np.int64)
    s_start, s_end = k * step_ns, (k + 1) * step_ns
    c = np.arange(steps * per_step, dtype=np.int64)
    seq = seq0 + first_step * per_step + c
    start = (c // per_step) * step_ns + (c % per_step) * (step_ns // (per_step + 1)) + 1
    g, o = np.zeros(len(c), np.int64), np.ones(len(c), np.int64)
    return stepalign.pick_anchors(seq, g, o, STRINGS, start, k, s_start, s_end)


def test_a_rank_that_lost_its_first_steps_is_numbered_as_the_others():
    a = [_rank(0, 50), _rank(7, 43)]  # rank 1's capture starts at the job's step 7
    assert stepalign.offsets(["count", "count"], a) == [0, 7]
    # the reference lost them instead: the earliest capture keeps its count, the other moves up
    assert stepalign.offsets(["count", "count"], [_rank(7, 43), _rank(0, 50)]) == [7, 0]


def test_numbers_given_by_regions_or_marks_are_never_moved():
    got = stepalign.offsets(["count", "mark", "count"], [_rank(0, 40), _rank(5, 35), _rank(0, 40)])
    # the marked process says its first step is 0 though its collectives say 5: the marks win,
    # and the counted ones are tied to it
    assert got == [-5, 0, -5]


def test_few_or_disagreeing_anchors_keep_the_count():
    keys, nums = _rank(3, 30)
    one = (keys[:1], nums[:1])
    assert stepalign.offsets(["count", "count"], [_rank(0, 30), one]) == [0, 0]
    # half the anchors say +3, half +9: no two-thirds majority
    mixed = (keys[:10], np.concatenate([nums[:5], nums[5:10] - 6]))
    assert stepalign.offsets(["count", "count"], [_rank(0, 30), mixed]) == [0, 0]
    # nothing shared (another group's collectives): nothing moves
    other = stepalign.pick_anchors(np.arange(20), np.zeros(20, np.int64), np.full(20, 2), STRINGS,
                                   np.arange(20) * 100, np.arange(20), np.arange(20) * 100, np.arange(1, 21) * 100)
    assert stepalign.offsets(["count", "count"], [_rank(0, 30), other]) == [0, 0]


def test_a_process_that_shares_no_collective_is_not_moved_with_the_others():
    other = stepalign.pick_anchors(np.arange(200), np.zeros(200, np.int64), np.full(200, 2), STRINGS,
                                   np.arange(200) * 100, np.arange(20).repeat(10), np.arange(20) * 1000,
                                   np.arange(1, 21) * 1000)
    # rank 1 lost 7 steps; the lowest rank is the reference, so rank 1 stays and rank 0 moves up...
    # ...but rank 2, in a group of its own, keeps its count: nothing ties it to them
    assert stepalign.offsets(["count"] * 3, [_rank(7, 43), _rank(0, 50), other]) == [7, 0, 0]
    assert stepalign.offsets(["count"] * 3, [_rank(0, 50), other, _rank(7, 43)]) == [0, 0, 7]


def test_processes_that_chose_different_strides_still_share_anchors():
    short, long = _rank(200, 10, per_step=8), _rank(0, 210, per_step=8)  # strides 32 and 32 or 64
    assert stepalign.offsets(["count", "count"], [long, short]) == [0, 200]
    k, _ = long
    assert len(k) <= stepalign.ANCHORS_PER_GROUP * 2


def test_collectives_outside_every_step_and_damaged_seq_anchor_nothing():
    seq = np.array([-1, 0, 4, 8], np.int64)
    start = np.array([5, 5, 5000, 50], np.int64)  # 5000: after the last step
    keys, nums = stepalign.pick_anchors(seq, np.array([0, 0, 0, 99]), np.array([1, 1, 1, -7]), STRINGS, start,
                                        np.array([0, 1]), np.array([0, 20]), np.array([20, 40]))
    assert nums.tolist() == [0] and len(keys) == 1  # seq 8's group and op are out of range: "" and ""
    assert stepalign.pick_anchors(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), [], np.zeros(0),
                                  np.zeros(0), np.zeros(0), np.zeros(0))[0].size == 0


def test_the_summary_pairs_the_same_steps_on_every_rank():
    def proc(rank: int, first: int, n: int) -> dict:
        keys, nums = _rank(first, n)
        num = np.arange(n, dtype=np.int64)
        wall = np.full(n, 1_000_000, np.int64)
        cols = {"method": "optimizer", "boundary": "SGD.step", "number": num, "start_ns": num * 1_000_000,
                "end_ns": (num + 1) * 1_000_000, "wall_ns": wall, "numbered": "count", "anchor_key": keys,
                "anchor_number": nums}
        for c in BREAKDOWN + COUNTS + ("collective_ns", "own_ns", "compute_own_ns", "optimizer_ns", "flops"):
            cols[c] = np.zeros(n, np.int64)
        cols["compute_ns"] = wall
        return {"instance_id": "i", "pid": 100 + rank, "rank": rank, "device_kind": "cpu", **cols}
    doc = insights.analyse([proc(1, 6, 24), proc(0, 0, 30)])
    per = {p["rank"]: p for p in doc["steps"]["per_process"]}
    assert per[1]["renumbered_by"] == 6 and "renumbered_by" not in per[0]
    assert max(per[1]["number"]) == max(per[0]["number"]) == 29
    assert not any(k.startswith("anchor_") for p in per.values() for k in p)
    rows = {r["number"]: r["ranks"] for r in doc["steps"]["per_step"]}
    assert rows[29] == 2 and rows[0] == 1


def test_offsets_fuzzed():
    rnd = random.Random(seed(31))
    for i in range(examples(300)):
        n = rnd.randint(0, 6)
        numbered = [rnd.choice(["count", "count", "mark", "region"]) for _ in range(n)]
        anchors = []
        for _ in range(n):
            m = rnd.randint(0, 12)
            anchors.append(None if rnd.random() < 0.2 else (
                np.asarray([rnd.randint(-3, 3) for _ in range(m)], np.int64),
                np.asarray([rnd.randint(-2**40, 2**40) if rnd.random() < 0.1 else rnd.randint(0, 9)
                            for _ in range(m)], np.int64)))
        got = stepalign.offsets(numbered, anchors)
        assert len(got) == n and all(isinstance(d, int) for d in got), (i, numbered)
        assert all(d == 0 for d, k in zip(got, numbered) if k != "count"), (i, numbered, got)


def test_process_anchors_are_each_processes_own_rows_anchors():
    """``process_anchors`` (the rows of every group and op gathered by process with one stable sort,
    a radix sort of 16-bit keys where the indices fit, none where they are in order already) gives
    each process what ``pick_anchors`` gives on that process's own rows in the order they came."""
    rng = np.random.default_rng(192)
    for i in range(60):
        procs = [0, 1, 2, 5] if i % 3 else [3, 70_000, 1 << 40]  # (beyond 16 bits: the general sort)
        spans = {}
        for p in procs:
            ends = np.cumsum(rng.integers(50, 150, 30))
            spans[p] = (np.arange(30) + int(rng.integers(0, 3)), np.r_[0, ends[:-1]], ends)
        colls = []
        for k in range(int(rng.integers(1, 4))):
            n = int(rng.integers(0, 400)) if k or i % 5 else 0  # (a group and op with no rows)
            proc = np.sort(rng.choice(procs, n)) if i % 2 else rng.choice(procs, n)
            seq = rng.integers(-1, 300, n)
            start = rng.integers(0, 3000, n)
            colls.append((f"g{k % 2}", f"op{k}", seq, start, proc))
        got = stepalign.process_anchors(iter(colls), spans)
        strings = [x for g, o, *_ in colls for x in (g, o)]
        for p in procs:
            parts = [(np.asarray(q)[pr == p], np.asarray(s)[pr == p], np.full(int((pr == p).sum()), 2 * j),
                      np.full(int((pr == p).sum()), 2 * j + 1)) for j, (_g, _o, q, s, pr) in enumerate(colls)]
            if not sum(len(x[0]) for x in parts):
                assert p not in got
                continue
            q, s, g, o = (np.concatenate([x[c] for x in parts]) for c in range(4))
            want = stepalign.pick_anchors(q, g, o, strings, s, *spans[p])
            assert [a.tolist() for a in got[p]] == [a.tolist() for a in want], (i, p)
