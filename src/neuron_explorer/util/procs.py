"""Facts about the current process read from its real command line: is it a launcher (torchrun's
agent), a framework helper (multiprocessing's resource tracker, Inductor's compile workers), or a
child that ``multiprocessing`` spawned (a pool worker).

At ``.pth`` time ``sys.argv`` is just ``['-m']`` while a module is being imported, so the command
line comes from ``sys.orig_argv`` (or ``/proc/self/cmdline``).
"""

from __future__ import annotations

import os
import sys

LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")


def command_line() -> list[str]:
    """The interpreter's real argument list."""
    orig = getattr(sys, "orig_argv", None)
    if orig:
        return list(orig)
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return list(sys.argv)


def is_launcher(argv: list[str] | None = None) -> bool:
    """True in torchrun's agent (``torchrun ...`` or ``python -m torch.distributed.run ...``): it has
    the capture variables too but runs no workload, so it must leave no profile and no log."""
    argv = command_line() if argv is None else argv
    for i, a in enumerate(argv[:4]):
        if os.path.basename(a) == "torchrun" or (a == "-m" and i + 1 < len(argv) and argv[i + 1] in LAUNCHERS):
            return True
    return False


# Processes a framework starts for its own book-keeping.  They inherit the environment, so the
# capture variables turn the runtime on in them too, but they never run the user's graphs: a
# profile of one is empty noise beside the real ones (docs/decisions/0008-forked-children.md).
_HELPER_CODE = (  # python -c CODE
    "from multiprocessing.resource_tracker import",
    "from multiprocessing.forkserver import",
    "from multiprocessing.semaphore_tracker import",
)
_HELPER_SCRIPTS = ("torch/_inductor/compile_worker/__main__.py",)  # python SCRIPT
_HELPER_MODULES = ("torch._inductor.compile_worker",)  # python -m MODULE


# Inductor checks each CPU vector ISA it may compile for by loading a test library in a fresh
# ``python -c`` (six of them when a process first compiles): the code is only these lines, with
# ``import torch`` where the platform (or an older torch) needs it.
ISA_PROBE = "torch._inductor.cpu_vec_isa"
_PROBE_PREAMBLE = frozenset({"import sys", 'if sys.platform != "linux":', "import torch", "import torch  # noqa: F401"})


def _isa_probe(code: str) -> bool:
    lines = [ln.strip() for ln in code.splitlines() if ln.strip()]
    return (len(lines) >= 2 and lines[-2] == "from ctypes import cdll" and lines[-1].startswith("cdll.LoadLibrary(")
            and all(ln in _PROBE_PREAMBLE for ln in lines[:-2]))


def framework_helper(argv: list[str] | None = None) -> str | None:
    """What known framework helper this process is (from its real command line), or None:
    multiprocessing's resource tracker and fork server, Inductor's compile workers and its ISA
    probes."""
    if argv is None:
        argv = command_line()
    args = argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if a == "-c":
            code = nxt.lstrip()
            if _isa_probe(code):
                return ISA_PROBE
            return next((c.split()[1] for c in _HELPER_CODE if code.startswith(c)), None)
        if a == "-m":
            return nxt if nxt in _HELPER_MODULES else None
        if a in ("-W", "-X"):
            i += 2  # an interpreter option with its argument
            continue
        if a.startswith("-"):
            i += 1  # an interpreter option (-u, -B, -s, -E, -Wdefault...): the command follows
            continue
        norm = a.replace(os.sep, "/")
        return next((s for s in _HELPER_SCRIPTS if norm.endswith(s)), None)
    return None


_SPAWN_CODE = "from multiprocessing.spawn import spawn_main"


def multiprocessing_child(argv: list[str] | None = None) -> bool:
    """True in a process that ``multiprocessing`` (or ``torch.multiprocessing``) started with the
    ``spawn`` method: ``python -c "from multiprocessing.spawn import spawn_main; ..." --multiprocessing-fork``.
    Known from the first line of start-up, before ``multiprocessing.parent_process()`` is set.  Such
    a process inherits its parent's environment, ``RANK`` included: that rank is the parent's."""
    if argv is None:
        argv = command_line()
    if "--multiprocessing-fork" not in argv[1:]:
        return False
    for i, a in enumerate(argv[1:-1], start=1):
        if a == "-c":
            return argv[i + 1].lstrip().startswith(_SPAWN_CODE)
    return False
