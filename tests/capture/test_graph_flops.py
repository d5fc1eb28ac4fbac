"""Each graph's flop count (``ModelInfo.flops``, neuron-monitor's ``flops``), compiled and eager,
and the promise that counting it changes nothing in the user's program
(docs/decisions/0049-graph-flops.md)."""
from __future__ import annotations

import json

import pytest

from ..conftest import shared_dir
from .helpers import sessions
from .test_device_and_api import _run_script

# Linear(16, 32) -> ReLU -> Linear(32, 4) on a batch of 8, by PyTorch's formulas:
FWD = 2 * 8 * (16 * 32 + 32 * 4)  # two addmm
BWD = 2 * 8 * 32 * 4 + 2 * 32 * 4 * 8 + 2 * 16 * 32 * 8  # grad input of layer 2, grad weights of both

STEP = """
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
run = {wrap}
x, y = torch.randn(8, 16), torch.randn(8, 4)
opt = None
for _ in range(3):
    loss = torch.nn.functional.mse_loss(run(x), y)
    loss.backward()
    if opt is None:  # (made after the first backward: making an optimizer imports Dynamo)
        dynamo = "torch._dynamo" in sys.modules
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.step()
    opt.zero_grad()
print("dynamo imported by the first forward and backward:", dynamo)
"""


def _flops_by_kind(out) -> dict[str, float]:
    (s,) = sessions(out)
    return {m.kind: m.flops for m in s.models}


@pytest.mark.parametrize("wrap", ["model", 'torch.compile(model, backend="aot_eager")'])
def test_a_graph_knows_its_forward_and_backward_flops(tmp_path, wrap):
    out = tmp_path / "out"
    seen = _run_script(tmp_path, STEP.format(wrap=wrap), NEURON_RT_INSPECT_ENABLE="1",
                       NEURON_RT_INSPECT_OUTPUT_DIR=str(out)).stdout
    flops = _flops_by_kind(out)
    assert flops["forward"] == FWD and flops["backward"] == BWD, flops
    if "optimizer" in flops:
        assert flops["optimizer"] == 0  # SGD's foreach ops have no formula: unknown, stored as 0
    if wrap == "model":
        # counting an eager program's first calls does not import Dynamo (1-2 CPU-s: decision 0115)
        assert seen.strip().endswith("first forward and backward: False")


def test_op_flops_equal_pytorchs_own_entries():
    """``op_flops`` calls PyTorch's shape formulas without their pytree wrapper (decision 0115):
    op by op, on the ops of real training steps (matmuls, attention, convolutions forward and
    backward), it gives what torch's registry entry gives."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    from neuron_explorer.integrations.torch.flops import op_flops

    seen: dict[str, int] = {}
    wrong: list = []

    class Compare(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            entry = flop_registry.get(func.overloadpacket)
            if entry is not None:
                want = float(entry(*args, **kwargs, out_val=out))
                got = op_flops(flop_registry, func, args, kwargs, out)
                seen[str(func)] = seen.get(str(func), 0) + 1
                if got != want:
                    wrong.append((str(func), got, want))
            return out

    nn = torch.nn
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    conv = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ConvTranspose2d(4, 2, 2, stride=2), nn.Flatten(),
                         nn.Linear(2 * 8 * 8, 3))
    mha = nn.MultiheadAttention(8, 2)
    with Compare():
        layer(torch.randn(2, 5, 32)).sum().backward()
        conv(torch.randn(2, 3, 4, 4)).sum().backward()
        q = torch.randn(3, 2, 8)
        mha(q, q, q)[0].sum().backward()
        a, b = torch.randn(3, 4, 5), torch.randn(3, 5, 6)
        torch.baddbmm(torch.randn(3, 4, 6), a, b)
    assert not wrong, wrong
    assert {"aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default",
            "aten.convolution.default", "aten.convolution_backward.default"} <= set(seen), seen


PROBE = """
import json, torch
calls = []
def counting(gm, example_inputs):
    calls.append(len(gm.graph.nodes))
    return gm.forward
class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8),
                                                       torch.nn.Dropout(0.5)), backend=counting)
        self.head = torch.nn.Linear(8, 2)
    def forward(self, x):
        return self.head(self.inner(x))
torch.manual_seed(0)
m, x = Outer(), torch.randn(4, 8)
sums = []
for _ in range(3):
    out = m(x)
    out.sum().backward()
    sums.append(float(out.sum()))
    after_first = len(calls) if not sums[:-1] else after_first
bn = m.inner._orig_mod[1]
print(json.dumps({"compiles_after_first_call": after_first, "compiles": len(calls), "sums": sums,
                  "batches": int(bn.num_batches_tracked), "mean": bn.running_mean.tolist(),
                  "rng": torch.random.get_rng_state().sum().item()}))
"""


@pytest.fixture(scope="module")
def plain_probe(tmp_path_factory) -> dict:
    """PROBE's output unprofiled, once per test run for the three settings compared with it
    (``shared_dir``: whichever xdist worker asks first)."""
    return shared_dir(tmp_path_factory, "graph_flops_plain_probe",
                      lambda d: json.loads(_run_script(d, PROBE).stdout))[1]


@pytest.mark.parametrize("env", [{}, {"NEURON_RT_INSPECT_DEVICE_PROFILE": "model"},
                                 {"NEURON_RT_INSPECT_DEVICE_PROFILE": "session"}],
                         ids=["system", "device-model", "device-session"])
def test_counting_flops_changes_nothing_in_the_program(tmp_path, plain_probe, env):
    """A torch.compile inside an eager module still compiles on its first call, once, while the first
    call's flops are counted (and while a device profile records it); the fake run that counts a
    compiled graph's flops leaves BatchNorm's buffers and the random number generator alone."""
    plain = plain_probe
    out = tmp_path / "out"
    seen = json.loads(_run_script(tmp_path, PROBE, NEURON_RT_INSPECT_ENABLE="1",
                                  NEURON_RT_INSPECT_OUTPUT_DIR=str(out), **env).stdout)
    assert plain["compiles_after_first_call"] >= 1
    assert seen == plain
    (s,) = sessions(out)
    compiled = [m for m in s.models if m.backend != "eager"]
    assert compiled and compiled[0].flops == 2 * 4 * 8 * 8  # the inner Linear's addmm, on fake tensors


# The program profiles its own steps with torch.profiler (and, at the end, counts flops with its own
# dispatch mode), then runs one step unwatched; it prints what its tools saw
OWN_PROFILER = """
import json, torch
from torch.profiler import profile, ProfilerActivity
from torch.utils.flop_counter import FlopCounterMode
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
run = {wrap}
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 16), torch.randn(8, 4)

def step():
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(run(x), y)
    loss.backward()
    opt.step()
    return loss

with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(5):
        step()
events = sorted((e.key, e.count) for e in prof.key_averages())
with FlopCounterMode(display=False) as fcm:
    step()
step()  # unwatched: an eager graph's flops are counted here
print(json.dumps({{"events": events, "flops": fcm.get_total_flops()}}))
"""


@pytest.mark.parametrize("wrap", ["model",
                                  pytest.param('torch.compile(model, backend="aot_eager")', marks=pytest.mark.slow)],
                         ids=["eager", "compiled"])
def test_the_programs_own_profiler_sees_the_same_events_with_capture_on(tmp_path, wrap):
    """The first calls' flop counting (a dispatch mode) is not seen by the program's torch.profiler
    or its own dispatch modes; the graphs still get their flops (docs/decisions/0069)."""
    text = OWN_PROFILER.format(wrap=wrap)
    plain = json.loads(_run_script(tmp_path, text).stdout.strip().splitlines()[-1])
    out = tmp_path / "out"
    seen = json.loads(_run_script(tmp_path, text, NEURON_RT_INSPECT_ENABLE="1",
                                  NEURON_RT_INSPECT_OUTPUT_DIR=str(out)).stdout.strip().splitlines()[-1])
    assert seen == plain
    if wrap == "model":  # (a compile's own fake tensors are dispatch-mode events of the program's)
        assert not any(name == "PythonDispatchMode" for name, _ in seen["events"])
    flops = _flops_by_kind(out)
    assert flops["forward"] == FWD and flops["backward"] == BWD, flops


API_STEP = """
import sys, torch
from torch.profiler import profile, ProfilerActivity
from neuron_explorer.torch import NeuronConfig, ProfileMode, NeuronProfiler
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 16), torch.randn(8, 4)
cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir="{out}")
with profile(activities=[ProfilerActivity.CPU], experimental_config=cfg,
             on_trace_ready=NeuronProfiler(cfg).export_trace):
    for _ in range(2):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
"""


def test_eager_graphs_profiled_through_the_api_know_their_flops(tmp_path):
    """Every call the API records runs under its torch.profiler: an eager graph's first call is
    counted by the device profile's op recorder (the same formulas), not deferred for ever."""
    out = tmp_path / "out"
    _run_script(tmp_path, API_STEP.format(out=out))
    flops = _flops_by_kind(out)
    assert flops["forward"] == FWD and flops["backward"] == BWD, flops


def _optimizer_for(torch, name: str):
    """A small model's parameters with gradients, and torch.optim.<name> over them."""
    torch.manual_seed(0)
    sparse = name == "SparseAdam"
    model = torch.nn.Embedding(10, 4, sparse=True) if sparse else torch.nn.Linear(4, 3)
    x = torch.tensor([1, 2, 3]) if sparse else torch.randn(2, 4)
    model(x).sum().backward()
    params = list(model.parameters()) if sparse or name != "Muon" else [model.weight]
    return getattr(torch.optim, name)(params, lr=0.01)


def test_formula_free_optimizers_dispatch_no_formula_op():
    """The first step of the optimizers in ``FORMULA_FREE_OPTIMIZERS`` is not run under the flop
    mode (issue 33): their count is None because no op of their step has a formula.  Each is run
    under the mode here, as before, to show it; Muon's step (excluded) does count flops."""
    import torch

    from neuron_explorer.integrations.torch.flops import FORMULA_FREE_OPTIMIZERS, _counter_mode

    mode_cls = _counter_mode(torch)
    ran = []
    for name in FORMULA_FREE_OPTIMIZERS:
        if not hasattr(torch.optim, name):
            continue
        opt = _optimizer_for(torch, name)
        with mode_cls() as m:
            opt.step()
            opt.step()
        assert not m.known, (name, m.total)
        ran.append(name)
    assert {"Adam", "AdamW", "SGD", "Adagrad", "RMSprop"} <= set(ran), ran
    for name in ("Muon", "Adafactor"):  # (excluded: their steps do count flops)
        if hasattr(torch.optim, name):
            opt = _optimizer_for(torch, name)
            with mode_cls() as m:
                opt.step()
            assert m.known and m.total > 0, name


def test_formula_free_step_only_for_torchs_own_plain_steps():
    """No mode only for torch's own class itself, without closure or the program's step hooks."""
    import torch

    from neuron_explorer.integrations.torch.flops import formula_free_step

    opt = _optimizer_for(torch, "Adam")
    assert formula_free_step(torch, (opt,), {})
    assert formula_free_step(torch, (opt, None), {"closure": None})
    assert not formula_free_step(torch, (opt, lambda: 0.0), {})
    assert not formula_free_step(torch, (opt,), {"closure": lambda: 0.0})
    h = opt.register_step_pre_hook(lambda o, a, k: None)
    assert not formula_free_step(torch, (opt,), {})
    h.remove()
    from torch.optim.optimizer import register_optimizer_step_post_hook

    h = register_optimizer_step_post_hook(lambda o, a, k: None)
    try:
        assert not formula_free_step(torch, (opt,), {})
    finally:
        h.remove()
    assert formula_free_step(torch, (opt,), {})

    class MyAdam(torch.optim.Adam):
        pass

    mine = MyAdam(opt.param_groups[0]["params"])
    assert not formula_free_step(torch, (mine,), {})
    if hasattr(torch.optim, "Muon"):
        assert not formula_free_step(torch, (_optimizer_for(torch, "Muon"),), {})
    assert not formula_free_step(torch, (torch.optim.LBFGS(opt.param_groups[0]["params"]),), {})
