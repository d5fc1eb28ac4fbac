"""`record_function` regions are framework events named by their label, on the thread that ran
them, linked (framework_stream_id, flows) to the executions they issued, in Parquet, Perfetto and
JSON; and the done-when DDP job: eager executions per step with DDP's collectives between them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import duckdb
import pytest

from ..conftest import (
    clean_env,
    cli_in_process as cli,  # conversions in this process (decision 0173)
    shared_dir,
    torchrun,
)
from ..view.test_perfetto_semantics import decode
from .helpers import sessions, type_counts

REGIONS = """
import threading
import torch
from torch.profiler import record_function

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
x = torch.randn(4, 8)
with torch.no_grad():
    with record_function("outer"):
        with record_function("inner"):
            model(x)
        model(x)

    def worker():
        with record_function("on_thread"):
            model(x)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    model(x)  # outside any region
"""


def _profiled(tmp_path, source: str):
    """Run ``source`` as a script under a user's system profile; the capture's output directory."""
    out = tmp_path / "out"
    script = tmp_path / "job.py"
    script.write_text(source)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out)))
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def regions_capture(tmp_path_factory) -> Path:
    """REGIONS' capture (``_profiled``), made once per test run for every test that only reads it:
    the three tests here and ``tests/view/test_json_identical.py`` (``shared_dir``, decision 0210)."""
    return shared_dir(tmp_path_factory, "framework_regions_capture", lambda d: str(_profiled(d, REGIONS)))[0] / "out"


def _events(pq: str, where: str = "true") -> list[dict]:
    con = duckdb.connect()
    cur = con.execute(f"""select id, name, trace_event_source, thread_id, start_ts, flow_id, framework_stream_id,
                          worker_gid from read_parquet('{pq}/SystemProfileEvents/**/*.parquet', hive_partitioning=true)
                          where {where} order by start_ts, id""")
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _views(tmp_path, out) -> tuple[str, dict, object]:
    """Parquet directory, JSON document and decoded Perfetto trace of a capture."""
    pq = str(tmp_path / "pq")
    cli("view", "-d", str(out), "--output-file", pq, check=True)
    for fmt, ext in (("json", "json"), ("perfetto", "pftrace")):
        (tmp_path / fmt).mkdir()
        cli("view", "-d", str(out), "--output-format", fmt, "--output-file",
            str(tmp_path / fmt / f"system_profile.{ext}"), check=True)
    doc = json.loads((tmp_path / "json" / "system_profile.json").read_text())
    pf = decode((tmp_path / "perfetto" / "system_profile.pftrace").read_bytes())
    return pq, doc, pf


def test_regions_are_named_by_label_and_linked_to_the_executions_they_issued(tmp_path, tmp_path_factory):
    out = regions_capture(tmp_path_factory)
    pq, doc, pf = _views(tmp_path, out)

    evs = _events(pq)
    regions = {e["name"]: e for e in evs if e["trace_event_source"] == "framework"}
    assert set(regions) == {"outer", "inner", "on_thread"}
    calls = [e for e in evs if e["name"] == "nrt_execute"]
    cores = [e for e in evs if e["name"] == "nc_exec_running"]
    assert len(calls) == len(cores) == 4
    # each call carries the id of the innermost region around it on its own thread; the last none
    want = [regions[n]["id"] for n in ("inner", "outer", "on_thread")] + [None]
    assert [c["framework_stream_id"] for c in calls] == want
    assert [c["framework_stream_id"] for c in cores] == [c["framework_stream_id"] for c in calls]
    assert regions["on_thread"]["thread_id"] == calls[2]["thread_id"] != calls[0]["thread_id"]
    assert all(r["framework_stream_id"] == r["id"] for r in regions.values())
    # flows: region <-> its call (a flow of their own), call <-> core execution (the execution's)
    members = defaultdict(list)
    for e in evs:
        for f in e["flow_id"]:
            members[f].append(e["name"])
    chains = sorted(sorted(v) for v in members.values())
    assert chains == sorted([["inner", "nrt_execute"], ["nrt_execute", "outer"], ["nrt_execute", "on_thread"]]
                            + [["nc_exec_running", "nrt_execute"]] * 4)

    # JSON: named by label, with the stream id and an arrow from each region to its call
    js = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert {"outer", "inner", "on_thread"} <= {e["name"] for e in js}
    (inner,) = [e for e in js if e["name"] == "inner"]
    assert inner["cat"] == "framework" and inner["args"]["framework_stream_id"] == regions["inner"]["id"]
    arrows = [e for e in doc["traceEvents"] if e.get("cat") == "framework" and e.get("ph") in ("s", "f")]
    assert Counter(e["ph"] for e in arrows) == {"s": 3, "f": 3}
    starts = {e["id"]: e for e in arrows if e["ph"] == "s"}
    for f in (e for e in arrows if e["ph"] == "f"):
        assert f["bp"] == "e" and starts[f["id"]]["ts"] <= f["ts"] and starts[f["id"]]["tid"] == f["tid"]

    # Perfetto: the same chains through the slices' flow ids
    flows = defaultdict(list)
    for s in pf.slices:
        for f in s.flows:
            flows[f].append(s.name)
    assert sorted(sorted(v) for v in flows.values()) == chains


@pytest.mark.parametrize("types", ["framework_op,nc_exec_running", "^nrt_execute"])
def test_a_type_filter_that_drops_the_calls_keeps_regions_linked_to_their_core_executions(tmp_path, tmp_path_factory,
                                                                                        types):
    """The links are found before the filter: without the nrt_execute between them, each core
    execution still names its region, and every kept event keeps the id it has unfiltered."""
    out = regions_capture(tmp_path_factory)
    cli("view", "-d", str(out), "--output-format", "parquet", "--output-file", str(tmp_path / "all"), check=True)
    cli("view", "-d", str(out), "--output-format", "parquet", "--output-file", str(tmp_path / "some"),
        "--system-trace-filter-event-type", types, check=True)
    every = {e["id"]: e for e in _events(str(tmp_path / "all"))}
    kept = _events(str(tmp_path / "some"))
    assert kept and all(every[e["id"]] == e for e in kept)  # ids, flows and stream ids as unfiltered
    cores = [e for e in kept if e["name"] == "nc_exec_running"]
    regions = {e["id"]: e["name"] for e in kept if e["trace_event_source"] == "framework"}
    assert [regions.get(c["framework_stream_id"]) for c in cores] == ["inner", "outer", "on_thread", None]


PAUSED = """
import torch
from torch.profiler import record_function
from neuron_explorer.runtime import _fastpath

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
x = torch.randn(4, 8)
with torch.no_grad():
    with record_function("kept"):
        model(x)
    _fastpath.pause_executions(True)
    with record_function("paused"):
        model(x)
    _fastpath.pause_executions(False)
    with record_function("after"):
        model(x)
"""


def test_paused_hooks_leave_regions_and_executions_out_of_the_capture(tmp_path):
    """``pause_executions`` (the benchmarks' working-over-paused blocks only) pauses record_function
    regions as well as the execution wrappers: compiled graphs' and, since later eager calls take
    the same C wrapper, eager graphs' after their first call."""
    out = _profiled(tmp_path, PAUSED)
    pq = str(tmp_path / "pq")
    cli("view", "-d", str(out), "--output-file", pq, check=True)
    evs = _events(pq)
    regions = [e for e in evs if e["trace_event_source"] == "framework"]
    assert [e["name"] for e in regions] == ["kept", "after"]
    # the eager entry points run in both kinds of block, but the paused block's call (the graph's
    # second: the C wrapper's) records nothing
    calls = [e for e in evs if e["name"] == "nrt_execute"]
    assert [c["framework_stream_id"] for c in calls] == [regions[0]["id"], regions[1]["id"]]


@pytest.mark.slow
def test_an_eager_ddp_job_gives_per_rank_executions_collectives_and_linked_regions(tmp_path):
    """The done-when: eager DDP under NEURON_RT_INSPECT_ENABLE=1 torchrun, no code changes."""
    script = tmp_path / "ddp.py"
    script.write_text("""
import torch, torch.distributed as dist
from torch.profiler import record_function
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randn(16, 8)
for step in range(3):
    with record_function("forward"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        opt.step()
        opt.zero_grad()
dist.destroy_process_group()
""")
    out = tmp_path / "out"
    torchrun(2, script, [], clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out)),
             cwd=tmp_path)
    ss = sessions(out)
    assert sorted(s.info.rank for s in ss) == [0, 1]
    for s in ss:
        c = type_counts(s)
        assert c["nrt_execute"] == c["nc_exec_running"] == 9 and c["cc_running"] >= 3
    pq, doc, pf = _views(tmp_path, out)
    for rank in (0, 1):
        evs = _events(pq, f"worker_gid = {rank}")
        con = duckdb.connect()
        names = [r[0] for r in con.execute(f"""
                 select model_name from read_parquet('{pq}/SystemProfileEvents/**/*.parquet', hive_partitioning=true)
                 where worker_gid = {rank} and name = 'nrt_execute' order by start_ts""").fetchall()]
        fwd = names[0]
        assert fwd.startswith("DistributedDataParallel_") and names[2].startswith("SGD_")
        assert names == [fwd, fwd + "_bwd", names[2]] * 3
        # DDP's gradient all-reduce runs inside each backward, between its forward and optimizer step
        calls = [e for e in evs if e["name"] == "nrt_execute"]
        cc = [e for e in evs if e["name"] == "cc_running"]
        for k in range(3):
            fwd_start, opt_start = calls[3 * k]["start_ts"], calls[3 * k + 2]["start_ts"]
            assert any(fwd_start < e["start_ts"] < opt_start for e in cc), (rank, k)
        # regions by label, each linked to the execution it issued, by stream id and by a flow
        by_id = {e["id"]: e for e in evs}
        for call in calls:
            region = by_id[call["framework_stream_id"]]
            want = {fwd: "forward", fwd + "_bwd": "backward"}.get(names[calls.index(call)], "optimizer")
            assert region["name"] == want and region["trace_event_source"] == "framework"
            assert set(region["flow_id"]) & set(call["flow_id"])
    js = {e["name"] for e in doc["traceEvents"] if e.get("ph") == "X"}
    assert {"forward", "backward", "optimizer", "Optimizer.step#SGD.step"} <= js
    linked = defaultdict(set)
    for s in pf.slices:
        for f in s.flows:
            linked[f].add(s.name)
    assert sum(v == {"backward", "nrt_execute"} for v in linked.values()) == 6  # 3 steps x 2 ranks


REGIONS_EDGES = """
import torch
from torch.profiler import record_function

@record_function("decorated")
def work(x):
    return x * 2

with record_function("outer") as rf:
    assert isinstance(rf, record_function)
    work(torch.ones(2))
    try:
        with record_function("raises"):
            raise KeyError("mine")
    except KeyError as e:
        assert e.args == ("mine",)
    else:
        raise SystemExit("the region swallowed the exception")
ctx = record_function("manual")
ctx.__enter__()
ctx.__exit__(None, None, None)
"""


def _run_and_view(tmp_path, source: str, pure: str) -> tuple[str, str]:
    """Run ``source`` captured (the C path or the Python one) and convert its capture: the
    Parquet folder and the program's stdout."""
    out = tmp_path / "out"
    script = tmp_path / "job.py"
    script.write_text(source)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                                     NEURON_EXPLORER_PURE_PYTHON=pure))
    assert p.returncode == 0, p.stderr[-3000:]
    pq = str(tmp_path / "pq")
    cli("view", "-d", str(out), "--output-file", pq, check=True)
    return pq, p.stdout


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_regions_record_around_exceptions_decorators_and_manual_calls_on_both_paths(tmp_path, pure):
    """The C methods (runtime/_hooks.h) and the Python ones record the same regions, nested in
    time, and leave record_function's own behaviour (its return value, the body's exception)."""
    pq, _ = _run_and_view(tmp_path, REGIONS_EDGES, pure)
    regions = {e["name"]: e for e in _events(pq, "trace_event_source = 'framework'")}
    assert set(regions) == {"outer", "decorated", "raises", "manual"}
    con = duckdb.connect()
    span = dict(con.execute(f"""select name, [start_ts, end_ts]
                                 from read_parquet('{pq}/SystemProfileEvents/**/*.parquet', hive_partitioning=true)
                                 where trace_event_source = 'framework'""").fetchall())
    for inner in ("decorated", "raises"):
        assert span["outer"][0] <= span[inner][0] <= span[inner][1] <= span["outer"][1]
    assert span["outer"][1] <= span["manual"][0] <= span["manual"][1]


FRESH_LABELS = """
from torch.profiler import record_function
from neuron_explorer.runtime.core import get_runtime
# six labels of one length, one of them two bytes a character: more than the C path remembers
marks = [("A", 1), ("B", 2), ("C", 3), ("D", 4), ("E", 5), ("\u03a9", 6)]
ring = get_runtime().core().ring
before = ring.produced()
for i in range(5 * len(marks)):
    cls, n = marks[i % len(marks)]
    with record_function(f"opt.step#{cls}.{n}"):  # a new string at each call, as torch's optimizers make theirs
        pass
print("produced", ring.produced() - before)
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_labels_made_anew_at_each_call_name_their_regions_and_each_region_is_counted(tmp_path, pure):
    """A label is looked up by its text, not by the string object (the C path remembers its last
    labels, runtime/_hooks.h), and each region counts one event produced (the C path advances the
    ring's counter in place)."""
    pq, stdout = _run_and_view(tmp_path, FRESH_LABELS, pure)
    assert "produced 30" in stdout
    names = [e["name"] for e in _events(pq, "trace_event_source = 'framework'")]
    assert Counter(names) == {f"opt.step#{c}.{n}": 5 for c, n in
                              [("A", 1), ("B", 2), ("C", 3), ("D", 4), ("E", 5), ("\u03a9", 6)]}
    assert names[:6] == [f"opt.step#{c}.{n}" for c, n in
                         [("A", 1), ("B", 2), ("C", 3), ("D", 4), ("E", 5), ("\u03a9", 6)]]


ORDINARY = """
import sys
import torch, torch.distributed as dist
from torch.profiler import record_function
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(4, 8), torch.randn(4, 2)
for step in range(3):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    if step == 2:
        with record_function("my_step"):  # a user's region around the step: both links hold
            opt.step()
    else:
        opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.4f}")
dist.destroy_process_group()
"""


def readme_region_query() -> str:
    """The region -> execution query, as docs/capture.md (the README's reference until issue 36) prints it."""
    import re

    from ..conftest import REPO

    blocks = re.findall(r"```sql\n(.*?)```", (REPO / "docs" / "capture.md").read_text(), re.S)
    (q,) = [b for b in blocks if "trace_event_source = 'framework'" in b]
    return q


def test_the_readmes_region_query_returns_the_executions_of_an_ordinary_training_program(tmp_path, monkeypatch):
    """Issue 29, item 11e: PyTorch's own regions (``Optimizer.step#SGD.step``,
    ``DistributedDataParallel.forward``) open inside the execution they belong to, so the README's
    query (calls inside regions only) returned no rows on a program without regions of its own."""
    from ..conftest import free_port

    out = tmp_path / "out"
    script = tmp_path / "train.py"
    script.write_text(ORDINARY)
    p = subprocess.run([sys.executable, str(script), str(free_port())], capture_output=True, text=True, timeout=300,
                       env=clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out)))
    assert p.returncode == 0, p.stderr[-3000:]
    cli("view", "-d", str(out), "--output-format", "parquet", "--output-file",
        str(tmp_path / "system_profile_parquet"), check=True)
    monkeypatch.chdir(tmp_path)  # (the README's path is view's default output directory)
    con = duckdb.connect()
    for stmt in [x for x in readme_region_query().split(";") if x.strip()]:
        rows = con.execute(stmt).fetchall()
    got = Counter((region, model.split("_")[0]) for region, model, _ in rows)
    assert got == {("DistributedDataParallel.forward", "DistributedDataParallel"): 3,
                   ("Optimizer.step#SGD.step", "SGD"): 3, ("my_step", "SGD"): 1}, rows
    assert all(d > 0 for _, _, d in rows)

    # the model: a region inside an execution is in the flow of its host call and core execution;
    # framework_stream_id keeps its meaning (the user's region around the third step owns the call)
    evs = _events(str(tmp_path / "system_profile_parquet"))
    by_flow = defaultdict(list)
    for e in evs:
        for f in e["flow_id"]:
            by_flow[f].append(e["name"])
    inner = [e for e in evs if e["name"] in ("Optimizer.step#SGD.step", "DistributedDataParallel.forward")]
    assert len(inner) == 6
    for r in inner:
        assert r["framework_stream_id"] == r["id"] and len(r["flow_id"]) == 1
        assert sorted(by_flow[r["flow_id"][0]]) == sorted([r["name"], "nrt_execute", "nc_exec_running"])
    calls = [e for e in evs if e["name"] == "nrt_execute"]
    mine = next(e for e in evs if e["name"] == "my_step")
    assert [c["framework_stream_id"] for c in calls] == [None] * 8 + [mine["id"]]
    zero_grad = [e for e in evs if e["name"].startswith("Optimizer.zero_grad")]
    assert len(zero_grad) == 3 and all(not e["flow_id"] for e in zero_grad)  # outside every execution

    # JSON: a "ran" arrow from each call to the region inside its execution; Perfetto: the flows
    (tmp_path / "views").mkdir()
    _, doc, pf = _views(tmp_path / "views", out)
    ran = [e for e in doc["traceEvents"] if e.get("cat") == "framework" and e.get("name") == "ran"]
    assert Counter(e["ph"] for e in ran) == {"s": 6, "f": 6}
    binds = Counter(e["bind_id"] for e in doc["traceEvents"] if "bind_id" in e)
    assert set(binds.values()) == {2}  # each execution flow binds its call and its core only
    flows = defaultdict(set)
    for s in pf.slices:
        for f in s.flows:
            flows[f].add(s.name)
    assert sum(v == {"Optimizer.step#SGD.step", "nrt_execute", "nc_exec_running"} for v in flows.values()) == 3


REGIONS_MANY = """
import threading
from torch.profiler import record_function

# forty regions open at once, nested: more than the C path keeps its start times for
stack = [record_function(f"n{i:02d}") for i in range(40)]
for r in stack:
    r.__enter__()
for r in reversed(stack):
    r.__exit__(None, None, None)
# one region object entered three times, one after the other
again = record_function("reused")
for _ in range(3):
    with again:
        pass
# opened here, closed on another thread
handoff = record_function("handoff")
handoff.__enter__()
t = threading.Thread(target=handoff.__exit__, args=(None, None, None))
t.start()
t.join()
# left open while twenty others open and close, then closed
held = record_function("held")
held.__enter__()
for i in range(20):
    with record_function(f"short{i:02d}"):
        pass
held.__exit__(None, None, None)
# closed twice without a second enter: torch's __exit__ lets it, and the region is recorded again
twice = record_function("twice")
twice.__enter__()
twice.__exit__(None, None, None)
twice.__exit__(None, None, None)
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_regions_open_many_at_once_reused_handed_over_and_closed_twice_on_both_paths(tmp_path, pure):
    """Where each region's start is kept between its enter and its exit (the C path keeps the open
    ones in a small table, runtime/_hooks.h) does not change what is recorded: every region of
    forty open at once, nested in time; a region object entered again; one closed on another
    thread; one held open while twenty others come and go; a second exit without an enter."""
    pq, _ = _run_and_view(tmp_path, REGIONS_MANY, pure)
    con = duckdb.connect()
    rows = con.execute(f"""select name, start_ts, end_ts, thread_id
                           from read_parquet('{pq}/SystemProfileEvents/**/*.parquet', hive_partitioning=true)
                           where trace_event_source = 'framework' order by start_ts, end_ts""").fetchall()
    names = Counter(r[0] for r in rows)
    assert names == {**{f"n{i:02d}": 1 for i in range(40)}, **{f"short{i:02d}": 1 for i in range(20)},
                     "reused": 3, "handoff": 1, "held": 1, "twice": 2}
    span = {r[0]: (r[1], r[2]) for r in rows}
    for i in range(39):  # each of the forty inside the one opened before it
        outer, inner = span[f"n{i:02d}"], span[f"n{i + 1:02d}"]
        assert outer[0] <= inner[0] <= inner[1] <= outer[1]
    reused = sorted((s, e) for n, s, e, _ in rows if n == "reused")
    assert all(a[1] <= b[0] for a, b in zip(reused, reused[1:]))  # three, one after the other
    assert span["n39"][1] <= reused[0][0] and reused[-1][1] <= span["handoff"][0]
    for i in range(20):
        assert span["held"][0] <= span[f"short{i:02d}"][0] <= span[f"short{i:02d}"][1] <= span["held"][1]
    twice = [(s, e) for n, s, e, _ in rows if n == "twice"]
    assert twice[0][0] == twice[1][0] and twice[0][1] <= twice[1][1]  # the same start, ended twice
    tids = {n: tid for n, _, _, tid in rows}
    assert tids["handoff"] != tids["held"]  # recorded by the thread that closed it
