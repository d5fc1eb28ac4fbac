"""The documented scale-out path: converting with Dask's process scheduler gives the same dataset
as `neuron-explorer view`."""

import subprocess
import sys

import duckdb
import pytest

from ..conftest import EXAMPLES, clean_env, cli

pytest.importorskip("dask")
pytestmark = pytest.mark.slow


def test_dask_conversion_matches_view(tmp_path):
    sys.path.insert(0, str(EXAMPLES.parent))
    from bench.synth_capture import generate

    src = tmp_path / "cap"
    generate(str(src), instances=2, processes=2, events=20_000)
    out = tmp_path / "fleet"
    p = subprocess.run([sys.executable, str(EXAMPLES / "scale_out_dask.py"), str(src), str(out)], env=clean_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.count("executions") == 4
    ref = tmp_path / "ref"
    cli("view", "-d", str(src), "--output-file", str(ref), check=True)
    con = duckdb.connect()
    q = """select worker_gid, name, count(*), min(start_ts), max(end_ts), count(distinct id)
           from read_parquet('{}/SystemProfileEvents/**/*.parquet', hive_partitioning=true) group by all order by all"""
    assert con.execute(q.format(out)).fetchall() == con.execute(q.format(ref)).fetchall()
    offs = "select instance_id, clock_offset_ns, clock_offset_method from '{}/ProfileMetadata.parquet' order by all"
    assert con.execute(offs.format(out)).fetchall() == con.execute(offs.format(ref)).fetchall()
