"""Ending a profiled process on SIGTERM/SIGHUP exactly as the default disposition would, after a
bounded final write (docs/decisions/0007-signal-exit.md).

A Python-level handler alone is not enough: CPython runs it in the main thread between bytecodes,
so a rank blocked in C (a gloo ``all_reduce`` waiting for a peer that never comes) would never run
it and never die; under torchrun the launcher then waits 30 s and SIGKILLs it, losing the final
write too.  So a signal also wakes a watcher thread at once:

* with the C extension, ``_fastpath.forward_signal`` puts a C handler in front of Python's own: it
  writes the signal number to a pipe the watcher reads, then chains to Python's handler;
* without it (or with ``NEURON_EXPLORER_PURE_PYTHON=1``), the pipe is ``signal.set_wakeup_fd``,
  which Python's own C handler writes (when nobody else holds the wakeup fd; otherwise only the
  Python handler runs, as before).

The watcher runs the final write in a separate thread, waits for it at most ``timeout_s``, then
puts back the default disposition and raises the signal again, so the parent sees the process
killed by that signal.  The main thread, if it reaches our Python handler meanwhile, waits there
instead of running more of the program, unless the signal caught it inside a write itself (an
exception's final write: a rank whose peer died fails its collective just as its launcher's SIGTERM
comes); then it finishes that write, which the watcher's waits for.  A second signal during the
write only finds the write already under way (torchrun forwards a group SIGTERM within milliseconds).

Nor does the main thread wait where the signal caught it inside the import system or ``logging``:
their locks are held there, and a write that needed one would wait for the parked thread until the
bound.  (A pool's worker, ended by SIGTERM while its ``atexit`` hooks imported a module, lost its
final counts so.)  The main thread then runs on until the watcher ends the process, and waits at
its exit (:meth:`SignalExit.hold_if_ending`) should it get there first.  The write itself imports
nothing (docs/decisions/0219-signal-inside-an-import.md).

A program's own handler keeps its exact semantics: installed before us, ours calls it and does
nothing else (the program decides whether and how to end); installed after us, it replaces ours
(``signal.signal`` also replaces the C handler) and the watcher ignores the wake-up.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType, ModuleType
from typing import Any, Callable

from neuron_explorer.util.log import get_logger

_fp: ModuleType | None  # runtime/_fastpath.pyi: forward_signal, stop_forwarding, die_by_signal
try:
    from . import _fastpath as _fp
except ImportError:  # pragma: no cover - a build without a C compiler
    _fp = None
if os.environ.get("NEURON_EXPLORER_PURE_PYTHON", "0") not in ("", "0"):
    _fp = None

TIMEOUT_VAR = "NEURON_EXPLORER_FINAL_WRITE_TIMEOUT_MS"
DEFAULT_TIMEOUT_MS = 5000
# handled signals: the ones whose default disposition ends the process and that a launcher or a
# scheduler sends to ask a job to stop
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_OURS = 0x80  # a wake-up byte with this bit comes from our own Python handler: no check needed


def holds_shared_locks(frame: FrameType | None) -> bool:
    """Is the thread interrupted at ``frame`` inside the import system (frozen, or from source) or
    ``logging``, at any depth?  It may hold a lock there that a final write needs: the write logs on
    trouble, and a library it calls may import lazily."""
    while frame is not None:
        name = frame.f_code.co_filename.replace(os.sep, "/")
        if "importlib._bootstrap" in name or "importlib/_bootstrap" in name or name.endswith("/logging/__init__.py"):
            return True
        frame = frame.f_back
    return False


def _die_by_signal(sig: int) -> None:
    """End the process as ``sig``'s default disposition would (the parent sees it killed by ``sig``)."""
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - nothing may stop the process from ending
        pass
    if _fp is not None:
        _fp.die_by_signal(sig)
    else:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.signal.restype = ctypes.c_void_p
            libc.signal(ctypes.c_int(sig), ctypes.c_void_p(0))  # SIG_DFL, from any thread
        except Exception:  # noqa: BLE001
            if threading.current_thread() is threading.main_thread():
                signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        signal.pthread_kill(threading.get_ident(), sig)
    # only reached if the default action does not end the process (not one of SIGNALS): as a last
    # resort end with the shell's convention for "killed by a signal"
    time.sleep(1.0)
    os._exit(128 + sig)


class SignalExit:
    """The signal handling of one process: ``install()`` once from the main thread."""

    def __init__(self, final_write: Callable[[str], None], on_signal: Callable[[], None], timeout_s: float,
                 writing_here: Callable[[], bool] | None = None) -> None:
        """``final_write(reason)``: the last write; ``on_signal()``: note that the workload got a
        terminating signal (before the program's own handler or the final write);
        ``writing_here()``: does the calling thread hold what the final write needs (it is inside
        a write itself)?"""
        self.final_write = final_write
        self.writing_here = writing_here
        self.on_signal = on_signal
        self.timeout_s = timeout_s
        # signal -> the Python-level handler we found
        self.prev: dict[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}
        self.handlers: dict[int, Callable] = {}  # signal -> our handler
        self.mode = "none"  # "c", "wakeup_fd" or "none": what wakes the watcher
        self._r = self._w = -1
        self._lock = threading.Lock()
        self._ending = 0  # the signal whose end (the final write, then the end) is under way
        self._parked = False  # the main thread waits in our handler
        self._thread: threading.Thread | None = None

    # -- set-up --------------------------------------------------------------------------------
    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal.signal works only there; a runtime started elsewhere flushes at exit
        for sig in SIGNALS:
            prev = signal.getsignal(sig)
            if prev is None or prev is signal.SIG_IGN:
                continue  # installed outside Python, or ignored: not ours to change
            if sig == signal.SIGINT and prev is signal.default_int_handler:
                continue  # Python raises KeyboardInterrupt; the program may handle it; atexit flushes
            self.prev[sig] = prev
            self.handlers[sig] = self._make_handler(sig)
            signal.signal(sig, self.handlers[sig])
        if not self.handlers:
            return
        if _fp is None:
            import ctypes  # noqa: F401 - loaded now: the end (_die_by_signal) may import nothing
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(self._r, True)
        if _fp is not None:
            for num in self.handlers:
                _fp.forward_signal(num, self._w)
            self.mode = "c"
        else:
            try:
                old = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
            except ValueError:
                old = -2
            if old == -1:
                self.mode = "wakeup_fd"
            elif old >= 0:
                signal.set_wakeup_fd(old)  # someone else's (an event loop): leave it theirs
        self._thread = threading.Thread(target=self._watch, name="neuron-explorer-signals", daemon=True)
        self._thread.start()

    def reset_in_child(self) -> None:
        """In a forked child: the handlers, pipe and watcher belong to the parent.  Put back the
        signal dispositions the program had, so the child behaves as it would unprofiled."""
        if _fp is not None:
            _fp.stop_forwarding()
        if self.mode == "wakeup_fd":
            try:
                old = signal.set_wakeup_fd(-1)
                if old not in (-1, self._w):
                    signal.set_wakeup_fd(old)  # someone else's since (an event loop): keep it
            except ValueError:
                pass
        for sig, h in self.handlers.items():
            try:
                if signal.getsignal(sig) is h:
                    signal.signal(sig, self.prev[sig])
            except (ValueError, OSError):
                pass
        for fd in (self._r, self._w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._r = self._w = -1
        self.handlers.clear()
        self.mode = "none"
        self._thread = None
        self._ending, self._parked = 0, False  # (the parent's end, if one was under way, is not ours)

    # -- the Python-level handler (main thread) ------------------------------------------------
    def _make_handler(self, sig: int):
        prev = self.prev[sig]

        def handler(signum, frame):
            if callable(prev):
                # the program's own handler decides what the signal means; we only take note
                self.on_signal()
                return prev(signum, frame)
            self._main_thread_default(signum, frame)

        handler.__qualname__ = "neuron_explorer_signal_handler"
        return handler

    def _main_thread_default(self, sig: int, frame: FrameType | None = None) -> None:
        if self._parked:
            return  # a second signal while we wait below: the first one's end is under way
        if self._thread is None or not self._thread.is_alive():
            self._terminate(sig)  # no watcher (cannot happen normally): do it here
            return
        try:
            os.write(self._w, bytes([sig | _OURS]))  # the watcher may not have been woken (wakeup fd taken)
        except OSError:
            pass
        if self.writing_here is not None and self.writing_here():
            # the signal came in the middle of a write on this thread (an exception's final write,
            # a periodic flush): parking here would hold up the watcher's write until its bound.
            # Finish it; the watcher ends the process as soon as its own write is through.
            return
        if holds_shared_locks(frame):
            return  # run on to the end of the import (or the log call); the watcher ends the process
        self._park(sig)

    def _park(self, sig: int) -> None:
        """The program must not go on running while the final write is done; the watcher ends the
        process.  Should it not (it died), end it here after the same bound."""
        self._parked = True
        threading.Event().wait(self.timeout_s + 2.0)
        _die_by_signal(sig)

    def hold_if_ending(self) -> None:
        """Called where the program ends (its ``atexit`` hooks, an uncaught exception): if a
        signal's end is under way, wait here for it on the main thread, rather than let the
        interpreter finalize and cut the final write (a daemon thread) short."""
        sig = self._ending
        if sig and not self._parked and threading.current_thread() is threading.main_thread():
            self._park(sig)

    # -- the watcher ---------------------------------------------------------------------------
    def _watch(self) -> None:
        while True:
            try:
                data = os.read(self._r, 64)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data:
                return
            for b in data:
                sig, ours = b & ~_OURS, bool(b & _OURS)
                if ours or self._is_default(sig):
                    self._terminate(sig)

    def _is_default(self, sig: int) -> bool:
        """Is ``sig`` still handled by us, on behalf of the default disposition?"""
        h = self.handlers.get(sig)
        return h is not None and signal.getsignal(sig) is h and not callable(self.prev.get(sig))

    def _terminate(self, sig: int) -> None:
        """The final write, bounded, then the end by ``sig``; runs once, later calls return."""
        with self._lock:
            if self._ending:
                return
            self._ending = sig
        name = signal.Signals(sig).name
        try:
            self.on_signal()
        except Exception:  # noqa: BLE001
            pass
        writer = threading.Thread(target=self._write, args=(f"signal:{name}",),
                                  name="neuron-explorer-final-write", daemon=True)
        writer.start()
        writer.join(self.timeout_s)
        if writer.is_alive():
            get_logger(__name__).error("neuron-explorer: profile incomplete: the final write did not finish within "
                                       f"{self.timeout_s:g} s of {name} ({TIMEOUT_VAR}); the files on disk are from "
                                       "the last complete write")
        _die_by_signal(sig)

    def _write(self, reason: str) -> None:
        try:
            self.final_write(reason)
        except Exception as e:  # noqa: BLE001 - the process must still end
            get_logger(__name__).warning(f"neuron-explorer: warning: final write failed: {e}")
