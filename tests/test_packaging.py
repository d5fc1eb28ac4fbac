"""Packaging rules (docs/install.md): the extras hold what imports them, the supported framework
ranges are declared once and agree with pyproject, the version is written in one place."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import tomllib

from neuron_explorer.integrations import versions

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _imports(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports (at any depth of the file)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


# third-party module -> the extra that provides it, and the only part of src/ allowed to import it
EXTRA_OWNERS = {"duckdb": ("ui", "neuron_explorer/ui/"), "starlette": ("ui", "neuron_explorer/ui/"),
                "uvicorn": ("ui", "neuron_explorer/ui/"), "prometheus_client": ("monitor", "neuron_explorer/monitor/"),
                "boto3": ("monitor", "neuron_explorer/monitor/"), "distributed": ("cluster", "neuron_explorer/view/"),
                "dask": ("cluster", "neuron_explorer/view/")}


def test_an_extras_modules_are_imported_only_by_its_feature() -> None:
    """DuckDB is in the 'ui' extra only: nothing but ui/ imports it, so `view` without --ui, the
    capture, neuron-det and neuron-monitor run without it (the layering test keeps ui/ out of them)."""
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        for mod in _imports(path) & EXTRA_OWNERS.keys():
            extra, home = EXTRA_OWNERS[mod]
            assert rel.startswith(home), f"{rel} imports {mod} (extra {extra!r}), which only {home} may"
    core = " ".join(PROJECT["dependencies"])
    for mod, (extra, _home) in EXTRA_OWNERS.items():
        assert mod.replace("_", "-") not in core.replace("_", "-"), f"{mod} is a core dependency"
        declared = " ".join(PROJECT["optional-dependencies"][extra]).replace("_", "-")
        assert mod.replace("_", "-") in declared or mod in ("distributed",), f"{mod} not in the {extra!r} extra"


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_the_supported_ranges_are_the_extras_ranges(framework) -> None:
    low, high = versions.SUPPORTED[framework]
    spec = next(r for r in PROJECT["optional-dependencies"][framework] if r.startswith(framework))
    assert spec == f"{framework}>={low[0]}.{low[1]},<{high[0]}.{high[1]}"


@pytest.mark.parametrize("framework,version,ok", [
    ("torch", "2.12.1", False), ("torch", "2.13.0", True), ("torch", "2.13.0+cpu", True), ("torch", "2.13.9", True),
    ("torch", "2.14.0", False), ("torch", "3.0", False), ("torch", "nightly", False),
    ("jax", "0.9.2", False), ("jax", "0.10.0", True), ("jax", "0.10.2", True), ("jax", "0.11.0", False)])
def test_a_version_outside_the_range_is_one_warning_line(framework, version, ok) -> None:
    why = versions.unsupported(framework, version)
    assert (why is None) == ok
    if why is not None:
        assert "\n" not in why and why.startswith(f"{framework} {version} is not a version neuron-explorer supports")


def test_check_says_it_once_per_process(capsys, monkeypatch) -> None:
    monkeypatch.setattr(versions, "_warned", set())
    versions.check("torch", "2.12.1")
    versions.check("torch", "2.12.1")
    versions.check("jax", "0.10.2")
    assert capsys.readouterr().err == ("neuron-explorer: warning: torch 2.12.1 is not a version neuron-explorer "
                                       "supports (torch 2.13); its hooks may miss events\n")


def test_the_installed_frameworks_are_supported() -> None:
    """The CI's torch and jax are inside the declared ranges (else the ranges say nothing)."""
    import jax
    import torch

    assert versions.unsupported("torch", torch.__version__) is None
    assert versions.unsupported("jax", jax.__version__) is None


def test_the_version_is_written_once() -> None:
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    init = (SRC / "neuron_explorer" / "__init__.py").read_text()
    assert re.search(r'^__version__ = "\d+\.\d+\.\d+"$', init, re.M)
    from neuron_explorer import __version__

    hits = [p for p in SRC.rglob("*.py") if re.search(f"[\"']{re.escape(__version__)}[\"']", p.read_text())]
    assert hits == [SRC / "neuron_explorer" / "__init__.py"]


@pytest.mark.slow
def test_make_docs_builds_the_api_reference(tmp_path) -> None:
    """`make docs` (pdoc) renders the public API: the PyTorch API, the readers, the map/reduce steps."""
    pytest.importorskip("pdoc")
    import os
    import subprocess
    import sys

    make = (REPO / "Makefile").read_text()
    modules = re.search(r"^DOC_MODULES = (.*?)(?<!\\)$", make, re.M | re.S).group(1).replace("\\\n", " ").split()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    p = subprocess.run([sys.executable, "-m", "pdoc", "-o", str(tmp_path), "--docformat", "restructuredtext",
                        *modules], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    page = (tmp_path / "neuron_explorer" / "torch.html").read_text()
    assert "NeuronProfiler" in page and "export_trace" in page and "ProfileMode" in page
    scale = (tmp_path / "neuron_explorer" / "view" / "scale.html").read_text()
    assert all(name in scale for name in ("index_session", "plan_offsets", "convert_session", "finalize"))
    assert "load_session" in (tmp_path / "neuron_explorer" / "analysis" / "reader.html").read_text()


def test_without_a_compiler_the_build_says_once_per_extension_what_it_costs(tmp_path) -> None:
    """`CC=/bin/false`: the build goes on (exit status 0), one line per extension, with the cost."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "CC": "/bin/false"}
    p = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
                        "--build-temp", str(tmp_path / "tmp")], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("neuron-explorer:")]
    assert [ln.split(" not built ")[0] for ln in lines] == [
        "neuron-explorer: warning: neuron_explorer.runtime._fastpath",
        "neuron-explorer: warning: neuron_explorer.exporters._pqenc",
        "neuron-explorer: warning: neuron_explorer.analysis._sweep"], p.stderr[-2000:]
    assert "the C compiler failed" in lines[0] and "about 3x the overhead per event" in lines[0]
    assert not list((tmp_path / "lib").rglob("*.so"))


CAPTURE_WITHOUT_EXTENSION = """
import os, sys
sys.modules["neuron_explorer.runtime._fastpath"] = None  # as if the build had failed
os.environ["NEURON_RT_INSPECT_ENABLE"] = "1"
os.environ["NEURON_RT_INSPECT_OUTPUT_DIR"] = sys.argv[1]
from neuron_explorer import boot
boot.start()
boot.start()
import torch
torch.nn.Linear(2, 2)(torch.ones(2))
"""


@pytest.mark.slow
def test_a_capture_without_the_c_hot_path_says_so_once(tmp_path) -> None:
    import subprocess
    import sys

    from tests.conftest import clean_env

    p = subprocess.run([sys.executable, "-c", CAPTURE_WITHOUT_EXTENSION, str(tmp_path)], env=clean_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [
        "neuron-explorer: warning: the C hot path (neuron_explorer.runtime._fastpath) is not built: this capture "
        "runs the Python fallback, about 3x the overhead per event; reinstall with a C compiler and the Python "
        "headers (docs/install.md)"]
    q = subprocess.run([sys.executable, "-c", CAPTURE_WITHOUT_EXTENSION, str(tmp_path)], capture_output=True,
                       text=True, timeout=300, env=clean_env(NEURON_EXPLORER_PURE_PYTHON="1"))
    assert q.returncode == 0 and q.stderr == "", q.stderr  # chosen: nothing to say
