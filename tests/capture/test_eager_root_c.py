"""Eager root module calls and their backward recorded in C (``module_call_root`` and
``backward_settle`` in runtime/_hooks.h, ``EagerLocal`` in runtime/_local.h; docs/decisions/0161):
the same program records the same events -- names, fields, order and execution ids -- on the C
path and on the Python path (``NEURON_EXPLORER_PURE_PYTHON=1``), through training steps,
inference, ``autograd.grad``, two roots taking turns, a module that raises, NaN outputs, a second
thread and NDET; and the gates hold the Python state the hooks read (``tl.depth``, ``grad_root``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from neuron_explorer.contracts import ndet_log as ndet_fmt

from .helpers import sessions
from .test_device_and_api import _run_script

# Prints one JSON line: the traceback frames of the error a settled root raised, what the C gates
# held at the end, and (C only) whether a paused step recorded nothing
PROGRAM = """
import json, os, threading, traceback, torch
from neuron_explorer.runtime import _fastpath
torch.manual_seed(0)
C = os.environ.get("NEURON_EXPLORER_PURE_PYTHON", "0") == "0"
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 16), torch.randn(8, 4)

def step(m=model, o=opt):
    loss = torch.nn.functional.mse_loss(m(x), y)
    loss.backward()
    o.step()
    o.zero_grad()

for _ in range(5):
    step()
if C:  # benchmarks' pause: the step runs, nothing is recorded, the state stays right
    was = _fastpath.pause_executions(True)
    step()
    _fastpath.pause_executions(was)
step()
out = model(x).sum()
torch.autograd.grad(out, list(model.parameters()))
torch.autograd.grad(model(x).sum(), list(model.parameters()))
with torch.no_grad():
    model(x)
    model(x)
other = torch.nn.Linear(16, 4)
for _ in range(3):  # two roots taking turns: the gate's one settled root moves each call
    model(x)
    other(x)
step()

class Flaky(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l, self.n = torch.nn.Linear(16, 4), 0
    def forward(self, x):
        self.n += 1
        if self.n == 4:
            raise ValueError("flaky")
        return self.l(x)

flaky, frames = Flaky(), None
for _ in range(5):
    try:
        flaky(x)
    except ValueError as e:
        frames = [[f.name, f.line] for f in traceback.extract_tb(e.__traceback__)]
bad = torch.full((8, 16), float("nan"))
for i in range(4):  # the NaN check of a settled root's outputs
    model(bad if i == 2 else x)

def thread_steps():
    m = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    o = torch.optim.SGD(m.parameters(), lr=0.01)
    for _ in range(4):
        step(m, o)

t = threading.Thread(target=thread_steps)
t.start()
t.join()
step()
step()  # (the step before named Flaky's backward: the gate settled on that graph then)
ours = []  # the Python frames of the eager hooks in a steady step

def watch(frame, event, arg):
    if event == "call" and frame.f_code.co_filename.endswith(os.path.join("torch", "eager.py")):
        ours.append(frame.f_code.co_name)

import sys
sys.setprofile(watch)
step()
sys.setprofile(None)
import neuron_explorer.integrations.torch as it
tl = it._installed.eager.tl
print(json.dumps({"frames": frames, "tl": type(tl).__name__, "depth": tl.depth,
                  "grad_root": tl.grad_root is not None, "ours": ours}))
"""

EXEC_TYPES = ("model_load", "nrt_load", "nrt_model_switch", "nrt_execute", "runtime_execute", "nc_exec_running",
              "numerical_err")


def _events(s) -> list[tuple]:
    """The execution events in time order: type, graph name, the other fields (timing fields left
    out), the thread by order of appearance.  Model ids become graph names."""
    ev, names = s.events, {m.id: m.name for m in s.models}
    order = np.argsort(ev["start_ns"], kind="stable")
    threads: dict[int, int] = {}
    out = []
    for i in order:
        t = s.type_names[ev["type"][i]]
        if t not in EXEC_TYPES:
            continue
        th = threads.setdefault(int(ev["thread_id"][i]), len(threads))
        a, b, c, d, e = (int(ev[k][i]) for k in "abcde")
        if t in ("model_load", "nrt_load"):
            out.append((t, names[a], th))
        elif t == "nrt_model_switch":
            out.append((t, names[a], b, names.get(c, c), th))
        else:
            out.append((t, names[a], b, c, d, e, th))
    return out


def _run(tmp_path, pure: str, **env) -> tuple[dict, list[tuple], object]:
    d = tmp_path / ("c" if pure == "0" else "python")
    d.mkdir()
    p = _run_script(d, PROGRAM, NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(d / "out"),
                    NEURON_EXPLORER_NAN_CHECK="1", NEURON_EXPLORER_PURE_PYTHON=pure,
                    **{k: v.replace("{dir}", str(d)) for k, v in env.items()})
    (s,) = sessions(d / "out")
    return json.loads(p.stdout.strip().splitlines()[-1]), _events(s), d


def _check_pair(tmp_path, **env) -> tuple:
    c_info, c_events, c_dir = _run(tmp_path, "0", **env)
    py_info, py_events, py_dir = _run(tmp_path, "1", **env)
    assert c_info["tl"] == "EagerLocal" and py_info["tl"] == "_Local"
    # a steady step: in C only the optimizer's one-line step function is a frame of ours
    assert c_info["ours"] == ["c_step"]
    assert {"__call__", "record", "run", "step"} <= set(py_info["ours"])
    assert c_info["frames"] == py_info["frames"] and c_info["frames"][-1] == ["forward", 'raise ValueError("flaky")']
    assert [f[0] for f in c_info["frames"]] == ["<module>", "_wrapped_call_impl", "_call_impl", "forward"]
    assert c_info["depth"] == py_info["depth"] == 0 and c_info["grad_root"] is py_info["grad_root"] is False
    assert c_events == py_events
    return c_events, c_dir, py_dir


def test_root_calls_and_backwards_record_the_same_events_in_c_and_in_python(tmp_path):
    events, _, _ = _check_pair(tmp_path)
    execs = [e for e in events if e[0] == "nrt_execute"]
    # execution ids count up from 0 without a gap: every call recorded once, in order
    assert [e[2] for e in execs] == list(range(len(execs)))

    def count(prefix: str, thread: int, bwd: bool = False) -> int:
        return sum(1 for e in execs if e[1].startswith(prefix) and e[1].endswith("_bwd") == bwd and e[6] == thread)

    # main thread: 5 steps, the step after the paused one (C: recorded nothing; Python: skipped),
    # 2 grads, 2 without gradients, 3 turns, 1 step, 4 NaN-checked calls, 3 steps
    assert count("Sequential", 0) == 5 + 1 + 2 + 2 + 3 + 1 + 4 + 3
    # the backward after Flaky's calls is Flaky's: the first root run with gradients names it
    assert count("Sequential", 0, bwd=True) == 5 + 1 + 2 + 1 + 2 and count("Flaky", 0, bwd=True) == 1
    assert count("SGD", 0) == 5 + 1 + 1 + 3 and count("Linear", 0) == 3
    assert count("Sequential", 1) == count("Sequential", 1, bwd=True) == count("SGD", 1) == 4
    # the failed call of the settled root is recorded with ret 1, the NaN output with RET_NUM_ERR
    assert [e[3] for e in execs if e[1].startswith("Flaky") and not e[1].endswith("_bwd")] == [0, 0, 0, 1, 0]
    (numerr,) = [e for e in events if e[0] == "numerical_err"]
    assert numerr[1].startswith("Sequential") and numerr[4] == 8 * 4  # NaN outputs
    assert [e[3] for e in execs if e[2] == numerr[2]] == [numerr[3]] and numerr[3] != 0


@pytest.mark.slow
def test_with_ndet_the_c_path_logs_what_the_python_path_logs(tmp_path):
    _, c_dir, py_dir = _check_pair(tmp_path, NEURON_RT_DBG_NDET_FLUSH_USEC="5000000",
                                   NEURON_RT_DBG_NDET_LOG_LOCATION="{dir}")

    def log(d):
        (f,) = [p for p in d.iterdir() if p.name.startswith("ndet_")]
        lg = ndet_fmt.read_log(str(f))
        names = {m["id"]: m["name"] for m in lg.header["models"]}
        ex = lg.records[lg.records["kind"] == ndet_fmt.KIND_EXEC]
        return [(names[int(a)], int(b), int(ret)) for a, b, ret in zip(ex["a"], ex["b"], ex["ret"])]

    c_log = log(c_dir)
    assert c_log == log(py_dir) and len(c_log) > 20
    assert any(ret == 1 and name.startswith("Flaky") for name, _, ret in c_log)


def test_eager_local_keeps_depth_and_grad_root_per_thread_and_per_instance():
    """``EagerLocal`` (runtime/_local.h) behaves as the ``threading.local`` it replaces: defaults
    0 and None, per thread, per instance (the thread's storage belongs to the last writer)."""
    import threading

    _fastpath = pytest.importorskip("neuron_explorer.runtime._fastpath")
    tl = _fastpath.EagerLocal()
    assert (tl.depth, tl.grad_root) == (0, None)
    marker = object()
    tl.depth, tl.grad_root = 1, marker
    assert (tl.depth, tl.grad_root) == (1, marker)
    seen = []

    def other():
        seen.append((tl.depth, tl.grad_root))
        tl.depth, tl.grad_root = 7, "theirs"
        seen.append((tl.depth, tl.grad_root))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [(0, None), (7, "theirs")] and (tl.depth, tl.grad_root) == (1, marker)
    second = _fastpath.EagerLocal()  # another instance reads the defaults until it writes
    assert (second.depth, second.grad_root) == (0, None)
    second.depth = 3
    assert (second.depth, tl.depth, tl.grad_root) == (3, 0, None)
    tl.grad_root = marker
    del tl.grad_root  # (deleting is setting None)
    assert tl.grad_root is None
    with pytest.raises(TypeError):
        tl.depth = "1"
    with pytest.raises(AttributeError):
        del tl.depth
    with pytest.raises(TypeError):
        _fastpath.EagerLocal(1)


def test_the_settle_functions_check_their_arguments():
    _fastpath = pytest.importorskip("neuron_explorer.runtime._fastpath")

    with pytest.raises(TypeError):
        _fastpath.backward_settle(len, object(), len)  # not a backward gate
    gate = _fastpath.backward_gate("backward", _fastpath.EagerLocal(), len, len)
    with pytest.raises(TypeError):  # made without `enabled`: it cannot record
        _fastpath.backward_settle(gate, object(), len)
    _fastpath.backward_settle(gate, None, None)
    assert gate([1, 2]) == 2  # no grad_root: torch's own function (here len)
    with pytest.raises(TypeError):
        _fastpath.module_call_root(object(), len)
    with pytest.raises(TypeError):
        _fastpath.module_call_root(object(), len, object(), [True], -1, len)
    _fastpath.module_call_root(None)  # forgets (nothing settled here)
