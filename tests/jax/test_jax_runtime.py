"""A plain JAX program, with no jax.profiler and no neuron_explorer import, profiled without code
changes: NEURON_RT_INSPECT_ENABLE=1, `neuron-explorer inspect`, device profiles, NDET logs and
neuron-monitor all see its jitted executions, and its TraceAnnotation labels are event names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import (
    clean_env,
    cli as cli_subprocess,
    cli_in_process as cli,  # conversions in this process (decision 0173)
    jit_loop_capture,
    run,
)

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install jax jaxlib)")

from neuron_explorer.analysis.reader import discover, load_session  # noqa: E402
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb  # noqa: E402

LOOP = Path(__file__).resolve().parent / "workloads" / "jit_loop.py"
STEPS = 4


def _session(out: Path):
    found = discover(str(out))
    assert len(found) == 1, found
    return found[0], load_session(found[0])


def _executions(s) -> Counter:
    """Executions per model name (nc_exec_running events)."""
    names = {m.id: m.name for m in s.models}
    ex = s.events["type"] == s.type_id("nc_exec_running")
    return Counter(names[int(m)].split("@")[0] for m in s.events["a"][ex])


def _count(s, name: str) -> int:
    tid = s.type_id(name)
    return 0 if tid is None else int((s.events["type"] == tid).sum())


@pytest.fixture(scope="module")
def env_capture(tmp_path_factory):
    """The loop run under the variable (its directory and standard output), once per test run
    whichever xdist worker asks first (``shared_dir``); the tests only read it."""
    return jit_loop_capture(tmp_path_factory, STEPS)


def test_a_plain_jit_loop_under_the_variable_gives_one_execution_per_call(env_capture, tmp_path):
    cwd, stdout = env_capture
    d, s = _session(cwd / "output")
    # step ran STEPS times; predict once at the top level (its calls inside step are staged out,
    # not executed); the jitted method once
    assert _executions(s) == Counter({"step": STEPS, "predict": 1, "scale": 1})
    assert _count(s, "nrt_execute") == _count(s, "nc_exec_running") == STEPS + 2
    step = next(m for m in s.models if m.name.startswith("step@jit_loop.py:"))
    assert step.kind == "jit" and step.compile_ns > 0 and "HloModule" not in step.name
    # one model_load (trace to compiled) and one nrt_load (the backend compile) per jitted function
    ml = s.events["type"] == s.type_id("model_load")
    assert sorted(int(m) for m in s.events["a"][ml]) == sorted(m.id for m in s.models)
    assert _count(s, "nrt_load") == len(s.models) == 3
    # the program's results are those of an unprofiled run
    plain = run([sys.executable, str(LOOP), str(STEPS)], clean_env(), cwd=tmp_path)
    assert plain.stdout == stdout and "checks ['step', 'Compiled', 2.0]" in stdout


def test_trace_annotations_and_named_scopes_are_framework_events_named_by_label(env_capture):
    cwd, _ = env_capture
    _, s = _session(cwd / "output")
    fo = s.events["type"] == s.type_id("framework_op")
    labels = [s.strings[i] for i in s.events["a"][fo]]
    assert {f"train_step_{i}" for i in range(STEPS)} <= set(labels)
    assert labels.count("evaluate") == 1  # the named_scope entered at the top level
    # each step's execution lies inside its annotation, on the same thread
    i = labels.index("train_step_2")
    a0, a1, tid = (s.events[k][fo][i] for k in ("start_ns", "end_ns", "thread_id"))
    ex = (s.events["type"] == s.type_id("nrt_execute")) & (s.events["start_ns"] >= a0) & (s.events["end_ns"] <= a1)
    assert ex.sum() == 1 and s.events["thread_id"][ex][0] == tid


def test_labels_are_event_names_in_parquet_json_and_perfetto(env_capture, tmp_path):
    from tests.view.test_perfetto_semantics import decode

    cwd, _ = env_capture
    out = str(cwd / "output")
    want = {f"train_step_{i}" for i in range(STEPS)} | {"evaluate"}
    pq = tmp_path / "pq"
    cli("view", "-d", out, "--output-file", str(pq), check=True)
    import duckdb

    rows = duckdb.sql(f"select name, trace_event_source from read_parquet('{pq}/SystemProfileEvents/**/*.parquet') "
                      "where name like 'train_step_%' or name = 'evaluate'").fetchall()
    assert {r[0] for r in rows} == want and {r[1] for r in rows} == {"framework"}
    js = tmp_path / "system_profile.json"
    cli("view", "-d", out, "--output-format", "json", "--output-file", str(js), check=True)
    names = {e.get("name") for e in json.loads(js.read_text())["traceEvents"]}
    assert want <= names and "framework_op" not in names
    pf = tmp_path / "system_profile.pftrace"
    cli("view", "-d", out, "--output-format", "perfetto", "--output-file", str(pf), check=True)
    slices = {sl.name for sl in decode(pf.read_bytes()).slices}
    assert want <= slices and "framework_op" not in slices


@pytest.mark.slow
def test_inspect_gives_one_execution_per_call(tmp_path):
    out = tmp_path / "inspect-output"
    p = cli_subprocess("inspect", "-o", str(out), sys.executable, str(LOOP), str(STEPS), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    _, s = _session(out)
    assert _executions(s) == Counter({"step": STEPS, "predict": 1, "scale": 1})


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["model", "session"])
def test_device_profiles_hold_the_xla_ops_of_the_executions(tmp_path, mode):
    run([sys.executable, str(LOOP), str(STEPS)],
        clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_DEVICE_PROFILE=mode), cwd=tmp_path)
    d, s = _session(tmp_path / "output")
    ntffs = sorted(f for f in os.listdir(d) if f.endswith(".ntff"))
    neffs = sorted(f for f in os.listdir(d) if f.endswith(".neff"))
    assert len(neffs) == 3
    traces = []
    for f in ntffs:
        t = pb.DeviceTrace()
        t.ParseFromString(Path(d, f).read_bytes())
        traces.append(t)
    if mode == "session":
        assert ntffs == ["profile_nc_0_session_0.ntff"]
        assert len(traces[0].executions) == STEPS + 2  # every execution
    else:
        assert len(ntffs) == 3 and all(len(t.executions) == 1 for t in traces)  # each graph's first
    step = next(m for m in s.models if m.name.startswith("step@"))
    t = next(t for t in traces if any(e.model_id == step.id for e in t.executions))
    assert t.source == "jax" and t.ops.count > 0
    assert np.nansum(np.frombuffer(t.ops.flops, "<f8")) > 0
    # a profiled execution was waited for: its core span covers its ops, within the execution
    e = next(e for e in t.executions if e.model_id == step.id)
    starts, ends = np.frombuffer(t.ops.start_ns, "<i8"), np.frombuffer(t.ops.end_ns, "<i8")
    mine = np.frombuffer(t.ops.exec_idx, "<i4") == list(t.executions).index(e)
    assert mine.any() and e.start_ns <= starts[mine].min() and ends[mine].max() <= e.end_ns + 200_000
    neff = pb.NeffFile()
    neff.ParseFromString(Path(d, f"{step.neff_name}_vnc_0.neff").read_bytes())
    assert neff.framework == "jax" and "HloModule jit_step" in neff.code


@pytest.mark.slow
def test_ndet_logs_count_the_jax_executions(tmp_path):
    from neuron_explorer.contracts.ndet_log import KIND_EXEC
    from neuron_explorer.ndet import sources

    logs = tmp_path / "ndet"
    logs.mkdir()
    run([sys.executable, str(LOOP), str(STEPS)],
        clean_env(NEURON_RT_DBG_NDET_FLUSH_USEC="100000", NEURON_RT_DBG_NDET_LOG_LOCATION=str(logs)), cwd=tmp_path)
    (path,) = [p for p in logs.iterdir() if p.name.startswith("ndet_")]
    log = sources.load(str(path))
    ex = log.records[log.records["kind"] == KIND_EXEC]
    assert len(ex) == STEPS + 2
    assert any(m.get("name", "").startswith("step@") for m in log.models.values())
    p = subprocess.run([sys.executable, "-m", "neuron_explorer.ndet.cli", "--log-prefix", str(logs), "-o",
                        str(tmp_path / "trace.json")], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "no errors detected" in p.stdout, p.stdout + p.stderr


@pytest.mark.slow
def test_neuron_monitor_reports_the_jax_executions(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "monitor"))
    from monitor_helpers import FULL_RUNTIME_METRICS, bin_path, write_config

    env = clean_env(NEURON_EXPLORER_STATS_DIR=str(tmp_path / "stats"))
    app = subprocess.Popen([sys.executable, str(LOOP), "1", "60"], env=dict(env, NEURON_PROCESS_TAG="jax_job"),
                           stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        while (line := app.stdout.readline().strip()) != "ready":
            assert line, "the JAX program ended early"
        conf = write_config(tmp_path / "monitor.conf", {
            "period": "1s", "neuron_runtimes": [{"tag_filter": "^jax_", "metrics": FULL_RUNTIME_METRICS}]})
        mon = subprocess.Popen([bin_path("neuron-monitor"), "-c", str(conf)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
        try:
            t_end = time.time() + 30
            while True:
                rep = json.loads(mon.stdout.readline())
                rts = rep["neuron_runtime_data"]
                if rts and rts[0]["report"]["execution_stats"]["execution_summary"]["completed"] > 0:
                    break
                assert time.time() < t_end, rep
        finally:
            mon.terminate()
            mon.wait(timeout=10)
    finally:
        app.terminate()
        app.wait(timeout=30)
    (rt,) = rts
    assert rt["pid"] == app.pid and rt["neuron_runtime_tag"] == "jax_job"
    names = [m["name"] for m in rt["report"]["memory_used"]["loaded_models"]]
    assert any(n.startswith("step@jit_loop.py") for n in names), names
    nc = rt["report"]["neuroncore_counters"]["neuroncores_in_use"]["0"]
    assert nc["neuroncore_utilization"] > 0
