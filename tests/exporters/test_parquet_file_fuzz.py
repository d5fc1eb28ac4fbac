"""Fuzz of the own Parquet writer (exporters/parquet_file.py, exporters/_pqenc.c): random columns of
every kind it writes (integers up to the int64 limits, nulls anywhere, constant columns, dictionary
and plain strings with empty and non-ASCII values, lists of 0..n int64), in row groups of random
sizes, read back with pyarrow and DuckDB and compared with the same data written by Arrow's writer.
The encoders only write; what they parse is their own arguments, checked here for bad ones too."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.fuzzing import examples, seed

own = pytest.importorskip("neuron_explorer.exporters.parquet_file", reason="C encoders not built")
from neuron_explorer.exporters import _pqenc  # noqa: E402

I64 = np.iinfo(np.int64)
ROUND_TRIPS = 120  # random files; what 8 s gave on an idle machine (decision 0151)
WORDS = ["", "a", "nrt_execute", "región", 'quote " x', "日本", "x" * 300, "\x00nul"]


def _ints(rng, n: int, wide: bool) -> np.ndarray:
    lo, hi = (I64.min, I64.max) if wide else (-2**31, 2**31 - 1)
    kind = rng.integers(0, 5)
    if kind == 0:  # full range: deltas wrap around
        v = rng.integers(lo, hi, n, endpoint=True, dtype=np.int64)
    elif kind == 1:  # sorted timestamps
        v = np.sort(rng.integers(0, 2**62 if wide else 2**30, n))
    elif kind == 2:  # small values
        v = rng.integers(-3, 8, n)
    elif kind == 3:  # the extremes only
        v = rng.choice(np.array([lo, hi, 0, -1], dtype=np.int64), n)
    else:
        v = np.full(n, rng.integers(lo, hi, endpoint=True, dtype=np.int64))
    return v.astype(np.int64 if wide else np.int32)


def _null(rng, n: int) -> np.ndarray | None:
    p = rng.choice([0.0, 0.0, 0.1, 0.5, 1.0])
    return None if p == 0 else rng.random(n) < p


def _dict_ids(rng, n: int, leaf) -> tuple:
    """A dictionary column from per-row ids through a lookup table (``encode_dict_ids``, the C
    ``dict_page``): ids of either width with an offset, a table whose entries may be the null
    sentinel, ids outside the table (null when the column has nulls)."""
    k = int(rng.integers(1, len(WORDS) + 1))
    values = list(rng.permutation(WORDS)[:k])
    lut = rng.integers(0, k, int(rng.integers(1, 40))).astype(np.int32)
    offset = int(rng.integers(-3, 4))
    nullable = rng.random() < 0.6
    null_pos = k if nullable else -1  # a sentinel past the dictionary
    if nullable:
        lut[rng.random(len(lut)) < rng.choice([0.0, 0.3, 1.0])] = null_pos
        ids = rng.integers(-offset - 3, len(lut) - offset + 3, n)
    else:
        ids = rng.integers(-offset, len(lut) - offset, n)
    ids = ids.astype(rng.choice([np.int64, np.int32]))
    chunk = own.encode_dict_ids(leaf, ids, lut, values, offset, null_pos)
    key = ids.astype(np.int64) + offset
    inside = (key >= 0) & (key < len(lut))
    pos = np.where(inside, lut[np.where(inside, key, 0)], null_pos)
    null = pos == null_pos
    arr = pa.DictionaryArray.from_arrays(pa.array(np.where(null, 0, pos).astype(np.int32), mask=null),
                                         pa.array(values, pa.string()))
    return chunk, arr


def _group(rng, n: int) -> tuple[list, list]:
    """One row group: (the own writer's column chunks, the Arrow arrays of the same data)."""
    leaves, arrays, chunks = LEAVES, [], []
    for leaf in leaves:
        if leaf.kind == "int":
            v, null = _ints(rng, n, leaf.ptype == own.INT64), _null(rng, n)
            chunks.append(own.encode_int(leaf, v, null))
            arrays.append(pa.array(v, mask=null))
        elif leaf.kind == "const":
            pass
        elif leaf.kind == "dict" and rng.random() < 0.5:
            chunk, arr = _dict_ids(rng, n, leaf)
            chunks.append(chunk)
            arrays.append(arr)
        elif leaf.kind == "dict":
            k = int(rng.integers(1, len(WORDS) + 1))
            values = list(rng.permutation(WORDS)[:k])
            idx, null = rng.integers(0, k, n).astype(np.int32), _null(rng, n)
            chunks.append(own.encode_dict(leaf, idx, values, null))
            arrays.append(pa.DictionaryArray.from_arrays(pa.array(idx, mask=null), pa.array(values, pa.string())))
        elif leaf.kind == "str":
            null = _null(rng, n)
            s = pa.array([WORDS[i] * int(rng.integers(0, 3)) for i in rng.integers(0, len(WORDS), n)],
                         pa.string(), mask=null)
            if n > 2 and rng.random() < 0.5:
                s = s.slice(1, n - 1)  # an array with an offset
                s = pa.concat_arrays([s, pa.array([None], pa.string())])
            chunks.append(own.encode_strings(leaf, s))
            arrays.append(s)
        elif rng.random() < 0.4:  # flow_id's shape: one or two flows a row, 0 = none (encode_flows)
            first = np.where(rng.random(n) < rng.random(), 0, _ints(rng, n, True))
            second = np.where(rng.random(n) < rng.choice([0.0, 0.9, 1.0]), 0, _ints(rng, n, True))
            second = None if rng.random() < 0.3 else second
            chunks.append(own.encode_flows(leaf, first, second))
            rows = [[x for x in (a, b) if x] for a, b in zip(first.tolist(), (second if second is not None
                                                                            else np.zeros(n, np.int64)).tolist())]
            arrays.append(pa.array(rows, pa.list_(pa.int64())))
        else:
            counts = rng.choice([0, 1, 1, 2, 5], n) if rng.random() < 0.7 else rng.integers(0, 2, n)
            offsets = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(counts, out=offsets[1:])
            vals = _ints(rng, int(offsets[-1]), True)
            chunks.append(own.encode_list(leaf, offsets, vals))
            arrays.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(vals)))
    return chunks, arrays


LEAVES = [own.Leaf("a", "int", own.INT64, delta=True, stats=True),
          own.Leaf("b", "int", own.INT32, delta=True, stats=True, snappy=False),
          own.Leaf("c", "int", own.INT64, delta=False),
          own.Leaf("d", "dict", own.BYTE_ARRAY, stats=True),
          own.Leaf("e", "str", own.BYTE_ARRAY),
          own.Leaf("f", "list", own.INT64, delta=True),
          own.Leaf("g", "dict", own.BYTE_ARRAY, snappy=False)]
SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int32()), ("c", pa.int64()),
                    ("d", pa.dictionary(pa.int32(), pa.string())), ("e", pa.string()), ("f", pa.list_(pa.int64())),
                    ("g", pa.dictionary(pa.int32(), pa.string()))])


def _one(rng, path: str) -> None:
    w = own.ParquetFileWriter(path, LEAVES, SCHEMA, "fuzz")
    tables = []
    for _ in range(int(rng.integers(1, 4))):
        n = int(rng.choice([1, 7, 8, 9, 31, 127, 128, 129, 1000, int(rng.integers(1, 5000))]))
        chunks, arrays = _group(rng, n)
        w.write_row_group(n, chunks)
        tables.append(pa.Table.from_arrays(arrays, schema=SCHEMA))
    w.close()
    want = pa.concat_tables(tables).unify_dictionaries().combine_chunks()
    got = pq.read_table(path)
    assert got.schema == SCHEMA
    for c in SCHEMA.names:
        g, e = got[c].combine_chunks(), want[c].combine_chunks()
        if pa.types.is_dictionary(SCHEMA.field(c).type):
            g, e = g.cast(pa.string()), e.cast(pa.string())
        assert g.equals(e), c
    ref = path + ".arrow.parquet"
    pq.write_table(want, ref)
    con = duckdb.connect()
    for x, y in ((path, ref), (ref, path)):
        assert con.execute(f"select count(*) from (select * from '{x}' except all select * from '{y}')"
                           ).fetchone()[0] == 0
    meta = pq.ParquetFile(path).metadata
    for g in range(meta.num_row_groups):  # min/max where asked, over the non-null values
        col = tables[g]["a"]
        st = meta.row_group(g).column(0).statistics
        assert st.null_count == col.null_count
        if col.null_count < len(col):
            assert (st.min, st.max) == (pa.compute.min(col).as_py(), pa.compute.max(col).as_py())


def test_own_writer_round_trips_random_columns(tmp_path):
    s = seed(1)
    rng = np.random.default_rng(s)
    for runs in range(examples(ROUND_TRIPS)):
        path = str(tmp_path / f"f{runs}.parquet")
        try:
            _one(rng, path)
        except AssertionError as e:
            raise AssertionError(f"run {runs} of seed {s} (NEURON_EXPLORER_FUZZ_SEED={s}): {e}") from e


@pytest.mark.parametrize("call", [
    lambda: _pqenc.delta_binary_packed(np.zeros(3, np.int16), None, b""),
    lambda: _pqenc.delta_binary_packed(np.zeros(3, np.int64), np.zeros(2, np.uint8), b""),
    lambda: _pqenc.rle_hybrid(np.zeros(3, np.int32), 33),
    lambda: _pqenc.rle_hybrid(np.zeros(3, np.int64), 3),
    lambda: _pqenc.plain_byte_array(np.array([0, 5], np.int32), b"abc", None),
    lambda: _pqenc.plain_byte_array(np.array([2, 1], np.int32), b"abc", None),
    lambda: _pqenc.plain_byte_array(np.array([0, 1, 2], np.int32), b"abc", np.zeros(1, np.uint8)),
    lambda: _pqenc.list_page(np.zeros(3, np.int32), None),
    lambda: _pqenc.list_page(np.zeros(3, np.int64), np.zeros(2, np.int64)),
    lambda: _pqenc.dict_page(np.zeros(3, np.int16), np.zeros(2, np.int32), 0, -1, 1, 1),
    lambda: _pqenc.dict_page(np.zeros(3, np.int64), np.zeros(2, np.int64), 0, -1, 1, 1),
    lambda: _pqenc.dict_page(np.zeros(3, np.int64), np.zeros(2, np.int32), 0, -1, 1, 33),
    lambda: _pqenc.dict_page(np.zeros(3, np.int64), np.zeros(2, np.int32), 0, -1, -1, 1),
    lambda: _pqenc.dict_page(np.array([0, 2]), np.zeros(2, np.int32), 0, -1, 1, 1),  # id past the table
    lambda: _pqenc.dict_page(np.array([0, -5]), np.zeros(2, np.int32), 0, -1, 1, 1),  # id before it
    lambda: _pqenc.dict_page(np.array([0, 1]), np.array([0, 4], np.int32), 0, -1, 4, 3),  # past the dictionary
    lambda: _pqenc.dict_page(np.array([0, 1]), np.array([0, 1], np.int32), 0, -1, 2, 0),  # over the bit width
    lambda: _pqenc.dict_page(np.array([0, 1]), np.array([0, -2], np.int32), 0, -1, 2, 1),  # a negative position
])
def test_encoders_refuse_bad_arguments(call):
    with pytest.raises(ValueError):
        call()


def test_presence_is_bincounts_nonzero():
    """``_pqenc.present`` (the string columns' presence pass) against ``np.bincount``, ids inside and
    outside the table, int64 extremes included."""
    rng = np.random.default_rng(seed(3))
    for _ in range(300):
        k = int(rng.integers(0, 50))
        n = int(rng.integers(0, 2000))
        ids = rng.integers(0, max(k, 1), n)
        if rng.random() < 0.3 and n:  # one id outside [0, k)
            ids[rng.integers(0, n)] = rng.choice([-1, k, I64.min, I64.max])
        got = _pqenc.present(ids, k)
        inside = ((ids >= 0) & (ids < k)).all()
        if not inside:
            assert got is None
            continue
        want = (np.bincount(ids, minlength=k) > 0).astype(np.uint8).tobytes()
        assert got == want


@pytest.mark.parametrize("call", [lambda: _pqenc.present(np.zeros(3, np.int32), 4),
                                  lambda: _pqenc.present(np.zeros(3, np.int64), -1)])
def test_presence_refuses_bad_arguments(call):
    with pytest.raises(ValueError):
        call()
