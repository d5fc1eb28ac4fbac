"""The ``neuron-det`` trace's core rows (issue #17, item 12): each graph's load is drawn on its core,
and a collective run inside a graph is nested under that execution's ``nc_exec`` -- as Chrome's
trace viewer and Perfetto's JSON importer nest complete events: by containment on one thread."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import free_port, shared_dir
from .helpers import WORKLOADS, load_trace, logs_in, make_recorder, ndet_env, neuron_det, seal


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> list[dict]:
    """Made once per run whichever xdist worker asks first (``shared_dir``); the tests only read it."""
    def build(d: Path) -> None:
        logs = d / "logs"
        logs.mkdir()
        env = ndet_env(logs, 1_000_000, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        subprocess.run([sys.executable, str(WORKLOADS / "compiled_collective.py")], env=env, check=True,
                       capture_output=True, timeout=240)
        r = neuron_det("--log-prefix", str(logs / "ndet"), "-o", str(d / "trace.json"))
        assert r.returncode == 0 and "no errors detected ✓" in r.stdout, r.stdout + r.stderr

    return load_trace(shared_dir(tmp_path_factory, "ndet_trace_nesting", build)[0] / "trace.json")


def _parents(events: list[dict]) -> dict[int, dict | None]:
    """id(event) -> the complete event it is nested under on its thread, the way trace viewers
    stack X events: sorted by start (longer first on ties), each inside the innermost open one
    that contains it."""
    out: dict[int, dict | None] = {}
    by_tid: dict[tuple, list[dict]] = {}
    for e in events:
        if e.get("ph") == "X":
            by_tid.setdefault((e["pid"], e["tid"]), []).append(e)
    for evs in by_tid.values():
        stack: list[dict] = []
        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            while stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + 1e-3:
                stack.pop()
            out[id(e)] = stack[-1] if stack else None
            stack.append(e)
    return out


def test_a_collective_run_by_a_graph_is_nested_under_its_nc_exec(trace):
    parents = _parents(trace)
    ccs = [e for e in trace if e["name"] == "cc_op_exec"]
    assert len(ccs) == 3
    for cc in ccs:
        parent = parents[id(cc)]
        assert parent is not None and parent["name"] == "nc_exec", parent
        assert cc["args"]["in_exec"] == parent["args"]["exec_id"]
        assert cc["args"]["op"] == "all_reduce" and cc["tid"] == parent["tid"]
    assert sorted(cc["args"]["in_exec"] for cc in ccs) == [0, 1, 2]


def test_the_graph_load_is_on_its_core_row(trace):
    loads = [e for e in trace if e["name"] == "model_load"]
    inner = [e for e in trace if e["name"] == "nrt_load"]
    execs = [e for e in trace if e["name"] == "nc_exec"]
    (load,) = loads
    (backend,) = inner
    assert load["tid"] == execs[0]["tid"] == 0 and load["args"]["graph"] == execs[0]["args"]["graph"]
    assert _parents(trace)[id(backend)] is load  # the backend's part inside the whole load
    assert load["ts"] + load["dur"] <= min(e["ts"] for e in execs)  # loaded before it first ran
    names = {e["args"]["name"] for e in trace if e.get("name") == "thread_name"}
    assert names == {"NC 0"}


def test_a_collective_issued_by_the_host_names_no_execution(tmp_path):
    rec = make_recorder(tmp_path, rank=0, world=1)
    rec.exec_begin(0, 0, 0, 1_000)
    rec.exec_end(0, 0, 0, 1_000, 2_000, 0)
    tok = rec.cc_begin(0, "all_reduce", 0, "0", 64, "float32", 3_000)  # after the execution ended
    rec.cc_end(tok, 4_000, 0)
    rec.write(final=True, reason="exit")
    r = neuron_det("--log-prefix", str(tmp_path / "ndet"), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 0, r.stderr
    (cc,) = [e for e in load_trace(tmp_path / "t.json") if e["name"] == "cc_op_exec"]
    assert cc["args"]["in_exec"] is None


@pytest.mark.parametrize("load", [[3, 2, 1], [1, 2], ["a", 1, 2], [-1, 0, 1]])
def test_a_model_with_impossible_load_times_is_one_line_naming_the_field(tmp_path, load):
    rec = make_recorder(tmp_path, rank=0, world=1)
    path = Path(rec.write(final=True, reason="exit"))
    raw = path.read_bytes()
    hlen = int.from_bytes(raw[8:12], "little")
    header = json.loads(raw[12:12 + hlen])
    header["models"][0]["load"] = load
    path.write_bytes(seal(header, raw[12 + hlen:-16]))
    r = neuron_det("--log-prefix", str(tmp_path / "ndet"), "-o", str(tmp_path / "t.json"))
    lines = [ln for ln in r.stderr.splitlines() if "models[0].load" in ln]
    # the only log is skipped: nothing could be read (exit 2), said in one line naming the field
    assert len(lines) == 1 and "Traceback" not in r.stderr and r.returncode == 2, r.stderr
    assert "accepted: [] or three ascending" in lines[0] and len(logs_in(tmp_path)) == 1
