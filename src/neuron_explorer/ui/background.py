"""The UI's background work (profile preparations, index builds): started here, so the server can
wait for it at shutdown.

Why: the work runs in daemon threads, often inside DuckDB's C++ code. An interpreter that finalises
while such a thread is there unwinds it with a forced exception that DuckDB swallows, and the
process aborts ("terminate called ... exception not rethrown"). ``serve`` gives the work a moment
to end, then leaves without finalising when some is still running (docs/decisions/0061).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

_running: dict[threading.Thread, str] = {}  # thread -> what it does, in words
_lock = threading.Lock()


def start(target: Callable[..., Any], *args: Any, name: str, what: str) -> threading.Thread:
    """Run ``target(*args)`` in a daemon thread named ``name``; ``what`` says what it does."""
    def run() -> None:
        try:
            target(*args)
        finally:
            with _lock:
                _running.pop(threading.current_thread(), None)

    t = threading.Thread(target=run, daemon=True, name=name)
    with _lock:
        _running[t] = what
    t.start()
    return t


def wait(timeout: float) -> list[str]:
    """Wait up to ``timeout`` seconds for the background work; returns what is still running."""
    end = time.monotonic() + timeout
    while True:
        with _lock:
            left = list(_running.items())
        if not left:
            return []
        remaining = end - time.monotonic()
        if remaining <= 0:
            return sorted({what for _, what in left})
        left[0][0].join(min(remaining, 0.1))
