"""Our frames out of the tracebacks of the program's exceptions.

A module's ``forward``, a backward hook or an optimizer step that raises must give the program
the traceback it gives without us (PyTorch's dispatch is C++, so torch adds no frames of its
own there).  Our hooks that run Python frames around the user's code end in
``except BaseException as e: hide_our_frames(e); raise``: the bare ``raise`` re-raises without a
new entry for the hook's frame, and ``hide_our_frames`` has unlinked the entries of our frames
from the traceback.  Zero-cost ``try`` blocks (Python 3.11) keep the calls that do not raise
as they were.  Entries of ours *below* the last foreign frame are kept: an exception raised by
our own code keeps the frames that show where.

Our dispatch modes (the first call's flop counter, the device profiler's op recorder) sit
between the program's line and an ATen op that raises (a shape mismatch): torch calls their
handler through its ``_disable_dynamo`` wrappers (``torch/_compile.py``,
``torch/_dynamo/eval_frame.py``), and the handler calls the op again through
``OpOverload.__call__``.  The handler drops the frames below it (``hide_redispatch``), and
``hide_our_frames`` drops the handler's entry with the wrappers' entries right above it, so the
traceback ends in the program's own line, as without us.
"""

from __future__ import annotations

import os
import sys
from types import CodeType

__all__ = ["dispatch_handler", "hide_our_frames", "hide_redispatch"]

# the package's directory, with a trailing separator: a code object's file below it is ours
_OURS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_HANDLERS: set[CodeType] = set()  # the code of our dispatch modes' handlers
_WRAPPERS = ("_compile.py", os.path.join("_dynamo", "eval_frame.py"))  # torch's, around a handler


def dispatch_handler(fn):
    """Mark ``fn`` (a ``__torch_dispatch__`` of ours) as a dispatch handler; returns it."""
    _HANDLERS.add(fn.__code__)
    return fn


def _ours(tb) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(_OURS)


def _torch_dir() -> str | None:
    torch = sys.modules.get("torch")
    f = getattr(torch, "__file__", None)
    return os.path.dirname(os.path.abspath(f)) + os.sep if f else None


def _entries(exc: BaseException) -> list:
    tb, entries = exc.__traceback__, []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    return entries


def _relink(exc: BaseException, entries: list, keep: list) -> None:
    if len(keep) == len(entries):
        return
    for a, b in zip(keep, keep[1:]):
        a.tb_next = b
    if keep:
        keep[-1].tb_next = None
    exc.__traceback__ = keep[0] if keep else None


def hide_redispatch(exc: BaseException) -> None:
    """In a dispatch handler of ours: unlink the entries of torch's frames right below its own
    (the op called again from Python), up to a frame not in torch (an op with a Python kernel
    keeps that kernel's frames).  Never raises."""
    try:
        tdir = _torch_dir()
        entries = _entries(exc)
        if not tdir or not entries or entries[0].tb_frame.f_code not in _HANDLERS:
            return
        i = 1
        while i < len(entries) and entries[i].tb_frame.f_code.co_filename.startswith(tdir):
            i += 1
        _relink(exc, entries, entries[:1] + entries[i:])
    except Exception:  # noqa: BLE001 - never turn the program's exception into ours
        pass


def hide_our_frames(exc: BaseException) -> None:
    """Unlink our frames' entries from ``exc``'s traceback (those above a frame not of ours, and
    our dispatch handlers' with torch's wrappers around them).  Never raises: a traceback it
    cannot change is left as it is."""
    try:
        entries = _entries(exc)
        drop = set()
        if _HANDLERS:
            tdir = _torch_dir()
            wrappers = tuple(tdir + w for w in _WRAPPERS) if tdir else ()
            for i, t in enumerate(entries):
                if t.tb_frame.f_code in _HANDLERS:
                    drop.add(i)
                    j = i - 1
                    while j >= 0 and entries[j].tb_frame.f_code.co_filename in wrappers:
                        drop.add(j)
                        j -= 1
        last_foreign = max((i for i, t in enumerate(entries) if i not in drop and not _ours(t)), default=-1)
        _relink(exc, entries, [t for i, t in enumerate(entries)
                               if i not in drop and (i > last_foreign or not _ours(t))])
    except Exception:  # noqa: BLE001 - never turn the program's exception into ours
        pass
