"""The rule that picks the fast loop (tests/fastset.py), on a small test tree of its own and on this
one, and the guard that catches a process the rule cannot see."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from . import fastset

TREE = {
    "tests/__init__.py": "",
    "tests/fuzzing.py": "def budget(s):\n    return s\n",
    "tests/conftest.py": """
import subprocess, pytest

def run(cmd):
    return subprocess.run(cmd)

def clean_env():
    return {}

@pytest.fixture
def workspace():
    run(["x"])

@pytest.fixture
def out_dir(tmp_path):
    return tmp_path
""",
    "tests/pkg/__init__.py": "",
    "tests/pkg/helpers.py": """
from ..conftest import run

def capture():
    return run(["x"])

def pure():
    return 1
""",
    "tests/pkg/test_mixed.py": """
import os, sys, multiprocessing
from tests import conftest
from tests.conftest import clean_env
from tests.fuzzing import budget
from .helpers import capture, pure

def _pool():
    return multiprocessing.Pool(2)

def test_pure():
    assert pure() == 1 and clean_env() == {}

def test_capture():
    capture()

def test_interpreter():
    print(sys.executable)

def test_budget():
    budget(3)

def test_local_helper():
    _pool()

def test_module_attribute():
    conftest.run(["x"])

class TestForks:
    def test_fork(self):
        os.fork()
""",
    "tests/pkg/test_all_costly.py": "from .helpers import capture\n\ndef test_a():\n    capture()\n",
    "tests/pkg/test_slow.py": "import pytest\npytestmark = pytest.mark.slow\n\ndef test_a():\n    pass\n",
    "tests/pkg/test_named.py": "import pytest\nfrom .helpers import capture\n\n@pytest.mark.fast\ndef test_a():\n"
                               "    capture()\n",
    "tests/flat/monitor_helpers.py": "import subprocess\n\ndef apps():\n    subprocess.Popen(['x'])\n",
    "tests/flat/test_flat.py": "from monitor_helpers import apps\n\ndef test_a():\n    apps()\n\ndef test_b():\n"
                               "    pass\n",
}


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for rel, text in TREE.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    monkeypatch.setattr(fastset, "REPO", tmp_path)
    monkeypatch.setattr(fastset, "SRC", tmp_path / "src")
    return tmp_path


def test_a_test_is_costly_through_what_it_calls_in_the_test_tree(tree: Path):
    a = fastset.Analysis()
    mixed = tree / "tests/pkg/test_mixed.py"
    costly = {t: a.costly(mixed, t) for t in fastset.parse(mixed).tests}
    assert costly == {"test_pure": False, "test_capture": True, "test_interpreter": True, "test_budget": True,
                      "test_local_helper": True, "test_module_attribute": True, "TestForks": True}
    assert a.costly(tree / "tests/flat/test_flat.py", "test_a") and not a.costly(tree / "tests/flat/test_flat.py",
                                                                                 "test_b")


def test_fixtures_are_judged_one_by_one(tree: Path):
    a = fastset.Analysis()
    conftest = tree / "tests/conftest.py"
    assert a.costly(conftest, "workspace") and a.costly(conftest, "run")
    assert not a.costly(conftest, "out_dir") and not a.costly(conftest, "clean_env")
    assert not a.costly(conftest, "no_such_name")


def test_files_without_a_possible_fast_test_are_not_imported(tree: Path):
    a = fastset.Analysis()
    may = {p: a.file_may_be_fast(tree / "tests/pkg" / p) for p in
           ("test_mixed.py", "test_all_costly.py", "test_slow.py", "test_named.py")}
    assert may == {"test_mixed.py": True, "test_all_costly.py": False, "test_slow.py": False, "test_named.py": True}


@pytest.mark.parametrize("dotted,costly", [("subprocess.run", True), ("subprocess", True), ("os.fork", True),
                                           ("os.execvp", True), ("os.path.join", False), ("sys.executable", True),
                                           ("sys.path", False), ("concurrent.futures.ProcessPoolExecutor", True),
                                           ("concurrent.futures.ThreadPoolExecutor", False),
                                           ("multiprocessing.pool.ThreadPool", True), ("tests.fuzzing.budget", True)])
def test_process_apis(dotted: str, costly: bool):
    assert fastset.is_costly_api(dotted) is costly


def test_on_this_tree_fixtures_that_start_jobs_are_costly_and_helpers_that_do_not_are_not():
    a = fastset.Analysis()
    tests = fastset.REPO / "tests"
    assert a.costly(tests / "conftest.py", "torchrun") and a.costly(tests / "conftest.py", "cli")
    assert not a.costly(tests / "conftest.py", "clean_env") and not a.costly(tests / "conftest.py", "out_dir")
    assert a.costly(tests / "ui/conftest.py", "ui_workspace")
    assert a.costly(tests / "monitor/monitor_helpers.py", "apps")
    assert not a.costly(tests / "monitor/monitor_helpers.py", "stats_dir")
    assert not a.costly(Path(__file__), "test_process_apis")


@pytest.mark.fast  # starts one short process on purpose: what the guard must see
def test_the_guard_sees_a_process_started_inside_it_only():
    with fastset.guard() as started:
        subprocess.run(["true"], check=True)
    assert len(started) == 1 and ("fork_exec()" in started[0] or "posix_spawn()" in started[0])
    assert "test_fastset.py" in started[0]  # where it was started
    assert "mark it @pytest.mark.processes" in fastset.describe(started)
    subprocess.run(["true"], check=True)
    with fastset.guard() as started:
        pass
    assert started == []


@pytest.mark.fast  # starts short processes on purpose
def test_the_guard_counts_threads_the_test_starts_but_not_earlier_ones():
    import threading

    go, done = threading.Event(), threading.Event()

    def earlier():  # a thread an earlier test or a session fixture left running
        go.wait(30)
        subprocess.run(["true"], check=True)
        done.set()

    t = threading.Thread(target=earlier, daemon=True)
    t.start()
    with fastset.guard() as started:
        go.set()
        assert done.wait(30)
        assert started == []
        mine = threading.Thread(target=subprocess.run, args=(["true"],))
        mine.start()
        mine.join()
        assert len(started) == 1
    t.join()
