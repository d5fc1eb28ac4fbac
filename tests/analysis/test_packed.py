"""``analysis.packed``: int64 columns packed for the trip from a diff's workers come back exactly
(every value, extremes and wrapped differences included), narrower where their range allows."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from neuron_explorer.analysis.packed import Packed, concat, concat_pieces, pack, unpack

I64 = np.iinfo(np.int64)


def _columns() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    start = np.cumsum(rng.integers(0, 20_000_000, 1000)) + 1_700_000_000_000_000_000  # (a range beyond 32 bits)
    return {
        "empty": np.zeros(0, dtype=np.int64),
        "one": np.array([-5], dtype=np.int64),
        "constant": np.full(300, 1 << 40, dtype=np.int64),
        "small": rng.integers(-100, 100, 500),
        "u16": rng.integers(10, 60_000, 500),
        "u32": rng.integers(-(1 << 31), 1 << 31, 500),
        "wide": rng.integers(I64.min, I64.max, 500, dtype=np.int64),
        "extremes": np.array([I64.min, I64.max, 0, -1, I64.min, I64.max], dtype=np.int64),
        "starts": start,
        "ends": start + rng.integers(0, 60_000, 1000),
        "falling": np.arange(1000, 0, -1, dtype=np.int64),
        # consecutive differences that wrap past int64 yet fit 32 bits as int64 differences
        "wrapping": np.array([I64.max - 3, I64.max, I64.min + 2, I64.min + 100], dtype=np.int64),
        "big steps": np.array([I64.min, 0, I64.max], dtype=np.int64),
    }


@pytest.mark.parametrize("name", sorted(_columns()))
def test_every_column_comes_back_exactly_whatever_the_packing(name):
    a = _columns()[name]
    for ref in (None, a[::-1].copy(), np.zeros_like(a), a + 7, np.full_like(a, I64.max)):
        for delta in (False, True):
            p = pack(a, ref, 0 if ref is not None else -1, delta=delta)
            back = unpack(pickle.loads(pickle.dumps(p, protocol=5)), ref)
            assert back.dtype == np.int64 and np.array_equal(back, a), (name, delta, p)


def test_narrow_where_the_range_allows():
    c = _columns()
    assert isinstance(pack(c["constant"]), Packed) and pack(c["constant"]).nbytes == 0
    assert pack(c["small"]).narrow.dtype == np.uint8
    assert pack(c["u16"]).narrow.dtype == np.uint16
    assert pack(c["u32"]).narrow.dtype == np.uint32
    assert isinstance(pack(c["wide"]), np.ndarray) and pack(c["extremes"]).dtype == np.int64
    starts, ends = c["starts"], c["ends"]
    assert isinstance(pack(starts), np.ndarray)  # (a wide range: int64 as it is)
    assert pack(starts, delta=True).delta and pack(starts, delta=True).narrow.dtype == np.uint32
    assert pack(ends, starts, 0).ref == 0 and pack(ends, starts, 0).narrow.dtype == np.uint16
    assert pack(c["wrapping"], delta=True).delta  # (differences taken as int64 wraps do)


def test_a_column_left_wide_is_sent_as_it_is():
    a = _columns()["wide"]
    a.flags.writeable = False
    assert pack(a) is a


def test_pack_wants_int64():
    with pytest.raises(TypeError):
        pack(np.zeros(3, dtype=np.int32))


def test_concat_of_packed_and_plain_pieces_is_numpys():
    c = _columns()
    pieces = [c["starts"][:400], c["starts"][400:], c["starts"][:0], c["u32"]]
    plain = np.concatenate(pieces)
    packed = [pack(x, delta=True) for x in pieces[:2]] + [pieces[2], pack(pieces[3])]
    assert np.array_equal(concat(packed), plain) and concat(packed).dtype == np.int64
    assert concat(pieces).dtype == plain.dtype and np.array_equal(concat(pieces), plain)
    assert len(concat([])) == 0


def test_pieces_packed_against_another_column_read_its_concatenation():
    c = _columns()
    s, e = c["starts"], c["ends"]
    halves = [(s[:600], e[:600], np.full(600, 3)), (s[600:], e[600:], np.full(400, 4))]
    packed = [(pack(a, delta=True), pack(b, a, 0), pack(p)) for a, b, p in halves]
    got = concat_pieces(packed + [tuple(np.zeros(0, np.int64) for _ in range(3))])
    want = [np.concatenate([h[i] for h in halves]) for i in range(3)]
    assert all(np.array_equal(g, w) and g.dtype == np.int64 for g, w in zip(got, want))
    with pytest.raises(ValueError):
        concat([packed[0][1]])  # (an end without its starts)
