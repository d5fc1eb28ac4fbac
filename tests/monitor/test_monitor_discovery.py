"""neuron-monitor sees every PyTorch process of its user while it runs, with no variable set in the
application (docs/decisions/0030-monitor-discovery.md).

The applications run in an interpreter where this checkout is installed as a wheel installs it
(``installed.py``): torch's ``torch.backends`` entry point is what notices the monitor.  Both sides
use a private ``XDG_RUNTIME_DIR``, as in a login session; no NEURON_* variable is set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from installed import make_installed_python
from monitor_helpers import stop_all, write_config

from neuron_explorer.contracts import stats_files

JOB = Path(__file__).parent / "apps" / "untagged_job.py"
PARAM_BYTES = (128 * 256 + 256 + 256 * 8 + 8) * 4
FLOPS_PER_CALL = 2 * 32 * (128 * 256 + 256 * 8)  # the job's two matmuls (batch 32), by PyTorch's formulas


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> str:
    return make_installed_python(tmp_path_factory.mktemp("installed"))


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "XDG_"))}
    e.update(XDG_RUNTIME_DIR=str(xdg), OMP_NUM_THREADS="1")
    return e


class Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, cmd: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(cmd, env=env, text=True, **kw)
        self.procs.append(p)
        return p

    def stop(self) -> None:
        stop_all(self.procs)


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.stop()


def start_monitor(procs: Procs, python: str, env: dict[str, str], tmp_path: Path) -> subprocess.Popen:
    cfg = write_config(tmp_path / "monitor.json", {"period": "1s", "neuron_runtimes": [{"metrics": [
        {"type": "neuroncore_counters"}, {"type": "execution_stats"}, {"type": "memory_used"}]}]})
    return procs.start([python, "-m", "neuron_explorer.monitor.cli", "-c", str(cfg)], env,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def reports_of(monitor: subprocess.Popen, pid: int, n: int, timeout: float = 60.0):
    """Read reports until the application ``pid`` has ``n`` consecutive reports with executions
    (returns them and how many reports came before the first one)."""
    deadline = time.monotonic() + timeout
    seen, before = [], 0
    while time.monotonic() < deadline:
        line = monitor.stdout.readline()
        assert line, "the monitor stopped"
        entry = next((a for a in json.loads(line)["neuron_runtime_data"] if a["pid"] == pid), None)
        done = entry and entry["report"]["execution_stats"]["execution_summary"]["completed"] > 0
        if done:
            seen.append(entry["report"])
            if len(seen) == n:
                return seen, before
        elif not seen:
            before += 1
    raise AssertionError(f"no executions of pid {pid} reported within {timeout} s")


def wait_ready(p: subprocess.Popen) -> None:
    assert p.stdout.readline().strip() == "ready"


def check_report(rep: dict, memory: bool = True) -> None:
    core = rep["neuroncore_counters"]["neuroncores_in_use"]["0"]
    assert core["neuroncore_utilization"] > 0
    # flops/s over the period = the period's executions x the graph's flop count (compiled: counted on
    # fake tensors at compile; eager: counted during the first call)
    period = rep["neuroncore_counters"]["period"]
    done = rep["execution_stats"]["execution_summary"]["completed"]
    assert core["flops"] is not None, rep["neuroncore_counters"]
    assert abs(core["flops"] * period - done * FLOPS_PER_CALL) <= 0.01 * done * FLOPS_PER_CALL, (core, period, done)
    if not memory:
        return  # modules built before the runtime started are not known (docs/monitor.md)
    mem = rep["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"]["neuroncore_memory_usage"]["0"]
    assert mem["constants"] == PARAM_BYTES  # the same bytes a capture's device_mem.nc0.parameters shows


@pytest.mark.slow
def test_a_monitor_started_before_an_untagged_job_reports_it(python, env, procs, tmp_path):
    monitor = start_monitor(procs, python, env, tmp_path)
    deadline = time.monotonic() + 60
    while not stats_files.monitor_present(Path(env["XDG_RUNTIME_DIR"]) / "neuron-explorer" / "stats"):
        assert time.monotonic() < deadline, "the monitor never announced itself"
        time.sleep(0.1)
    job = procs.start([python, str(JOB), "60"], env, stdout=subprocess.PIPE)
    wait_ready(job)
    (rep, *_), _ = reports_of(monitor, job.pid, 1)
    check_report(rep)


@pytest.mark.slow
def test_a_monitor_started_after_an_untagged_job_reports_it(python, env, procs, tmp_path):
    """The job's graph is compiled before any monitor runs; once one appears the job's watch thread
    starts its counters and adopts the graph, and its executions are reported with their flops.
    (How soon is the machine's business: issue 29 saw a loaded host take a third period.)"""
    job = procs.start([python, str(JOB), "60"], env, stdout=subprocess.PIPE)
    wait_ready(job)
    stats = Path(env["XDG_RUNTIME_DIR"]) / "neuron-explorer" / "stats"
    assert not stats_files.snapshot_path(stats, job.pid).exists()  # unobserved so far: no counters
    monitor = start_monitor(procs, python, env, tmp_path)
    (rep, *_), _ = reports_of(monitor, job.pid, 1)
    check_report(rep, memory=False)


@pytest.mark.slow
def test_a_monitor_reports_an_untagged_eager_job(python, env, procs, tmp_path):
    monitor = start_monitor(procs, python, env, tmp_path)
    time.sleep(0.5)
    job = procs.start([python, str(JOB), "60", "eager"], env, stdout=subprocess.PIPE)
    wait_ready(job)
    (rep, *_), _ = reports_of(monitor, job.pid, 1, timeout=10)
    check_report(rep)


def test_a_python_process_that_imports_no_framework_runs_none_of_our_code(python, env, procs, tmp_path):
    monitor = start_monitor(procs, python, env, tmp_path)
    time.sleep(0.5)
    r = subprocess.run([python, "-c", "import sys, json; print(json.dumps(sorted(m for m in sys.modules "
                        "if m.startswith('neuron_explorer'))))"], env=env, capture_output=True, text=True, check=True)
    assert json.loads(r.stdout) == []
    monitor.terminate()


def test_without_a_monitor_torch_import_starts_only_the_watcher(python, env):
    code = ("import torch, sys, threading; from neuron_explorer import discovery as d; "
            "print(d.watching(), 'neuron_explorer.runtime.core' in sys.modules, "
            "sorted(t.name for t in threading.enumerate() if t.name.startswith('neuron')))")
    r = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["True", "False", "['neuron-explorer-monitor-watch']"], r.stdout + r.stderr


def test_a_stale_or_foreign_announcement_is_no_monitor(tmp_path):
    d = tmp_path / "stats"
    stats_files.announce_monitor(d)
    assert stats_files.monitor_present(d)
    old = time.time() - stats_files.MONITOR_FRESH_S - 1
    os.utime(stats_files.monitor_file(d), (old, old))
    assert not stats_files.monitor_present(d)  # a monitor killed by SIGKILL
    stats_files.monitor_file(d).unlink()
    os.symlink("/etc/hostname", stats_files.monitor_file(d))
    assert not stats_files.monitor_present(d)
    stats_files.withdraw_monitor(d)
    assert stats_files.monitor_file(d).is_symlink()  # not ours to remove: written by no monitor of this pid
    assert stat_mode(d) == 0o700


def stat_mode(p: Path) -> int:
    import stat

    return stat.S_IMODE(os.stat(p).st_mode)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))


def test_a_broken_install_never_breaks_import_torch(python, env, tmp_path):
    """torch fails its own import when a ``torch.backends`` entry point cannot be loaded; ours
    points at a module that swallows every error, so a damaged or mismatched neuron_explorer (here
    one whose discovery module raises) leaves ``import torch`` working and silent."""
    broken = tmp_path / "broken" / "neuron_explorer"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("")
    (broken / "discovery.py").write_text("raise ImportError('half-installed')\n")
    env = dict(env, PYTHONPATH=str(broken.parent))
    p = subprocess.run([python, "-c",
                        "import torch, neuron_explorer; print(torch.tensor([2]).item(), neuron_explorer.__file__)"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0] == "2" and str(broken) in p.stdout  # the broken package was the one seen
    assert "Failed to load the backend extension" not in p.stderr


@pytest.mark.slow
def test_import_torch_survives_the_checkout_of_an_editable_install_being_deleted(tmp_path):
    """``pip install -e`` points site-packages at a checkout; once that checkout is moved or deleted,
    torch still loads our ``torch.backends`` entry point: its module is a real file in
    site-packages that finds no neuron_explorer and returns quietly."""
    repo = Path(__file__).resolve().parents[2]
    copy = tmp_path / "checkout"
    archive = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    for rel in filter(None, archive.decode().split("\0")):
        src, dst = repo / rel, copy / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    # this interpreter's pip installs into the venv (``--python``: no pip of its own to bootstrap),
    # without the C extensions (a Python twin takes over each; what is checked is the entry point's
    # module in site-packages, which ``build_py`` places either way): decision 0153
    subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "-e", str(copy)],
                   check=True, timeout=600, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                   | {"NEURON_EXPLORER_NO_EXT": "1"})
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",) and not k.startswith("NEURON_")}
    probe = "import sys, torch; print(torch.tensor([2]).item(), sys.modules['neuron_explorer_autoload'].__file__)"
    r = subprocess.run([py, "-c", probe], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    two, where = r.stdout.split()
    # (this machine's own install of neuron-explorer is visible to the venv too: what matters is that
    # torch loads the entry point's module from the venv's site-packages, not from the checkout)
    assert two == "2" and Path(where).parent == venv_site(py), where
    import shutil

    shutil.rmtree(copy)
    r = subprocess.run([py, "-c", probe], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[0] == "2" and "backend extension" not in r.stderr


def venv_site(py: str) -> Path:
    return Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())


RACE = r"""
import importlib.abc, importlib.util, sys, threading

NAME = "neuron_explorer.runtime.core"
entered, release = threading.Event(), threading.Event()


class Paused(importlib.abc.Loader):
    '''The real loader, paused after the module is in sys.modules and before its body runs.'''
    def __init__(self, inner):
        self.inner = inner
    def create_module(self, spec):
        return self.inner.create_module(spec)
    def exec_module(self, module):
        entered.set()
        release.wait()
        self.inner.exec_module(module)


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != NAME:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        spec.loader = Paused(spec.loader)
        return spec


from neuron_explorer import discovery

sys.meta_path.insert(0, Finder())
importer = threading.Thread(target=lambda: __import__(NAME))
importer.start()
entered.wait()
assert NAME in sys.modules  # half-made: its body has not run
result = []


def watch():
    try:
        result.append(discovery._runtime_started())
    except Exception as e:  # what the watch thread met before the fix
        result.append(f"{type(e).__name__}: {e}")


watcher = threading.Thread(target=watch)
watcher.start()
watcher.join(0.5)  # (fixed: it waits for the import; before the fix it has already failed)
release.set()
importer.join()
watcher.join()
print(result)
"""


def test_the_watch_thread_never_reads_a_runtime_module_another_thread_is_importing():
    """The watch thread's check for a started runtime, made while the program's thread is halfway
    through importing ``runtime.core`` (the spec's JAX example starts a capture while the watcher
    runs): it waits for the import and answers, instead of meeting a half-made module (issue 29:
    ``partially initialized module 'neuron_explorer.runtime.core' has no attribute 'get_runtime'``)."""
    r = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if not k.startswith("NEURON_")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[False]", r.stdout + r.stderr
