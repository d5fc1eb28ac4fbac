"""A bounded per-core event buffer.

``append`` is a C-level ``deque.append`` (atomic under the GIL, so the completion callbacks of
collectives may record from another thread) and ``tick`` counts every event ever produced (an execution
record, which stands for two events, ticks twice), so the number of overwritten events is known.
"""

from __future__ import annotations

import itertools
from collections import deque


class Ring:
    __slots__ = ("nc", "capacity", "_q", "append", "_counter", "tick")

    def __init__(self, nc: int, capacity: int) -> None:
        self.nc = nc
        self.capacity = capacity
        self._q: deque = deque(maxlen=capacity)
        self.append = self._q.append
        self._counter = itertools.count()
        self.tick = self._counter.__next__

    def produced(self) -> int:
        """Records produced so far (reads the counter without advancing it)."""
        return int(repr(self._counter)[6:-1])  # "count(N)"

    def drain(self) -> list[tuple]:
        """Remove and return what is buffered, oldest first; safe against concurrent appends."""
        q = self._q
        n = len(q)
        pop = q.popleft
        return [pop() for _ in range(n)]
