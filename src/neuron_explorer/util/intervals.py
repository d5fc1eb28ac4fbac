"""Busy time: the length of the union of time intervals.

One definition serves every tool that reports how busy a core was (``view``'s summaries, device
profiles, neuron-monitor's utilization): overlapping executions count once, so the figures agree
and never exceed the wall time.
"""

from __future__ import annotations

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the ``[start, end)`` intervals as sorted, disjoint runs ``(run_starts, run_ends)``
    (a reversed interval is empty)."""
    if len(starts) == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    s, _e, reach, first, last = overlap_runs(np.asarray(starts), np.asarray(ends))
    return s[first], reach[last]


def overlap_runs(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
    """Non-empty ``[start, end)`` intervals in start order (stable; sorted input is not sorted
    again), reversed ones made empty, cut into runs of overlapping ones: (starts, ends, the
    furthest end so far, each run's first index, each run's last index).  ``merge`` keeps each
    run's first start and last furthest end; a caller may want more of each run."""
    s, e = starts, ends
    if not (s[1:] >= s[:-1]).all():  # (events come in time order: usually no sort)
        o = np.argsort(s, kind="stable")
        s, e = s[o], e[o]
    e = np.maximum(e, s)
    reach = np.maximum.accumulate(e)
    # a new run begins where a start lies beyond every earlier end
    head = np.empty(len(s), dtype=bool)
    head[0] = True
    head[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(head)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s, e, reach, first, last


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of the ``[start, end)`` intervals."""
    rs, re_ = merge(starts, ends)
    return int((re_ - rs).sum())
