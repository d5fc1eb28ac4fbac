"""`view` never imports pandas (docs/decisions/0050-view-without-pandas.md).

pyarrow imports pandas, when it is installed, on its first conversion of a Python or numpy object
(``pa.array``, ``pa.table``, ``pa.scalar``, a boolean ``to_numpy``): ~0.2 CPU-s and ~45 MB in every
`view` process.  Each run below is a real `neuron-explorer view` in a subprocess whose interpreters
(the parent and its spawned workers) load a ``sitecustomize`` that puts an import finder first on
``sys.meta_path``; it records every import of pandas with the stack that asked for it and lets
the import go on, so the command behaves as it would without the recorder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ..conftest import clean_env, cli, run

pytest.importorskip("pandas")  # (dev extra: without pandas there is nothing to import)

RECORDER = '''
import os, sys, traceback

class _RecordPandas:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            with open(os.environ["NX_TEST_PANDAS_LOG"], "a") as f:
                f.write(f"pid {os.getpid()} imported pandas from:\\n" + "".join(traceback.format_stack(limit=8)))
        return None

sys.meta_path.insert(0, _RecordPandas())
'''


def _env(tmp_path: Path, **extra: str) -> tuple[dict[str, str], Path]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(RECORDER)
    log = tmp_path / "pandas.log"
    env = clean_env(NX_TEST_PANDAS_LOG=str(log), **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(site)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env, log


def test_the_recorder_sees_pyarrow_import_pandas(tmp_path):
    """The check below cannot pass vacuously: the same recorder catches pyarrow's import."""
    env, log = _env(tmp_path)
    run([sys.executable, "-c", "import pyarrow as pa; pa.array([1, 2])"], env, check=True)
    assert "imported pandas" in log.read_text()


@pytest.mark.parametrize("jobs,writer", [("1", "own"), ("2", "own"), ("1", "arrow")])
def test_view_parquet_never_imports_pandas(small_capture, tmp_path, jobs, writer):
    env, log = _env(tmp_path, NEURON_EXPLORER_PARQUET_WRITER=writer)
    out = tmp_path / "pq"
    r = cli("view", "-d", str(small_capture), "--output-file", str(out), "--jobs", jobs, env=env)
    assert r.returncode == 0, r.stderr
    tables = {p.name for p in out.iterdir()}
    # every table kind was written: events, counters, device events, the single-file tables
    assert {"SystemProfileEvents", "SystemProfileCounters", "DeviceProfileEvents", "ProfileMetadata.parquet",
            "ProfileModels.parquet", "DeviceProfiles.parquet", "ViewWarnings.parquet"} <= tables, tables
    assert not log.exists(), log.read_text()
