"""Comparing two profiles item by item: the statistics and the alignment rules behind
``neuron-explorer diff`` (docs/diff.md), kept apart from any file format so that every front end
that compares profiles applies the same rule.

Why a *block* bootstrap: the durations of one item are not independent draws.  On a shared machine a
burst of load slows every execution for a while, so neighbours in time move together; resampling
single executions would treat a burst as many independent slow samples and give an interval far too
narrow (an A/A pair then shows "changes").  Resampling runs of consecutive executions keeps that
dependence, so a burst widens the interval instead of shifting it.  And a verdict needs more than an
interval that excludes zero: the whole interval of the lower quartile must lie beyond ``Thresholds``
(a share of the baseline, an absolute floor) and beyond the pair's own noise (how far the typical
item of the same two profiles moved, ``item_shift``), and the median's interval must exclude zero
the same way (docs/decisions/0127-diff-statistics.md, 0131).  Load adds time to an occurrence, it
never removes any: the fast side of an item's distribution is what its code costs, the slow side is
what the machine did meanwhile.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence

import numpy as np

FASTER = "faster"
SLOWER = "slower"
SAME = "no detectable change"
FEW = "too few samples"
NEW = "new"
VANISHED = "vanished"
VERDICTS = (FASTER, SLOWER, SAME, FEW, NEW, VANISHED)

MIN_SAMPLES = 5  # per side: fewer gives no interval worth the name
BOOTSTRAP_CAP = 512  # samples per side the resampling sees (evenly spaced in time beyond it)


@dataclass(frozen=True)
class Thresholds:
    """What a change must reach, besides an interval that excludes zero, to get a verdict."""

    confidence: float = 0.95
    resamples: int = 1000
    seed: int = 0
    min_change_pct: float = 10.0  # of the baseline median
    min_change_ns: int = 200_000  # absolute floor (scheduler noise on a loaded host is ~0.1 ms)
    # the bar rises with the pair's own noise: an item must move by more than exp(factor x the typical
    # item's |log change|) - 1 of its baseline (docs/decisions/0131-diff-noise-from-the-pair.md)
    noise_factor: float = 1.5


@dataclass
class Stats:
    count: int
    median_ns: float | None
    p90_ns: float | None

    def as_dict(self) -> dict:
        return {"count": self.count, "median_ns": _num(self.median_ns), "p90_ns": _num(self.p90_ns)}


@dataclass
class Change:
    """One item's change: candidate median minus baseline median, its interval and the verdict."""

    delta_ns: float | None
    delta_pct: float | None
    ci_ns: tuple[float, float] | None
    verdict: str
    q25_ci_ns: tuple[float, float] | None = None  # the lower quartile's change

    @property
    def significant(self) -> bool:
        return self.verdict in (FASTER, SLOWER, NEW, VANISHED)

    def as_dict(self) -> dict:
        return {"delta_ns": _num(self.delta_ns), "delta_pct": _num(self.delta_pct, 2),
                "ci_ns": None if self.ci_ns is None else [_num(self.ci_ns[0]), _num(self.ci_ns[1])],
                "q25_ci_ns": None if self.q25_ci_ns is None else [_num(self.q25_ci_ns[0]), _num(self.q25_ci_ns[1])],
                "verdict": self.verdict, "significant": self.significant}


def _num(v: float | None, digits: int = 0) -> float | int | None:
    if v is None or not np.isfinite(v):
        return None
    return int(round(v)) if digits == 0 else round(float(v), digits)


@dataclass(frozen=True)
class Order:
    """The order statistics a diff reads of one sample, from one partition of it, each equal to
    numpy's own: ``median`` is ``numpy.median``, ``p50``/``p90``/``q25`` are ``numpy.percentile``'s
    and ``numpy.quantile``'s linear interpolation (the same numbers, not merely close: a verdict
    must not depend on which was called).  None for an empty sample."""

    count: int
    median: float | None = None
    p50: float | None = None
    p90: float | None = None
    q25: float | None = None
    mid: tuple[float, float] | None = None  # the two middle values (the same one when the count is odd)


def order(values: np.ndarray) -> Order:
    """``Order`` of ``values`` (durations in ns: integers below 2**53, exact as floats).  Large
    samples (a step table has millions of rows) are partitioned once at the six positions needed
    instead of once per statistic, and integers as they are (the k-th smallest integer is the
    k-th smallest of their float64 values: no float copy is made)."""
    v = np.asarray(values)
    if v.dtype != np.int64:
        v = np.asarray(v, dtype=np.float64)
    n = len(v)
    if not n:
        return Order(0)
    lo, hi = (v.min(), v.max()) if n > 1 else (v[0], v[0])
    if n > 1 and lo == hi:  # one value (a part a profile never has: often): no partition
        x = float(np.float64(v[0]))
        return Order(n, x, x, x, x, (x, x))
    at = {q: (n - 1) * q for q in (0.25, 0.5, 0.9)}  # numpy's virtual index for the linear method
    near = {q: (int(np.floor(a)), min(int(np.floor(a)) + 1, n - 1)) for q, a in at.items()}
    kth = sorted({k for pair in near.values() for k in pair} | {(n - 1) // 2, n // 2})
    kv = _kth_values(v, kth, int(lo), int(hi)) if v.dtype == np.int64 else None
    p = np.partition(v, kth) if kv is None else kv

    def at_(k: int) -> np.ndarray:
        return p[k:k + 1].astype(np.float64)

    def quantile(q: float) -> float:
        lo, hi = near[q]
        return float(_lerp(at_(lo), at_(hi), at[q] - lo)[0])

    # numpy.median: the mean of the two middle values (one when n is odd)
    lo_mid, hi_mid = at_((n - 1) // 2), at_(n // 2)
    median = float(hi_mid[0]) if n % 2 else float(((lo_mid + hi_mid) / 2)[0])
    return Order(n, median, quantile(0.5), quantile(0.9), quantile(0.25), (float(lo_mid[0]), float(hi_mid[0])))


COUNT_AT_LEAST = 1 << 12  # a sample this large, of integers in a range no wider than its size: counted


def _kth_values(v: np.ndarray, kth: list[int], lo: int, hi: int) -> np.ndarray | None:
    """The ``k``-th smallest integers of ``v`` (at index ``k`` of the answer, for each ``k`` of
    ``kth``; the rest unset) by counting each value (one ``bincount`` and its running sum instead
    of a partitioned copy: a step table's column of millions of durations spans fewer nanoseconds
    than it has rows); None where the values' range is wider than the sample or the sample small
    (``numpy.partition`` then, the same values)."""
    n = len(v)
    if n < COUNT_AT_LEAST or hi - lo >= n:
        return None
    shift = 0 if 0 <= lo and hi < n else lo  # (counted from 0 where the values allow: no copy)
    upto = np.cumsum(np.bincount(v - shift if shift else v))
    out = np.zeros(max(kth) + 1, dtype=np.int64)
    ks = np.asarray(kth, dtype=np.int64)
    # the k-th smallest is the first value whose running count exceeds k
    out[ks] = np.searchsorted(upto, ks, side="right") + shift
    return out


def stats(values: np.ndarray, o: Order | None = None) -> Stats:
    """Count, median and 90th percentile (linear interpolation) of ``values`` (``o``: its ``order``,
    when already known)."""
    o = order(values) if o is None else o
    if not o.count:
        return Stats(0, None, None)
    return Stats(o.count, o.p50, o.p90)


def item_seed(key: str, seed: int = 0) -> int:
    """A fixed seed per item (from its key), so that one item's interval does not depend on which
    other items a profile holds, and a rerun gives the same numbers."""
    return (zlib.crc32(key.encode("utf-8", "replace")) ^ (seed * 0x9E3779B1)) & 0xFFFFFFFF


class Positions(Protocol):
    """An order read at positions: an index array, or ``diff.dataset.TimeOrder``."""

    def __getitem__(self, at: np.ndarray) -> np.ndarray: ...


def thin(values: np.ndarray, order: np.ndarray | Positions | None = None, cap: int = BOOTSTRAP_CAP) -> np.ndarray:
    """The sample the bootstrap sees: ``values`` in time order (``values[order]``; None: they are
    in time order), at most ``cap`` of them evenly spaced in time, as float64.  Only the kept
    values are gathered (``order`` is read at their positions only)."""
    n = len(values)
    at = np.arange(n) if n <= cap else np.linspace(0, n - 1, cap).astype(np.int64)
    if order is None:
        return np.asarray(values if n <= cap else values[at], dtype=np.float64)
    return np.asarray(values[order[at]], dtype=np.float64)


def _lerp(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    """``numpy.quantile``'s linear interpolation between neighbouring order statistics, to the bit
    (its own formula: from the upper neighbour when ``t`` >= 0.5)."""
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


def _block_quantiles(values: np.ndarray, reps: int, rng: np.random.Generator,
                     qs: tuple[float, ...] = (0.5, 0.25)) -> np.ndarray:
    """The ``qs`` quantiles of ``reps`` moving-block resamples of ``values`` (in time order), one row
    per quantile: ``numpy.quantile(values[idx], qs, axis=1)`` for the resample indices ``idx`` drawn
    from ``rng``, exactly, at a sixth of its cost.

    Why not ``numpy.quantile``: selecting two quantiles of a (reps x n) float matrix partitions it
    four times; here each sample is replaced by its rank (a 16-bit integer: at most
    ``BOOTSTRAP_CAP`` samples), each resample gathered a whole block at a time, the rows of ranks
    sorted (a vectorised integer sort), and the order statistics read back through the sorted
    values, so the result is the same numbers (docs/decisions/0146-diff-bootstrap-by-ranks.md)."""
    n = len(values)
    block = max(1, int(round(n ** (1 / 3))))
    k = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=(reps, k))
    order = np.argsort(values, kind="stable")
    small = np.int16 if n <= np.iinfo(np.int16).max else np.int64
    rank = np.empty(n, dtype=small)
    rank[order] = np.arange(n, dtype=small)
    # each resample's blocks read as rows of the (n - block + 1, block) windows of the ranks, each
    # window one opaque item of ``block`` ranks: one gather of whole blocks, one copy per block (a
    # gather through the strided window view copies rank by rank: 10x the time)
    windows = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(rank, block))
    whole = windows.view(np.dtype((np.void, rank.itemsize * block))).reshape(-1)
    ranks = np.sort(np.take(whole, starts).view(small).reshape(reps, k * block)[:, :n], axis=1)
    ordered = values[order]
    out = np.empty((len(qs), reps), dtype=np.float64)
    for i, q in enumerate(qs):
        at = (n - 1) * q  # numpy's virtual index for the linear method, as it computes it
        lo = int(np.floor(at))
        hi = min(lo + 1, n - 1)
        out[i] = _lerp(ordered[ranks[:, lo]], ordered[ranks[:, hi]], at - lo)
    return out


def bootstrap_intervals(base: np.ndarray, cand: np.ndarray, key: str,
                        th: Thresholds = Thresholds()) -> tuple[tuple[float, float], tuple[float, float]]:
    """The ``th.confidence`` intervals of the change of the median and of the lower quartile
    (candidate minus baseline, both sides in time order), by a moving-block bootstrap of each side
    with a seed fixed per item."""
    rng = np.random.default_rng(item_seed(key, th.seed))
    b, c = thin(np.asarray(base)), thin(np.asarray(cand))
    d = _block_quantiles(c, th.resamples, rng) - _block_quantiles(b, th.resamples, rng)
    alpha = (1 - th.confidence) / 2
    (lo, hi), (qlo, qhi) = (np.quantile(row, [alpha, 1 - alpha]) for row in d)
    return (float(lo), float(hi)), (float(qlo), float(qhi))


def bootstrap_interval(base: np.ndarray, cand: np.ndarray, key: str,
                       th: Thresholds = Thresholds()) -> tuple[float, float]:
    """The interval of the change of the median (``bootstrap_intervals``)."""
    return bootstrap_intervals(base, cand, key, th)[0]


def item_shift(items: Iterable[tuple[np.ndarray, np.ndarray]]) -> float | None:
    """How far the typical item moved between the two sides: the median over items (each with at
    least ``MIN_SAMPLES`` occurrences per side) of |log(candidate's lower quartile / baseline's)|.

    It is the pair's own noise floor.  In an A/A pair every item's shift is noise: load that one run
    saw and the other did not, or jobs sharing a CPU in a different phase.  In a pair with one real
    change, the other items still measure that noise, and the median over items ignores the few
    that changed.  None with fewer than three items (no noise estimate: the fixed thresholds alone)."""
    return shift_of((order(b), order(c)) for b, c in items)


def shift_of(orders: Iterable[tuple[Order, Order]]) -> float | None:
    """``item_shift`` from each item's ``order`` on each side (its ``q25`` is ``numpy.quantile``'s)."""
    logs = []
    for ob, oc in orders:
        if ob.count < MIN_SAMPLES or oc.count < MIN_SAMPLES:
            continue
        assert ob.q25 is not None and oc.q25 is not None
        qb, qc = ob.q25, oc.q25
        if qb > 0 and qc > 0:
            logs.append(abs(np.log(qc / qb)))
    return float(np.median(logs)) if len(logs) >= 3 else None


def noise_bar(shift: float | None, th: Thresholds = Thresholds()) -> float:
    """The smallest relative change (a fraction of the baseline) given a verdict: the fixed
    ``min_change_pct``, raised to exp(noise_factor x shift) - 1 when the pair's items moved that much."""
    bar = th.min_change_pct / 100.0
    if shift is not None:
        bar = max(bar, float(np.expm1(th.noise_factor * shift)))
    return bar


def compare(base: np.ndarray, cand: np.ndarray, key: str, th: Thresholds = Thresholds(),
            floor_ns: float | None = None, orders: tuple[Order, Order] | None = None,
            samples: tuple[np.ndarray, np.ndarray] | None = None) -> Change:
    """The change of one item present on both sides (samples in time order).  A verdict only where
    the lower quartile's interval lies wholly beyond ``min_change_pct`` of the baseline's lower
    quartile and the absolute floor, and the median's interval excludes zero in the same direction;
    ``floor_ns`` replaces the absolute floor (e.g. a part of a step, measured against the step).  A
    diff raises ``min_change_pct`` to the pair's ``noise_bar`` first.  ``orders``: the ``order`` of
    each side, when already known; ``samples``: each side's ``thin`` sample, when the values are not
    in time order."""
    if not len(base) or not len(cand):
        return Change(None, None, None, NEW if len(cand) else VANISHED)
    ob, oc = orders if orders is not None else (order(base), order(cand))
    assert ob.median is not None and oc.median is not None and ob.q25 is not None
    mb, mc = ob.median, oc.median
    delta = mc - mb
    pct = 100.0 * delta / mb if mb > 0 else None
    if len(base) < MIN_SAMPLES or len(cand) < MIN_SAMPLES:
        return Change(delta, pct, None, FEW)
    (lo, hi), (qlo, qhi) = bootstrap_intervals(*(samples or (base, cand)), key, th)
    floor = th.min_change_ns if floor_ns is None else floor_ns
    # the bar is a factor, the same both ways: slower by at least (1 + bar) times, or faster by at
    # least that factor, i.e. down by bar / (1 + bar) of the baseline (a bar of 100% or more
    # would otherwise leave no faster change possible: nothing gets more than 100% faster)
    rel = th.min_change_pct / 100.0
    need_q = max(rel * abs(ob.q25), floor)
    need_fast = max(rel / (1.0 + rel) * abs(ob.q25), floor)
    # the lower quartile's whole interval beyond the bar ("at least that much, with confidence", not
    # only "not zero"): a busier host stretches the slow side of a distribution and barely moves its
    # fast side, a real change moves all of it.  The median must agree (its interval excludes zero
    # the same way): the typical occurrence moved too, not only the fastest quarter
    if qlo >= need_q and lo > 0:
        verdict = SLOWER
    elif -qhi >= need_fast and hi < 0:
        verdict = FASTER
    else:
        verdict = SAME
    return Change(delta, pct, (lo, hi), verdict, (qlo, qhi))


# ---- alignment

_HASH = re.compile(r"(?<=_)[0-9a-f]{8,}(?=$|_)")


def stem(graph_name: str) -> str:
    """A graph's name without its hashes (``Encoder_bea8d2961a0c946b_bwd`` -> ``Encoder_*_bwd``):
    what a recompile or a renamed hash keeps."""
    return _HASH.sub("*", graph_name)


@dataclass(frozen=True)
class GraphInfo:
    """What identifies a graph besides its name (ProfileModels)."""

    name: str
    kind: str = ""
    num_nodes: int = -1
    signature: str = ""
    backend: str = ""

    @property
    def structure(self) -> tuple:
        return (stem(self.name), self.kind, self.num_nodes, self.signature, self.backend)


@dataclass
class GraphMatch:
    pairs: list[tuple[str, str, str]]  # (baseline name, candidate name, "name" | "structure")
    new: list[str]
    vanished: list[str]


def match_graphs(base: Iterable[GraphInfo], cand: Iterable[GraphInfo]) -> GraphMatch:
    """Graphs by name, then the rest by structure (stem, kind, node count, signature, backend) where
    exactly one graph on each side has it: a hash that changed with nothing else still matches, and
    a graph compiled again for new shapes is new."""
    b = {g.name: g for g in base}
    c = {g.name: g for g in cand}
    pairs = [(n, n, "name") for n in sorted(b.keys() & c.keys())]
    rest_b = [b[n] for n in sorted(b.keys() - c.keys())]
    rest_c = [c[n] for n in sorted(c.keys() - b.keys())]
    by_b: dict[tuple, list[GraphInfo]] = {}
    by_c: dict[tuple, list[GraphInfo]] = {}
    for g in rest_b:
        by_b.setdefault(g.structure, []).append(g)
    for g in rest_c:
        by_c.setdefault(g.structure, []).append(g)
    matched_b, matched_c = set(), set()
    for s, gs in by_b.items():
        cs = by_c.get(s, [])
        if len(gs) == 1 and len(cs) == 1:
            pairs.append((gs[0].name, cs[0].name, "structure"))
            matched_b.add(gs[0].name)
            matched_c.add(cs[0].name)
    return GraphMatch(pairs, [g.name for g in rest_c if g.name not in matched_c],
                      [g.name for g in rest_b if g.name not in matched_b])


def match_resized(base: Sequence[tuple[str, str, int]], cand: Sequence[tuple[str, str, int]]
                  ) -> list[tuple[tuple[str, str, int], tuple[str, str, int]]]:
    """Collectives (op, group, bytes) left unmatched on both sides that share op and group, one size
    on each side: the same collective with a new size (a bigger bucket), paired."""
    by_b: dict[tuple[str, str], list] = {}
    by_c: dict[tuple[str, str], list] = {}
    for k in base:
        by_b.setdefault(k[:2], []).append(k)
    for k in cand:
        by_c.setdefault(k[:2], []).append(k)
    return [(bs[0], by_c[og][0]) for og, bs in sorted(by_b.items())
            if len(bs) == 1 and len(by_c.get(og, [])) == 1]
