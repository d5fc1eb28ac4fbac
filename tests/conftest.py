"""Shared helpers: run real processes (python, torchrun) with capture variables set."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from . import cpu_report, fastset

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@contextlib.contextmanager
def monitor_heartbeat(stats_dir: Path) -> Iterator[Path]:
    """A neuron-monitor's announcement in ``stats_dir``, kept fresh as a running monitor keeps it
    (every ``MONITOR_HEARTBEAT_S``) while the block runs: a job that took longer than
    ``MONITOR_FRESH_S`` to start on a loaded host still finds a monitor at its exit."""
    from neuron_explorer.contracts import stats_files

    stats_files.announce_monitor(stats_dir)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(stats_files.MONITOR_HEARTBEAT_S):
            stats_files.announce_monitor(stats_dir)

    t = threading.Thread(target=beat, name="test-monitor-heartbeat", daemon=True)
    t.start()
    try:
        yield stats_dir
    finally:
        stop.set()
        t.join()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment minus any capture/NDET variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NEURON_RT_", "NEURON_EXPLORER_", "NEURON_PROCESS_TAG", "XLA_"))}
    env["NEURON_EXPLORER_QUIET"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def run(cmd: list[str], env: dict[str, str], cwd: str | Path | None = None, timeout: float = 240,
        check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} failed with {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr[-4000:]}")
    return p


def torchrun(nproc: int, script: str | Path, args: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script), *args]
    return run(cmd, env, **kw)


def native_stamp_built() -> None:
    """The torch-ABI extension (integrations/torch/native.py) for the installed torch, built into
    the user cache when missing, as `make setup` does; the calling test is skipped where it cannot
    be built (no compiler)."""
    import torch

    from neuron_explorer.integrations.torch import native

    if native.stamp_work(torch) is None:
        try:
            native.build(torch, quiet=True)
        except Exception as e:  # noqa: BLE001
            pytest.skip(f"the c10d extension cannot be built here: {e}")
    assert native.stamp_work(torch) is not None


def rank_envs(nproc: int, env: dict[str, str], port: int | None = None) -> list[dict[str, str]]:
    """The environment of each rank of a one-node job started without a launcher: ``env`` plus the
    variables ``init_process_group``'s ``env://`` rendezvous reads (rank, world size, the store's
    address), as a cluster scheduler's own launcher sets them."""
    port = port or free_port()
    return [{**env, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)} for r in range(nproc)]


def ranks(nproc: int, script: str | Path, args: list[str], env: dict[str, str], cwd: str | Path | None = None,
          timeout: float = 240, check: bool = True) -> subprocess.CompletedProcess:
    """``script`` on ``nproc`` ranks of one gloo job, each rank a plain ``python`` process (no
    ``torchrun``): for the tests whose subject is what the ranks do, not how torchrun starts them.
    torchrun's own interpreter imports torch (about 2 CPU-s of every job, decision 0183).  Answers as
    ``run`` does: the ranks' standard outputs one after the other, their standard errors likewise,
    and the first non-zero status."""
    procs = [subprocess.Popen([sys.executable, str(script), *args], env=e, cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for e in rank_envs(nproc, env)]
    outs = []
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    code = next((p.returncode for p in procs if p.returncode), 0)
    p = subprocess.CompletedProcess(["ranks", str(nproc), str(script), *args], code, "".join(o for o, _ in outs),
                                    "".join(e for _, e in outs))
    if check and code != 0:
        raise AssertionError(f"{p.args} failed with {code}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr[-4000:]}")
    return p


def cli(*args: str, env: dict[str, str] | None = None, check: bool = False, **kw) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "neuron_explorer", *args], env or clean_env(), check=check, **kw)


def cli_in_process(*args: str, env: dict[str, str] | None = None, check: bool = False,
                   cwd: str | Path | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``cli`` run in this process (``tests.inproc``), for the tests that read what a conversion or
    ``check`` answers rather than how a process starts or ends: the same status and output without a
    fresh interpreter's 0.3 CPU-s (decision 0173).  ``timeout`` is accepted and not applied."""
    from .inproc import run_tool

    prev = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        p = run_tool("neuron_explorer", list(args), env or clean_env())
    finally:
        os.chdir(prev)
    if check and p.returncode != 0:
        raise AssertionError(f"{p.args} failed with {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr[-4000:]}")
    return p


def shared_dir(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Any]) -> tuple[Path, Any]:
    """A directory ``build`` fills once per test run, whichever pytest-xdist worker asks first.

    A session or module fixture is made once per *worker*: under ``-n 3 --dist worksteal`` a
    capture every UI file reads was made three times, and a module whose tests were spread over
    workers made its job once per worker (docs/decisions/0134-one-run-per-fixture.md).  The
    directory lives beside the workers' own base directories (the run's directory, as the matrix's
    cells do); a lock per name makes the first asker build it and the others wait for it.  What
    ``build`` returns (JSON) is kept beside it and returned with it.  A build that failed is
    redone by the next asker (and fails its tests the same way).  The tests must only read it."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-fixtures"
    root.mkdir(exist_ok=True)
    d, done = root / name, root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            if d.exists():  # a build that failed half-way
                shutil.rmtree(d)
            d.mkdir()
            value = build(d)
            tmp = done.with_suffix(".tmp")
            tmp.write_text(json.dumps(value))
            tmp.replace(done)
    return d, json.loads(done.read_text())


def train_capture(tmp_path_factory: pytest.TempPathFactory, *args: str) -> tuple[Path, str]:
    """The capture (``NEURON_RT_INSPECT_ENABLE=1``, nothing else) of ``examples/train.py args`` on two
    torchrun ranks, and its standard output: made once per test run for every test that reads that
    job (``shared_dir``), so that the files testing the capture, ``view``, the Parquet writers and the
    UI on the same job pay one launch."""
    def build(d: Path) -> str:
        env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(d / "output"))
        return torchrun(2, EXAMPLES / "train.py", list(args), env, cwd=d).stdout

    d, stdout = shared_dir(tmp_path_factory, "train_capture" + "".join(args).replace("-", "_"), build)
    return d / "output", stdout


JIT_LOOP = REPO / "tests" / "jax" / "workloads" / "jit_loop.py"


def jit_loop_capture(tmp_path_factory: pytest.TempPathFactory, steps: int) -> tuple[Path, str]:
    """The directory ``tests/jax/workloads/jit_loop.py steps`` ran in with ``NEURON_RT_INSPECT_ENABLE=1``
    alone (its capture in ``output/``), and its standard output: once per test run for the JAX
    runtime tests and the type-filter tests' unfiltered reference (``shared_dir``)."""
    def build(d: Path) -> str:
        return run([sys.executable, str(JIT_LOOP), str(steps)], clean_env(NEURON_RT_INSPECT_ENABLE="1"), cwd=d,
                   timeout=180).stdout

    return shared_dir(tmp_path_factory, f"jit_loop_capture_{steps}", build)


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    d = tmp_path / "output"
    return d


def pytest_configure(config: pytest.Config) -> None:
    """Keep the test runner itself out of neuron-monitor discovery.

    In-process tests import torch and JAX, which makes the runner a framework process that watches
    for a monitor (``neuron_explorer.discovery``).  A test that announces a monitor in its stats
    directory would then start the runtime inside the runner: its hooks on the runner's torch, and
    a snapshot of the runner in that directory (seen in CI: ``test_counters_publish_nothing...``
    found ``<runner pid>.json``).  Setting ``NEURON_EXPLORER_STATS=0`` here is not an option: the
    monitor tests hand ``os.environ`` to the workloads they start."""
    from neuron_explorer import discovery

    cpu_report.register(config)
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):  # (where tests run)
        launch_log(os.environ.get("NEURON_EXPLORER_TEST_LAUNCH_LOG"),
                   os.environ.get("NEURON_EXPLORER_TEST_LAUNCH_DRY") == "1")
    discovery._check = lambda framework: None  # type: ignore[assignment]
    if not hasattr(config, "workerinput"):  # (once, in the controller)
        compile_tree(Path(discovery.__file__).parent)
        rewrite_tests(config)


_LAUNCH_ENV = ("NEURON_", "XLA_", "JAX_", "TORCH", "RANK", "WORLD_SIZE", "MASTER_", "OMP_", "PYTHON")


def launch_log(path: str | None, dry: bool = False) -> None:
    """With ``NEURON_EXPLORER_TEST_LAUNCH_LOG=FILE``, every process a test starts through
    ``subprocess`` is appended to FILE as one JSON line: the test, the command line, a digest of
    each script it names (a file, or ``-c`` code), and the environment variables that choose a
    setting (an audit hook: the inventory of launches behind decision 0210).  With
    ``NEURON_EXPLORER_TEST_LAUNCH_DRY=1`` too, a test's launch is refused once logged: each test
    fails at its first launch, and the first launches of the whole suite are listed in minutes
    without running a program (with ``--tb=no``: pytest's traceback of an audit hook's refusal can
    fail).  Unset, nothing is installed."""
    if not path:
        return
    import hashlib

    def hook(event: str, args: tuple) -> None:
        test = os.environ.get("PYTEST_CURRENT_TEST", "")
        if event != "subprocess.Popen" or (dry and not test):
            return
        _exe, argv, _cwd, env = args
        argv = [os.fsdecode(a) for a in argv] if isinstance(argv, (list, tuple)) else [os.fsdecode(argv)]
        digests = {}
        for i, a in enumerate(argv):
            if i and argv[i - 1] == "-c":
                digests["-c"] = hashlib.sha1(a.encode()).hexdigest()[:10]
            elif a.endswith(".py") and os.path.isfile(a):
                digests[a] = hashlib.sha1(Path(a).read_bytes()).hexdigest()[:10]
        env = env if env is not None else os.environ
        line = {"test": test.rsplit(" (", 1)[0], "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
                "argv": argv, "scripts": digests,
                "env": {os.fsdecode(k): os.fsdecode(v) for k, v in dict(env).items()
                        if os.fsdecode(k).startswith(_LAUNCH_ENV)}}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")
        if dry:
            raise RuntimeError("NEURON_EXPLORER_TEST_LAUNCH_DRY: launch listed, not run")

    sys.addaudithook(hook)


def compile_tree(package: Path) -> None:
    """Write the bytecode of the package under test and of tests/ before any process starts.

    With ``PYTHONDONTWRITEBYTECODE`` set (as on this project's machines) no process writes it, so
    each program and tool process the suite starts compiled every module it imported from
    source: 16% of the CPU of two such test files (docs/decisions/0189-bytecode-before-the-suite.md).  Reading
    bytecode is not affected by the variable; a stale file is ignored by the import system."""
    import compileall

    for d in (package, REPO / "tests"):
        try:
            compileall.compile_dir(str(d), quiet=2, workers=0)
        except Exception:  # (a read-only tree is tested without it)
            pass


def rewrite_tests(config: pytest.Config) -> None:
    """Write pytest's assertion-rewritten code of each test file and conftest before the workers start.

    pytest rewrites the asserts of every test module it imports and keeps the result in a pyc of its
    own beside it, but writes none under ``PYTHONDONTWRITEBYTECODE``: each xdist worker parsed and
    rewrote all ~190 files at collection, 5.5 of its 14.5 CPU-s (decision 0193).  Written here once,
    each worker reads them (pytest reads its pyc whatever the variable says, and ignores a stale one:
    the file's mtime and size are in it).  This uses pytest's own private helpers: should they change,
    a failure leaves pytest rewriting in each worker as before."""
    from fnmatch import fnmatch

    if not sys.dont_write_bytecode:
        return  # pytest writes them itself
    try:
        from _pytest.assertion import rewrite as rw

        state = config.stash.get(rw.assertstate_key, None)
        patterns = ["conftest.py", *config.getini("python_files")]
    except Exception:  # noqa: BLE001 - another pytest: rewritten in each worker
        return
    if state is None:  # --assert=plain
        return
    for fn in sorted((REPO / "tests").rglob("*.py")):
        if not any(fnmatch(fn.name, p) for p in patterns):
            continue
        try:
            pyc = rw.get_cache_dir(fn) / (fn.name[:-3] + rw.PYC_TAIL)
            if rw._read_pyc(fn, pyc) is None and rw.try_makedirs(pyc.parent):
                source_stat, co = rw._rewrite_test(fn, config)
                rw._write_pyc(state, co, source_stat, pyc)
        except Exception:  # noqa: BLE001 - (a read-only tree, a file pytest reports itself)
            continue


# ---- the fast loop (tests/fastset.py, docs/decisions/0098-fast-test-set.md)

_ANALYSIS = fastset.Analysis()
_AUTO_FAST = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true",
                     help="run only the fast loop: tests that start no process (tests/fastset.py)")
    cpu_report.add_option(parser)
    cpu_report.order_option(parser)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With --fast, a file none of whose tests can be fast is not even imported (collection is a
    tenth of the fast loop's time otherwise)."""
    if (config.getoption("--fast") and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_") and not _ANALYSIS.file_may_be_fast(collection_path)):
        return True
    return None


def _is_auto_fast(item: pytest.Item) -> bool:
    if not isinstance(item, pytest.Function) or item.get_closest_marker("slow") or item.get_closest_marker("processes"):
        return False
    unit = fastset.source_unit(item.function)
    if unit is None or _ANALYSIS.costly(*unit):
        return False
    defs = item._fixtureinfo.name2fixturedefs
    return not any((u := fastset.source_unit(d.func)) is not None and _ANALYSIS.costly(*u)
                   for name in item.fixturenames for d in defs.get(name, ()))


@pytest.hookimpl(tryfirst=True)  # before -m reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, drop = [], []
    for item in items:
        if item.get_closest_marker("fast"):
            keep.append(item)
        elif _is_auto_fast(item):
            item.add_marker(pytest.mark.fast)
            item.stash[_AUTO_FAST] = True
            keep.append(item)
        else:
            drop.append(item)
    if config.getoption("--fast") and drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    cpu_report.reorder(config, items)


def _guarded(item: pytest.Item):
    """Fail an automatically selected test that started a process all the same (tests/fastset.py)."""
    if not item.stash.get(_AUTO_FAST, False):
        return (yield)
    with fastset.guard() as started:
        result = yield
    if started:
        pytest.fail(fastset.describe(started), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _guarded(item))
