"""A user exception's traceback is the one the program gets without us: our hooks' frames (the
root module call, the backward and optimizer step wrappers, the execution wrappers, the dispatch
modes that count flops or record device profiles) are hidden, on the C and the Python path
(integrations/torch/frames.py)."""

from __future__ import annotations

import json

import pytest

from ..conftest import shared_dir
from .test_device_and_api import _run_script

# Each case raises once from the user's code (or an ATen op it calls) and prints the frames of the
# traceback it caught: (file, line, function, source line)
CASES = """
import json, sys, traceback, torch

class Boom(Exception):
    pass

class Inner(torch.nn.Module):
    def __init__(self, case, at):
        super().__init__()
        self.case, self.at, self.n, self.l = case, at, 0, torch.nn.Linear(4, 2)

    def forward(self, x):
        self.n += 1
        if self.case == "nested" and self.n == self.at:
            raise Boom("nested")
        if self.case == "aten" and self.n == self.at:
            return self.l(x[:, :3])  # a shape mismatch in the op
        return self.l(x)

class Net(torch.nn.Module):
    def __init__(self, case, at):
        super().__init__()
        self.case, self.at, self.n, self.inner = case, at, 0, Inner(case, at)

    def forward(self, x):
        self.n += 1
        if self.case == "forward" and self.n == self.at:
            raise Boom("forward")
        return self.inner(x)

def run(case, at, compiled):
    torch.manual_seed(0)
    net = Net(case, at)
    model = torch.compile(net, backend="aot_eager") if compiled else net
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(3, 4)
    def hook(g):
        if case == "backward" and net.n == at:
            raise Boom("backward")
        return g
    net.inner.l.weight.register_hook(hook)
    def closure():
        if case == "step" and net.n == at:
            raise Boom("step")
    for _ in range(4):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step(closure)

out = {{}}
for case in ("forward", "nested", "aten", "backward", "step"):
    for at in (1, 3):  # the graph's first call, and a later one
        try:
            run(case, at, {compiled})
        except Exception as e:
            out[f"{{case}}@{{at}}"] = [type(e).__name__] + [list(f) for f in traceback.extract_tb(e.__traceback__)]
print(json.dumps(out))
"""


def _frames(tmp_path, compiled: bool, **env) -> dict:
    """Per case the exception's name and frames; the script's own path (each run has its directory)
    is written ``job.py``, every other file as the traceback names it."""
    p = _run_script(tmp_path, CASES.format(compiled=compiled), **env)
    script = str(tmp_path / "job.py")
    return {case: [v[0]] + [["job.py" if f[0] == script else f[0], *f[1:]] for f in v[1:]]
            for case, v in json.loads(p.stdout.strip().splitlines()[-1]).items()}


@pytest.fixture(scope="module")
def plain_frames(tmp_path_factory) -> dict:
    """The unprofiled run's frames (eager), run once per test run for every setting compared with it
    (``shared_dir``: whichever xdist worker asks first)."""
    return shared_dir(tmp_path_factory, "tracebacks_plain_eager", lambda d: _frames(d, False))[1]


CAPTURE = {"NEURON_RT_INSPECT_ENABLE": "1"}
SETTINGS = {
    "capture-c": dict(CAPTURE, NEURON_EXPLORER_PURE_PYTHON="0"),
    "capture-python": dict(CAPTURE, NEURON_EXPLORER_PURE_PYTHON="1"),
    "session-c": dict(CAPTURE, NEURON_RT_INSPECT_DEVICE_PROFILE="session"),
    "session-python": dict(CAPTURE, NEURON_RT_INSPECT_DEVICE_PROFILE="session", NEURON_EXPLORER_PURE_PYTHON="1"),
    "ndet-python": {"NEURON_RT_DBG_NDET_FLUSH_USEC": "5000000", "NEURON_EXPLORER_PURE_PYTHON": "1"},
}


@pytest.mark.parametrize("setting", ["capture-c", "capture-python"] + [
    pytest.param(s, marks=pytest.mark.slow) for s in ("session-c", "session-python", "ndet-python")])
def test_an_exception_in_forward_backward_or_step_has_the_unprofiled_traceback(tmp_path, plain_frames, setting):
    env = dict(SETTINGS[setting])
    env.setdefault("NEURON_RT_INSPECT_OUTPUT_DIR", str(tmp_path / "out"))
    if "NEURON_RT_DBG_NDET_FLUSH_USEC" in env:
        (tmp_path / "ndet").mkdir()
        env["NEURON_RT_DBG_NDET_LOG_LOCATION"] = str(tmp_path / "ndet")
    plain = plain_frames
    assert len(plain) == 10 and all(len(v) > 2 for v in plain.values()), plain
    seen = _frames(tmp_path, False, **env)
    for case, frames in plain.items():
        assert seen[case] == frames, case


@pytest.mark.slow
def test_an_exception_in_a_compiled_model_has_the_unprofiled_traceback(tmp_path):
    plain = _frames(tmp_path, True)
    seen = _frames(tmp_path, True, **CAPTURE, NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"))
    for case, frames in plain.items():
        assert seen[case] == frames, case


UNCAUGHT = """
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        raise ValueError("from forward")
Net()(torch.randn(2))
"""


def _uncaught_stderr(d, **env) -> str:
    """UNCAUGHT run as ``job.py`` in ``d`` (status 1): its standard error."""
    import subprocess
    import sys

    from ..conftest import clean_env

    script = d / "job.py"
    script.write_text(UNCAUGHT)
    p = subprocess.run([sys.executable, str(script)], env=clean_env(**env), cwd=d, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 1
    return p.stderr


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_an_uncaught_exception_prints_the_unprofiled_traceback(tmp_path, tmp_path_factory, pure):
    # the unprofiled run, once per test run for both paths (``shared_dir``, decision 0210); its
    # script's path is in the traceback, so the profiled run's script goes where the plain one was
    plain_dir, plain = shared_dir(tmp_path_factory, "tracebacks_plain_uncaught", _uncaught_stderr)
    assert plain.count('File "') == 4, plain  # <module>, _wrapped_call_impl, _call_impl, forward
    seen = _uncaught_stderr(tmp_path, NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"),
                            NEURON_EXPLORER_PURE_PYTHON=pure)
    assert seen.replace(str(tmp_path / "job.py"), str(plain_dir / "job.py")) == plain
