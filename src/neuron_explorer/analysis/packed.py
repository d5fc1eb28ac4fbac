"""Integer columns packed without loss for the trip from a worker to the process that merges them.

Why: ``neuron-explorer diff`` on a Dask cluster (or with ``-j N``) reads each events file on a
worker and sends its columns back; at 20M events a side was 840 MB of int64 arrays, received and
held by the client (docs/decisions/0179-dask-diff-client.md).  Most of those columns hold a
narrow range: spans of one process (an ``end`` is its ``start`` plus a duration), ids of one
process, step figures, a constant (a process index, a collective's bytes).

``pack`` keeps an int64 column as ``Packed``: a base and unsigned 8-, 16- or 32-bit offsets from it,
or the differences of consecutive values (starts, which rise), or the offsets from
another column of the same piece (an ``end`` from its ``start``), or the base alone (a constant);
a column that fits none of them stays an int64 array.  ``concat`` widens packed and plain pieces
straight into one int64 array: the value of every element is the int64 the column held (the
arithmetic wraps like int64's, so every value, extremes included, comes back exactly).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_WIDTHS = ((1 << 8, np.uint8), (1 << 16, np.uint16), (1 << 32, np.uint32))
_I64 = np.dtype(np.int64)


class Packed:
    """``n`` int64 values: ``base`` plus ``narrow`` (None: ``base`` alone), where ``delta`` says
    ``narrow`` holds the ``n - 1`` differences of consecutive values (``base``: the first value),
    and ``ref`` >= 0 that the values are further added to column ``ref`` of the same piece."""

    __slots__ = ("n", "base", "narrow", "delta", "ref")

    def __init__(self, n: int, base: int, narrow: np.ndarray | None = None, delta: bool = False,
                 ref: int = -1) -> None:
        self.n, self.base, self.narrow, self.delta, self.ref = n, base, narrow, delta, ref

    def __getstate__(self) -> tuple:
        return self.n, self.base, self.narrow, self.delta, self.ref

    def __setstate__(self, state: tuple) -> None:
        self.n, self.base, self.narrow, self.delta, self.ref = state

    def __len__(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        return 0 if self.narrow is None else self.narrow.nbytes


def _width(span: int) -> type[np.unsignedinteger] | None:
    """The unsigned dtype that holds 0..span, or None."""
    for limit, dt in _WIDTHS:
        if span < limit:
            return dt
    return None


def pack(a: np.ndarray, ref: np.ndarray | None = None, ref_index: int = -1, delta: bool = False) -> np.ndarray | Packed:
    """``a`` (int64) packed in the narrowest of: offsets from its minimum, offsets from ``ref``
    (column ``ref_index`` of the same piece, same length), the differences of consecutive values
    (``delta``: a column that mostly rises, such as starts); else ``a`` itself."""
    a = np.asarray(a)
    if a.dtype != _I64:
        raise TypeError(f"pack: int64 wanted, not {a.dtype}")
    n = len(a)
    if not n:
        return Packed(0, 0)
    lo, hi = int(a.min()), int(a.max())
    if lo == hi:
        return Packed(n, lo)
    best: np.ndarray | Packed | None = None
    best_size = 8
    dt = _width(hi - lo)
    if dt is not None:
        best, best_size = Packed(n, lo, (a - np.int64(lo)).astype(dt), ref=-1), np.dtype(dt).itemsize
    if ref is not None and best_size > 1:
        d = a - ref  # (wraps like int64: ref + d is a again, whatever the values)
        dlo, dhi = int(d.min()), int(d.max())
        if dlo == dhi:
            return Packed(n, dlo, ref=ref_index)
        dt = _width(dhi - dlo)
        if dt is not None and np.dtype(dt).itemsize < best_size:
            best, best_size = Packed(n, dlo, (d - np.int64(dlo)).astype(dt), ref=ref_index), np.dtype(dt).itemsize
    if delta and best_size > 1 and n > 1:
        d = np.diff(a)
        if int(d.min()) >= 0:  # (as int64 differences, wrapped or not: the running sum wraps back)
            dt = _width(int(d.max()))
            if dt is not None and np.dtype(dt).itemsize < best_size:
                best = Packed(n, int(a[0]), d.astype(dt), delta=True)
    return a if best is None else best


def unpack_into(p: np.ndarray | Packed, out: np.ndarray, ref: np.ndarray | None = None) -> None:
    """Write column ``p``'s values into ``out`` (int64, its length); ``ref``: the values of the
    column a ``Packed`` with ``ref`` >= 0 is added to."""
    if not isinstance(p, Packed):
        out[...] = p
        return
    if p.ref >= 0 and ref is None:
        raise ValueError("a column packed against another needs that column's values")
    base = np.int64(p.base)
    if p.narrow is None:
        out[...] = base
    elif p.delta:
        if p.n:
            out[0] = base
            np.cumsum(p.narrow, dtype=np.int64, out=out[1:])
            out[1:] += base
    else:
        np.add(p.narrow, base, out=out, dtype=np.int64)
    if p.ref >= 0:
        out += ref


def unpack(p: np.ndarray | Packed, ref: np.ndarray | None = None) -> np.ndarray:
    """Column ``p`` as an int64 array (an array is returned as it is)."""
    if not isinstance(p, Packed):
        return p
    out = np.empty(p.n, dtype=np.int64)
    unpack_into(p, out, ref)
    return out


def concat(cols: Sequence[np.ndarray | Packed], refs: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """The pieces of one column, one after another, as one array: ``numpy.concatenate`` of them
    when none is packed, else an int64 array filled piece by piece (no piece widened on its own
    first).  ``refs``: for pieces packed against another column, that column's whole values (the
    same length as the result)."""
    if not any(isinstance(c, Packed) for c in cols):
        return np.concatenate(list(cols)) if cols else np.zeros(0, dtype=np.int64)
    out = np.empty(sum(len(c) for c in cols), dtype=np.int64)
    lo = 0
    for c in cols:
        hi = lo + len(c)
        r = None
        if isinstance(c, Packed) and c.ref >= 0:
            if refs is None:
                raise ValueError("a column packed against another needs that column's values")
            r = refs[c.ref][lo:hi]
        unpack_into(c, out[lo:hi], r)
        lo = hi
    return out


def concat_pieces(pieces: Sequence[Sequence[np.ndarray | Packed]]) -> list[np.ndarray]:
    """Pieces of several columns (each a tuple, one column a position) as one array per column;
    a column packed against another reads that column's concatenation (which comes before it)."""
    out: list[np.ndarray] = []
    for i in range(len(pieces[0])):
        out.append(concat([p[i] for p in pieces], out))
    return out
