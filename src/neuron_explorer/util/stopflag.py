"""A stop flag that a signal handler may set (docs/decisions/0224-a-stop-flag-for-signal-handlers.md).

``threading.Event.set()`` takes the event's lock.  CPython runs a Python signal handler in the main
thread between two bytecodes, and when the main thread is itself inside ``Event.wait()`` holding
that lock (entering or leaving the wait), the handler waits for a lock its own thread holds:
the process hangs for good.  ``neuron-monitor`` did (CI, stop 60: SIGTERM after three reports,
still running 10 s later).

Here ``set()`` takes no lock: it sets a boolean and writes one byte to a pipe, and ``wait()``
polls the pipe's read end.  A signal that interrupts the poll runs the handler, whose byte makes
the resumed poll (PEP 475) return at once; a handler that runs just before the poll leaves its
byte for the poll to find.
"""

from __future__ import annotations

import os
import select


class StopFlag:
    """``is_set``/``set``/``wait`` like ``threading.Event``, one-shot (never cleared), and safe to
    set from a signal handler or any thread."""

    def __init__(self) -> None:
        self._set = False
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)  # a full pipe (many signals) must not block the handler
        self._poll = select.poll()
        self._poll.register(self._r, select.POLLIN)

    def set(self) -> None:
        self._set = True
        w = self._w
        if w < 0:
            return
        try:
            os.write(w, b"\0")
        except OSError:  # full: a byte is already waiting
            pass

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until set or ``timeout`` seconds passed; True when set."""
        if not self._set and self._r >= 0:
            self._poll.poll(None if timeout is None else max(0, int(timeout * 1000 + 0.999)))
        return self._set

    def close(self) -> None:
        """Close the pipe (a later ``set`` only sets the flag: it never writes to a reused fd)."""
        fds, self._r, self._w = (self._r, self._w), -1, -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)
