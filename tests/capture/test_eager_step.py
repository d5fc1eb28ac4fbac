"""The eager optimizer step recorded in C (``_fastpath.EagerStep``, docs/decisions/0052): every
step of a compiled training loop is still one execution of the optimizer's graph in the profile and
in the NDET log, the same with and without the extension, and ``opt.step`` still behaves as
torch's own (binding, closure, return value, exceptions, schedulers, nested calls)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from neuron_explorer.contracts import ndet_log as ndet_fmt

from ..conftest import clean_env, shared_dir
from .helpers import events_of, sessions

# a compiled loss and an eager optimizer (the toy loop of bench/capture_overhead.py)
COMPILED_LOOP = """
import json, sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
x, y = torch.randn(8, 16), torch.randn(8, 4)
closs = torch.compile(lambda: torch.nn.functional.mse_loss(model(x), y), backend="aot_eager")
for _ in range({steps}):
    opt.zero_grad(set_to_none=True)
    closs().backward()
    opt.step()
fast = getattr(type(opt).step, "_neuron_explorer_recorder", None)
print(json.dumps({{"type": type(fast).__name__, "settled": getattr(fast, "settled", None) is opt}}))
"""


def _run(tmp_path, text: str, check: bool = True, **env) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(text)
    p = subprocess.run([sys.executable, str(script)], env=clean_env(**env), cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def _ndet_log(d) -> ndet_fmt.NdetLog:
    """The one NDET log in ``d``. A process killed by SIGKILL in the middle of a periodic rewrite
    leaves that write's hidden temporary file beside the log (CI hit it once): the log is then the
    previous complete flush, and the temporary file is not a log (``neuron-det`` never reads it)."""
    logs = [f for f in d.iterdir() if not (f.name.startswith(".") and f.name.endswith(".tmp"))]
    (log,) = logs
    return ndet_fmt.read_log(str(log))


def _model_ids(log, prefix: str) -> set[int]:
    return {m["id"] for m in log.header["models"] if m["name"].startswith(prefix)}


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_every_optimizer_step_of_a_compiled_loop_is_one_execution_in_the_profile_and_the_ndet_log(tmp_path, pure):
    out, nd = tmp_path / "out", tmp_path / "ndet"
    nd.mkdir()
    p = _run(tmp_path, COMPILED_LOOP.format(steps=7), NEURON_RT_INSPECT_ENABLE="1",
             NEURON_RT_INSPECT_OUTPUT_DIR=str(out), NEURON_RT_DBG_NDET_FLUSH_USEC="5000000",
             NEURON_RT_DBG_NDET_LOG_LOCATION=str(nd), NEURON_EXPLORER_PURE_PYTHON=pure)
    state = json.loads(p.stdout.strip().splitlines()[-1])
    # with the extension the steps after the first run in C; without it, the Python wrapper
    assert state == ({"type": "EagerStep", "settled": True} if pure == "0" else {"type": "NoneType", "settled": False})
    (s,) = sessions(out)
    e = events_of(s, "nrt_execute")
    names = Counter(s.models[int(m)].name.split("_")[0] for m in e["a"])
    assert names["SGD"] == 7 and sum(names.values()) == 21, names  # forward, backward, step per step
    log = _ndet_log(nd)
    rec = log.records
    sgd = _model_ids(log, "SGD_")
    steps = rec[(rec["kind"] == ndet_fmt.KIND_EXEC) & np.isin(rec["a"], list(sgd))]
    assert len(sgd) == 1 and len(steps) == 7
    assert (steps["ret"] == 0).all() and (steps["state"] == ndet_fmt.STATE_COMPLETE).all()
    assert (steps["t1"] > steps["t0"]).all() and len(set(steps["b"].tolist())) == 7
    execs = rec[rec["kind"] == ndet_fmt.KIND_EXEC]
    assert len(execs) == 21 and len(set(execs["b"].tolist())) == 21  # one id per execution of the core


BEHAVIOUR = """
import inspect, json, warnings, torch
torch.manual_seed(0)
wt = torch.nn.Parameter(torch.randn(4, 1))  # no module: a closure that ran one would make the step a container
a = torch.optim.SGD([wt], lr=0.5)
b = torch.optim.SGD([wt], lr=0.5)  # a second optimizer of the same class
sched = torch.optim.lr_scheduler.StepLR(a, step_size=1, gamma=0.5)
x = torch.randn(3, 4)
out = {}

def closure():
    a.zero_grad()
    loss = (x @ wt).sum()
    loss.backward()
    return loss

class Boom(Exception):
    pass

def bad():
    raise Boom("from the closure")

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    for i in range(4):
        got = a.step(closure)  # the closure's loss comes back
        out.setdefault("returned", []).append(bool(torch.is_tensor(got)))
        sched.step()
    out["settled_a"] = getattr(getattr(type(a).step, "_neuron_explorer_recorder", None), "settled", None) is a
    try:
        a.step(bad)
    except Boom as e:
        out["raised"] = str(e)
    for i in range(4):
        b.step()
out["warnings"] = [str(x.message) for x in w if "lr_scheduler" in str(x.message)]
out["lr"] = a.param_groups[0]["lr"]
out["closure_param"] = "closure" in inspect.signature(a.step).parameters
out["name"] = type(a).step.__name__

class Inner(torch.nn.Module):  # a step inside a root module's forward is part of that module's run
    def forward(self, t):
        b.step()
        return t * 2

Inner()(x)
print(json.dumps(out))
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_opt_step_behaves_as_torchs_own_and_each_optimizer_is_its_own_graph(tmp_path, pure):
    nd = tmp_path / "ndet"
    nd.mkdir()
    p = _run(tmp_path, BEHAVIOUR, NEURON_RT_DBG_NDET_FLUSH_USEC="5000000", NEURON_RT_DBG_NDET_LOG_LOCATION=str(nd),
             NEURON_EXPLORER_PURE_PYTHON=pure)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["returned"] == [True] * 4 and out["warnings"] == [] and out["lr"] == 0.5 ** 5
    assert out["closure_param"] and out["name"] == "step" and out["raised"] == "from the closure"
    assert out["settled_a"] == (pure == "0")  # with the extension a's later steps, and the failed one, ran in C
    log = _ndet_log(nd)
    rec = log.records
    (sgd,) = _model_ids(log, "SGD_")  # both optimizers step the same parameters: one graph
    steps = rec[(rec["kind"] == ndet_fmt.KIND_EXEC) & (rec["a"] == sgd)]
    # a: 4 steps and the failed one; b: 4 steps; b's step inside Inner's forward is not its own
    assert len(steps) == 9 and sorted(steps["ret"].tolist()) == [0] * 8 + [1]
    (inner,) = _model_ids(log, "Inner_")
    assert int((rec["a"] == inner).sum()) == 1


HANG = """
import os, signal, time, torch
lin = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
x = torch.randn(3, 4)
for i in range(3):
    lin(x).sum().backward()
    if i < 2:
        opt.step()
        continue
    def stuck():  # the third step hangs, long enough for periodic writes, then the process is killed
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    opt.step(stuck)
"""


def test_a_hung_optimizer_step_is_in_flight_in_the_ndet_log(tmp_path):
    nd = tmp_path / "ndet"
    nd.mkdir()
    p = _run(tmp_path, HANG, check=False, NEURON_RT_DBG_NDET_FLUSH_USEC="100000",
             NEURON_RT_DBG_NDET_LOG_LOCATION=str(nd))
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    log = _ndet_log(nd)
    rec = log.records
    (sgd,) = _model_ids(log, "SGD_")
    steps = rec[(rec["kind"] == ndet_fmt.KIND_EXEC) & (rec["a"] == sgd)]
    assert steps["state"].tolist() == [ndet_fmt.STATE_COMPLETE] * 2 + [ndet_fmt.STATE_IN_FLIGHT]
    assert steps["t1"][-1] == 0 and steps["b"][-1] > steps["b"][1]


DYNAMO = """
import torch
torch.manual_seed(0)
lin = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
x = torch.randn(3, 4)

@torch.compile(backend="aot_eager")
def train_step():  # the optimizer step inside a compiled function: Dynamo traces opt.step
    loss = lin(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss

print([round(float(train_step()), 4) for _ in range(4)])
"""


def test_a_compiled_function_that_steps_the_optimizer_runs_as_without_the_profiler(tmp_path):
    nd = tmp_path / "ndet"
    nd.mkdir()
    plain = _run(tmp_path, DYNAMO).stdout.strip().splitlines()[-1]
    got = _run(tmp_path, DYNAMO, NEURON_RT_DBG_NDET_FLUSH_USEC="5000000", NEURON_RT_DBG_NDET_LOG_LOCATION=str(nd))
    assert got.stdout.strip().splitlines()[-1] == plain  # the same losses: every step ran
    rec = _ndet_log(nd).records
    assert int((rec["kind"] == ndet_fmt.KIND_EXEC).sum()) >= 8  # the compiled graphs' calls at least


# A training loop whose every optimizer step goes through the device profiler in session mode:
# ``{model}`` makes the model, ``{around}`` wraps the profiled steps (the API variant)
SESSION_LOOP = """
import torch
{head}
torch.manual_seed(0)
model = {model}
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)

def train(steps):
    for _ in range(steps):
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        print("loss", round(loss.item(), 6))

{around}
"""

LINEAR = "torch.nn.Linear(4, 2)"
COMPILED = ('torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)), '
            'backend="aot_eager")')
ENV_AROUND = "train(3)"
API_HEAD = """
from torch.profiler import profile, ProfilerActivity
from neuron_explorer.torch import NeuronConfig, ProfileMode, NeuronProfiler
"""
API_AROUND = """
cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir="{out}")
train(1)  # warm-up
with profile(activities=[ProfilerActivity.CPU], experimental_config=cfg,
             on_trace_ready=NeuronProfiler(cfg).export_trace):
    train(2)
"""


@pytest.fixture(scope="module")
def plain_stdout(tmp_path_factory):
    """``get(name, text)``: the standard output of ``text`` run unprofiled, once per test run for
    every test compared with it (``shared_dir``: whichever xdist worker asks first)."""
    def get(name: str, text: str) -> str:
        return shared_dir(tmp_path_factory, f"eager_step_plain_{name}", lambda d: _run(d, text).stdout)[1]

    return get


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
@pytest.mark.parametrize("variant", ["eager"] + [pytest.param(v, marks=pytest.mark.slow)
                                                  for v in ("compiled", "no-system-profile", "api")])
def test_a_session_device_profile_records_every_optimizer_step_and_changes_no_loss(tmp_path, plain_stdout, variant,
                                                                                   pure):
    out = tmp_path / "out"
    model = COMPILED if variant == "compiled" else LINEAR
    around = API_AROUND.format(out=out) if variant == "api" else ENV_AROUND
    text = SESSION_LOOP.format(head=API_HEAD if variant == "api" else "", model=model, around=around)
    env = {} if variant == "api" else dict(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                                           NEURON_RT_INSPECT_DEVICE_PROFILE="session")
    if variant == "no-system-profile":
        env["NEURON_RT_INSPECT_SYSTEM_PROFILE"] = "0"
    # the same 3 steps, unprofiled
    plain = plain_stdout("session_" + ("compiled" if model == COMPILED else "linear"),
                         SESSION_LOOP.format(head="", model=model, around=ENV_AROUND))
    p = _run(tmp_path, text, NEURON_EXPLORER_PURE_PYTHON=pure, **env)
    losses = [ln for ln in p.stdout.splitlines() if ln.startswith("loss")]
    assert losses == [ln for ln in plain.splitlines() if ln.startswith("loss")] and len(losses) == 3
    from neuron_explorer.analysis.reader import load_device_trace

    (ntff,) = out.glob("*/*/profile_nc_0_session_0.ntff")
    dp = load_device_trace(str(ntff))
    names = Counter(e.model_name.split("_")[0] for e in dp.trace.executions)
    assert names["SGD"] == (2 if variant == "api" else 3), names  # every profiled step, the second one too
    assert dp.trace.ops.count > 0



LATE_IMPORT = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)  # torch wraps SGD.step here, before our hooks exist
x = torch.randn(8, 4)

def train():
    for _ in range(2):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

if {api}:
    from torch.profiler import profile, ProfilerActivity
    from neuron_explorer.torch import NeuronConfig, ProfileMode, NeuronProfiler
    cfg = NeuronConfig(modes=[ProfileMode.RUNTIME], profile_output_dir="{out}")
    with profile(activities=[ProfilerActivity.CPU], experimental_config=cfg,
                 on_trace_ready=NeuronProfiler(cfg).export_trace):
        train()
else:
    train()
print(type(opt).step.hooked, round(model.weight.sum().item(), 6))
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_an_optimizer_built_before_the_api_is_imported_has_its_steps_recorded(tmp_path, plain_stdout, pure):
    out = tmp_path / "out"
    plain = plain_stdout("late_import", LATE_IMPORT.format(api=False, out=out))  # (out: unused without the API)
    p = _run(tmp_path, LATE_IMPORT.format(api=True, out=out), NEURON_EXPLORER_PURE_PYTHON=pure)
    assert p.stdout.splitlines()[-1] == plain.splitlines()[-1]  # torch's flag, the same weights
    (s,) = sessions(out)
    e = events_of(s, "nrt_execute")
    names = Counter(s.models[int(m)].name.split("_")[0] for m in e["a"])
    assert names["SGD"] == 2 and sum(names.values()) == 6, names
