"""Arrow arrays built from numpy buffers and Python lists without going through ``pa.array``.

Why: pyarrow imports pandas (when it is installed) the first time ``pa.array``, ``pa.table`` or
``pa.scalar`` converts a Python or numpy object, ~0.2 CPU-s and ~45 MB of resident memory in every
``view`` process that never uses pandas (docs/decisions/0050-view-without-pandas.md).
``pa.Array.from_buffers`` over numpy memory does not, and it costs less than ``pa.array`` too.
Every function here gives the array ``pa.array`` would give for the same input (same type, same
values, same nulls); ``rows_table`` falls back to ``pa.table`` for column values it does not know.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_NUMERIC = {np.dtype(np.int64): pa.int64(), np.dtype(np.int32): pa.int32(), np.dtype(np.float64): pa.float64(),
            np.dtype(np.float32): pa.float32(), np.dtype(np.uint8): pa.uint8(), np.dtype(np.int8): pa.int8(),
            np.dtype(np.int16): pa.int16(), np.dtype(np.uint16): pa.uint16(), np.dtype(np.uint32): pa.uint32(),
            np.dtype(np.uint64): pa.uint64()}


def _validity(null: np.ndarray | None) -> tuple[pa.Buffer | None, int]:
    if null is None:
        return None, 0
    k = int(np.count_nonzero(null))
    if not k:
        return None, 0
    return pa.py_buffer(np.packbits(np.logical_not(null), bitorder="little")), k


def numeric(a: np.ndarray, typ: pa.DataType | None = None, null: np.ndarray | None = None) -> pa.Array:
    """A numeric array over ``a``'s memory (``typ``: its Arrow type, default from the dtype; when
    given, ``a`` is converted to it first); ``null`` marks null slots."""
    a = np.asarray(a)
    if typ is None:
        typ = _NUMERIC[a.dtype]
    else:
        a = a.astype(typ.to_pandas_dtype(), copy=False)
    a = np.ascontiguousarray(a)
    valid, k = _validity(null)
    return pa.Array.from_buffers(typ, len(a), [valid, pa.py_buffer(a)], null_count=k)


def strings(values: list, null_is_none: bool = True) -> pa.Array:
    """A string array of ``values`` (str, or None for a null when ``null_is_none``)."""
    n = len(values)
    enc = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(n + 1, dtype=np.int64)
    if n:
        np.cumsum(np.fromiter(map(len, enc), dtype=np.int64, count=n), out=offsets[1:])
    data = b"".join(enc)
    null = np.fromiter((v is None for v in values), dtype=bool, count=n) if null_is_none and n else None
    valid, k = _validity(null)
    if offsets[-1] < 2**31 - 1:
        return pa.Array.from_buffers(pa.string(), n, [valid, pa.py_buffer(offsets.astype(np.int32)),
                                                        pa.py_buffer(data)], null_count=k)
    large = pa.Array.from_buffers(pa.large_string(), n, [valid, pa.py_buffer(offsets), pa.py_buffer(data)],
                                  null_count=k)
    return large.cast(pa.string())  # (raises as pa.array would: more than 2 GiB of text in one array)


def repeated(value: str, n: int) -> pa.Array:
    """``n`` copies of one string, as a plain string array (not a dictionary)."""
    b = value.encode()
    offsets = np.arange(n + 1, dtype=np.int64) * len(b)
    if n and offsets[-1] >= 2**31 - 1:
        return strings([value] * n)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(b * n)])


def dictionary(indices: np.ndarray, values: list[str]) -> pa.DictionaryArray:
    """A dictionary<int32, string> array of ``indices`` into ``values`` (checked to be in range)."""
    return pa.DictionaryArray.from_arrays(numeric(indices, pa.int32()), strings(values, null_is_none=False))


def _column(values: list) -> pa.Array | None:
    """What ``pa.array`` infers for a list of Python scalars of one kind (None = a null), or None
    for anything else (mixed kinds, ints beyond int64)."""
    kinds = {type(v) for v in values if v is not None}
    null = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    if not kinds:
        return pa.nulls(len(values))
    if kinds == {str}:
        return strings(values)
    if kinds == {bool}:
        bits = np.packbits(np.array([v is True for v in values], dtype=bool), bitorder="little")
        valid, k = _validity(null)
        return pa.Array.from_buffers(pa.bool_(), len(values), [valid, pa.py_buffer(bits)], null_count=k)
    if kinds <= {int, float}:
        if float in kinds:
            return numeric(np.array([0.0 if v is None else v for v in values], dtype=np.float64), null=null)
        if all(v is None or -2**63 <= v < 2**63 for v in values):
            return numeric(np.array([0 if v is None else v for v in values], dtype=np.int64), null=null)
    return None


def rows_table(rows: list[dict], columns: list[str]) -> pa.Table:
    """A table of ``rows`` with ``columns`` in order, typed as ``pa.table`` would type the lists."""
    data = {}
    for c in columns:
        vals = [r.get(c) for r in rows]
        arr = _column(vals)
        data[c] = arr if arr is not None else pa.array(vals)  # (rare kinds: Arrow's own inference)
    return pa.Table.from_arrays(list(data.values()), names=columns)


def sorted_codes(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """A string or dictionary column (without nulls) as (codes, values): ``values`` sorted and unique,
    ``codes[i]`` the position of row i's string in it, so that comparing codes compares the strings
    (a sort or a run check over strings without a Python object per row)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    vals = np.asarray(col.dictionary.to_pylist(), dtype=object)
    uniq, inv = np.unique(vals, return_inverse=True) if len(vals) else (vals, np.zeros(0, dtype=np.int64))
    idx = numpy_of(col.indices)
    return np.asarray(inv, dtype=np.int64).reshape(-1)[idx], [str(v) for v in uniq]


def numpy_of(col: pa.Array | pa.ChunkedArray, dtype: type = np.int64) -> np.ndarray:
    """A primitive Arrow column without nulls as a numpy array of ``dtype``, from its buffers (Arrow's
    ``to_numpy`` imports pandas when it is installed: ~0.8 s on a cold open)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    parts: list[np.ndarray] = []
    for a in chunks:
        if a.null_count:
            raise ValueError("a column with nulls")
        width = a.type.bit_width // 8
        raw = np.frombuffer(a.buffers()[1], dtype=np.dtype(f"<i{width}"), count=a.offset + len(a))
        parts.append(raw[a.offset:].astype(dtype, copy=False))
    return np.concatenate(parts) if len(parts) != 1 else parts[0]
