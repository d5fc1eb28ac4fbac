"""Every SystemProfileEvents column, for every event type, checked against the records that were written.

The capture is written through the real writer from a random mix of all event types (so argument
slots that have a column and those that go to ``extra_attributes_json`` are both exercised), with a
chunk size smaller than the process so that chunk boundaries are crossed.  The expected values are
computed here from the records and the vocabulary, independently of the view code.
"""

from __future__ import annotations

import json
import os

import duckdb
import numpy as np
import pytest

from neuron_explorer.capture import writer
from neuron_explorer.capture.store import CoreStore
from neuron_explorer.contracts import events as ev
from neuron_explorer.contracts.layout import make_session_dir
from neuron_explorer.exporters.chrome_json import JsonProcess
from neuron_explorer.exporters.parquet import ParquetProcess
from neuron_explorer.runtime.config import CaptureConfig
from neuron_explorer.runtime.core import Runtime
from neuron_explorer.runtime.identity import ProcessIdentity
from neuron_explorer.util.atomic import atomic_write
from neuron_explorer.view import pipeline

COLUMN_OF = {"model_id": None, "exec_id": "exec_id", "ret": "ret", "op_str": "op", "seq": "seq", "bytes": "bytes",
             "dtype_str": "dtype", "group_str": "group_ranks"}


def _capture(out: str, n: int, seed: int):
    rng = np.random.default_rng(seed)
    cfg = CaptureConfig(output_dir=out, max_events_per_nc=n)
    rt = Runtime(cfg, ProcessIdentity("i-0123456789abcdef0", "host", 4242, 1, 1, 2, 0, "tagged"))
    base = 5_000_000_000
    rt.anchors = [(base, base + 1_700_000_000_000_000_000, "start")]
    for k in ("forward", "backward"):
        rt.add_model(name=f"step_{k}", neff_name=f"neff_{k}", graph_hash=k, backend="aot_eager", kind=k, nc_idx=1)
    sids = [0] + [rt.intern(s) for s in ("all_reduce", "0,1", "float32", 'quote " name', "región")]
    types = np.array([t.id for t in ev.EVENT_TYPES])
    rec = np.zeros((n, ev.RECORD_WIDTH), dtype=np.int64)
    rec[:, 0] = rng.choice(types, n)
    rec[:, 1] = base + np.sort(rng.integers(0, 10**9, n))
    rec[:, 2] = rec[:, 1] + rng.integers(1, 10**5, n)
    rec[:, 3] = rng.choice([11, 12], n)
    for slot in range(5):
        rec[:, 4 + slot] = rng.integers(0, 6, n)
    for t in ev.EVENT_TYPES:  # string slots hold string ids; model ids refer to the two models
        m = rec[:, 0] == t.id
        for slot, arg in enumerate(t.args):
            if arg.endswith("_str"):
                rec[m, 4 + slot] = np.array(sids)[rng.integers(0, len(sids), int(m.sum()))]
            elif arg == "model_id":
                rec[m, 4 + slot] = rng.integers(0, 2, int(m.sum()))
    store = CoreStore(1, n)
    store.hold(rec)
    d = make_session_dir(out, "i-0123456789abcdef0", 4242, rt.anchors[0][1])
    atomic_write(os.path.join(d, "ntrace.pb"), writer.encode_system_trace(rt, {1: store}))
    atomic_write(os.path.join(d, "trace_info.pb"), writer.encode_trace_info(rt, {1: store}, d))
    return rt, rec


def test_every_column_matches_the_records(tmp_path, monkeypatch):
    n = 5000
    rt, rec = _capture(str(tmp_path / "cap"), n, seed=3)
    monkeypatch.setattr(ParquetProcess, "chunk", 1024)  # several chunks per process
    out = str(tmp_path / "out_parquet")
    res = pipeline.run(pipeline.ViewOptions(str(tmp_path / "cap"), output_file=out, jobs=1))
    assert res.events == n and not res.warnings
    rows = duckdb.sql(f"""SELECT * FROM read_parquet('{out}/SystemProfileEvents/**/*.parquet', hive_partitioning=false)
                          ORDER BY id""").fetchall()
    names = [d[0] for d in duckdb.sql(f"SELECT * FROM read_parquet('{out}/SystemProfileEvents/**/*.parquet', "
                                       "hive_partitioning=false) LIMIT 0").description]
    assert len(rows) == n
    strings = rt.string_list
    offset = rows[0][names.index("start_ts")] - int(rec[0, 1])
    flows_expected = 0
    for row, r in zip(rows, rec):
        got = dict(zip(names, row))
        t = ev.EVENT_TYPES[int(r[0])]
        name = (strings[int(r[4])] or t.name) if t.source == "framework" else t.name  # regions: their label
        assert got["name"] == name and got["trace_event_source"] == t.source and got["event_group"] == t.group
        assert got["start_ts"] - offset == r[1] and got["end_ts"] - got["start_ts"] == r[2] - r[1] == got["duration_ns"]
        assert (got["thread_id"], got["nc_idx"], got["pcore_idx"], got["worker_gid"]) == (r[3], 1, 1, 1)
        assert (got["instance_id"], got["process_id"]) == ("i-0123456789abcdef0", 4242)
        # a region's stream id is its own id; calls inside one carry it (tests/capture/test_framework_regions.py)
        if t.source == "framework":
            assert got["framework_stream_id"] == got["id"]
        elif t.name not in ("nrt_execute", "nc_exec_running"):
            assert got["framework_stream_id"] is None
        want = {"exec_id": None, "ret": None, "op": None, "seq": None, "bytes": None, "dtype": None,
                "group_ranks": None, "model_name": None}
        extra = {}
        for slot, arg in enumerate(t.args):
            if not arg:
                continue
            v = int(r[4 + slot])
            if arg == "model_id":
                want["model_name"] = f"step_{('forward', 'backward')[v]}"
            elif arg in COLUMN_OF:
                want[COLUMN_OF[arg]] = (strings[v] or None) if arg.endswith("_str") else v
            elif arg.endswith("_str"):
                extra[arg[:-4]] = strings[v]
            else:
                extra[arg] = v
        assert {k: got[k] for k in want} == want, (t.name, got)
        assert (json.loads(got["extra_attributes_json"]) if got["extra_attributes_json"] else {}) == extra, t.name
        is_flow = t.name in ("nrt_execute", "nc_exec_running", "cc_running", "cc_exec_barrier")
        # (a framework region and the calls it issued share one more flow)
        fw_flow = got["framework_stream_id"] is not None and t.name in ("nrt_execute", "framework_op") and \
            len(got["flow_id"]) == is_flow + 1
        assert len(got["flow_id"]) == is_flow + fw_flow, t.name
        flows_expected += is_flow + fw_flow
    # the flows join through unnest(flow_id): execution pairs share an id, so does one collective's seq
    assert not os.path.exists(os.path.join(out, "SystemProfileFlows"))  # no separate copy of the column
    pairs = duckdb.sql(f"""WITH f AS (SELECT unnest(flow_id) AS fid, name, exec_id, seq FROM
                           read_parquet('{out}/SystemProfileEvents/**/*.parquet', hive_partitioning=false))
                           SELECT count(*), count(DISTINCT fid) FROM f""").fetchall()[0]
    assert pairs[0] == flows_expected and 0 < pairs[1] < flows_expected


@pytest.mark.parametrize("fmt", ["json"])
def test_json_args_carry_the_same_extra_attributes(tmp_path, fmt, monkeypatch):
    rt, rec = _capture(str(tmp_path / "cap"), 500, seed=5)
    monkeypatch.setattr(JsonProcess, "chunk", 128)
    out = str(tmp_path / "t.json")
    pipeline.run(pipeline.ViewOptions(str(tmp_path / "cap"), output_format=fmt, output_file=out, jobs=1))
    evs = [e for e in json.load(open(out))["traceEvents"]
           if e.get("ph") in ("X", "i") and e.get("name") == "nrt_tensor_read"]
    want = sorted((int(r[5]), int(r[6])) for r in rec if r[0] == ev.NRT_TENSOR_READ)
    assert sorted((e["args"]["src_device"], e["args"]["dst_device"]) for e in evs) == want


@pytest.mark.fast  # a cheap end-to-end check in the fast loop (tests/fastset.py)
def test_an_output_path_of_the_wrong_kind_is_refused_before_any_work(tmp_path):
    import subprocess
    import sys

    _capture(str(tmp_path / "cap"), 100, seed=7)
    (tmp_path / "taken.json").write_text("keep me")
    (tmp_path / "adir").mkdir()
    for fmt, out, what in (("parquet", "taken.json", "is a file"), ("json", "adir", "is a directory")):
        r = subprocess.run([sys.executable, "-m", "neuron_explorer", "view", "-d", str(tmp_path / "cap"),
                            "--output-format", fmt, "--output-file", str(tmp_path / out)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and what in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert (tmp_path / "taken.json").read_text() == "keep me"


def test_json_names_tracks_of_large_thread_ids_and_core_indexes(tmp_path):
    """Host threads get tids of their own id and cores 1_000_000 (+ 1_000_000 for collectives) plus
    their index; a thread id or core index past that range is still named from its own kind
    (decoding the tid named a thread 3_500_000 as a fourth kind of track and failed)."""
    from neuron_explorer.analysis.events import build
    from neuron_explorer.analysis.reader import discover, load_session
    from neuron_explorer.exporters.interface import ProcessTarget

    _capture(str(tmp_path / "cap"), 300, seed=11)
    s = load_session(discover(str(tmp_path / "cap"))[0])
    s.events = {k: np.array(v) for k, v in s.events.items()}
    s.mapped = None
    s.events["thread_id"][s.events["thread_id"] == 11] = 3_500_000
    s.events["nc_idx"][:] = 2_000_000
    w = JsonProcess(ProcessTarget(0, 0, str(tmp_path / "t.json"), str(tmp_path), str(tmp_path)))
    w.add(build(s, 0, 0, 0, {}))
    piece = w.close()
    names = {e["tid"]: e["args"]["name"] for e in json.loads(b"[" + open(piece.path, "rb").read() + b"]")
             if e["name"] == "thread_name"}
    assert names == {12: "12/neuron_rt", 3_500_000: "3500000/neuron_rt", 3_000_000: "nc_2000000/neuron_hw",
                     4_000_000: "nc_2000000/cc"}
