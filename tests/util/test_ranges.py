"""util.ranges.IndexRanges: integer sets kept as merged ranges (core and rank filters).
Wide ranges without members are covered in tests/view/test_untrusted_input.py."""

from __future__ import annotations

import random

import numpy as np
import pytest

from neuron_explorer.util.ranges import IndexRanges


def test_of_merges_overlapping_and_adjacent_pairs_in_any_order():
    r = IndexRanges.of([(8, 9), (0, 3), (4, 5), (2, 2), (11, 11)])
    assert r.ranges == ((0, 5), (8, 9), (11, 11))
    assert str(r) == "0-5,8-9,11" and r.size == 9
    assert IndexRanges.of([]).ranges == () and IndexRanges.of([]).size == 0


@pytest.mark.parametrize("text,bad", [("", ""), ("1,", ""), ("a", "a"), ("3-1", "3-1"), ("1-", "1-"),
                                       ("-1", "-1"), ("1 - 2", "1 - 2"), ("0x1", "0x1")])
def test_parse_names_the_bad_part(text, bad):
    with pytest.raises(ValueError) as e:
        IndexRanges.parse(text)
    assert str(e.value) == bad


def test_text_round_trips_through_parse():
    rng = random.Random(7)
    for _ in range(200):
        pairs = []
        for _ in range(rng.randint(1, 6)):
            lo = rng.randint(0, 50)
            pairs.append((lo, lo + rng.randint(0, 6)))
        r = IndexRanges.of(pairs)
        assert IndexRanges.parse(str(r)) == r
        members = {i for lo, hi in pairs for i in range(lo, hi + 1)}
        assert r.members() == sorted(members) and r.size == len(members)
        assert [x in r for x in range(-2, 60)] == [x in members for x in range(-2, 60)]


def test_members_up_to_the_limit_and_not_one_more():
    r = IndexRanges.parse("0-9")
    assert r.members(limit=10) == list(range(10))
    with pytest.raises(ValueError, match="more than 9"):
        r.members(limit=9)


def test_membership_takes_integers_only():
    r = IndexRanges.parse("1-3")
    assert True in r and np.uint8(2) in r  # operator.index: bool and numpy integers are integers
    assert 2.0 not in r and None not in r and "2" not in r


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64, np.uint64])
def test_mask_clips_ranges_to_the_dtype(dtype):
    info = np.iinfo(dtype)
    values = np.array([0, 1, 100, info.max], dtype=dtype)
    r = IndexRanges.parse(f"1,100-{10**20}")  # a range far beyond any dtype's maximum
    assert r.mask(values).tolist() == [False, True, True, True]
    assert not IndexRanges.parse(f"{10**20}").mask(values).any()
    assert IndexRanges.parse("0").mask(np.zeros(0, dtype=dtype)).tolist() == []


def test_distinct_is_numpys_unique_for_any_1d_array() -> None:
    """``distinct`` (no ``numpy.ma`` import) gives ``numpy.unique``'s array: values, order and dtype
    (integers, and floats without NaN: the capture's timestamps and core indices)."""
    import numpy as np

    from neuron_explorer.util.ranges import distinct

    rng = np.random.default_rng(7)
    cases = [np.empty(0, np.int64), np.array([5], np.int64), np.array([3, 3, 3], np.int32),
             np.array([2**62, -2**62, 0, 2**62], np.int64), np.array([1.5, -0.0, 0.0, 1.5])]
    for _ in range(300):
        n = int(rng.integers(0, 50))
        dtype = rng.choice([np.int64, np.int32, np.uint8, np.float32, np.float64])
        cases.append(rng.integers(0, int(rng.integers(1, 20)), n).astype(dtype))
    for a in cases:
        got, want = distinct(a), np.unique(a)
        assert got.dtype == want.dtype and got.tolist() == want.tolist(), (a, got, want)
