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
from bisect import bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

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


def bucket_indices(values_ns: npt.ArrayLike) -> np.ndarray:
    """``bucket_index`` for a numpy array of latencies at once (batched recording)."""
    import numpy as np

    v = np.asarray(values_ns, dtype=np.float64)
    idx = np.zeros(len(v), dtype=np.int64)
    ok = v >= MIN_NS
    idx[ok] = ((np.log10(v[ok]) - _LOG_MIN) * BUCKETS_PER_DECADE).astype(np.int64) + 1
    return np.minimum(idx, NUM_BUCKETS - 1)


def bucket_bounds(index: int) -> tuple[float, float]:
    """Lower and upper edge (ns) of a bucket; the open-ended ones are clamped to a finite edge."""
    if index <= 0:
        return 0.0, MIN_NS
    lo = MIN_NS * 10 ** ((index - 1) / BUCKETS_PER_DECADE)
    if index >= NUM_BUCKETS - 1:
        return lo, lo
    hi = MIN_NS * 10 ** (index / BUCKETS_PER_DECADE)
    return lo, hi


_LO: list[float] = [bucket_bounds(i)[0] for i in range(NUM_BUCKETS)]
_HI: list[float] = [bucket_bounds(i)[1] for i in range(NUM_BUCKETS)]


def to_run(counts: list[int]) -> list:
    """Encode a dense bucket list as ``[first_index, [counts...]]`` without leading/trailing zeros.

    Latency distributions occupy a contiguous range of buckets, so this is
    both small on disk and fast to subtract: cumulative histograms only grow,
    so an older run always lies inside a newer one.
    """
    lo = 0
    n = len(counts)
    while lo < n and not counts[lo]:
        lo += 1
    if lo == n:
        return [0, []]
    hi = n
    while not counts[hi - 1]:
        hi -= 1
    return [lo, counts[lo:hi]]


def delta(new: list, old: list | None) -> list:
    """Bucket-wise difference of two cumulative runs (``old`` may be None = all zero), as a run."""
    off_n, cn = new
    if not old or not old[1]:
        return [off_n, list(cn)]
    off_o, co = old
    d = list(cn)
    base = off_o - off_n
    if base < 0 or base + len(co) > len(d):  # not a prefix-compatible pair: recompute densely
        dense = [0] * NUM_BUCKETS
        for i, c in enumerate(cn):
            dense[off_n + i] += c
        for i, c in enumerate(co):
            dense[off_o + i] -= c
        return to_run([max(0, c) for c in dense])
    for i, c in enumerate(co):
        d[base + i] -= c
    return [off_n, d]


def percentiles_seconds(
    run: list,
    min_ns: float | None = None,
    max_ns: float | None = None,
) -> dict[str, float] | None:
    """Estimate p0..p100 in seconds from a bucket run ``[first_index, counts]``, or None when empty.

    Inside a bucket the rank is interpolated geometrically, which matches the
    log spacing.  ``min_ns``/``max_ns``, when known to lie in the period, clamp
    the extreme estimates so that p0/p100 never fall outside what was observed.
    """
    offset, counts = run
    if not counts:
        return None
    cum = list(accumulate(counts))  # C-speed prefix sums; bisect finds each rank's bucket
    total = cum[-1]
    if total <= 0:
        return None
    out: dict[str, float] = {}
    for key, q in PERCENTILES:
        rank = q * (total - 1)  # zero-based fractional rank of the wanted sample
        i = bisect_right(cum, rank)
        if i >= len(cum):  # numerical edge: rank == total - 1 exactly
            i = len(cum) - 1
            while counts[i] <= 0:
                i -= 1
        count = counts[i]
        lo = _LO[offset + i]
        hi = _HI[offset + i]
        # position of the sample inside its bucket, centred on each sample's slot
        frac = min(1.0, (rank - (cum[i] - count) + 0.5) / count)
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
    # percentiles must be monotone even after clamping
    prev = 0.0
    for key, _ in PERCENTILES:
        if out[key] < prev:
            out[key] = prev
        prev = out[key]
    return out


def histogram_from_values(values_ns: Iterable[float]) -> list:
    """Build a bucket run from raw values; used by tests and benchmarks."""
    dense = [0] * NUM_BUCKETS
    for v in values_ns:
        dense[bucket_index(v)] += 1
    return to_run(dense)
