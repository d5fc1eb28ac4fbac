"""``analysis.occurrences``: what a diff reads of one events file."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from neuron_explorer.analysis import occurrences as occ, steps as steps_mod
from neuron_explorer.analysis.occurrences import STEP_TYPES, _codes, _File, int_column, read_file


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


def _events_table(rng: np.random.Generator, n: int, dictionary: bool = True) -> pa.Table:
    names = np.array(list(STEP_TYPES) + ["nrt_model_switch", "other", "ProfilerStep#3", "Optimizer.step#SGD.step"])
    sources = np.array(["neuron_hw", "neuron_rt", "framework", "jax"])
    name = names[rng.integers(0, len(names), n)]
    src = sources[rng.integers(0, len(sources), n)]
    start = rng.integers(0, 1 << 40, n)
    cols = {"id": pa.array((7 << 32) + np.arange(n)), "name": pa.array(name), "start_ts": pa.array(start),
            "end_ts": pa.array(start + rng.integers(0, 1000, n)), "trace_event_source": pa.array(src),
            "model_name": pa.array([f"g{v}" if v < 3 else None for v in rng.integers(0, 5, n)])}
    t = pa.table(cols)
    if dictionary:
        t = t.set_column(1, "name", t.column("name").dictionary_encode())
        t = t.set_column(4, "trace_event_source", t.column("trace_event_source").dictionary_encode())
    return t


def test_a_files_kept_rows_in_c_are_its_numpy_twins():
    """``_File``'s kept rows, types, framework flags, spans, ids, name codes, graph codes and rows
    grouped by type from the one C pass (``analysis._sweep.keep``, decision 0209) are those of its
    numpy twin (``_keep_numpy``): random files of every type and source, graph names with nulls, in
    one chunk or several (as a file of two row groups reads), sliced, with strings not
    dictionary-encoded, without graph names, with no row kept and with every row kept."""
    if steps_mod._sweep is None:
        pytest.skip("the C extension is not built")
    rng = np.random.default_rng(209)
    for i in range(60):
        n = int(rng.integers(0, 400))
        t = _events_table(rng, n, dictionary=i % 4 != 3)
        if i % 3 == 1 and n > 10:
            t = pa.concat_tables([t.slice(0, n // 3), t.slice(n // 3)])
        if i % 5 == 2 and n > 10:
            t = t.slice(3, n - 5)
        if i % 9 == 4:
            t = t.drop_columns(["model_name"])
        if i == 7:  # nothing kept
            t = t.set_column(1, "name", pa.array(["other"] * t.num_rows).dictionary_encode())
            t = t.set_column(4, "trace_event_source", pa.array(["neuron_hw"] * t.num_rows).dictionary_encode())
        c = _File(t)
        assert c._name.dtype == np.int32  # (the C pass was taken: the numpy twin widens the codes)
        with mock.patch.object(_File, "_keep_c", lambda *a: False):
            py = _File(t)
        assert (c.rows is None) == (py.rows is None), i
        if c.rows is not None:
            assert c.rows.tolist() == py.rows.tolist(), i
        for k in ("typ", "fw", "start", "end", "ids", "name_c", "model", "order", "bounds"):
            a, b = getattr(c, k), getattr(py, k)
            assert a.dtype == b.dtype and a.tolist() == b.tolist(), (i, k)
        sel = np.arange(0, len(c.typ), 3)
        assert c.name_at(sel).dtype == np.int64 and c.name_at(sel).tolist() == py.name_at(sel).tolist()
    every = _events_table(rng, 50)
    every = every.set_column(1, "name", pa.array(["nc_exec_running"] * 50).dictionary_encode())
    assert _File(every).rows is None


def test_a_file_read_in_c_gives_the_same_part(tmp_path):
    """``read_file`` of events files written by Arrow's Parquet writer (two row groups) gives the same
    ``FilePart`` with the C pass as with its numpy twin."""
    if steps_mod._sweep is None:
        pytest.skip("the C extension is not built")
    rng = np.random.default_rng(2090)
    taken: list[bool] = []
    real = _File._keep_c

    def spy(self, *a):
        taken.append(real(self, *a))
        return taken[-1]

    for i in range(4):
        path = str(tmp_path / f"e{i}.parquet")
        pq.write_table(_events_table(rng, 3000), path, row_group_size=1700)
        ids = {"g0": 0, "g1": 1, "g2": 2}
        models = [(0, "g0", "", 0.0), (1, "g1", "optimizer", 0.0), (2, "g2", "", 0.0)]
        taken.clear()
        with mock.patch.object(_File, "_keep_c", spy):
            got = read_file(path, ids, models)
        assert taken == [True]
        with mock.patch.object(_File, "_keep_c", lambda *a: False):
            want = read_file(path, ids, models)
        assert got.error is None and got.events == want.events == 3000
        for kind in ("graphs", "loads", "regions", "colls"):
            a, b = getattr(got, kind), getattr(want, kind)
            assert list(a) == list(b), kind
            for key in a:
                assert len(a[key]) == len(b[key])
                for pa_, pb in zip(a[key], b[key]):
                    assert all(np.array_equal(x, y) for x, y in zip(pa_, pb)), (kind, key)
        assert got.region_links == want.region_links
        assert list(got.steps) == list(want.steps)
        for p in got.steps:
            s, w = got.steps[p], want.steps[p]
            assert np.array_equal(s.number, w.number) and np.array_equal(s.start_ns, w.start_ns)
            assert sorted(s.columns) == sorted(w.columns)
            assert all(np.array_equal(s.columns[k], w.columns[k]) for k in s.columns)


def test_the_c_pass_refuses_an_index_outside_its_table():
    if steps_mod._sweep is None:
        pytest.skip("the C extension is not built")
    z = np.zeros(2, dtype=np.int64)

    def keep(name, src, bounds=9):
        out = (z.copy(), np.empty(2, dtype=np.bool_), *(z.copy() for _ in range(6)), np.empty(bounds, np.int64))
        return steps_mod._sweep.keep(np.array(name, dtype=np.int32), np.array(src, dtype=np.int32), None, None, 0,
                                     np.array([0, 2], np.int64), np.array([0, 1], np.uint8), (5, 0, 4), (z, z, z), out)

    assert keep([0, 1], [0, 1]) == 2
    for name, src in (([0, 3], [0, 0]), ([-1, 0], [0, 0]), ([0, 0], [0, 2])):
        with pytest.raises(ValueError):
            keep(name, src)
    with pytest.raises(ValueError):  # (type 2 has no group among 2 types)
        keep([0, 1], [0, 0], bounds=3)


def test_groups_of_few_codes_are_those_of_the_sort():
    """``_groups`` by one compare per code (codes in a narrow range, decision 0209) gives the groups
    the sort gives: codes ascending, -1 left out, each group's rows ascending."""
    rng = np.random.default_rng(16)
    for i in range(200):
        n = int(rng.integers(0, 300))
        lo = int(rng.integers(-3, 40))
        codes = rng.integers(lo, lo + int(rng.integers(1, 40)), n).astype(np.int64)
        got = [(c, r.tolist()) for c, r in occ._groups(codes)]
        with mock.patch.object(occ, "FEW_CODES", 0):
            want = [(c, r.tolist()) for c, r in occ._groups(codes)]
        assert got == want, i
