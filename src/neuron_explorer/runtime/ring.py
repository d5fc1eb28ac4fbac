"""A bounded per-core event buffer.

``append`` is a C-level ``deque.append`` (atomic under the GIL, so the completion callbacks of
collectives may record from another thread) and ``tick`` counts every record ever produced, so the
number of overwritten events is known exactly.
"""

from __future__ import annotations

import itertools
from collections import deque


class Ring:
    __slots__ = ("nc", "capacity", "_q", "append", "_counter", "tick", "_drained")

    def __init__(self, nc: int, capacity: int) -> None:
        self.nc = nc
        self.capacity = capacity
        self._q: deque = deque(maxlen=capacity)
        self.append = self._q.append
        self._counter = itertools.count()
        self.tick = self._counter.__next__
        self._drained = 0

    def produced(self) -> int:
        """Records produced so far (reads the counter without advancing it)."""
        return int(repr(self._counter)[6:-1])  # "count(N)"

    def drain(self) -> list[tuple]:
        """Remove and return what is buffered, oldest first; safe against concurrent appends."""
        q = self._q
        n = len(q)
        pop = q.popleft
        out = [pop() for _ in range(n)]
        self._drained += n
        return out

    def lost_in_ring(self) -> int:
        """Records overwritten before any drain saw them."""
        return max(0, self.produced() - self._drained - len(self._q))
