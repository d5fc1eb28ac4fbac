"""A dictionary column of ``SystemProfileEvents`` holds that column's values only (issue 29, item
11d): pandas turns a Parquet dictionary into a categorical with every dictionary value as a
category, so ``value_counts()`` of ``name`` listed 32 phantom names (``int64``, ``0,1``,
``kmgr_exec_core``: every event type of the vocabulary and every string of the capture's table),
with both writers.  Checked on a real eager training capture and on the synthetic bench capture,
for each writer, against the names the analysis model gives each event, read back with pandas,
pyarrow and DuckDB."""

from __future__ import annotations

import collections
import glob
import os
import sys

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest

from neuron_explorer.analysis import events as events_mod
from neuron_explorer.analysis.reader import discover, load_session

from ..conftest import clean_env, cli, run, shared_dir

pd = pytest.importorskip("pandas")  # (dev extra)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.synth_capture import generate  # noqa: E402

WRITERS = ("own", "arrow")
DICT_COLUMNS = ("name", "trace_event_source", "instance_id", "event_group", "model_name", "op", "dtype",
                "group_ranks", "device_profile_id")

PROGRAM = """
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    with torch.profiler.record_function("train_step"):
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
print("done")
"""


@pytest.fixture(scope="module")
def eager_capture(tmp_path_factory) -> str:
    """Made once per run whichever xdist worker asks first (``shared_dir``); the tests only read it."""
    def build(d) -> None:
        run([sys.executable, "-c", PROGRAM], clean_env(NEURON_RT_INSPECT_ENABLE="1",
                                                       NEURON_RT_INSPECT_OUTPUT_DIR=str(d / "output")))

    return str(shared_dir(tmp_path_factory, "parquet_dictionaries_capture", build)[0] / "output")


def names_per_event(src: str) -> collections.Counter:
    """What each event is named in the analysis model (``events.build``), counted over the capture."""
    counts: collections.Counter = collections.Counter()
    for i, d in enumerate(discover(src, [])):
        pe = events_mod.build(load_session(d), i, 0, 0, with_extra=False)
        counts.update(np.asarray(pe.type_names, dtype=object)[pe.cols["type"]].tolist())
    return counts


def convert(src: str, out: str, writer: str) -> list[str]:
    r = cli("view", "-d", src, "--output-format", "parquet", "--output-file", out,
            env=clean_env(NEURON_EXPLORER_PARQUET_WRITER=writer))
    assert r.returncode == 0, r.stderr
    files = sorted(glob.glob(f"{out}/SystemProfileEvents/**/*.parquet", recursive=True))
    assert files
    return files


def assert_dictionaries_hold_only_their_values(files: list[str]) -> None:
    for f in files:
        frame = pd.read_parquet(f, columns=list(DICT_COLUMNS))
        for c in DICT_COLUMNS:
            col = frame[c]
            assert isinstance(col.dtype, pd.CategoricalDtype), (f, c)
            present = set(col.dropna().unique())
            assert set(col.cat.categories) == present, (f, c, sorted(set(col.cat.categories) - present))
            assert not (col.value_counts() == 0).any(), (f, c)  # what the user saw: phantom names, 0 each
        t = pq.read_table(f, columns=list(DICT_COLUMNS))  # each row group's dictionary, as Arrow reads it
        for c in DICT_COLUMNS:
            for chunk in t[c].chunks:
                used = set(chunk.indices.filter(chunk.is_valid()).to_pylist())
                assert used == set(range(len(chunk.dictionary))), (f, c, chunk.dictionary.to_pylist())


@pytest.mark.parametrize("writer", WRITERS)
def test_parquet_dictionaries_hold_only_the_values_present_in_a_real_capture(eager_capture, tmp_path, writer):
    files = convert(eager_capture, str(tmp_path / "pq"), writer)
    assert_dictionaries_hold_only_their_values(files)
    want = names_per_event(eager_capture)
    assert "train_step" in want and any(n.startswith("Optimizer.step#SGD.step") for n in want)
    got = pd.concat([pd.read_parquet(f, columns=["name"]) for f in files])["name"]
    assert collections.Counter(got.astype(str).tolist()) == want
    assert dict(got.value_counts()) == dict(want)
    q = f"select name, count(*) from read_parquet('{tmp_path}/pq/SystemProfileEvents/**/*.parquet') group by 1"
    assert dict(duckdb.connect().execute(q).fetchall()) == dict(want)


@pytest.mark.parametrize("writer", WRITERS)
def test_parquet_dictionaries_hold_only_the_values_present_across_chunks(tmp_path, writer, monkeypatch):
    """The synthetic bench capture, converted in small chunks: each row group's dictionary holds
    that row group's values (pandas unifies them over the file)."""
    from neuron_explorer.exporters.parquet import ParquetProcess
    from neuron_explorer.view import pipeline

    src = str(tmp_path / "cap")
    generate(src, 1, 1, 30_000)
    monkeypatch.setenv("NEURON_EXPLORER_PARQUET_WRITER", writer)
    monkeypatch.setattr(ParquetProcess, "chunk", 7_001)
    out = str(tmp_path / "pq")
    pipeline.run(pipeline.ViewOptions(directory=src, output_format="parquet", output_file=out, progress=False,
                                      jobs=1))
    files = sorted(glob.glob(f"{out}/SystemProfileEvents/**/*.parquet", recursive=True))
    assert pq.ParquetFile(files[0]).metadata.num_row_groups > 1
    assert_dictionaries_hold_only_their_values(files)
    got = pd.concat([pd.read_parquet(f, columns=["name"]) for f in files])["name"]
    assert dict(got.value_counts()) == dict(names_per_event(src))
