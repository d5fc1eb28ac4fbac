"""`view`'s own Parquet writer for ``SystemProfileEvents`` against Arrow's writer, on the same capture.

The own writer (exporters/parquet_file.py + the C encoders of exporters/_pqenc.c) must give readers
exactly what Arrow's writer gave: same Arrow schema, same values in every column, read with pyarrow,
pandas and DuckDB (hive-partitioned, as users query the dataset), and statistics where range queries
use them.  ``NEURON_EXPLORER_PARQUET_WRITER=arrow`` selects Arrow's writer for the comparison.
"""

from __future__ import annotations

import glob
import os
import sys

import duckdb
import pyarrow.parquet as pq
import pytest

from neuron_explorer.view import pipeline

from ..conftest import (
    clean_env,
    cli_in_process as cli,  # conversions in this process (decision 0173)
    train_capture,
)

pd = pytest.importorskip("pandas")  # (dev extra)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.synth_capture import generate  # noqa: E402


def _view(src: str, dst: str, writer: str, monkeypatch) -> None:
    monkeypatch.setenv("NEURON_EXPLORER_PARQUET_WRITER", writer)
    pipeline.run(pipeline.ViewOptions(directory=src, output_format="parquet", output_file=dst, progress=False,
                                      jobs=1))


def _files(d: str) -> list[str]:
    return sorted(os.path.relpath(f, d) for f in glob.glob(f"{d}/SystemProfileEvents/**/*.parquet", recursive=True))


def assert_same_frame(fa, fb) -> None:
    """``pd.testing.assert_frame_equal``, with categorical columns compared by their categories (in
    order) and codes: the same verdict, where pandas' own comparison of a categorical column takes ~4 s
    per 300k rows (this module's frames have eight)."""
    assert list(fa.columns) == list(fb.columns) and fa.index.equals(fb.index)
    cats = [c for c in fa.columns if isinstance(fa[c].dtype, pd.CategoricalDtype)]
    for c in cats:
        assert isinstance(fb[c].dtype, pd.CategoricalDtype) and fa[c].dtype == fb[c].dtype, c
        assert fa[c].cat.categories.equals(fb[c].cat.categories), c
        assert fa[c].cat.categories.dtype == fb[c].cat.categories.dtype, c
        assert (fa[c].cat.codes.to_numpy() == fb[c].cat.codes.to_numpy()).all(), c
    pd.testing.assert_frame_equal(fa.drop(columns=cats), fb.drop(columns=cats))


def assert_same_dataset(a: str, b: str) -> None:
    """Every events file of ``b`` reads back as the one of ``a``: Arrow schema and columns, pandas
    frame, statistics of the filtered columns; and DuckDB sees the same rows over the dataset."""
    files = _files(a)
    assert files and files == _files(b)
    for f in files:
        ta, tb = pq.read_table(os.path.join(a, f)), pq.read_table(os.path.join(b, f))
        assert ta.schema == tb.schema
        assert ta.num_rows == tb.num_rows
        for c in ta.column_names:
            assert ta[c].equals(tb[c]), f"{f}: column {c} differs"
        assert_same_frame(pd.read_parquet(os.path.join(a, f)), pd.read_parquet(os.path.join(b, f)))
        ma, mb = pq.ParquetFile(os.path.join(a, f)).metadata, pq.ParquetFile(os.path.join(b, f)).metadata
        assert mb.num_row_groups == ma.num_row_groups
        for g in range(ma.num_row_groups):
            for i in range(ma.num_columns):
                sa, sb = ma.row_group(g).column(i).statistics, mb.row_group(g).column(i).statistics
                if sa is not None and sa.has_min_max:
                    assert sb is not None and sb.has_min_max and (sb.min, sb.max) == (sa.min, sa.max), \
                        (f, ma.row_group(g).column(i).path_in_schema)
    con = duckdb.connect()
    q = "select * from read_parquet('{}/SystemProfileEvents/**/*.parquet', hive_partitioning=true)"
    for x, y in ((a, b), (b, a)):
        assert con.execute(f"select count(*) from ({q.format(x)} except all {q.format(y)})").fetchone()[0] == 0
    query = ("select name, count(*), sum(duration_ns), count(exec_id), sum(len(flow_id)) from ({}) "
             "where start_ts between (select quantile_disc(start_ts, 0.3) from ({})) "
             "and (select quantile_disc(start_ts, 0.6) from ({})) group by 1 order by 1")
    ra = con.execute(query.format(q.format(a), q.format(a), q.format(a))).fetchall()
    assert ra and ra == con.execute(query.format(q.format(b), q.format(b), q.format(b))).fetchall()


@pytest.mark.slow
def test_own_writer_reads_back_as_arrows_on_a_synthetic_capture(tmp_path, monkeypatch):
    src = str(tmp_path / "cap")
    generate(src, 2, 1, 300_000)  # two instances (clock alignment), one chunk boundary per process
    _view(src, str(tmp_path / "arrow"), "arrow", monkeypatch)
    _view(src, str(tmp_path / "own"), "own", monkeypatch)
    assert_same_dataset(str(tmp_path / "arrow"), str(tmp_path / "own"))
    created = {pq.ParquetFile(os.path.join(tmp_path, w, f)).metadata.created_by
               for w in ("arrow", "own") for f in _files(str(tmp_path / "own"))}
    assert len(created) == 2  # really two writers


def test_bad_writer_choice_is_one_line(tmp_path):
    r = cli("view", "-d", str(tmp_path), env={**clean_env(), "NEURON_EXPLORER_PARQUET_WRITER": "fast"})
    assert r.returncode != 0
    assert "NEURON_EXPLORER_PARQUET_WRITER='fast' is not valid; accepted: own, arrow" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_own_writer_reads_back_as_arrows_on_a_real_capture(tmp_path, tmp_path_factory):
    out, _ = train_capture(tmp_path_factory, "--steps", "4", "--no-ddp")  # (one launch for every test of that job)
    for w in ("arrow", "own"):
        cli("view", "-d", str(out), "--output-file", str(tmp_path / w), check=True,
            env={**clean_env(), "NEURON_EXPLORER_PARQUET_WRITER": w})
    assert_same_dataset(str(tmp_path / "arrow"), str(tmp_path / "own"))
