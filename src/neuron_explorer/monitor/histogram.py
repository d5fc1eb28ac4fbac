"""Fixed log-spaced latency histograms shared by applications and the monitor.

Applications only ever increment a bucket counter (one ``log10`` and a list
increment per execution), so recording stays cheap on the hot path.  Because
every process uses the *same* bucket layout, the monitor can subtract two
cumulative snapshots and obtain the exact histogram of the executions that
finished inside its own period, then estimate percentiles from it.  The
bucket width bounds the estimation error: with ``BUCKETS_PER_DECADE = 40``
adjacent edges differ by about 5.9 %, and interpolation inside a bucket keeps
typical errors well below that.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

#: Smallest latency that gets its own bucket (1 microsecond, in nanoseconds).
MIN_NS: float = 1_000.0
#: Number of buckets per factor of ten.
BUCKETS_PER_DECADE: int = 40
#: Decades covered above MIN_NS: 1 us .. 1000 s.
DECADES: int = 9
#: Bucket 0 collects everything below MIN_NS; the last bucket everything above the top edge.
NUM_BUCKETS: int = BUCKETS_PER_DECADE * DECADES + 2

#: The percentiles neuron-monitor reports, as (JSON key, fraction).
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p0", 0.0),
    ("p1", 0.01),
    ("p25", 0.25),
    ("p50", 0.50),
    ("p75", 0.75),
    ("p99", 0.99),
    ("p100", 1.0),
)

_LOG_MIN = math.log10(MIN_NS)


def bucket_index(value_ns: float) -> int:
    """Return the bucket a latency (in ns) falls into; cheap enough for every execution."""
    if value_ns < MIN_NS:
        return 0
    idx = int((math.log10(value_ns) - _LOG_MIN) * BUCKETS_PER_DECADE) + 1
    return idx if idx < NUM_BUCKETS - 1 else NUM_BUCKETS - 1


def bucket_bounds(index: int) -> tuple[float, float]:
    """Lower and upper edge (ns) of a bucket; the open-ended ones are clamped to a finite edge."""
    if index <= 0:
        return 0.0, MIN_NS
    lo = MIN_NS * 10 ** ((index - 1) / BUCKETS_PER_DECADE)
    if index >= NUM_BUCKETS - 1:
        return lo, lo
    hi = MIN_NS * 10 ** (index / BUCKETS_PER_DECADE)
    return lo, hi


def to_sparse(counts: list[int]) -> dict[str, int]:
    """Encode a dense bucket list as ``{index: count}`` with zero buckets left out (small snapshots)."""
    return {str(i): c for i, c in enumerate(counts) if c}


def delta(new: Mapping[str, int], old: Mapping[str, int] | None) -> dict[int, int]:
    """Bucket-wise difference of two sparse cumulative histograms (``old`` may be None = all zero)."""
    out: dict[int, int] = {}
    for key, count in new.items():
        prev = old.get(key, 0) if old else 0
        d = count - prev
        if d > 0:
            out[int(key)] = d
    return out


def percentiles_seconds(
    counts: Mapping[int, int],
    min_ns: float | None = None,
    max_ns: float | None = None,
) -> dict[str, float] | None:
    """Estimate p0..p100 in seconds from a (sparse) bucket histogram, or None when it is empty.

    Inside a bucket the rank is interpolated geometrically, which matches the
    log spacing.  ``min_ns``/``max_ns``, when known to lie in the period, clamp
    the extreme estimates so that p0/p100 never fall outside what was observed.
    """
    items: list[tuple[int, int]] = sorted((i, c) for i, c in counts.items() if c > 0)
    total = sum(c for _, c in items)
    if total == 0:
        return None
    out: dict[str, float] = {}
    # one walk over the buckets serves all percentiles (their ranks are increasing)
    wanted = [(key, q * (total - 1)) for key, q in PERCENTILES]
    w = 0
    seen = 0
    for idx, count in items:
        while w < len(wanted) and wanted[w][1] < seen + count:
            key, rank = wanted[w]
            lo, hi = bucket_bounds(idx)
            # position of the sample inside its bucket, centred on each sample's slot
            frac = (rank - seen + 0.5) / count
            if lo <= 0.0:
                value = hi * frac
            elif hi > lo:
                value = lo * (hi / lo) ** frac
            else:
                value = lo
            if min_ns is not None and value < min_ns:
                value = min_ns
            if max_ns is not None and value > max_ns:
                value = max_ns
            out[key] = value / 1e9
            w += 1
        seen += count
    while w < len(wanted):  # numerical edge: rank == total - 1 exactly
        out[wanted[w][0]] = bucket_bounds(items[-1][0])[1] / 1e9
        w += 1
    # percentiles must be monotone even after clamping
    prev = 0.0
    for key, _ in PERCENTILES:
        if out[key] < prev:
            out[key] = prev
        prev = out[key]
    return out


def histogram_from_values(values_ns: Iterable[float]) -> dict[int, int]:
    """Build a sparse histogram from raw values; used by tests and benchmarks."""
    out: dict[int, int] = {}
    for v in values_ns:
        i = bucket_index(v)
        out[i] = out.get(i, 0) + 1
    return out
