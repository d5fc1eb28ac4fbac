"""A bounded per-core event buffer.

``append`` is a C-level ``deque.append`` (atomic under the GIL, so the completion callbacks of
collectives may record from another thread) and ``tick`` counts every other event produced, so the
number of overwritten events is known.  Executions are counted apart: ``exec_id`` hands out the
core's execution ids, and each id stands for exactly one ``EXEC_PAIR`` record, i.e. two events
(``nrt_execute`` + ``nc_exec_running``), so the execution hot path needs no ``tick`` at all.
"""

from __future__ import annotations

import itertools
from collections import deque


def _count_of(counter: itertools.count) -> int:
    """The next value of an ``itertools.count`` without advancing it."""
    return int(repr(counter)[6:-1])  # "count(N)"


class Ring:
    __slots__ = ("nc", "capacity", "_q", "append", "_counter", "tick", "exec_counter", "exec_id", "_opened",
                 "exec_open", "_closed", "exec_close")

    def __init__(self, nc: int, capacity: int) -> None:
        self.nc = nc
        self.capacity = capacity
        self._q: deque = deque(maxlen=capacity)
        self.append = self._q.append
        self._counter = itertools.count()
        self.tick = self._counter.__next__
        # Execution ids of this core.  Whoever takes an id must append exactly one EXEC_PAIR record
        # for it (also when the execution fails): produced() counts two events per id.  The common
        # wrapper takes the id when the call has returned, right before the append; a wrapper that
        # needs the id before the call (NDET, device profiles) brackets the call with exec_open()
        # and exec_close() so an execution still running is not counted as an overwritten event.
        self.exec_counter = itertools.count()  # the C wrapper advances it directly
        self.exec_id = self.exec_counter.__next__
        self._opened = itertools.count()
        self.exec_open = self._opened.__next__
        self._closed = itertools.count()
        self.exec_close = self._closed.__next__

    def executions(self) -> int:
        """Execution ids handed out so far."""
        return _count_of(self.exec_counter)

    def produced(self) -> int:
        """Events produced so far: the ticks, plus two per execution that has been recorded."""
        running = _count_of(self._opened) - _count_of(self._closed)
        return _count_of(self._counter) + 2 * (_count_of(self.exec_counter) - running)

    def drain(self) -> list[tuple]:
        """Remove and return what is buffered, oldest first; safe against concurrent appends."""
        q = self._q
        n = len(q)
        pop = q.popleft
        return [pop() for _ in range(n)]
