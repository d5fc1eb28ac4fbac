"""Device profiles (model and session modes), NEFF artifacts, the NeuronConfig/NeuronProfiler API
(the spec's examples with only the import line changed), and `neuron-explorer check`."""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from ..conftest import (
    EXAMPLES,
    clean_env,
    cli_in_process as cli,  # conversions in this process (decision 0173)
    shared_dir,
    torchrun,
)
from .helpers import sessions, type_counts

TRAIN_ONE = """
import torch
m = torch.compile(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)),
                  backend="{backend}")
x = torch.randn(8, 16)
for _ in range({steps}):
    m(x).sum().backward()
"""


def _run_script(tmp_path, text, **env):
    script = tmp_path / "job.py"
    script.write_text(text)
    p = subprocess.run([sys.executable, str(script)], env=clean_env(**env), cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def _device_traces(root):
    from neuron_explorer.analysis.reader import load_device_trace

    return {os.path.basename(p): load_device_trace(p) for p in glob.glob(f"{root}/*/*/*.ntff")}


def test_model_mode_gives_one_ntff_per_unique_graph_and_core(tmp_path):
    out = tmp_path / "out"
    _run_script(tmp_path, TRAIN_ONE.format(backend="aot_eager", steps=4), NEURON_RT_INSPECT_ENABLE="1",
                NEURON_RT_INSPECT_OUTPUT_DIR=str(out), NEURON_RT_INSPECT_DEVICE_PROFILE="model")
    traces = _device_traces(out)
    assert len(traces) == 2  # the forward graph and its backward graph
    for name, dp in traces.items():
        assert name.endswith("_instid_0_vnc_0.ntff")
        assert dp.trace.mode == "model" and len(dp.trace.executions) == 1  # first execution only
        assert dp.trace.ops.count > 0
    names = {dp.strings[i] for dp in traces.values() for i in dp.ops["name"]}
    assert "aten::mm" in names or "aten::addmm" in names
    flops = [f for dp in traces.values() for f in dp.ops["flops"] if f == f]
    assert flops and min(flops) > 0
    neffs = glob.glob(f"{out}/*/*/neff_*_vnc_0.neff")
    assert len(neffs) == 2
    from neuron_explorer.analysis.reader import load_neff

    assert "def forward" in load_neff(neffs[0]).code


def session_capture(tmp_path_factory):
    """The capture of TRAIN_ONE (aot_eager, 3 steps) with the session-mode device profile, made once
    per test run for the tests that only read it: here and ``tests/view/test_perfetto_device.py``
    (``shared_dir``, decision 0210)."""
    def build(d):
        _run_script(d, TRAIN_ONE.format(backend="aot_eager", steps=3), NEURON_RT_INSPECT_ENABLE="1",
                    NEURON_RT_INSPECT_OUTPUT_DIR=str(d / "out"), NEURON_RT_INSPECT_DEVICE_PROFILE="session")

    return shared_dir(tmp_path_factory, "device_session_train_one", build)[0] / "out"


def test_session_mode_gives_one_ntff_per_core_with_every_execution(tmp_path_factory):
    out = session_capture(tmp_path_factory)
    traces = _device_traces(out)
    assert list(traces) == ["profile_nc_0_session_0.ntff"]
    assert len(traces["profile_nc_0_session_0.ntff"].trace.executions) == 6  # 3 forward + 3 backward


@pytest.mark.slow
def test_inductor_kernels_appear_in_the_device_profile(tmp_path):
    out = tmp_path / "out"
    _run_script(tmp_path, "import torch\ncf = torch.compile(lambda x, w: torch.relu(x @ w).sum(0) * 2 + 1)\n"
                          "x, w = torch.randn(32, 32), torch.randn(32, 32)\nfor _ in range(3): cf(x, w)\n",
                NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                NEURON_RT_INSPECT_DEVICE_PROFILE="1")
    (dp,) = _device_traces(out).values()
    tracks = {dp.strings[i] for i in dp.ops["track"]}
    names = {dp.strings[i] for i in dp.ops["name"]}
    assert "inductor" in tracks and any(n.startswith("cpp_fused") for n in names)


def test_basic_api_example_writes_the_spec_files_and_view_links_them(tmp_path):
    p = subprocess.run([sys.executable, str(EXAMPLES / "profile_api_basic.py")], env=clean_env(), cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    (session,) = glob.glob(f"{tmp_path}/profile_output/*_pid_*/*")
    files = os.listdir(session)
    for f in ("trace.json", "ntrace.pb", "trace_info.pb"):
        assert f in files
    ntffs = [f for f in files if f.endswith(".ntff")]
    assert ntffs == ["profile_nc_0_session_0.ntff"] and os.path.getsize(os.path.join(session, ntffs[0])) > 0
    assert [f for f in files if f.endswith(".neff")]
    assert "traceEvents" in json.load(open(os.path.join(session, "trace.json")))
    (s,) = sessions(tmp_path / "profile_output")
    assert type_counts(s)["nc_exec_running"] == 1  # only the profiled call, not the warm-up
    assert s.info.end_reason == "profiler stop"

    for fmt in ("json", "perfetto"):
        out = tmp_path / fmt
        out.mkdir()
        ext = "json" if fmt == "json" else "pftrace"
        cli("view", "-d", str(tmp_path / "profile_output"), "--output-format", fmt,
            "--output-file", str(out / f"system_profile.{ext}"), check=True)
        (dev,) = glob.glob(f"{out}/device_profile_model_*.{ext}")
        assert os.path.getsize(dev) > 0
    doc = json.load(open(tmp_path / "json" / "system_profile.json"))
    (ex,) = [e for e in doc["traceEvents"] if e.get("name") == "nc_exec_running"]
    profile_id = ex["args"]["device_profile"]
    assert os.path.exists(tmp_path / "json" / f"device_profile_model_{profile_id}.json")
    dev = json.load(open(tmp_path / "json" / f"device_profile_model_{profile_id}.json"))
    assert any(e.get("name", "").startswith("aten::") for e in dev["traceEvents"])

    import duckdb

    cli("view", "-d", str(tmp_path / "profile_output"), "--output-file", str(tmp_path / "pq"), check=True)
    con = duckdb.connect()
    (pid_link,) = con.execute(f"""select device_profile_id
                                  from read_parquet('{tmp_path}/pq/SystemProfileEvents/**/*.parquet',
                                  hive_partitioning=true) where name = 'nc_exec_running'""").fetchone()
    (mode, execs, flops) = con.execute(f"""select mode, executions, flops from '{tmp_path}/pq/DeviceProfiles.parquet'
                                           where profile_id = ?""", [pid_link]).fetchone()
    assert mode == "session" and execs == 1 and flops > 0
    n_ops = con.execute(f"""select count(*) from read_parquet('{tmp_path}/pq/DeviceProfileEvents/**/*.parquet',
                            hive_partitioning=true) where profile_id = ?""", [pid_link]).fetchone()[0]
    assert n_ops > 0


@pytest.mark.slow
def test_multi_rank_host_cc_example_with_gloo(tmp_path):
    torchrun(2, EXAMPLES / "profile_host_cc.py", [], clean_env(), cwd=tmp_path)
    ss = sessions(tmp_path / "profile_host_cc")
    assert sorted(s.info.rank for s in ss) == [0, 1]
    for s in ss:
        c = type_counts(s)
        assert c["nc_exec_running"] == 13 and c["cc_running"] == 13 and c["cc_exec_barrier"] == 2
        assert s.cpu is not None and s.mem is not None
        assert len(s.device_paths) == 1 and os.path.exists(os.path.join(s.path, "trace.json"))


def test_neff_cache_dir_keeps_graphs_and_copies_them_into_the_profile(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    _run_script(tmp_path, TRAIN_ONE.format(backend="aot_eager", steps=2), NEURON_RT_INSPECT_ENABLE="1",
                NEURON_RT_INSPECT_OUTPUT_DIR=str(out), NEURON_RT_INSPECT_DEVICE_PROFILE="model",
                TORCH_NEURONX_NEFF_CACHE_DIR=str(cache))
    cached = sorted(os.listdir(cache))
    assert cached and all(f.endswith(".neff") for f in cached)
    assert sorted(os.path.basename(p) for p in glob.glob(f"{out}/*/*/*.neff")) == cached


def test_neuron_config_validates_its_arguments():
    code = ("from neuron_explorer.torch import NeuronConfig, ProfileMode\n"
            "for kw in ({'modes': ['bogus']}, {'max_events_per_nc': 0}, {'capture_enabled_for_nc': '2-1'}):\n"
            "    try:\n        NeuronConfig(**kw)\n    except ValueError as e:\n        print('ERR', e)\n"
            "c = NeuronConfig()\nprint(c.modes == [ProfileMode.DEVICE, ProfileMode.RUNTIME], c.max_events_per_nc)\n")
    p = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=120)
    lines = p.stdout.splitlines()
    assert len([ln for ln in lines if ln.startswith("ERR")]) == 3
    assert "'bogus'" in lines[0] and "ProfileMode.DEVICE" in lines[0]
    assert lines[-1] == "True 1000000"


def test_check_reports_the_failure_signs(tmp_path, tmp_path_factory):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli("check", "-d", str(empty))
    assert r.returncode == 1 and "empty" in r.stdout
    out = tmp_path / "out"
    # a copy of the session-mode capture the tests above read (this test damages it): one launch for all
    shutil.copytree(session_capture(tmp_path_factory), out, symlinks=True)
    r = cli("check", "-d", str(out))
    assert r.returncode == 0 and "ok:" in r.stdout and "0 error(s)" in r.stdout
    for neff in glob.glob(f"{out}/*/*/*.neff"):
        os.unlink(neff)
    (ntff,) = glob.glob(f"{out}/*/*/*.ntff")
    open(ntff, "wb").close()
    r = cli("check", "-d", str(out))
    assert r.returncode == 1
    assert "0 bytes" in r.stdout and "warm-up" in r.stdout and "TORCH_NEURONX_NEFF_CACHE_DIR" in r.stdout
    os.unlink(ntff)
    r = cli("check", "-d", str(out))  # device profiling was on: said so, not advised (decision 0027)
    assert "only .pb files" not in r.stdout
    assert ("device profiling was on (NEURON_RT_INSPECT_DEVICE_PROFILE=session) but no device trace was written: "
            "none of its 6 execution(s) has a device trace here") in r.stdout  # 3 forward + 3 backward
