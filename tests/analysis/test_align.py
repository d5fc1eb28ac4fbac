"""analysis.align: clock offsets between instances from collective end times, the groups that share
none, and who entered each collective last.  (Sampling: tests/view/test_align_sample.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from neuron_explorer.analysis import align
from neuron_explorer.analysis.pbfile import ProfileError
from neuron_explorer.analysis.reader import CLOCK_OFFSET_LIMIT_NS

from .sessions import session, trace_info


def _times(keys, ends, starts=None) -> align.Times:
    k = np.asarray(keys, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    return k, (e - 10 if starts is None else np.asarray(starts, dtype=np.int64)), e


def test_one_instance_is_its_own_reference_and_is_not_shifted():
    got = align.estimate_offsets({"i-a": [_times([1, 2], [100, 200])]})
    assert got == {"i-a": align.InstanceOffset("i-a", 0, 0, 0, "i-a", "reference")}
    assert align.estimate_offsets({}) == {}


def test_the_offset_is_the_robust_median_of_end_time_differences():
    keys = np.arange(9)
    ref = 1000 * keys
    skew = 1000 * keys - 500 + np.array([0, 1, -1, 0, 2, -2, 0, 0, 90_000])  # one outlier far out
    got = align.estimate_offsets({"i-a": [_times(keys, ref)], "i-b": [_times(keys, skew)]})
    b = got["i-b"]
    assert (b.offset_ns, b.reference, b.method) == (500, "i-a", "collectives")
    assert b.samples == 8  # the outlier beyond 3 scaled MADs is left out
    assert 0 < b.uncertainty_ns <= 3


def test_ranks_of_one_instance_are_averaged_per_collective_first():
    a = _times([1, 2], [1000, 2000])
    b0, b1 = _times([1, 2], [1100, 2100]), _times([1, 2], [1300, 2300])  # two ranks of i-b
    assert align.estimate_offsets({"i-a": [a], "i-b": [b0, b1]})["i-b"].offset_ns == -200


def test_an_instance_is_aligned_through_another_it_shares_collectives_with():
    a = _times([1, 2], [1000, 2000])
    b = _times([1, 2, 3, 4], [1100, 2100, 3100, 4100])  # 100 ahead of a
    c = _times([3, 4], [2800, 3800])  # shares nothing with a: 300 behind b
    got = align.estimate_offsets({"i-a": [a], "i-b": [b], "i-c": [c]})
    assert (got["i-b"].offset_ns, got["i-c"].offset_ns) == (-100, 200)
    assert got["i-c"].reference == "i-b" and align.clock_groups(got) == []


def test_instances_that_share_nothing_keep_their_own_clocks_and_say_so():
    jobs = {"i-a": [_times([1], [10])], "i-b": [_times([1], [15])], "i-c": [_times([7], [99])],
            "i-d": [_times([8], [5])]}
    got = align.estimate_offsets(jobs)
    assert got["i-b"].offset_ns == -5 and got["i-c"].method == got["i-d"].method == "none"
    assert align.clock_groups(got) == [["i-a", "i-b"], ["i-c"], ["i-d"]]


def test_an_offset_beyond_any_clock_error_is_not_taken():
    far = 2 * CLOCK_OFFSET_LIMIT_NS
    got = align.estimate_offsets({"i-a": [_times([1], [far])], "i-b": [_times([1], [0])]})
    assert got["i-b"].method == "none" and got["i-b"].offset_ns == 0


def test_collective_keys_name_group_op_and_sequence_number():
    index = align.CollectiveIndex()
    pair = index.pair_id("0,1", "all_reduce")
    assert index.pair_id("0,1", "all_reduce") == pair and index.pair_id("0,1", "broadcast") == pair + 1
    assert index.pair_id("0,1", "all_reduce", job="j2") == pair + 2  # another job: another collective
    assert index.describe((pair << 40) | 17) == ("0,1", 17, "all_reduce")
    assert index.describe((99 << 40) | 3) == ("?", 3, "?")


def _collectives(offset_wall: int):
    cc = [("cc_running", 100 + 10 * q, 150 + 10 * q, 0, {"op_str": "all_reduce", "seq": q, "group_str": "0,1"})
          for q in range(3)]
    cc.append(("cc_exec_barrier", 500, 510, 0, {"op_str": "barrier", "seq": 0, "group_str": "0,1"}))
    cc.append(("nrt_execute", 600, 700, 0, {}))
    return session(cc, info=trace_info(anchors=[(0, offset_wall)]))


def test_a_sessions_collectives_are_read_in_chunks_on_the_wall_clock():
    s = _collectives(10**18)
    index = align.CollectiveIndex()
    keys, start, end = index.times(s, chunk=2)
    assert [index.describe(int(k)) for k in keys] == [("0,1", 0, "all_reduce"), ("0,1", 1, "all_reduce"),
                                                      ("0,1", 2, "all_reduce"), ("0,1", 0, "barrier")]
    assert (start - 10**18).tolist() == [100, 110, 120, 500] and (end - 10**18).tolist() == [150, 160, 170, 510]
    assert [len(x) for x in index.times(session([]))] == [0, 0, 0]


def test_a_collective_naming_a_string_outside_the_table_is_a_damaged_file():
    s = _collectives(10**18)
    s.events["e"][0] = len(s.strings) + 5
    with pytest.raises(ProfileError, match="group_str of a collective refers to a string outside"):
        align.CollectiveIndex().times(s)


def test_the_rank_that_entered_last_most_often_is_the_straggler():
    index = align.CollectiveIndex()
    pair = index.pair_id("0,1", "all_reduce")
    keys = (pair << 40) | np.arange(3)
    offsets = {"i-a": align.InstanceOffset("i-a", 0, 0, 0, "i-a", "reference"),
               "i-b": align.InstanceOffset("i-b", -1000, 0, 3, "i-a", "collectives")}
    entries = [(0, "i-a", _times(keys, [0, 0, 0], starts=[100, 200, 300])),
               (1, "i-b", _times(keys, [0, 0, 0], starts=[1150, 1190, 1240])),  # -1000: 150, 190, 240
               (-1, "i-a", _times(keys, [0, 0, 0], starts=[0, 0, 0]))]  # not a rank: not compared
    st = align.stragglers(entries, offsets, index)
    assert st["collectives_compared"] == 3 and st["last_to_enter"] == {"0": 2, "1": 1}
    assert st["slowest_rank"] == 0
    assert st["worst"] == {"group": "0,1", "seq": 2, "op": "all_reduce", "last_rank": 0, "spread_ns": 60}
    assert align.stragglers([], offsets, index)["collectives_compared"] == 0
