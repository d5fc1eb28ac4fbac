"""The names and source locations a user reads: a compiled module's graphs are named after its
class (``Net_<hash>``, README), a compiled function's after the function and its line
(``f@job.py:12_<hash>``); an optimizer's step carries the user's ``opt.step()`` line."""

from __future__ import annotations

import json
import re

import pytest

from ..conftest import clean_env, cli
from .helpers import sessions
from .test_device_and_api import _run_script

NAMES = """
import torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 2)
    def forward(self, x):
        return self.l(x).relu()
x = torch.randn(3, 4)
net = torch.compile(Net(), backend="aot_eager")
net(x).sum().backward()
@torch.compile(backend="aot_eager")
def f(x):
    return (x * 2).sin()
f(x)
seq = torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 3)), backend="aot_eager")
with torch.no_grad():
    seq(x)
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_compiled_module_graphs_are_named_after_the_modules_class(tmp_path, pure):
    out = tmp_path / "out"
    _run_script(tmp_path, NAMES, NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                NEURON_EXPLORER_PURE_PYTHON=pure)
    (s,) = sessions(out)
    names = sorted(m.name for m in s.models)
    h = "[0-9a-f]{16}"
    want = [rf"Net_{h}", rf"Net_{h}_bwd", rf"Sequential_{h}", rf"f@job\.py:14_{h}"]  # (the line of f's op)
    assert len(names) == 4 and all(re.fullmatch(w, n) for w, n in zip(want, names)), names
    # the names a user reads in view's output and the .neff files
    p = cli("view", "-d", str(out), "--output-format", "summary-json", env=clean_env(), check=True)
    profiles = json.loads(p.stdout)["profiles"]
    tops = {g["model_name"] for prof in profiles for c in prof["cores"] for g in c["top_graphs"]}
    assert tops == set(names)


STEP_SITE = """
import torch
m = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(3, 4)
for _ in range(3):
    m(x).sum().backward()
    opt.step()
"""


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_an_optimizer_step_carries_the_users_call_site(tmp_path, pure):
    out = tmp_path / "out"
    _run_script(tmp_path, STEP_SITE, NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                NEURON_EXPLORER_PURE_PYTHON=pure)
    (s,) = sessions(out)
    (sgd,) = [m for m in s.models if m.kind == "optimizer"]
    assert sgd.source_location == f"{tmp_path / 'job.py'}:8", sgd.source_location
