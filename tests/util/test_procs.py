"""Which processes are framework helpers, read from their command lines (``util.procs``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_explorer.util.procs import ISA_PROBE, framework_helper

PY = "/usr/bin/python3"


def _torch_probe_code() -> str:
    """The code Inductor's installed version runs in its ISA probe, library path filled in."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("torch")  # read from the source: importing Inductor takes seconds
    assert spec is not None and spec.origin is not None
    source = (Path(spec.origin).parent / "_inductor" / "cpu_vec_isa.py").read_text()
    (code,) = (n.value.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Assign)
               and any(getattr(t, "id", "") == "_avx_py_load" for t in n.targets))
    return code.replace("__lib_path__", "/tmp/torchinductor_root/xy/probe.so")


def test_inductor_s_own_isa_probe_is_a_helper():
    assert framework_helper([PY, "-c", _torch_probe_code()]) == ISA_PROBE


@pytest.mark.parametrize("code", [
    "import torch\nfrom ctypes import cdll\ncdll.LoadLibrary('/tmp/x.so')",  # older torch: imports torch first
    "\nimport sys\nif sys.platform != \"linux\":\n    import torch  # noqa: F401\nfrom ctypes import cdll\n"
    "cdll.LoadLibrary(\"/tmp/a b.so\")\n",
])
def test_probe_forms_are_helpers(code):
    assert framework_helper([PY, "-u", "-c", code]) == ISA_PROBE


@pytest.mark.parametrize("code", [
    "from ctypes import cdll\ncdll.LoadLibrary('/tmp/x.so')\nimport torch\ntorch.ones(1)",  # runs torch after
    "import numpy\nfrom ctypes import cdll\ncdll.LoadLibrary('/tmp/x.so')",  # other work before
    "from ctypes import cdll",
    "import ctypes; ctypes.CDLL(None)",
    "cdll.LoadLibrary('/tmp/x.so')",
])
def test_a_program_that_does_more_than_probe_is_not_a_helper(code):
    assert framework_helper([PY, "-c", code]) is None


@pytest.mark.parametrize("argv,want", [
    ([PY, "-c", "from multiprocessing.resource_tracker import main;main(5)"], "multiprocessing.resource_tracker"),
    ([PY, "-W", "ignore", "-c", "from multiprocessing.forkserver import main; main(1, 2)"],
     "multiprocessing.forkserver"),
    ([PY, "-m", "torch._inductor.compile_worker", "--workers=2"], "torch._inductor.compile_worker"),
    ([PY, "/site-packages/torch/_inductor/compile_worker/__main__.py"], "torch/_inductor/compile_worker/__main__.py"),
    ([PY, "train.py", "-c", "from ctypes import cdll\ncdll.LoadLibrary('x')"], None),  # -c is the script's
    ([PY, "-m", "torch.distributed.run", "train.py"], None),
    ([PY], None),
])
def test_command_lines(argv, want):
    assert framework_helper(argv) == want
