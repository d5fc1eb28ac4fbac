"""``analysis.occurrences``: what a diff reads of one events file."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from neuron_explorer.analysis.occurrences import _codes, int_column


def test_an_integer_column_at_some_rows_is_the_whole_column_indexed():
    """``int_column(col, fill, rows)`` (the rows taken before they are widened, decision 0192) is
    ``int_column(col, fill)[rows]``: every integer width, signed or not, nulls or none, a slice (an
    offset into the buffers), several chunks, a column of nulls only, floats; and ``_codes`` of a
    dictionary or plain string column at some rows is its codes indexed."""
    rng = np.random.default_rng(192)
    types = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.float64()]
    for i in range(300):
        n = int(rng.integers(0, 60))
        t = types[i % len(types)]
        vals = rng.integers(0, 100, n).tolist()
        nulls = rng.random(n) < (0.3 if i % 2 else 0.0)
        arr = pa.array([None if z else v for v, z in zip(vals, nulls)], type=t)
        if i % 5 == 1 and n > 4:
            arr = arr.slice(2, n - 3)
        col: pa.Array | pa.ChunkedArray = arr
        if i % 7 == 3 and len(arr) > 2:
            col = pa.chunked_array([arr.slice(0, 1), arr.slice(1)])
        if i % 11 == 5:
            col = pa.nulls(len(arr), type=pa.int32())
        rows = rng.integers(0, len(arr), int(rng.integers(0, 2 * len(arr) + 1))) if len(arr) else np.zeros(0, np.int64)
        for fill in (-1, 0):
            got = int_column(col, fill, rows)
            assert got.dtype == np.int64 and got.tolist() == int_column(col, fill)[rows].tolist(), (i, t)
        strs = pa.array([None if z else f"s{v % 7}" for v, z in zip(vals, nulls)])
        for c in (strs, strs.dictionary_encode()):
            whole, values = _codes(c)
            part, values2 = _codes(c, rows)
            assert part.tolist() == whole[rows].tolist() and values.tolist() == values2.tolist()
