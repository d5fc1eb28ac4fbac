"""Busy time: the length of the union of time intervals.

One definition serves every tool that reports how busy a core was (``view``'s summaries, device
profiles, neuron-monitor's utilization): overlapping executions count once, so the figures agree
and never exceed the wall time.
"""

from __future__ import annotations

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the ``[start, end)`` intervals as sorted, disjoint runs ``(run_starts, run_ends)``."""
    if len(starts) == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts)[order]
    run_end = np.maximum.accumulate(np.asarray(ends)[order])
    # a new run begins where a start lies beyond every earlier end
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.append(run_end[idx[1:] - 1], run_end[-1])


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of the ``[start, end)`` intervals."""
    rs, re_ = merge(starts, ends)
    return int((re_ - rs).sum())
