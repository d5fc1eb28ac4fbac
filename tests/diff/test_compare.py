"""The statistics and alignment rules of ``analysis.compare``, in process on made-up samples."""

from __future__ import annotations

import numpy as np
import pytest

from neuron_explorer.analysis import compare as cmp
from neuron_explorer.diff import report

from .reference import block_quantiles


def _samples(n: int, median: float, spread: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (median + spread * rng.standard_normal(n)).clip(1)


def test_interval_is_the_same_every_run_and_per_item():
    a, b = _samples(60, 1e6, 1e5, 1), _samples(60, 1.1e6, 1e5, 2)
    assert cmp.bootstrap_interval(a, b, "graph:x") == cmp.bootstrap_interval(a, b, "graph:x")
    assert cmp.bootstrap_interval(a, b, "graph:x") != cmp.bootstrap_interval(a, b, "graph:y")
    th = cmp.Thresholds(seed=7)
    assert cmp.bootstrap_interval(a, b, "graph:x", th) != cmp.bootstrap_interval(a, b, "graph:x")


@pytest.mark.parametrize("n", [1, 2, 5, 7, 64, 100, 511, 512])
def test_the_bootstrap_by_ranks_is_numpys_quantile_to_the_bit(n):
    """Decision 0146: quantiles read through ranks equal ``numpy.quantile`` of the float resamples,
    with ties (whole nanoseconds repeat), for the quantiles a diff uses and others."""
    rng = np.random.default_rng(n)
    for values in (np.round(rng.lognormal(12, 1, n)), rng.integers(0, 4, n).astype(np.float64)):
        for qs in ((0.5, 0.25), (0.025, 0.1, 0.33, 0.9, 0.975)):
            got = cmp._block_quantiles(values, 300, np.random.default_rng(7), qs)
            assert np.array_equal(got, block_quantiles(values, 300, np.random.default_rng(7), qs))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 10, 11, 999, 1000])
def test_order_statistics_from_one_partition_are_numpys(n):
    """The median, 90th percentile and lower quartile a diff reads from one partition are
    ``numpy.median``'s, ``numpy.percentile``'s and ``numpy.quantile``'s own numbers, on integer
    nanoseconds as the tables hold them, with ties."""
    rng = np.random.default_rng(n)
    for values in (rng.integers(1, 10**12, n), rng.integers(0, 3, n), np.full(n, 7), np.round(rng.lognormal(9, 1, n))):
        o = cmp.order(values)  # (int64 partitioned as they are, floats as floats: the same numbers)
        assert o.count == n
        assert o.median == np.median(values)
        assert o.mid == (float(np.sort(values)[(n - 1) // 2]), float(np.sort(values)[n // 2]))
        assert (o.p50, o.p90) == tuple(np.percentile(values.astype(np.float64), [50, 90]))
        assert o.q25 == np.quantile(values, 0.25)
    assert cmp.order(np.zeros(0, dtype=np.int64)) == cmp.Order(0)


@pytest.mark.parametrize("n", [cmp.COUNT_AT_LEAST, cmp.COUNT_AT_LEAST + 1, 100_003])
def test_order_statistics_by_counting_are_the_partitions(n, monkeypatch):
    """A large sample of integers in a narrow range is counted (``compare._kth_values``) instead of
    partitioned: the same ``Order`` as the partition gives (and numpy's own numbers), whatever the
    range's place (from 0, far from it, below it) or width (one value short of the sample's size,
    or wider: partitioned)."""
    rng = np.random.default_rng(n)
    samples = [rng.integers(0, n, n), rng.integers(10**15, 10**15 + n // 3, n), rng.integers(-n // 2, n // 2, n),
               rng.integers(0, 5, n), np.concatenate([rng.integers(20, 40, n - 1), [20 + n - 1]]),
               rng.integers(0, 2 * n, n), np.sort(rng.integers(7, 7 + n // 100, n))]
    counted = [cmp.order(v.astype(np.int64)) for v in samples]
    assert [cmp._kth_values(v.astype(np.int64), [0, n - 1], int(v.min()), int(v.max())) is None
            for v in samples] == [False] * 5 + [True, False]
    monkeypatch.setattr(cmp, "COUNT_AT_LEAST", 1 << 62)  # every sample partitioned
    for v, o in zip(samples, counted):
        assert o == cmp.order(v.astype(np.int64))
        assert o.median == np.median(v) and o.q25 == np.quantile(v, 0.25)


def test_a_clear_change_gets_its_sign_and_a_tie_gets_none():
    base = _samples(60, 10e6, 0.5e6, 1)
    slower = cmp.compare(base, _samples(60, 13e6, 0.5e6, 2), "k")
    assert slower.verdict == cmp.SLOWER and slower.significant
    assert slower.ci_ns[0] > 0 and abs(slower.delta_ns - 3e6) < 0.5e6
    faster = cmp.compare(base, _samples(60, 7e6, 0.5e6, 3), "k")
    assert faster.verdict == cmp.FASTER and faster.ci_ns[1] < 0
    same = cmp.compare(base, _samples(60, 10e6, 0.5e6, 4), "k")
    assert same.verdict == cmp.SAME and not same.significant


def test_the_bar_is_a_factor_both_ways():
    """A bar of 150% (a noisy pair) still lets a 3x faster item through: faster by the bar's factor
    is down by bar / (1 + bar), not by the bar itself (nothing is more than 100% faster); and an item
    only 1.3x faster, inside the factor, gets no verdict, as an item 1.3x slower does not."""
    th = cmp.Thresholds(min_change_pct=150.0)
    base = _samples(60, 3e6, 1e4, 1)
    assert cmp.compare(base, _samples(60, 1e6, 1e4, 2), "graph:x", th).verdict == cmp.FASTER
    assert cmp.compare(_samples(60, 1e6, 1e4, 2), base, "graph:x", th).verdict == cmp.SLOWER
    assert cmp.compare(base, _samples(60, 3e6 / 1.3, 1e4, 3), "graph:x", th).verdict == cmp.SAME
    assert cmp.compare(base, _samples(60, 3e6 * 1.3, 1e4, 3), "graph:x", th).verdict == cmp.SAME


def test_a_real_but_small_change_gets_no_verdict():
    """Interval excluding zero but not wholly beyond the thresholds: no verdict."""
    base = _samples(2000, 10e6, 0.1e6, 1)
    small = cmp.compare(base, _samples(2000, 10.3e6, 0.1e6, 2), "k")  # +3%: real, below 10%
    assert small.ci_ns[0] > 0 and small.verdict == cmp.SAME
    assert cmp.compare(base, _samples(2000, 10.3e6, 0.1e6, 2), "k",
                       cmp.Thresholds(min_change_pct=1, min_change_ns=0)).verdict == cmp.SLOWER
    tiny = cmp.compare(np.full(50, 1000.0), np.full(50, 1500.0), "k")  # +50% of 1 us: under the ns floor
    assert tiny.verdict == cmp.SAME


def test_load_that_stretches_the_slow_side_gets_no_verdict_a_whole_shift_does():
    """A busier host adds time to some occurrences (the median moves, the fast side does not): no
    verdict.  The same code made 40% slower moves every occurrence: slower."""
    base = _samples(60, 10e6, 0.3e6, 1)
    loaded = base.copy()
    loaded[1::2] *= 2.5  # every other occurrence preempted: the median moves by far more than 10%
    change = cmp.compare(base, loaded, "k")
    assert change.ci_ns[0] > 0.1 * np.median(base) and change.verdict == cmp.SAME
    assert cmp.compare(base, base * 1.4, "k").verdict == cmp.SLOWER


def test_the_bar_rises_with_how_far_the_pairs_items_moved():
    rng = np.random.default_rng(3)
    quiet = [(_samples(40, m, m / 20, 1), _samples(40, m * f, m / 20, 2))
             for m, f in ((1e6, 1.02), (5e6, 0.97), (2e6, 1.01), (8e6, 1.03))]
    shift = cmp.item_shift(quiet)
    assert shift is not None and shift < 0.05
    assert cmp.noise_bar(shift) == pytest.approx(0.10)  # quiet: the fixed 10%
    noisy = [(b, c * f) for (b, c), f in zip(quiet, (1.3, 0.75, 1.25, 1.35))]
    assert cmp.noise_bar(cmp.item_shift(noisy)) > 0.45  # items moved ~30% by themselves: the bar is ~2x that
    # one changed item among unchanged ones does not raise the bar: the median over items ignores it
    one = quiet + [(_samples(40, 3e6, 1e5, 4), _samples(40, 9e6, 1e5, 5))]
    assert cmp.noise_bar(cmp.item_shift(one)) == pytest.approx(0.10)
    assert cmp.item_shift(quiet[:2]) is None  # too few items for an estimate
    assert cmp.item_shift([(rng.random(3), rng.random(3))] * 5) is None  # too few occurrences each


def test_a_burst_of_load_widens_the_interval_instead_of_moving_it():
    """Twenty slow samples in a row (a burst on the machine) give a wider interval than the same
    values spread out: neighbours in time are resampled together."""
    base = _samples(120, 10e6, 0.3e6, 1)
    cand = _samples(120, 10e6, 0.3e6, 2)
    burst = cand.copy()
    burst[50:80] *= 1.6
    spread = cand.copy()
    spread[::4] *= 1.6
    lo_b, hi_b = cmp.bootstrap_interval(base, burst, "k")
    lo_s, hi_s = cmp.bootstrap_interval(base, spread, "k")
    assert hi_b - lo_b > hi_s - lo_s


def test_few_samples_new_and_vanished():
    assert cmp.compare(np.ones(3), np.ones(3) * 9, "k").verdict == cmp.FEW
    assert cmp.compare(np.zeros(0), np.ones(3), "k").verdict == cmp.NEW
    assert cmp.compare(np.ones(3), np.zeros(0), "k").verdict == cmp.VANISHED


def test_stats():
    s = cmp.stats(np.arange(1, 11, dtype=np.int64))
    assert (s.count, s.median_ns, round(s.p90_ns, 1)) == (10, 5.5, 9.1)
    assert cmp.stats(np.zeros(0)).as_dict() == {"count": 0, "median_ns": None, "p90_ns": None}


@pytest.mark.parametrize("name, stem", [
    ("Encoder_bea8d2961a0c946b", "Encoder_*"), ("Encoder_bea8d2961a0c946b_bwd", "Encoder_*_bwd"),
    ("tail@diff_pair.py:56_e8a0cda6b58cf7cf", "tail@diff_pair.py:56_*"), ("plain", "plain"),
    ("jit_train_step", "jit_train_step"),
])
def test_stem(name, stem):
    assert cmp.stem(name) == stem


def test_graphs_match_by_name_then_structure():
    g = cmp.GraphInfo
    base = [g("A_1111111111111111", "forward", 6, "(f32[2])", "eager"), g("B_2222222222222222", "forward", 3, "", ""),
            g("Gone_3333333333333333", "forward", 1, "", "")]
    cand = [g("A_1111111111111111", "forward", 6, "(f32[2])", "eager"),
            g("B_9999999999999999", "forward", 3, "", ""),  # a new hash, same structure: the same graph
            g("New_4444444444444444", "forward", 1, "", "")]
    m = cmp.match_graphs(base, cand)
    assert ("A_1111111111111111", "A_1111111111111111", "name") in m.pairs
    assert ("B_2222222222222222", "B_9999999999999999", "structure") in m.pairs
    assert m.new == ["New_4444444444444444"] and m.vanished == ["Gone_3333333333333333"]


def test_two_graphs_of_one_structure_are_not_guessed():
    g = cmp.GraphInfo
    m = cmp.match_graphs([g("X_1111111111111111", "f", 2)], [g("X_2222222222222222", "f", 2),
                                                              g("X_3333333333333333", "f", 2)])
    assert all(how == "name" for *_, how in m.pairs)
    assert len(m.new) == 2 and m.vanished == ["X_1111111111111111"]


def test_a_resized_collective_is_paired_when_unambiguous():
    b = [("all_reduce", "0,1", 1024), ("broadcast", "0,1", 8)]
    c = [("all_reduce", "0,1", 4096), ("broadcast", "0,1", 16), ("broadcast", "0,1", 32)]
    assert cmp.match_resized(b, c) == [(("all_reduce", "0,1", 1024), ("all_reduce", "0,1", 4096))]


def test_gate_rule():
    info = {"baseline_median_ns": 100, "verdict": "slower", "delta_pct": 12.0, "ci_pct": [6.0, 18.0]}
    assert report.gate(info, 5)["failed"] is True
    assert report.gate(info, 10)["failed"] is False  # slower, but not surely by more than 10%
    assert report.gate({**info, "ci_pct": None}, 5)["failed"] is None
    assert report.gate({"baseline_median_ns": None, "verdict": "no steps found on the candidate"}, 5)["failed"] is None


def test_memory_needs_a_change_beyond_the_levels_own_noise():
    """Held memory that moves by 3 MiB between the halves of one run cannot call a 3 MiB change
    between runs; 8 MiB less on a steady level is a change."""
    from neuron_explorer.diff.dataset import Process, Side

    def side(level: int, noise: int) -> Side:
        s = Side("x", processes={0: Process("i", 1, 0)})
        s.memory_level[0], s.memory_peak[0], s.memory_noise[0] = level, level, noise
        return s

    mib = 1 << 20
    th = cmp.Thresholds()
    noisy = report.memory_rows(side(48 * mib, 3 * mib), side(45 * mib, 0), th)
    assert noisy[0]["verdict"] == cmp.SAME and noisy[0]["baseline"]["noise_bytes"] == 3 * mib
    (steady,) = report.memory_rows(side(49 * mib, mib // 4), side(41 * mib, mib // 2), th)
    assert steady["verdict"] == "smaller" and steady["delta_bytes"] == -8 * mib


def test_common_keys_by_one_search_are_intersect1d_s():
    """``report._common`` (the per-step table's pairs: keys both sides hold, the first ``limit`` in
    key order) gives what ``numpy.intersect1d(assume_unique=True, return_indices=True)`` cut to
    ``limit`` gives, on random sorted distinct keys (none shared, all shared, empty sides)."""
    rng = np.random.default_rng(192)
    for i in range(500):
        a = np.unique(rng.integers(-20, 200, int(rng.integers(0, 60))))
        b = np.unique(rng.integers(-20, 200, int(rng.integers(0, 60)))) if i % 7 else a.copy()
        limit = int(rng.integers(0, 40))
        common, ia, ib = np.intersect1d(a, b, assume_unique=True, return_indices=True)
        total, ga, gb = report._common(a, b, limit)
        assert total == len(common)
        assert ga.tolist() == ia[:limit].tolist() and gb.tolist() == ib[:limit].tolist()
