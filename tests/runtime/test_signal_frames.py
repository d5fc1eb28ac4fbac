"""Where a signal handler may park the main thread: not inside the import system or ``logging``,
whose locks a final write may need (docs/decisions/0219-signal-inside-an-import.md)."""

from __future__ import annotations

import importlib
import logging
import sys

from neuron_explorer.runtime.signals import holds_shared_locks


def test_plain_code_holds_no_shared_lock() -> None:
    assert not holds_shared_locks(sys._getframe())
    assert not holds_shared_locks(None)


def test_a_finder_runs_inside_the_import_system() -> None:
    seen = []

    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name == "no_such_module_for_this_test":
                seen.append(holds_shared_locks(sys._getframe()))
            return None

    sys.meta_path.insert(0, Finder())
    try:
        try:
            importlib.import_module("no_such_module_for_this_test")
        except ImportError:
            pass
    finally:
        sys.meta_path.pop(0)
    assert seen == [True]


def test_a_log_handler_runs_inside_logging() -> None:
    seen = []

    class Handler(logging.Handler):
        def emit(self, record):
            seen.append(holds_shared_locks(sys._getframe()))

    log = logging.getLogger("test_signal_frames")
    h = Handler()
    log.addHandler(h)
    try:
        log.warning("a record")
    finally:
        log.removeHandler(h)
    assert seen == [True]
