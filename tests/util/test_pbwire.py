"""util.pbwire: varints, tags, the field walk, and the vectorized ``Rows`` encoder read back with
the walk.  (Rows against protobuf's own parser: tests/view/test_perfetto_encoding.py.)"""

from __future__ import annotations

import random

import numpy as np
import pytest

from neuron_explorer.util import pbwire as w

BOUNDS = [0, 1, 127, 128, 16383, 16384, (1 << 21) - 1, 1 << 21, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]


@pytest.mark.parametrize("v", BOUNDS)
def test_varints_round_trip_at_every_length_boundary(v):
    b = w.encode_varint_scalar(v)
    assert w.decode_varint(b, 0) == (v, len(b))
    assert len(b) == max(1, -(-v.bit_length() // 7))
    assert int(w.varint_len(np.array([v], dtype=np.uint64))[0]) == len(b)


def test_a_negative_value_is_its_64_bit_twos_complement():
    assert w.encode_varint_scalar(-1) == b"\xff" * 9 + b"\x01"
    assert w.decode_varint(w.encode_varint_scalar(-2), 0)[0] == (1 << 64) - 2


def test_varint_len_of_nothing_is_nothing():
    assert w.varint_len(np.zeros(0, dtype=np.uint64)).tolist() == []


def test_a_varint_past_64_bits_or_cut_short_is_refused():
    with pytest.raises(ValueError, match="too long"):
        w.decode_varint(b"\x80" * 10 + b"\x01", 0)
    with pytest.raises(IndexError):  # (readers catch both: analysis.pbfile)
        w.decode_varint(b"\x80\x80", 0)


def test_fields_are_walked_with_their_spans():
    msg = w.varint_field(1, 300) + w.length_delimited(2, b"abc") + b"\x19" + (7).to_bytes(8, "little") + \
        b"\x25" + (9).to_bytes(4, "little")
    got = list(w.iter_fields(msg, 0, len(msg)))
    assert [(f, t) for f, t, *_ in got] == [(1, 0), (2, 2), (3, 1), (4, 5)]
    (_, _, a1, b1, t1), (_, _, a2, b2, t2) = got[:2]
    assert (t1, a1, b1) == (0, 1, 3) and w.decode_varint(msg, a1)[0] == 300
    assert msg[a2:b2] == b"abc" and t2 == b1
    assert got[-1][3] == len(msg)


@pytest.mark.parametrize("msg,why", [
    (b"\x00\x00", "field number 0"),  # zero bytes: stops at once
    (b"\x0b", "wire type 3"),
    (w.length_delimited(1, b"abcdef")[:-1], "past the end"),  # a declared length is not trusted
    (b"\x09\x01\x02", "past the end"),  # a fixed64 cut short
])
def test_malformed_fields_are_refused(msg, why):
    with pytest.raises(ValueError, match=why):
        list(w.iter_fields(msg, 0, len(msg)))


def _split(buf: bytes, lengths) -> list[bytes]:
    out, pos = [], 0
    for n in lengths:
        out.append(buf[pos:pos + n])
        pos += n
    assert pos == len(buf)
    return out


def _decode(row: bytes) -> dict[int, list[int]]:
    fields: dict[int, list[int]] = {}
    for f, t, a, b, _ in w.iter_fields(row, 0, len(row)):
        if t == 0:
            v = w.decode_varint(row, a)[0]
        elif t == 1:
            v = int.from_bytes(row[a:b], "little")
        else:
            v = _decode(row[a:b])  # type: ignore[assignment]
        fields.setdefault(f, []).append(v)
    return fields


def test_varints_of_one_and_two_bytes_are_padded_to_one_row_length():
    rows = w.Rows(2).field_varint(1, [1, 200])
    assert rows.lengths() == 3  # (an int: the same on every row, no compaction pass)
    enc = rows.encode().tobytes()
    assert enc == b"\x08\x81\x00" + b"\x08\xc8\x01"  # 1 carries a redundant high byte
    assert [_decode(r) for r in _split(enc, [3, 3])] == [{1: [1]}, {1: [200]}]


def test_rows_with_absent_fields_and_nested_messages_decode_to_their_values():
    rng = random.Random(3)
    for n in (1, 2, 7, 64):
        a = [rng.choice([0, 1, 127, 128, 1 << 35, (1 << 64) - 1]) for _ in range(n)]
        b = [rng.randrange(1 << 64) for _ in range(n)]
        c = [rng.randrange(1 << 14) for _ in range(n)]
        has_b = [rng.random() < 0.5 for _ in range(n)]
        has_sub = [rng.random() < 0.7 for _ in range(n)]
        sub = w.Rows(n).field_varint(1, np.array(c, dtype=np.uint64)).const(w.varint_field(2, 5))
        rows = (w.Rows(n).field_varint(1, np.array(a, dtype=np.uint64))
                .field_fixed64(2, np.array(b, dtype=np.uint64), present=has_b)
                .message(3, sub, present=has_sub))
        lengths = rows.lengths()
        lengths = [lengths] * n if isinstance(lengths, int) else lengths.tolist()
        for i, row in enumerate(_split(rows.encode().tobytes(), lengths)):
            want = {1: [a[i]]}
            if has_b[i]:
                want[2] = [b[i]]
            if has_sub[i]:
                want[3] = [{1: [c[i]], 2: [5]}]
            assert _decode(row) == want, (n, i)


def test_no_rows_or_no_fields_encode_to_nothing():
    assert w.Rows(0).field_varint(1, np.zeros(0, dtype=np.uint64)).encode().size == 0
    assert w.Rows(3).encode().size == 0
    assert w.Rows(3).field_varint(1, [1, 2, 3], present=[False] * 3).encode().size == 0
