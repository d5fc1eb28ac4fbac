"""The extension built against the installed torch: ``_c10d_stamp.cpp`` (decision 0221).

A collective whose ``Work`` nobody waits on from Python (DDP's gradient buckets, ``async_op=True``
work) has its end taken from its future's completion.  A Python callable on the future (even the C
``Stamp`` of ``runtime/_fastpath.c``) is called by pybind with the GIL taken on the backend's
thread; the C++ callback of this extension takes no GIL.  It needs torch's headers and its pybind11
ABI, so it cannot ship in the wheel beside ``_fastpath``: ``build`` compiles it (~20 CPU-s, once)
into a cache keyed by torch's version and build and by the source's content, and ``module``
loads it from there when it matches.  Nothing is ever compiled in a profiled process: without a
matching build the collectives use the C ``Stamp`` as before.  The same library holds the
collectives' ``BackendSelect`` kernels in C++ (``install_kernels``, decision 0223).

The cache is ``$NEURON_EXPLORER_EXT_CACHE`` (``0``: never used), else
``$XDG_CACHE_HOME/neuron_explorer/ext`` or ``~/.cache/neuron_explorer/ext``.

Usage::

    python -m neuron_explorer.integrations.build_native build    # what `make setup` runs
    python -m neuron_explorer.integrations.build_native status
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import sys
import tempfile
import time
from typing import Any, Callable

from neuron_explorer.contracts.env import EXT_CACHE

__all__ = ["build", "built_path", "cache_root", "module", "stamp_work"]

NAME = "ne_c10d_stamp"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_c10d_stamp.cpp")


def cache_root() -> str | None:
    """The cache directory, or None when ``NEURON_EXPLORER_EXT_CACHE=0``."""
    v = os.environ.get(EXT_CACHE, "")
    if v == "0":
        return None
    if v:
        return v
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "neuron_explorer", "ext")


def _tag(torch) -> str:
    """The build's directory name: torch's version, and a digest of everything the binary depends
    on (the source, torch's build, the interpreter, the machine)."""
    h = hashlib.sha256()
    with open(SOURCE, "rb") as f:
        h.update(f.read())
    git = getattr(getattr(torch, "version", None), "git_version", "") or ""
    for part in (torch.__version__, git, sys.version, platform.machine(), sys.abiflags):
        h.update(b"\0" + str(part).encode())
    safe = "".join(c if c.isalnum() or c in ".-" else "_" for c in torch.__version__)
    return f"{NAME}-{safe}-{h.hexdigest()[:16]}"


def built_path(torch) -> str | None:
    """Where the build for this torch is (or would be), or None when the cache is off."""
    root = cache_root()
    return None if root is None else os.path.join(root, _tag(torch), NAME + ".so")


def module(torch) -> Any | None:
    """The extension (``stamp_work``, ``install_kernels``, ``drain``...) when a build for this
    torch is in the cache, else None.  Never builds, never raises."""
    try:
        path = built_path(torch)
        if path is None or not os.path.isfile(path):
            return None
        mod = sys.modules.get(NAME)
        if mod is not None:
            return mod
        loader = importlib.machinery.ExtensionFileLoader(NAME, path)
        spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
        if spec is None:
            return None
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        sys.modules[NAME] = mod
        return mod
    except Exception:  # noqa: BLE001 - a build that does not load here (another ABI): the C Stamp
        return None


def stamp_work(torch) -> Callable[[Any], Any] | None:
    """The extension's ``stamp_work(work) -> WorkStamp``, or None (``module``)."""
    mod = module(torch)
    return None if mod is None else getattr(mod, "stamp_work", None)


def build(torch, quiet: bool = False) -> str:
    """Compile the extension for this torch into the cache (nothing when it is there) and return
    its path.  Raises with the compiler's message when it cannot be built."""
    path = built_path(torch)
    if path is None:
        raise RuntimeError(f"{EXT_CACHE}=0: the extension cache is off")
    if os.path.isfile(path):
        return path
    from torch.utils import cpp_extension

    final = os.path.dirname(path)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    # a directory of our own, made anew (nothing of anyone else's is ever removed), renamed whole
    work = tempfile.mkdtemp(prefix=os.path.basename(final) + ".tmp-", dir=os.path.dirname(final))
    try:
        cpp_extension.load(NAME, [SOURCE], build_directory=work, extra_cflags=["-O2"], verbose=not quiet)
        try:
            os.rename(work, final)  # (whole, or not at all: a concurrent build that won is kept)
        except OSError:
            if not os.path.isfile(path):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cmd = args[0] if args else "status"
    if cmd not in ("build", "status"):
        print("usage: python -m neuron_explorer.integrations.build_native build|status", file=sys.stderr)
        return 2
    import torch

    if cmd == "status":
        path = built_path(torch)
        ok = stamp_work(torch) is not None
        print(f"torch {torch.__version__}: {path or 'cache off'}: {'loads' if ok else 'not built'}")
        return 0 if ok else 1
    t0 = time.monotonic()
    try:
        was = built_path(torch)
        present = was is not None and os.path.isfile(was)
        path = build(torch, quiet=True)
    except Exception as e:  # noqa: BLE001 - one line, and the collectives keep the C Stamp
        msg = str(e).strip().splitlines()
        print(f"neuron-explorer: the c10d completion extension was not built ({type(e).__name__}: "
              f"{msg[-1] if msg else ''}); collectives use the C stamp", file=sys.stderr)
        return 1
    if present:
        print(f"neuron-explorer: the c10d completion extension for torch {torch.__version__} is built: {path}")
    else:
        print(f"neuron-explorer: built the c10d completion extension for torch {torch.__version__} "
              f"in {time.monotonic() - t0:.0f} s: {path}")
    return 0 if stamp_work(torch) is not None else 1

