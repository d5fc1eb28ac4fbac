"""exporters.parquet_file: the own Parquet writer, one column kind at a time, written and read back
with pyarrow with concrete values (random columns for a time budget: test_parquet_file_fuzz.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pf = pytest.importorskip("neuron_explorer.exporters.parquet_file", reason="C encoders not built")

I64 = np.iinfo(np.int64)
DICT = pa.dictionary(pa.int32(), pa.string())


def _write(path, fields: list[tuple[object, pa.DataType]], groups: list[tuple[int, list]]) -> pa.Table:
    leaves = [leaf for leaf, _ in fields]
    schema = pa.schema([(leaf.name, t) for leaf, t in fields])
    w = pf.ParquetFileWriter(str(path), leaves, schema, "neuron-explorer test")
    for n, chunks in groups:
        w.write_row_group(n, chunks)
    w.close()
    w.close()  # a second close does nothing
    got = pq.read_table(str(path))
    assert got.schema == schema
    return got


def test_integer_columns_plain_and_delta_with_nulls_and_extremes(tmp_path):
    a = pf.Leaf("a", "int", pf.INT64, delta=True, stats=True)
    b = pf.Leaf("b", "int", pf.INT32, delta=False, snappy=False)
    va = np.array([I64.min, -1, 0, 5, I64.max], dtype=np.int64)
    vb = np.array([1, 2, 3, 4, 5], dtype=np.int32)
    null = np.array([False, True, False, False, False])
    got = _write(tmp_path / "i.parquet", [(a, pa.int64()), (b, pa.int32())],
                 [(5, [pf.encode_int(a, va, null), pf.encode_int(b, vb)])])
    assert got["a"].to_pylist() == [I64.min, None, 0, 5, I64.max] and got["b"].to_pylist() == [1, 2, 3, 4, 5]
    st = pq.ParquetFile(str(tmp_path / "i.parquet")).metadata.row_group(0).column(0).statistics
    assert (st.min, st.max, st.null_count) == (I64.min, I64.max, 1)


def test_negative_values_are_the_nulls_of_a_nonneg_column(tmp_path):
    for stats in (False, True):  # (the one C pass, and the numpy path statistics need)
        leaf = pf.Leaf("x", "int", pf.INT32, delta=True, stats=stats)
        got = _write(tmp_path / f"n{stats}.parquet", [(leaf, pa.int32())],
                     [(4, [pf.encode_int_nonneg(leaf, np.array([3, -1, 0, 2**31 - 1]))])])
        assert got["x"].to_pylist() == [3, None, 0, 2**31 - 1]


@pytest.mark.parametrize("n,step", [(0, 0), (1, 5), (128, 1), (129, 1), (300, 0), (1000, -3)])
def test_a_constant_or_counting_column_without_its_values(tmp_path, n, step):
    leaf = pf.Leaf("id", "int", pf.INT64, delta=True, stats=True)
    got = _write(tmp_path / "c.parquet", [(leaf, pa.int64())], [(n, [pf.encode_const(leaf, 1 << 40, n, step)])])
    assert got["id"].to_pylist() == [(1 << 40) + step * i for i in range(n)]
    if n:
        st = pq.ParquetFile(str(tmp_path / "c.parquet")).metadata.row_group(0).column(0).statistics
        assert (st.min, st.max) == (min(1 << 40, (1 << 40) + step * (n - 1)), max(1 << 40, (1 << 40) + step * (n - 1)))


def test_dictionary_strings_from_indices_and_from_ids_through_a_table(tmp_path):
    d = pf.Leaf("name", "dict", pf.BYTE_ARRAY, stats=True)
    e = pf.Leaf("op", "dict", pf.BYTE_ARRAY)
    values = ["nrt_execute", "", "región"]
    idx = np.array([0, 2, 1, 2], dtype=np.int32)
    ids = np.array([10, 11, 12, 99])  # row i holds values[lut[ids[i] - 10]]; 99 is outside the table
    lut = np.array([2, 0, 3], dtype=np.int32)  # position 3 is the null sentinel
    got = _write(tmp_path / "d.parquet", [(d, DICT), (e, DICT)],
                 [(4, [pf.encode_dict(d, idx, values, np.array([False, False, False, True])),
                       pf.encode_dict_ids(e, ids, lut, values, offset=-10, null_pos=3)])])
    assert got["name"].to_pylist() == ["nrt_execute", "región", "", None]
    assert got["op"].to_pylist() == ["región", "nrt_execute", None, None]
    st = pq.ParquetFile(str(tmp_path / "d.parquet")).metadata.row_group(0).column(0).statistics
    assert (st.min, st.max, st.null_count) == ("", "región", 1)  # over the values present only


def test_plain_strings_keep_nulls_and_an_arrays_offset(tmp_path):
    leaf = pf.Leaf("s", "str", pf.BYTE_ARRAY)
    arr = pa.array(["skip", "a", None, "", "日本" * 100], pa.string()).slice(1)
    got = _write(tmp_path / "s.parquet", [(leaf, pa.string())], [(4, [pf.encode_strings(leaf, arr)])])
    assert got["s"].to_pylist() == ["a", None, "", "日本" * 100]


def test_lists_of_int64_empty_single_and_many(tmp_path):
    a = pf.Leaf("flow_id", "list", pf.INT64, delta=True)
    b = pf.Leaf("ranks", "list", pf.INT64, delta=True)
    offsets = np.array([0, 0, 1, 4, 4], dtype=np.int32)
    values = np.array([7, I64.min, 0, I64.max], dtype=np.int64)
    first, second = np.array([5, 0, 9, 0]), np.array([6, 0, 0, 4])
    got = _write(tmp_path / "l.parquet", [(a, pa.list_(pa.int64())), (b, pa.list_(pa.int64()))],
                 [(4, [pf.encode_flows(a, first, second), pf.encode_list(b, offsets, values)])])
    assert got["flow_id"].to_pylist() == [[5, 6], [], [9], [4]]  # zeros are "no flow"
    assert got["ranks"].to_pylist() == [[], [7], [I64.min, 0, I64.max], []]
    one = _write(tmp_path / "one.parquet", [(a, pa.list_(pa.int64()))],
                 [(3, [pf.encode_list(a, np.array([0, 1, 1, 2]), np.array([3, 4]))])])  # at most one a row
    assert one["flow_id"].to_pylist() == [[3], [], [4]]
    flows = _write(tmp_path / "f.parquet", [(a, pa.list_(pa.int64()))],
                   [(2, [pf.encode_flows(a, np.array([1, 0]), None)])])
    assert flows["flow_id"].to_pylist() == [[1], []]


def test_row_groups_follow_one_another_and_an_empty_file_reads_as_no_rows(tmp_path):
    leaf = pf.Leaf("a", "int", pf.INT64, delta=True)
    got = _write(tmp_path / "g.parquet", [(leaf, pa.int64())],
                 [(2, [pf.encode_int(leaf, np.array([1, 2]))]), (0, [pf.encode_int(leaf, np.zeros(0, np.int64))]),
                  (1, [pf.encode_int(leaf, np.array([3]))])])
    assert got["a"].to_pylist() == [1, 2, 3]
    assert pq.ParquetFile(str(tmp_path / "g.parquet")).metadata.num_row_groups == 3
    assert _write(tmp_path / "e.parquet", [(leaf, pa.int64())], []).num_rows == 0


def test_a_row_group_must_have_a_chunk_per_column(tmp_path):
    leaf = pf.Leaf("a", "int", pf.INT64)
    w = pf.ParquetFileWriter(str(tmp_path / "x.parquet"), [leaf, leaf], pa.schema([("a", pa.int64())]), "t")
    with pytest.raises(ValueError, match="1 column chunks for 2 columns"):
        w.write_row_group(1, [pf.encode_int(leaf, np.array([1]))])
    w.close()


class _Huge(bytes):
    """Claims a length past the limit without holding it (the check reads only the length)."""

    def __len__(self) -> int:
        return (1 << 30) + 1


def test_a_page_past_a_gib_is_refused_not_written():
    leaf = pf.Leaf("big", "str", pf.BYTE_ARRAY)
    with pytest.raises(ValueError, match="column big: a page of 1073741825 bytes is over"):
        pf._page(leaf, 0, _Huge(), b"")


def test_thrift_field_ids_beyond_a_delta_of_15_use_the_long_form():
    assert pf.tstruct((1, pf._I32, 5)) == b"\x15\x0a\x00"
    assert pf.tstruct((20, pf._I32, 1)) == b"\x05\x28\x02\x00"  # type, then the zigzag field id, then the value
    assert pf.tstruct((1, pf._I32, None)) == b"\x00"  # None fields are left out
    assert pf.presence(np.array([0, 2, 2]), 3) == b"\x01\x00\x01" and pf.presence(np.array([3]), 3) is None
