"""``extra_attributes_json`` when a single event type has attributes without a column (the
synthetic bench capture: ``nrt_model_switch``'s ``prev_model_id``), the layout `view` builds
around the joined strings without a ``take`` over every row (analysis/events.py), checked row by
row against the records read back from ``ntrace.pb``, in both Parquet writers and across chunks."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from neuron_explorer.analysis.reader import discover, load_session
from neuron_explorer.exporters.parquet import ParquetProcess
from neuron_explorer.view import pipeline

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.synth_capture import generate  # noqa: E402


@pytest.mark.parametrize("writer", ["own", "arrow"])
def test_single_type_extra_json_matches_the_records(tmp_path, monkeypatch, writer):
    src = str(tmp_path / "cap")
    generate(src, 1, 1, 30_000)
    monkeypatch.setenv("NEURON_EXPLORER_PARQUET_WRITER", writer)
    monkeypatch.setattr(ParquetProcess, "chunk", 7_001)  # chunk boundaries inside the type's runs
    out = str(tmp_path / "pq")
    pipeline.run(pipeline.ViewOptions(directory=src, output_format="parquet", output_file=out, progress=False,
                                      jobs=1))
    s = load_session(discover(src, [])[0])
    files = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(out, "SystemProfileEvents")) for f in fs]
    t = pq.read_table(files[0], columns=["id", "name", "extra_attributes_json"]).sort_by("id")
    got = t["extra_attributes_json"].to_pylist()
    names = t["name"].to_pylist()
    switch = s.type_id("nrt_model_switch")
    slot = "abcde"[s.type_args[switch].index("prev_model_id")]
    want = np.where(s.events["type"] == switch, s.events[slot], -1)
    assert len(got) == s.num_events and 1_000 < int((want >= 0).sum()) < s.num_events
    for i, (g, name) in enumerate(zip(got, names)):
        if name == "nrt_model_switch":
            assert json.loads(g) == {"prev_model_id": int(want[i])}, i
        else:
            assert g is None, (i, name, g)
