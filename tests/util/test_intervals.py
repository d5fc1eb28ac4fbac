"""util.intervals: the union of [start, end) intervals that every busy-time figure is built on."""

from __future__ import annotations

import random

import numpy as np

from neuron_explorer.util.intervals import merge, union_length


def _arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_no_intervals_is_an_empty_union():
    rs, re_ = merge(_arr(), _arr())
    assert rs.dtype == np.int64 and len(rs) == 0 and len(re_) == 0
    assert union_length(_arr(), _arr()) == 0


def test_overlapping_nested_and_touching_intervals_merge_into_runs():
    # [0,10) holds [2,3); [10,12) touches it (half-open: no gap); [20,25) and [22,30) overlap
    starts, ends = _arr(22, 0, 2, 10, 20, 40), _arr(30, 10, 3, 12, 25, 41)
    rs, re_ = merge(starts, ends)
    assert rs.tolist() == [0, 20, 40] and re_.tolist() == [12, 30, 41]
    assert union_length(starts, ends) == 12 + 10 + 1


def test_a_gap_of_one_keeps_runs_apart_and_empty_intervals_add_nothing():
    assert merge(_arr(0, 6), _arr(5, 8))[0].tolist() == [0, 6]
    assert union_length(_arr(0, 6), _arr(5, 8)) == 7
    assert union_length(_arr(3, 3), _arr(3, 3)) == 0


def test_union_length_is_the_covered_count_on_random_intervals():
    rng = random.Random(30)
    for _ in range(300):
        n = rng.randint(0, 12)
        starts = [rng.randint(0, 60) for _ in range(n)]
        ends = [s + rng.randint(0, 15) for s in starts]
        covered = np.zeros(80, dtype=bool)
        for s, e in zip(starts, ends):
            covered[s:e] = True
        assert union_length(_arr(*starts), _arr(*ends)) == int(covered.sum())
        rs, re_ = merge(_arr(*starts), _arr(*ends))
        assert (rs[1:] > re_[:-1]).all() and (rs <= re_).all()  # sorted and disjoint runs


def test_large_timestamps_do_not_overflow():
    base = 1 << 62
    assert union_length(_arr(base, base + 5), _arr(base + 10, base + 20)) == 20


def test_a_reversed_interval_is_empty_and_runs_keep_their_members():
    from neuron_explorer.util.intervals import overlap_runs

    s, e = np.array([0, 10, 12, 30]), np.array([5, 4, 20, 40])  # [10, 4) is reversed: empty
    assert [x.tolist() for x in merge(s, e)] == [[0, 10, 12, 30], [5, 10, 20, 40]]
    assert union_length(s, e) == 5 + 8 + 10
    _s, _e, reach, first, last = overlap_runs(np.array([3, 0, 1]), np.array([4, 2, 2]))
    assert first.tolist() == [0, 2] and last.tolist() == [1, 2] and reach.tolist() == [2, 2, 4]
