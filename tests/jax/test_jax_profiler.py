"""The spec's JAX pattern (variables set inside the script, jax.profiler.trace, TraceAnnotation) run
with real JAX on CPU produces a neuron-explorer profile that view reads."""

from __future__ import annotations

import glob
import json
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import (
    clean_env,
    cli_in_process as cli,  # conversions in this process (decision 0173)
    run,
)

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install jax jaxlib)")

from neuron_explorer.analysis.reader import discover, load_session  # noqa: E402
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb  # noqa: E402

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE / "workloads"


def _plugin_visible() -> bool:
    """Our JAX plugin must be discoverable (namespace package on sys.path, or the entry point)."""
    import importlib.util
    from importlib.metadata import entry_points

    if importlib.util.find_spec("jax_plugins.neuron_explorer_profiler") is not None:
        return True
    return any(e.value.endswith("neuron_explorer_profiler") for e in entry_points(group="jax_plugins"))


pytestmark = pytest.mark.skipif(not _plugin_visible(), reason="neuron-explorer's jax_plugins module is not installed")


def _run(script: str, cwd: Path, *args: str, **env_extra: str):
    env = clean_env(**env_extra)
    env.pop("NEURON_EXPLORER_QUIET", None)
    return run([sys.executable, str(WORKLOADS / script), *args], env, cwd=cwd, timeout=180)


def _session(out: Path):
    found = discover(str(out))
    assert len(found) == 1, found
    return found[0], load_session(found[0])


def _names(s) -> list[str]:
    return [s.type_names[t] for t in s.events["type"]]


def _labels(s) -> list[str]:
    m = s.events["type"] == s.type_id("framework_op")
    return [s.strings[i] for i in s.events["a"][m]]


def _ntff(path: str) -> pb.DeviceTrace:
    t = pb.DeviceTrace()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def _op_names(t: pb.DeviceTrace) -> list[str]:
    return [t.strings[i] for i in np.frombuffer(t.ops.name, "<i4")]


@pytest.fixture(scope="module")
def basic(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("basic")
    p = _run("spec_basic.py", cwd, "1", "3")
    return cwd, p


def test_basic_pattern_writes_the_spec_layout(basic):
    cwd, p = basic
    d, s = _session(cwd / "output")
    rel = Path(d).relative_to(cwd / "output")
    assert len(rel.parts) == 2 and "_pid_" in rel.parts[0]
    files = os.listdir(d)
    for f in ("ntrace.pb", "trace_info.pb", "trace.json"):
        assert f in files
    assert any(f.endswith(".ntff") for f in files) and any(f.endswith(".neff") for f in files)
    assert "neuron-explorer: profile written to" in p.stderr
    # JAX's own trace is left where JAX put it
    assert glob.glob(str(cwd / "output" / "plugins" / "profile" / "*" / "*.xplane.pb"))


def test_each_trace_annotation_is_a_framework_op(basic):
    cwd, _ = basic
    _, s = _session(cwd / "output")
    labels = _labels(s)
    for i in range(3):
        assert f"my_label{i}" in labels
    fo = s.events["type"] == s.type_id("framework_op")
    assert (s.events["end_ns"][fo] >= s.events["start_ns"][fo]).all()


def test_jitted_executions_become_nrt_execute_and_nc_exec_running(basic):
    cwd, _ = basic
    _, s = _session(cwd / "output")
    c = Counter(_names(s))
    assert c["nrt_execute"] == c["nc_exec_running"] >= 6  # layer and loss, three steps each
    models = {m.id: m.name for m in s.models}
    assert "jit_layer" in models.values() and "jit_loss" in models.values()
    ex = s.events["type"] == s.type_id("nc_exec_running")
    run_models = Counter(models[int(m)] for m in s.events["a"][ex])
    assert run_models["jit_layer"] == 3 and run_models["jit_loss"] == 3
    # executions of my_label1 lie inside its annotation (both on the host monotonic clock)
    fo = s.events["type"] == s.type_id("framework_op")
    i = _labels(s).index("my_label1")
    a0, a1 = s.events["start_ns"][fo][i], s.events["end_ns"][fo][i]
    inside = ex & (s.events["start_ns"] >= a0) & (s.events["end_ns"] <= a1)
    assert sorted(models[int(m)] for m in s.events["a"][inside]) == ["jit_layer", "jit_loss"]
    assert "clock:" in s.info.note


def test_model_mode_ntff_holds_the_xla_ops_and_neff_the_hlo(basic):
    cwd, _ = basic
    d, s = _session(cwd / "output")
    layer = next(m for m in s.models if m.name == "jit_layer")
    h = layer.neff_name.replace("neff_", "")
    t = _ntff(os.path.join(d, f"{h}_instid_0_vnc_0.ntff"))
    assert t.mode == "model" and t.source == "jax" and len(t.executions) == 1
    assert t.executions[0].model_id == layer.id
    assert t.ops.count >= 1
    flops = np.frombuffer(t.ops.flops, "<f8")
    assert np.nansum(flops) >= 2 * 128 * 128 * 128  # the matmul
    assert all(t.strings[i] for i in np.frombuffer(t.ops.track, "<i4"))
    neff = pb.NeffFile()
    with open(os.path.join(d, f"neff_{h}_vnc_0.neff"), "rb") as f:
        neff.ParseFromString(f.read())
    assert neff.framework == "jax" and "HloModule jit_layer" in neff.code
    assert {n.name for n in neff.nodes} >= set(_op_names(t))


def test_view_reads_the_profile_and_names_regions_by_label(basic, tmp_path):
    cwd, _ = basic
    p = cli("view", "-d", str(cwd / "output"), "--output-format", "summary-json")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["num_profiles"] == 1
    pq = tmp_path / "pq"
    p = cli("view", "-d", str(cwd / "output"), "--output-format", "parquet", "--output-file", str(pq))
    assert p.returncode == 0, p.stderr
    import pyarrow.dataset as ds

    tbl = ds.dataset(str(pq / "SystemProfileEvents"), format="parquet", partitioning="hive").to_table()
    # a TraceAnnotation is a framework event named by its label (never "framework_op")
    fw = tbl.filter(ds.field("trace_event_source") == "framework")
    labels = set(fw.column("name").to_pylist())
    assert {f"my_label{i}" for i in range(3)} <= labels and "framework_op" not in labels
    rows = tbl.filter(ds.field("name") == "my_label1").column("extra_attributes_json").to_pylist()
    assert [json.loads(r)["name"] for r in rows] == ["my_label1"]


def test_session_mode_writes_one_ntff_per_core(tmp_path):
    _run("spec_basic.py", tmp_path, "session", "3")
    d, s = _session(tmp_path / "output")
    ntffs = sorted(f for f in os.listdir(d) if f.endswith(".ntff"))
    assert ntffs == ["profile_nc_0_session_0.ntff"]
    t = _ntff(os.path.join(d, ntffs[0]))
    assert t.mode == "session"
    assert len(t.executions) == Counter(_names(s))["nc_exec_running"]
    assert _op_names(t).count("broadcast_add_fusion") == 3  # every execution of jit_layer


def test_model_mode_writes_one_ntff_per_computation_and_core(basic):
    cwd, _ = basic
    d, s = _session(cwd / "output")
    ntffs = [f for f in os.listdir(d) if f.endswith(".ntff")]
    graphs = {(m.neff_name, m.nc_idx) for m in s.models}
    assert len(ntffs) == len(graphs)
    assert all(len(_ntff(os.path.join(d, f)).executions) == 1 for f in ntffs)


def test_enable_with_jax_profiler_warns_once(tmp_path):
    p = _run("spec_basic.py", tmp_path, "1", "2", NEURON_RT_INSPECT_ENABLE="1", NEURON_EXPLORER_QUIET="1")
    warn = [ln for ln in p.stderr.splitlines() if "NEURON_RT_INSPECT_ENABLE" in ln and "jax.profiler" in ln]
    assert len(warn) == 1, p.stderr


def test_no_variables_no_profile(tmp_path):
    env = clean_env()
    code = ("import jax, jax.numpy as jnp\n"
            "with jax.profiler.trace('./jaxtrace'):\n"
            "    with jax.profiler.TraceAnnotation('x'):\n"
            "        jnp.ones(4).block_until_ready()\n")
    run([sys.executable, "-c", code], env, cwd=tmp_path)
    assert not discover(str(tmp_path))


@pytest.mark.slow
def test_spec_allgather_example_on_two_cpu_devices(tmp_path):
    p = _run("spec_allgather.py", tmp_path, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    assert "Tensors are the same" in p.stdout
    d, s = _session(tmp_path / "output")
    assert {f"my_label{i}" for i in range(10)} <= set(_labels(s))
    ex = s.events["type"] == s.type_id("nc_exec_running")
    assert sorted(set(s.events["nc_idx"][ex].tolist())) == [0, 1]
    # 11 calls; JAX dispatches asynchronously and the spec's example leaves the trace without waiting
    # for the last result, so on a loaded machine the last execution can still be running when the
    # trace stops (JAX records it then in neither XPlane nor trace.json)
    per_core = Counter(s.events["nc_idx"][ex].tolist())
    assert set(per_core) == {0, 1} and all(n in (10, 11) for n in per_core.values()), per_core
    ntffs = sorted(f for f in os.listdir(d) if f.endswith(".ntff"))
    assert len(ntffs) == 2 and ntffs[0].endswith("_vnc_0.ntff") and ntffs[1].endswith("_vnc_1.ntff")
    for f in ntffs:
        assert "all_gather" in " ".join(_op_names(_ntff(os.path.join(d, f))))
    assert len([f for f in os.listdir(d) if f.endswith(".neff")]) == 2


def test_reads_of_the_loss_are_waits_and_unpatched_after_the_trace(tmp_path):
    """Under ``jax.profiler.trace``, ``.item()`` and ``float()`` of a jitted call's result are host
    waits like ``block_until_ready`` (one ``kbl_exec_wait`` each); when the trace stops, JAX's
    methods are its own again."""
    code = ("import os, jax, jax.numpy as jnp\n"
            "from jax._src import array\n"
            "os.environ['NEURON_RT_INSPECT_DEVICE_PROFILE'] = '1'\n"
            "os.environ['NEURON_RT_INSPECT_OUTPUT_DIR'] = './output'\n"
            "before = (vars(array.ArrayImpl)['item'], vars(array.ArrayImpl)['_value'])\n"
            "f = jax.jit(lambda a: (a @ a).sum())\n"
            "x = jnp.ones((64, 64))\n"
            "with jax.profiler.trace('./output'):\n"
            "    a = f(x).item()\n"
            "    b = float(f(x))\n"
            "    f(x).block_until_ready()\n"
            "after = (vars(array.ArrayImpl)['item'], vars(array.ArrayImpl)['_value'])\n"
            "print('VALUES', a, b, after == before)\n")
    env = clean_env()
    env.pop("NEURON_EXPLORER_QUIET", None)
    p = run([sys.executable, "-c", code], env, cwd=tmp_path, timeout=180)
    assert "VALUES 262144.0 262144.0 True" in p.stdout, p.stdout + p.stderr
    _, s = _session(tmp_path / "output")
    assert Counter(_names(s))["kbl_exec_wait"] == 3
