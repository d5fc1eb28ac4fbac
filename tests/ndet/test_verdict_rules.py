"""ndet.verdict, one rule at a time, on hand-made logs (no process, no file): which ranks each rule
blames and the line it prints, and the ordering and cleanliness of the whole verdict."""

from __future__ import annotations

import numpy as np
import pytest

from neuron_explorer.contracts import ndet_log as fmt
from neuron_explorer.ndet import verdict as vd
from neuron_explorer.ndet.analysis import CollectiveIndex, scan
from neuron_explorer.ndet.sources import RankLog

S = 10**18  # wall clock: offsets are 0, so record times are wall times
STRINGS = ["", "all_reduce", "0,1,2", "float32", "broadcast", "float16"]
OP, GROUP, F32 = 1, 2, 3


def cc(seq: int, t0: int, *, op: int = OP, nbytes: int = 4, dtype: int = F32, state: int = fmt.STATE_COMPLETE,
       ret: int = 0, kind: int = fmt.KIND_CC_OP) -> tuple:
    return dict(kind=kind, state=state, ret=ret, t0=S + t0, t1=0 if state else S + t0 + 10, a=op, b=seq, c=nbytes,
                d=dtype, e=GROUP)


def ex(t0: int, *, ret: int = 0, kind: int = fmt.KIND_EXEC, nan: int = 0) -> dict:
    return dict(kind=kind, state=fmt.STATE_COMPLETE, ret=ret, t0=S + t0, t1=S + t0 + 10, a=7, b=t0, c=nan, d=0, e=0)


def log(rank: int, records: list[dict], *, final: bool = True, reason: str = "exit", last: int = 1000,
        **kw) -> RankLog:
    rec = np.zeros(len(records), dtype=fmt.RECORD_DTYPE)
    for i, r in enumerate(records):
        for k, v in r.items():
            rec[i][k] = v
    return RankLog(path=f"/logs/ndet_r{rank}.log", source="ndet", rank=rank, pid=100 + rank, instance_id="i-a",
                   world_size=3, nd=0, start_wall_ns=S, last_wall_ns=S + last, final=final, reason=reason,
                   flush_period_ns=1_000_000, offset_ns=0, strings=list(STRINGS),
                   models={7: {"id": 7, "name": "step_graph", "neff_name": "neff_7"}}, records=rec, **kw)


def judge(*logs: RankLog):
    index = CollectiveIndex()
    summaries = [scan(lg, index) for lg in logs]
    culprits, notes = vd.verdict(summaries, index)
    return culprits, notes, vd.is_clean(summaries, culprits)


def healthy(rank: int, seqs=range(3), **kw) -> RankLog:
    return log(rank, [cc(q, 100 * q + rank) for q in seqs], **kw)


def test_a_healthy_job_has_no_culprit_and_no_note():
    culprits, notes, clean = judge(healthy(0), healthy(1), healthy(2))
    assert culprits == [] and notes == [] and clean


def test_mismatched_signature_blames_the_ranks_outside_the_majority():
    odd = log(2, [cc(0, 2), cc(1, 102, nbytes=8), cc(2, 202)])
    culprits, _, clean = judge(healthy(0), healthy(1), odd)
    (c,) = culprits
    assert c.ranks == [2] and not clean and c.t_wall == S + 102
    assert c.text == ("culprit: rank 2: mismatched size in all_reduce #1 of group [0, 1, 2]: "
                      "ranks 0, 1: all_reduce 4 B float32; rank 2: all_reduce 8 B float32")


def test_a_tied_mismatch_takes_the_lowest_ranks_signature_as_the_reference():
    a = log(0, [cc(0, 0, op=4, dtype=5)])
    b = log(1, [cc(0, 1)])
    (c,) = judge(a, b)[0]
    assert c.ranks == [1] and "mismatched dtype/op in broadcast #0" in c.text and c.text.endswith(
        "(tie: the group of the lowest rank is taken as the reference)")


def test_a_rank_missing_from_a_collective_others_wait_in_is_named():
    waiting = [cc(3, 300, state=fmt.STATE_IN_FLIGHT)]
    r0 = log(0, [cc(q, 100 * q) for q in range(3)] + waiting, last=5 * 10**9)
    r1 = log(1, [cc(q, 100 * q + 1) for q in range(3)] + waiting, last=5 * 10**9)
    culprits, _, _ = judge(r0, r1, healthy(2))
    (c,) = culprits
    assert c.ranks == [2] and c.t_wall == S + 300
    assert c.text.startswith("culprit: rank 2 never entered all_reduce #3 of group [0, 1, 2]; rank 0 stuck in it")
    assert "(5.0 s at its last write)" in c.text


def test_a_missing_rank_whose_log_stopped_early_is_named_once_as_dead():
    r0 = log(0, [cc(q, 100 * q) for q in range(4)])
    r1 = log(1, [cc(q, 100 * q + 1) for q in range(4)])
    dead = healthy(2, final=False, last=250)
    culprits, notes, _ = judge(r0, r1, dead)
    (c,) = culprits  # not again by the job rule for early stops
    assert c.ranks == [2] and "its log stops at" in c.text and "with no final write (crashed or killed)" in c.text
    assert c.text.endswith("; ranks 0, 1 entered it")  # (both finished it: no wait to report)
    assert notes == [f"rank 2 (ndet_r2.log): no final write (crashed or killed); last write at {vd.wall_str(S + 250)}"]


def test_every_rank_stuck_in_the_same_collective_is_a_hang_without_a_culprit_rank():
    logs = [log(r, [cc(0, r), cc(1, 100 + r, state=fmt.STATE_IN_FLIGHT)]) for r in range(3)]
    (c,) = judge(*logs)[0]
    assert c.ranks == [] and c.t_wall == S + 100
    assert c.text.startswith("hang: every rank of group [0, 1, 2] is in all_reduce #1 and none finished")


def test_a_collective_that_failed_blames_the_earliest_failing_rank():
    logs = [log(r, [cc(0, r, ret=5 if r else 0)]) for r in range(3)]
    (c,) = judge(*logs)[0]
    assert c.ranks == [1] and c.text == "culprit: rank 1: all_reduce of group [0, 1, 2] failed with ret 5 " \
                                        "NRT_TIMEOUT after 0.0 s"


def test_a_log_that_stopped_while_others_went_on_is_an_early_stop():
    culprits, _, clean = judge(log(0, [], last=5 * 10**9), log(1, [], final=False, last=10))
    (c,) = culprits
    assert c.ranks == [1] and c.t_wall == S + 10 and not clean
    assert c.text.startswith("culprit: rank 1: its log stops at") and c.text.endswith("while other ranks went on "
                                                                                     "(crashed or killed)")


def test_without_a_final_write_anywhere_only_a_lag_beyond_the_flush_margin_is_an_early_stop():
    running = [log(0, [], final=False, last=5 * 10**9), log(1, [], final=False, last=5 * 10**9 - 10**8)]
    assert judge(*running)[0] == []  # 0.1 s behind: inside the 1 s margin, both still running
    lagging = [log(0, [], final=False, last=5 * 10**9), log(1, [], final=False, last=10**9)]
    assert [c.ranks for c in judge(*lagging)[0]] == [[1]]


def test_the_first_numerical_error_names_its_rank_graph_and_the_others():
    r0 = log(0, [ex(80, kind=fmt.KIND_NUMERICAL_ERROR, nan=3)])
    r1 = log(1, [ex(50, kind=fmt.KIND_NUMERICAL_ERROR, nan=2)])
    (c,) = judge(r0, r1)[0]
    assert c.ranks == [1] and c.t_wall == S + 50
    assert c.text.startswith("culprit: rank 1: first numerical error (NaN 2, Inf 0) in graph step_graph (neff_7) "
                             "on NC 0, exec_id 50")
    assert c.text.endswith("(ret 1003 NRT_EXEC_COMPLETED_WITH_NUM_ERR); later also on rank 0")


def test_the_first_failed_execution_is_named():
    (c,) = judge(log(0, [ex(10), ex(20, ret=1004), ex(30, ret=5)]))[0]
    assert c.ranks == [0] and c.t_wall == S + 20 and c.text.endswith("(ret 1004 NRT_EXEC_COMPLETED_WITH_ERR)")


def test_culprits_of_different_rules_come_earliest_first():
    r0 = log(0, [ex(900, kind=fmt.KIND_NUMERICAL_ERROR, nan=1), cc(0, 0, ret=5)])
    r1 = log(1, [ex(500, ret=1004), cc(0, 1)])
    culprits = judge(r0, r1)[0]
    assert [c.t_wall - S for c in culprits] == [0, 500, 900]
    assert [c.text.split(": ")[2].split()[0] for c in culprits] == ["all_reduce", "execution", "first"]


CHILD = dict(role=fmt.ROLE_CHILD, process_name="SpawnPoolWorker-1", ppid=100, parent_alive=True)


@pytest.mark.parametrize("reason,facts,in_flight,parent", [
    ("signal:SIGTERM", CHILD, False, True),
    ("signal:SIGTERM", {**CHILD, "role": fmt.ROLE_RANK}, False, False),
    ("signal:SIGTERM", CHILD, True, False),
    ("signal:SIGTERM", {**CHILD, "parent_alive": False}, False, False),
    ("signal:SIGHUP", CHILD, False, False),
    ("signal:SIGTERM", {}, False, False),  # a version-1 log does not say
])
def test_only_an_idle_pool_worker_ended_by_its_live_parent_is_no_error(reason, facts, in_flight, parent):
    records = [ex(10)] + ([dict(ex(20), state=fmt.STATE_IN_FLIGHT)] if in_flight else [])
    worker = log(-1, records, reason=reason, **facts)
    index = CollectiveIndex()
    s = scan(worker, index)
    assert vd.ended_by_its_parent(s) is parent
    culprits, notes = vd.verdict([s], index)
    assert vd.is_clean([s], culprits) is parent
    assert ("while its parent ran (as a pool ends its workers: not an error)" in notes[0]) is parent
