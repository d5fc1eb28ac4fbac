"""Which tests make up the fast loop (``make test-fast``, ``pytest --fast``): decision 0098.

The rule, applied to every collected test on every run (so it stays right as tests are added):

    a test is *fast* unless it is marked ``slow`` or ``processes``, or code of the repository
    outside ``src/`` that it runs (its own function or class, every fixture pytest resolved for
    it, and what those call in the test tree) can start a process or asks for a time budget.

"Can start a process" is read from the source, not guessed from file names: each file of the test
tree is parsed once, every top-level function, class and assigned name becomes a *unit*, and a
unit is costly when it refers to a process API (``subprocess``, ``multiprocessing``, ``os.fork``,
``os.system``, ``os.posix_spawn``, ``os.exec*``, ``sys.executable``, a process pool,
``asyncio.create_subprocess_*``), to a fuzz search (``tests.fuzzing.examples``: the fuzz tests run as
many examples as they are given), or to a unit that is costly, followed through the test tree's own imports
(``from tests.conftest import torchrun``, ``from .helpers import ...``, ``conftest.cli``).  Names
are resolved at module level only: a local variable called ``run`` in a module that also defines a
process-starting ``run`` leaves the test out (the rule errs towards leaving a test out).

What the source cannot show is a process started by the code under test (``src/``, a library).
``guard`` watches for that while an automatically selected test sets up and runs, on every run, fast
loop or full suite: the test fails naming what started the process, and the cure is the
``processes`` marker (or running the code under test in one process). Threads that were running
before the test began (left by an earlier test, a session fixture's server) are not watched. A
handful of cheap end-to-end checks join the fast loop by name, ``@pytest.mark.fast``; the guard
leaves those alone.
"""

from __future__ import annotations

import ast
import os
import threading
import traceback
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"

# dotted names that start a process (a reference to the module itself counts: ``subprocess.run``)
PROCESS_MODULES = ("subprocess", "multiprocessing", "_posixsubprocess", "pty", "concurrent.futures.process")
PROCESS_NAMES = {"os.fork", "os.forkpty", "os.system", "os.popen", "os.posix_spawn", "os.posix_spawnp",
                 "sys.executable", "concurrent.futures.ProcessPoolExecutor",
                 "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell"}
PROCESS_PREFIXES = ("os.exec", "os.spawn")

# a fuzz test (tests/fuzzing.py) runs as many examples as it is given, a search rather than a check
BUDGET_NAMES = {"tests.fuzzing.budget", "tests.fuzzing.examples"}


def is_costly_api(dotted: str) -> bool:
    """A process API, or a time budget."""
    if dotted in PROCESS_NAMES or dotted in BUDGET_NAMES or dotted.startswith(PROCESS_PREFIXES):
        return True
    return any(dotted == m or dotted.startswith(m + ".") for m in PROCESS_MODULES)


def _chain(node: ast.AST) -> tuple[str, ...] | None:
    """``a.b.c`` as ("a", "b", "c"); None unless the chain ends in a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return tuple(reversed(parts))
    return None


def _refs(node: ast.AST) -> set[tuple[str, ...]]:
    """Every maximal dotted name the node refers to (``subprocess.run`` once, not ``subprocess`` too)."""
    out: set[tuple[str, ...]] = set()
    inner: set[int] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and id(n) not in inner:
            c = _chain(n)
            if c is not None:
                out.add(c)
                v = n.value
                while isinstance(v, ast.Attribute):
                    inner.add(id(v))
                    v = v.value
                inner.add(id(v))
        elif isinstance(n, ast.Name) and id(n) not in inner:
            out.add((n.id,))
    return out


class Module:
    """One parsed file of the test tree: its imports and its units (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, str(path))
        # local name -> dotted module it names ("subprocess", "tests.conftest") or "module:attr"
        self.imports: dict[str, str] = {}
        for n in ast.walk(tree):  # function-level imports too: they bind names the same way
            if isinstance(n, ast.Import):
                for a in n.names:
                    if a.asname:
                        self.imports[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.imports[top] = top
            elif isinstance(n, ast.ImportFrom):
                base = self._absolute(n.module, n.level)
                for a in n.names:
                    self.imports[a.asname or a.name] = f"{base}:{a.name}"
        self.units: dict[str, set[tuple[str, ...]]] = {}
        self.tests: list[str] = []
        self.marked_slow = False
        # @pytest.mark.fast anywhere: an end-to-end check that joins the fast loop by name
        # (a file without the word has no such mark: one walk of the tree fewer for most files)
        self.explicit_fast = "fast" in text and ("mark", "fast") in {c[-2:] for c in _refs(tree)}
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.units[stmt.name] = _refs(stmt)
                if stmt.name.startswith("test" if not isinstance(stmt, ast.ClassDef) else "Test"):
                    self.tests.append(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    for name in (n.id for n in ast.walk(t) if isinstance(n, ast.Name)):
                        self.units.setdefault(name, set()).update(_refs(stmt.value) if stmt.value else set())
                        if name == "pytestmark" and ("slow",) in {c[-1:] for c in _refs(stmt)}:
                            self.marked_slow = True

    def _absolute(self, module: str | None, level: int) -> str:
        """The dotted name an ``ImportFrom`` names; relative ones as a path-based name ("./x")."""
        if not level:
            return module or ""
        base = self.path.parent
        for _ in range(level - 1):
            base = base.parent
        rel = base.relative_to(REPO).as_posix().replace("/", ".")
        return ".".join(p for p in (rel, module) if p)


@lru_cache(maxsize=None)
def parse(path: Path) -> Module | None:
    try:
        return Module(path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


@lru_cache(maxsize=None)  # (asked again for each reference to the same module)
def local_file(dotted: str, importer: Path) -> Path | None:
    """The repository file (outside ``src/``) that ``import dotted`` loads from ``importer``, if any:
    a package-relative name (``tests.conftest``) or a top-level module beside the importer or in a
    directory above it (pytest's rootdir-relative ``sys.path`` entries, as for ``monitor_helpers``)."""
    parts = dotted.split(".")
    roots = [REPO, *[d for d in importer.parents if d != REPO and REPO in d.parents]]
    for root in roots:
        for cand in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
            if cand.is_file() and SRC not in cand.parents and cand != Path(__file__).resolve():
                return cand
    return None


class Analysis:
    """Answers "can this unit start a process?" for units of the test tree, memoized."""

    def __init__(self) -> None:
        self._memo: dict[tuple[Path, str], bool] = {}

    def costly(self, path: Path, unit: str) -> bool:
        key = (path, unit)
        if key not in self._memo:
            self._memo[key] = False  # a cycle (recursion, mutual imports) adds nothing
            mod = parse(path)
            self._memo[key] = bool(mod and unit in mod.units
                                   and any(self._ref_starts(mod, r) for r in mod.units[unit]))
        return self._memo[key]

    def _ref_starts(self, mod: Module, ref: tuple[str, ...]) -> bool:
        head, rest = ref[0], ref[1:]
        if head in mod.imports:
            target = mod.imports[head]
            if ":" in target:  # from X import name
                base, name = target.split(":", 1)
                dotted = f"{base}.{name}" if base else name
                if is_costly_api(".".join((dotted, *rest))):
                    return True
                f = local_file(base, mod.path) if base else None
                if f is not None and not local_file(dotted, mod.path):
                    return self.costly(f, name)
                target = dotted  # "from tests import conftest": a module
            if is_costly_api(".".join((target, *rest))):
                return True
            f = local_file(target, mod.path)
            return bool(f is not None and rest and self.costly(f, rest[0]))
        if head in mod.units:
            return self.costly(mod.path, head)
        return False

    def file_may_be_fast(self, path: Path) -> bool:
        """False when no test of the file can be fast (read before the file is imported)."""
        mod = parse(path)
        if mod is None or mod.explicit_fast:
            return True  # let pytest report a file it cannot read
        return not mod.marked_slow and any(not self.costly(path, t) for t in mod.tests)


def source_unit(func) -> tuple[Path, str] | None:
    """(file, top-level name) where ``func`` is defined, when that file is in the test tree."""
    func = getattr(func, "__wrapped__", func)
    code = getattr(func, "__code__", None)
    if code is None:
        return None
    path = _test_tree_file(code.co_filename)
    return None if path is None else (path, func.__qualname__.split(".")[0])


@lru_cache(maxsize=None)
def _test_tree_file(filename: str) -> Path | None:
    path = Path(filename).resolve()
    return None if REPO not in path.parents or SRC in path.parents else path


# ---- the guard: a process started while an automatically selected test runs

_started: list[str] = []
_lock = threading.Lock()
_installed = False


def _watch(name: str, fn):
    def watched(*args, **kwargs):
        if _guarding[0] and threading.current_thread() not in _earlier_threads:
            where = "".join(traceback.format_stack(limit=12)[:-1])
            with _lock:
                _started.append(f"{name}() called at\n{where}")
        return fn(*args, **kwargs)

    watched.__wrapped__ = fn  # type: ignore[attr-defined]
    return watched


_guarding = [False]  # one flag for all threads: a test's worker threads start processes for it too
# threads that ran before the guarded test began (what an earlier test left running, a session
# fixture's server): a process they start is not this test's
_earlier_threads: set[threading.Thread] = set()


def install() -> None:
    """Wrap the functions every way of starting a process goes through (once per session)."""
    global _installed
    if _installed:
        return
    _installed = True
    import _posixsubprocess
    import subprocess

    for name in ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            setattr(os, name, _watch(f"os.{name}", getattr(os, name)))
    # multiprocessing calls _posixsubprocess.fork_exec; subprocess took its own reference at import
    _posixsubprocess.fork_exec = _watch("fork_exec", _posixsubprocess.fork_exec)
    if getattr(subprocess, "_fork_exec", None) is not None:
        subprocess._fork_exec = _watch("fork_exec", subprocess._fork_exec)


@contextmanager
def guard() -> Iterator[list[str]]:
    """Within the block, every process started is listed (with where it was started)."""
    install()
    with _lock:
        _started.clear()
    _earlier_threads.clear()
    _earlier_threads.update(t for t in threading.enumerate() if t is not threading.current_thread())
    _guarding[0] = True
    try:
        yield _started
    finally:
        _guarding[0] = False


def describe(started: list[str]) -> str:
    return (f"this test is in the fast loop (tests/fastset.py) but started {len(started)} process(es); "
            f"mark it @pytest.mark.processes (or keep the code under test in one process):\n"
            + started[0])


