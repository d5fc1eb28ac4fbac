"""Eager PyTorch is a first-class execution: root modules, their backward and optimizer steps are
recorded like compiled graphs (executions, loads, device profiles, NEFFs, NDET, check)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from neuron_explorer.analysis.reader import load_device_trace, load_neff
from neuron_explorer.contracts import ndet_log as ndet_fmt

from ..conftest import clean_env, cli
from .helpers import events_of, sessions, type_counts
from .test_device_and_api import _run_script

# the spec's basic PyTorch example, with only the import line changed and an eager model
SPEC_BASIC_EAGER = """
import torch
from torch.profiler import profile, ProfilerActivity
from neuron_explorer.torch import NeuronConfig, ProfileMode, NeuronProfiler

model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
x = torch.randn(32, 64)

neuron_config = NeuronConfig(
    modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME],
    profile_output_dir="./profile_output",
)
exporter = NeuronProfiler(neuron_config)

with torch.no_grad():
    for _ in range(3):
        model(x)

with profile(
    activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
    experimental_config=neuron_config,
    on_trace_ready=exporter.export_trace,
) as prof:
    with torch.no_grad():
        model(x)
        torch.neuron.synchronize()
"""

TRAIN_EAGER = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 16), torch.randn(8, 4)
for _ in range({steps}):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def _run(tmp_path, text: str, **env) -> subprocess.CompletedProcess:
    return _run_script(tmp_path, text, **env)


def _executions(s) -> list[str]:
    """Model names of the nrt_execute events, in time order."""
    e = events_of(s, "nrt_execute")
    return [s.models[int(m)].name for m in e["a"][e["start_ns"].argsort(kind="stable")]]


def test_the_spec_basic_example_with_an_eager_model_writes_an_execution_an_ntff_and_a_neff(tmp_path):
    _run(tmp_path, SPEC_BASIC_EAGER)
    (session,) = glob.glob(f"{tmp_path}/profile_output/*_pid_*/*")
    (s,) = sessions(tmp_path / "profile_output")
    assert type_counts(s)["nc_exec_running"] == 1  # the profiled call only, not the warm-up
    (name,) = _executions(s)
    assert name.startswith("Sequential_") and len(name) == len("Sequential_") + 16
    (ntff,) = glob.glob(f"{session}/*.ntff")
    dp = load_device_trace(ntff)
    ops = {dp.strings[i] for i in dp.ops["name"]}
    assert os.path.getsize(ntff) > 0 and {"aten::addmm", "aten::relu"} <= ops
    (neff,) = glob.glob(f"{session}/neff_*_vnc_0.neff")
    n = load_neff(neff)
    assert n.backend == "eager" and "Linear(in_features=64, out_features=128" in n.code
    r = cli("check", "-d", str(tmp_path / "profile_output"))
    assert r.returncode == 0 and "0 warning(s)" in r.stdout, r.stdout


def test_an_eager_training_loop_gives_a_forward_a_backward_and_an_optimizer_execution_per_step(tmp_path):
    out = tmp_path / "out"
    _run(tmp_path, TRAIN_EAGER.format(steps=4), NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
         NEURON_RT_INSPECT_DEVICE_PROFILE="model")
    (s,) = sessions(out)
    names = _executions(s)
    fwd = names[0]
    assert fwd.startswith("Sequential_") and names[2].startswith("SGD_")
    assert names == [fwd, fwd + "_bwd", names[2]] * 4
    c = type_counts(s)
    assert c["nc_exec_running"] == 12 and c["model_load"] == 3 and c["nrt_model_switch"] == 11
    kinds = {m.name: m.kind for m in s.models}
    assert kinds == {fwd: "forward", fwd + "_bwd": "backward", names[2]: "optimizer"}
    # model mode: one device trace per graph, of its first execution
    traces = [load_device_trace(p) for p in s.device_paths]
    assert len(traces) == 3 and all(len(t.trace.executions) == 1 and t.trace.ops.count > 0 for t in traces)
    assert len(s.neff_paths) == 3


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_a_compiled_graph_inside_an_eager_module_is_counted_once(tmp_path, pure):
    """(Nested calls, graph modules and the compiled root's later calls take the C gate of
    Module.__call__, runtime/_hooks.h; the Python path decides the same.)"""
    out = tmp_path / "out"
    _run(tmp_path, """
import torch
class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.compile(torch.nn.Linear(8, 8), backend="aot_eager")
        self.head = torch.nn.Linear(8, 2)
    def forward(self, x):
        return self.head(self.inner(x))
m, x = Outer(), torch.randn(4, 8)
for _ in range(3):
    m(x).sum().backward()
whole = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), backend="aot_eager")
for _ in range(2):
    whole(x).sum().backward()
""", NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out), NEURON_EXPLORER_PURE_PYTHON=pure)
    (s,) = sessions(out)
    counts = Counter(_executions(s))
    # the compiled graphs are the executions: no Outer_/Sequential_ eager execution around them
    assert sorted(counts.values()) == [2, 2, 3, 3], counts
    assert all(m.backend == "aot_eager" for m in s.models if m.name in counts)


HOOKED_COMPILED = """
import json, sys, torch
torch.manual_seed(0)
class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)
    def forward(self, x):
        return torch.nn.Module.__call__(self.b, self.a(x).relu())  # called as Module's own, too
m = Outer()
m.a.register_forward_hook(lambda mod, i, o: o * 2)
x = torch.randn(4, 8)
graphs = []
def backend(gm, inputs):
    graphs.append(len(gm.graph.nodes))
    return gm.forward
out = torch.compile(m, backend=backend)(x)
print(json.dumps({"same": bool(torch.allclose(out, m(x))), "graphs": graphs}))
"""


@pytest.mark.parametrize("env", [{}, {"NEURON_RT_INSPECT_ENABLE": "1"}, {"NEURON_RT_DBG_NDET_FLUSH_USEC": "5000000"}],
                         ids=["unprofiled", "capture", "ndet"])
def test_a_compiled_model_with_a_forward_hook_compiles_as_unprofiled(tmp_path, env):
    """Dynamo traces a hooked submodule's call through Module.__call__ (our wrapper, replaced in
    the trace by Module's own): it failed with "'SkipFunctionVariable' object has no attribute
    'get_code'" under a capture or NDET, since Dynamo skips this package's files."""
    env = dict(env)
    if "NEURON_RT_INSPECT_ENABLE" in env:
        env["NEURON_RT_INSPECT_OUTPUT_DIR"] = str(tmp_path / "out")
    if "NEURON_RT_DBG_NDET_FLUSH_USEC" in env:
        (tmp_path / "ndet").mkdir()
        env["NEURON_RT_DBG_NDET_LOG_LOCATION"] = str(tmp_path / "ndet")
    got = json.loads(_run(tmp_path, HOOKED_COMPILED, **env).stdout.strip().splitlines()[-1])
    assert got["same"] and len(got["graphs"]) == 1, got  # one graph: no break at the hooked call



@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_a_compiled_root_that_raises_leaves_the_next_eager_root_recorded(tmp_path, pure):
    """A compiled root's calls run with the thread marked nested (what runs eagerly inside is not
    a root); an exception out of one must clear the mark, or every later root would go unrecorded."""
    out = tmp_path / "out"
    _run(tmp_path, """
import torch
m, x = torch.compile(torch.nn.Linear(8, 8), backend="aot_eager"), torch.randn(4, 8)
m(x); m(x)  # the second call takes the compiled root's short cut
for _ in range(2):
    try:
        m(torch.randn(4, 3))
    except Exception:
        pass
    else:
        raise SystemExit("expected a shape error")
head = torch.nn.Linear(8, 2)
with torch.no_grad():
    head(x)
""", NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out), NEURON_EXPLORER_PURE_PYTHON=pure)
    (s,) = sessions(out)
    names = _executions(s)
    backend = {m.name: m.backend for m in s.models}
    assert [backend[n] for n in names] == ["aot_eager", "aot_eager", "eager"], names  # head: an eager root

def test_ndet_logs_eager_executions(tmp_path):
    ndet = tmp_path / "ndet"
    ndet.mkdir()
    _run(tmp_path, TRAIN_EAGER.format(steps=3), NEURON_RT_DBG_NDET_FLUSH_USEC="5000000",
         NEURON_RT_DBG_NDET_LOG_LOCATION=str(ndet))
    (log,) = list(ndet.iterdir())
    rec = ndet_fmt.read_log(str(log)).records
    assert int((rec["kind"] == ndet_fmt.KIND_EXEC).sum()) == 9  # 3 steps x (forward, backward, step)


def test_eager_executions_can_be_turned_off(tmp_path):
    out = tmp_path / "out"
    _run(tmp_path, TRAIN_EAGER.format(steps=2), NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
         NEURON_EXPLORER_EAGER="0")
    (s,) = sessions(out)
    assert type_counts(s)["nrt_execute"] == 0
    r = cli("check", "-d", str(out))
    assert "NEURON_EXPLORER_EAGER=0" in r.stdout and "no module, compiled graph or collective ran" in r.stdout


@pytest.mark.slow
def test_neuron_monitor_counts_eager_executions_and_their_graphs(tmp_path):
    """A tagged eager training job (no code changes) is reported with executions and its graphs."""
    stats = tmp_path / "stats"
    app = tmp_path / "app.py"
    app.write_text(TRAIN_EAGER.format(steps=1) + """
import time
print("ready", flush=True)
end = time.time() + 30
while time.time() < end:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    time.sleep(0.002)
""")
    env = clean_env(NEURON_EXPLORER_STATS_DIR=str(stats))
    p = subprocess.Popen([sys.executable, str(app)], env=dict(env, NEURON_PROCESS_TAG="eager_job"),
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        conf = tmp_path / "monitor.conf"
        conf.write_text(json.dumps({"period": "1s", "neuron_runtimes": [{"tag_filter": "^eager_", "metrics": [
            {"type": "neuroncore_counters"}, {"type": "memory_used"}, {"type": "execution_stats"}]}]}))
        exe = os.path.join(os.path.dirname(sys.executable), "neuron-monitor")
        mon = subprocess.Popen([exe if os.path.exists(exe) else "neuron-monitor", "-c", str(conf)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            reports = [json.loads(mon.stdout.readline()) for _ in range(3)]
        finally:
            mon.terminate()
            mon.wait(timeout=10)
    finally:
        p.terminate()
        p.wait(timeout=30)
    (rt,) = reports[-1]["neuron_runtime_data"]
    assert rt["pid"] == p.pid
    assert rt["report"]["execution_stats"]["execution_summary"]["completed"] > 0
    names = {m["name"] for m in rt["report"]["memory_used"]["loaded_models"]}
    assert any(n.startswith("Sequential_") for n in names) and any(n.startswith("SGD_") for n in names)
    assert rt["report"]["neuroncore_counters"]["neuroncores_in_use"]["0"]["neuroncore_utilization"] > 0


def test_a_module_that_cannot_be_registered_runs_as_before_unrecorded(tmp_path):
    """A repr that raises or an unhashable module never makes the user's call fail."""
    out = tmp_path / "out"
    p = _run(tmp_path, """
import torch
class Bad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(2, 2)
    def extra_repr(self):
        raise RuntimeError("no repr for you")
    def forward(self, x):
        return self.l(x)
class Eq(torch.nn.Linear):
    def __eq__(self, other):
        return False
for m in (Bad(), Eq(2, 2), torch.nn.Linear(2, 2)):
    print(type(m).__name__, tuple(m(torch.randn(1, 2)).shape))
try:
    Bad()(None)
except TypeError as e:
    print("the user's own error:", e)
""", NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out))
    assert p.stdout.splitlines()[:3] == ["Bad (1, 2)", "Eq (1, 2)", "Linear (1, 2)"]
    assert "the user's own error:" in p.stdout
    assert "Bad calls not recorded as executions: no repr for you" in p.stderr
    assert "Eq calls not recorded as executions: unhashable type" in p.stderr
    (s,) = sessions(out)
    assert [n.split("_")[0] for n in _executions(s)] == ["Linear"]


# Two threads calling their own modules at the same time (the GIL handed over every microsecond,
# so each thread's first call overlaps the other's calls): the inference phase, then training
THREADS = """
import sys, threading, torch
torch.set_num_threads(1)
sys.setswitchinterval(1e-6)
N = {n}

def infer(i, barrier):
    m, x = torch.nn.Linear(4, 2), torch.randn(3, 4)
    barrier.wait()
    with torch.no_grad():
        for _ in range(N):
            m(x)

def train(i, barrier):
    torch.manual_seed(i)
    m, x = torch.nn.Linear(6, 3), torch.randn(3, 6)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    barrier.wait()
    for _ in range(N):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()

for work in (infer, train):
    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=work, args=(i, barrier)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_modules_called_by_threads_at_the_same_time_are_each_an_execution(tmp_path, pure):
    """Depth is per thread (docs/decisions/0025): a root's first call on one thread is not taken
    for a container of compiled graphs because another thread's executions ran meanwhile."""
    out = tmp_path / "out"
    _run(tmp_path, THREADS.format(n=50), NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
         NEURON_EXPLORER_PURE_PYTHON=pure)
    (s,) = sessions(out)
    counts = Counter(_executions(s))
    kinds = Counter(m.kind for m in s.models)
    # each graph registered once, though both threads met it at the same time
    assert kinds == {"forward": 2, "backward": 1, "optimizer": 1} and type_counts(s)["model_load"] == 4
    assert sorted(counts.values()) == [100] * 4, counts  # 2 threads x 50 calls of each
