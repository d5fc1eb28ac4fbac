"""``util.arrays`` (the Arrow arrays `view` builds without pandas) gives what ``pa.array`` /
``pa.table`` give for the same input: same type, values and nulls, on random inputs."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from neuron_explorer.util.arrays import dictionary, numeric, repeated, rows_table, strings

TEXT = ["", "a", "neuron_rt", "é", "日本", "x" * 300, '"q"\\', "\x00z"]


def _same(a: pa.Array, b: pa.Array) -> None:
    assert a.type == b.type
    assert a.null_count == b.null_count
    assert a.equals(b), (a, b)


@pytest.mark.parametrize("seed", range(20))
def test_numeric_and_strings_as_pa_array(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    for dtype in (np.int64, np.int32, np.float64):
        v = rng.integers(-2**31, 2**31 - 1, n).astype(dtype)
        null = rng.random(n) < rng.random() if seed % 3 else None
        _same(numeric(v, null=null), pa.array(v, mask=null))
    v = rng.integers(-5, 5, n)
    _same(numeric(v, pa.int32()), pa.array(v, type=pa.int32()))
    r = random.Random(seed)
    vals = [r.choice(TEXT + [None]) for _ in range(n)]
    _same(strings(vals), pa.array(vals, type=pa.string()))
    s = TEXT[seed % len(TEXT)]
    _same(repeated(s, n), pa.array([s] * n, type=pa.string()))
    idx = rng.integers(0, len(TEXT), n)
    _same(dictionary(idx, TEXT), pa.DictionaryArray.from_arrays(pa.array(idx, type=pa.int32()), pa.array(TEXT)))


def test_dictionary_refuses_out_of_range_indices():
    with pytest.raises(pa.ArrowIndexError):  # (as pa.DictionaryArray.from_arrays over pa.array)
        dictionary(np.array([0, 3]), ["a", "b"])


KINDS = [lambda r: r.randint(-2**63, 2**63 - 1), lambda r: r.random() * 1e9, lambda r: r.choice(TEXT),
         lambda r: r.random() < 0.5, lambda r: None]


@pytest.mark.parametrize("seed", range(30))
def test_rows_table_types_as_pa_table(seed):
    r = random.Random(seed)
    cols = [f"c{i}" for i in range(6)]
    rows = []
    kinds = {c: [r.choice(KINDS) for _ in range(2)] for c in cols}  # up to two kinds a column (int+float, x+None)
    for _ in range(r.randint(1, 20)):
        rows.append({c: r.choice(kinds[c])(r) for c in cols if r.random() < 0.9})
    data = {c: [row.get(c) for row in rows] for c in cols}
    try:
        want = pa.table(data)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
            rows_table(rows, cols)
        return
    got = rows_table(rows, cols)
    assert got.schema == want.schema
    assert got.equals(want)
