"""Sets of integers written as ranges (core indices, ranks)."""

from __future__ import annotations

import bisect
import operator
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class IndexRanges:
    """A set of non-negative integers (core indices, ranks) kept as sorted, merged inclusive ranges.

    Filters are written as ranges (``0-3,8``), and a range may be as wide as the user types:
    ``0-99999999999`` costs two integers here, where a set of its members would exhaust memory at
    start-up.  Membership is a binary search; there is deliberately no ``__iter__`` (``sorted(r)``
    or ``set(r)`` on a wide range must fail, not allocate), and ``members`` lists the values only
    when there are at most ``limit`` of them.
    """

    ranges: tuple[tuple[int, int], ...]  # (lo, hi) inclusive, sorted, disjoint, not adjacent

    @classmethod
    def of(cls, pairs: Iterable[tuple[int, int]]) -> IndexRanges:
        """Merge ``(lo, hi)`` inclusive pairs (any order, overlapping or adjacent) into one set."""
        merged: list[list[int]] = []
        for lo, hi in sorted(pairs):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return cls(tuple((lo, hi) for lo, hi in merged))

    @classmethod
    def parse(cls, value: str) -> "IndexRanges":
        """``0``, ``0,2,4``, ``0-3`` or mixes such as ``0,1,2-5``; raises ValueError naming the bad part."""
        pairs = []
        for part in value.split(","):
            p = part.strip()
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", p)
            if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
                raise ValueError(p)
            lo = int(m.group(1))
            pairs.append((lo, int(m.group(2)) if m.group(2) is not None else lo))
        return cls.of(pairs)

    def __contains__(self, x: Any) -> bool:  # (anything: what is not an integer is not in the set)
        try:
            x = operator.index(x)  # int, bool or a numpy integer
        except TypeError:
            return False
        i = bisect.bisect_right(self.ranges, (x, float("inf"))) - 1
        return i >= 0 and self.ranges[i][0] <= x <= self.ranges[i][1]

    @property
    def size(self) -> int:
        """How many integers the set holds (a Python int: it may exceed any machine integer)."""
        return sum(hi - lo + 1 for lo, hi in self.ranges)

    def members(self, limit: int = 1 << 16) -> list[int]:
        """The values in ascending order; ValueError when there are more than ``limit``."""
        if self.size > limit:
            raise ValueError(f"{self} holds {self.size} values, more than {limit}")
        return [i for lo, hi in self.ranges for i in range(lo, hi + 1)]

    def mask(self, values: np.ndarray) -> np.ndarray:
        """Element-wise membership of an integer numpy array, one comparison pair per range."""
        import numpy as np  # not at module level: the runtime parses its configuration without numpy

        keep = np.zeros(len(values), dtype=bool)
        info = np.iinfo(values.dtype) if values.dtype.kind in "iu" else None
        for lo, hi in self.ranges:
            if info is not None and (lo > info.max or hi < info.min):
                continue  # no value of this dtype can fall in the range (and lo/hi would not convert)
            if info is not None:
                lo, hi = max(lo, int(info.min)), min(hi, int(info.max))
            keep |= (values >= lo) & (values <= hi)
        return keep

    def __str__(self) -> str:
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)


def distinct(a: np.ndarray) -> np.ndarray:
    """``numpy.unique(a)`` of integers (or floats without NaN: ``numpy.unique`` keeps one NaN, this
    every one) as a 1-D array (sorted distinct values, same dtype), without its first call's
    import of ``numpy.ma`` (~7 ms CPU of a profiled process's final write, for a masked-array check that a
    plain array never needs)."""
    import numpy as np

    s = np.sort(np.asarray(a).ravel())
    if len(s) < 2:
        return s
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]
