"""A child memory cgroup of the test process's own cgroup, for running one program under a memory
limit (decision 0182).

``memory_cgroup(limit)`` makes ``<own cgroup>/nx-test-<pid>-<n>`` with that limit (cgroup v1
``memory.limit_in_bytes``, or v2 ``memory.max`` where the memory controller is delegated to the
own cgroup's children), and removes it afterwards.  The child lives under the test's own cgroup, so
the job stays inside whatever limits and accounting the machine puts the tests in.  A program is
put in it by ``in_cgroup(cmd, procs)``: a shell writes its own pid into the cgroup, then execs the
program.  Where no cgroup can be made, ``CgroupUnavailable`` says why (the tests skip with it)."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
from pathlib import Path
from typing import Iterator

from neuron_explorer.util.cgroup import CgroupMemory, cgroup_dirs, parse_mountinfo, parse_proc_cgroup


class CgroupUnavailable(Exception):
    pass


def _own_dirs() -> list[tuple[str, Path]]:
    """``(kind, directory)`` of this process's own cgroup in each hierarchy that may hold a
    memory limit, v1 first."""
    cg = parse_proc_cgroup(Path("/proc/self/cgroup").read_text())
    out = []
    for kind, root, point in parse_mountinfo(Path("/proc/self/mountinfo").read_text()):
        if kind in cg:
            dirs = cgroup_dirs(cg[kind], root, point)
            if dirs:
                out.append((kind, Path(dirs[0][0])))
    return sorted(out)


def _make(kind: str, own: Path, limit: int) -> tuple[Path, str]:
    if kind == "v2":
        ctl = own / "cgroup.subtree_control"
        if "memory" not in (ctl.read_text().split() if ctl.exists() else []):
            raise CgroupUnavailable(f"cgroup v2: the memory controller is not enabled for the children of {own} "
                                    "(cgroup.subtree_control)")
    name = "memory.max" if kind == "v2" else "memory.limit_in_bytes"
    child = own / f"nx-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        child.mkdir()
    except OSError as e:
        raise CgroupUnavailable(f"cgroup {kind}: cannot create a cgroup under {own}: {e.strerror}") from e
    try:
        (child / name).write_text(str(limit))
        got = int((child / name).read_text().split()[0])
    except (OSError, ValueError) as e:
        _remove(child)
        raise CgroupUnavailable(f"cgroup {kind}: cannot set {name} in {child}: {e}") from e
    if got != limit:  # v1 rounds down to a page
        _remove(child)
        raise CgroupUnavailable(f"cgroup {kind}: {name} set to {limit} reads {got}")
    return child, kind


def _remove(child: Path, deadline_s: float = 60.0) -> None:
    """rmdir the cgroup once its processes are gone (the kernel may take a moment after they exit)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            child.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > end:
                raise
            time.sleep(0.05)


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[tuple[Path, str]]:
    """``(cgroup.procs of a new child cgroup limited to limit bytes, "v1" | "v2")``; the cgroup is
    removed on exit.  CgroupUnavailable when none can be made here, or when the own cgroup's
    limit is too low to hold it."""
    try:
        own = _own_dirs()
    except OSError as e:
        raise CgroupUnavailable(f"cannot read this process's cgroups: {e}") from e
    if not own:
        raise CgroupUnavailable("no cgroup hierarchy with a memory controller is mounted")
    above = CgroupMemory.find().read()
    if above is not None and above.bytes < 2 * limit:
        raise CgroupUnavailable(f"the tests' own cgroup {above.cgroup} is limited to {above.bytes} bytes: "
                                f"no room for a child limited to {limit}")
    reasons = []
    for kind, d in own:
        try:
            child, kind = _make(kind, d, limit)
        except CgroupUnavailable as e:
            reasons.append(str(e))
            continue
        try:
            yield child / "cgroup.procs", kind
        finally:
            _remove(child)
        return
    raise CgroupUnavailable("; ".join(reasons))


def in_cgroup(cmd: list[str], procs: Path) -> list[str]:
    """``cmd`` run by a shell that first moves itself into the cgroup (so the program starts in it)."""
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs), *cmd]


LIMIT = 4 << 30  # what the program fills to 92%: above 10x its own ~230 MB of anonymous memory at start
STEPS = 18
PROGRAM = Path(__file__).parent / "programs" / "memory_fill.py"


def fill_capture(tmp_path_factory) -> tuple[Path, dict]:
    """The capture of ``tests/programs/memory_fill.py`` run in a child cgroup limited to ``LIMIT``
    (20 ms memory samples), made once per test run (``shared_dir``), and what the build saw:
    ``{"skip": reason}`` where no cgroup could be made, else the cgroup's kind and the program's
    output."""
    from tests.conftest import clean_env, run, shared_dir

    def build(d: Path) -> dict:
        env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(d / "capture"),
                        NEURON_EXPLORER_SAMPLE_PERIOD_MS="20", PYTHONPATH=os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, str(PROGRAM), str(LIMIT), str(STEPS)]
        try:
            with memory_cgroup(LIMIT) as (procs, kind):
                p = run(in_cgroup(cmd, procs), env, check=False)
                cg = "/" + str(procs.parent.name)
        except CgroupUnavailable as e:
            return {"skip": f"no memory cgroup can be made here: {e}"}
        if p.returncode != 0:
            raise AssertionError(f"memory_fill.py ended with {p.returncode} in a cgroup of {LIMIT} bytes "
                                 f"(-9: the kernel's OOM killer)\nstdout:\n{p.stdout}\nstderr:\n{p.stderr[-4000:]}")
        return {"kind": kind, "limit": LIMIT, "cgroup_name": cg, "stdout": p.stdout}

    d, info = shared_dir(tmp_path_factory, "cgroup_fill", build)
    return d / "capture", info
