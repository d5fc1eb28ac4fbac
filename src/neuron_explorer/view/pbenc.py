"""Vectorized protobuf encoding: N messages of the same shape, built column by column with numpy.

Building one protobuf object per trace event costs microseconds in Python; a profile has millions.
Here a ``Batch`` describes the fields of N messages (each field a column of values, optionally
absent on some rows), and ``encode`` lays out all N messages in one buffer with a handful of
array operations per field.  The output is ordinary protobuf wire format.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VARINT, FIXED64, LEN = 0, 1, 2


def _tag(field: int, wire: int) -> bytes:
    return encode_varint_scalar((field << 3) | wire)


def encode_varint_scalar(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint_len(v: np.ndarray) -> np.ndarray:
    """Bytes needed for each uint64 value as a varint (1..10)."""
    v = v.astype(np.uint64, copy=False)
    n = np.ones(len(v), dtype=np.int64)
    x = v >> np.uint64(7)
    while True:
        nz = x != 0
        if not nz.any():
            return n
        n += nz
        x = x >> np.uint64(7)


def _write_varints(buf: np.ndarray, pos: np.ndarray, v: np.ndarray, nbytes: np.ndarray) -> None:
    """Write varints without per-byte masks: bytes are written from the last position down, and a
    row that has fewer bytes than k writes to its own last byte, which the k = nbytes-1 pass then
    overwrites with the right value."""
    if len(v) == 0:
        return
    v = v.astype(np.uint64, copy=False)
    last = nbytes - 1
    for k in range(int(nbytes.max()) - 1, -1, -1):
        byte = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        byte |= (last > k).astype(np.uint8) << 7
        buf[pos + np.minimum(k, last)] = byte


@dataclass
class Encoded:
    """N encoded messages: row i is data[offsets[i]:offsets[i+1]]."""

    data: np.ndarray  # uint8
    offsets: np.ndarray  # int64, len n+1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def tobytes(self) -> bytes:
        return self.data.tobytes()


def _as_u64(values) -> np.ndarray:
    a = np.asarray(values)
    if a.dtype == np.uint64:
        return a
    return a.astype(np.int64, copy=False).view(np.uint64)


class Batch:
    def __init__(self, n: int) -> None:
        self.n = n
        self._parts: list[tuple[np.ndarray, object]] = []  # (per-row length, writer(buf, pos))

    def _mask(self, present) -> np.ndarray | None:
        if present is None:
            return None
        m = np.asarray(present, dtype=bool)
        return m

    def varint(self, field: int, values, present=None) -> "Batch":
        v = _as_u64(values)
        if v.ndim == 0:
            v = np.full(self.n, v, dtype=np.uint64)
        tag = np.frombuffer(_tag(field, VARINT), dtype=np.uint8)
        vl = varint_len(v)
        lens = vl + len(tag)
        m = self._mask(present)
        if m is not None:
            lens = np.where(m, lens, 0)

        def write(buf, pos, v=v, vl=vl, tag=tag, m=m):
            if m is not None:
                pos, vv, vvl = pos[m], v[m], vl[m]
            else:
                vv, vvl = v, vl
            for i, b in enumerate(tag):
                buf[pos + i] = b
            _write_varints(buf, pos + len(tag), vv, vvl)

        self._parts.append((lens, write))
        return self

    def fixed64(self, field: int, values, present=None) -> "Batch":
        v = _as_u64(values)
        if v.ndim == 0:
            v = np.full(self.n, v, dtype=np.uint64)
        tag = np.frombuffer(_tag(field, FIXED64), dtype=np.uint8)
        lens = np.full(self.n, len(tag) + 8, dtype=np.int64)
        m = self._mask(present)
        if m is not None:
            lens = np.where(m, lens, 0)

        def write(buf, pos, v=v, tag=tag, m=m):
            if m is not None:
                pos, vv = pos[m], v[m]
            else:
                vv = v
            for i, b in enumerate(tag):
                buf[pos + i] = b
            raw = vv.astype("<u8").view(np.uint8).reshape(-1, 8)
            for k in range(8):
                buf[pos + len(tag) + k] = raw[:, k]

        self._parts.append((lens, write))
        return self

    def raw(self, data: bytes, present=None) -> "Batch":
        """Bytes already encoded (one or more whole fields), the same on every row."""
        arr = np.frombuffer(data, dtype=np.uint8)
        lens = np.full(self.n, len(arr), dtype=np.int64)
        m = self._mask(present)
        if m is not None:
            lens = np.where(m, lens, 0)

        def write(buf, pos, arr=arr, m=m):
            p = pos[m] if m is not None else pos
            for i, b in enumerate(arr):
                buf[p + i] = b

        self._parts.append((lens, write))
        return self

    def raw_rows(self, enc: "Encoded") -> "Batch":
        """Already-encoded fields that differ per row (rows may be empty)."""
        lens = enc.lengths.astype(np.int64)

        def write(buf, pos, enc=enc, lens=lens):
            _scatter_rows(buf, pos, enc, lens)

        self._parts.append((lens, write))
        return self

    def message(self, field: int, sub: "Batch | Encoded", present=None) -> "Batch":
        """A nested message field, written in place (no intermediate buffer).

        With ``present``, ``sub`` holds only the rows where the field is present (in order)."""
        inner = Batch(len(sub.offsets) - 1).raw_rows(sub) if isinstance(sub, Encoded) else sub
        m = self._mask(present)
        sl = inner.row_sizes()
        tag = np.frombuffer(_tag(field, LEN), dtype=np.uint8)
        ll = varint_len(sl.astype(np.uint64))
        sub_lens = len(tag) + ll + sl
        if m is None:
            lens = sub_lens
        else:
            lens = np.zeros(self.n, dtype=np.int64)
            lens[m] = sub_lens

        def write(buf, pos, inner=inner, sl=sl, ll=ll, tag=tag, m=m):
            p = pos[m] if m is not None else pos
            for i, b in enumerate(tag):
                buf[p + i] = b
            _write_varints(buf, p + len(tag), sl.astype(np.uint64), ll)
            inner.write_into(buf, p + len(tag) + ll)

        self._parts.append((lens, write))
        return self

    def row_sizes(self) -> np.ndarray:
        if not self._parts:
            return np.zeros(self.n, dtype=np.int64)
        return np.sum([p[0] for p in self._parts], axis=0)

    def write_into(self, buf: np.ndarray, pos: np.ndarray) -> None:
        start = pos.copy()
        for lens, write in self._parts:
            write(buf, start)
            start = start + lens

    def encode(self) -> Encoded:
        n = self.n
        row = self.row_sizes()
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(row, out=offsets[1:])
        buf = np.zeros(int(offsets[-1]), dtype=np.uint8)
        self.write_into(buf, offsets[:-1])
        return Encoded(buf, offsets)


def _copy_ranges(buf: np.ndarray, dst: np.ndarray, src: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> None:
    total = int(lens.sum())
    if total == 0:
        return
    rep_dst = np.repeat(dst - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    rep_src = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    idx = np.arange(total, dtype=np.int64)
    buf[rep_dst + idx] = src[rep_src + idx]


def _scatter_rows(buf: np.ndarray, pos: np.ndarray, enc: Encoded, lens: np.ndarray) -> None:
    _copy_ranges(buf, pos, enc.data, enc.offsets[:-1], lens)


def concat(rows: list[Encoded]) -> Encoded:
    """Row-wise concatenation: row i of the result is row i of each input, in order."""
    n = len(rows[0].offsets) - 1
    b = Batch(n)
    for r in rows:
        b.raw_rows(r)
    return b.encode()


def length_delimited(field: int, payload: bytes) -> bytes:
    """One LEN field (tag, length, payload) as bytes."""
    return _tag(field, LEN) + encode_varint_scalar(len(payload)) + payload


def varint_field(field: int, value: int) -> bytes:
    return _tag(field, VARINT) + encode_varint_scalar(value)
