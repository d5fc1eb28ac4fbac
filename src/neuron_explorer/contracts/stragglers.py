"""Who arrived last at each collective, and by how much: the straggler rule shared by the CLI summary
and the System Trace Viewer.

Why one module: ``view --output-format summary-*`` names the slowest rank from the collectives it read
from the captures (keyed by group, op and sequence number), and the web UI names it from the Parquet
store (keyed by the collective's flow id, which ``view`` derives from the same three values). Both
must apply the same rule, or the two tools would disagree about which rank held the job back. The
rule: a collective is one key seen on at least two ranks; the rank with the latest *start* entered
last (the others waited for it); the spread is last start minus first start; the slowest rank is the
one that entered last most often (ties: the lowest rank). Ties in start time keep the input order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass
class ArrivalTable:
    """One row per collective seen on two ranks or more, in key order."""

    key: np.ndarray  # int64 collective key
    first_start: np.ndarray  # earliest start (ns)
    last_start: np.ndarray  # latest start (ns)
    first_rank: np.ndarray
    last_rank: np.ndarray  # the rank that entered last
    ranks: np.ndarray  # how many entries the key has
    first_index: np.ndarray  # position of the first / last arrival in the arrays given to ``arrivals``
    last_index: np.ndarray

    @property
    def spread(self) -> np.ndarray:
        """How long the first rank waited for the last one to enter (ns)."""
        return self.last_start - self.first_start

    def __len__(self) -> int:
        return len(self.key)


def arrivals(keys: np.ndarray, start: np.ndarray, ranks: np.ndarray) -> ArrivalTable:
    """The arrival table of collectives given one entry per (rank, collective): key, start, rank."""
    keys = np.asarray(keys, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    ranks = np.asarray(ranks, dtype=np.int64)
    if not len(keys):
        z = np.zeros(0, dtype=np.int64)
        return ArrivalTable(z, z, z, z, z, z, z, z)
    order = np.lexsort((start, keys))
    keys, start, ranks = keys[order], start[order], ranks[order]
    bounds = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    sizes = np.diff(np.r_[bounds, len(keys)])
    multi = sizes >= 2
    first = bounds[multi]
    last = (bounds + sizes - 1)[multi]
    return ArrivalTable(keys[first], start[first], start[last], ranks[first], ranks[last], sizes[multi],
                        order[first], order[last])


def summarize(table: ArrivalTable, describe: Callable[[int], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The straggler summary the CLI prints: collectives compared, last-to-enter counts per rank, the
    slowest rank, median and largest spread, and the worst collective (``describe(key)`` names it)."""
    if not len(table):
        return {"collectives_compared": 0, "last_to_enter": {}, "slowest_rank": None, "spread_ns_median": None,
                "spread_ns_max": None, "worst": None}
    spread = table.spread
    ur, cnt = np.unique(table.last_rank, return_counts=True)
    counts = {int(r): int(c) for r, c in zip(ur, cnt)}
    w = int(np.argmax(spread))
    worst = dict(describe(int(table.key[w])) if describe else {"key": int(table.key[w])})
    worst.update(last_rank=int(table.last_rank[w]), spread_ns=int(spread[w]))
    return {
        "collectives_compared": len(table),
        "last_to_enter": {str(r): c for r, c in sorted(counts.items())},
        "slowest_rank": max(counts, key=lambda r: (counts[r], -r)),
        "spread_ns_median": float(np.median(spread)),
        "spread_ns_max": int(spread.max()),
        "worst": worst,
    }
