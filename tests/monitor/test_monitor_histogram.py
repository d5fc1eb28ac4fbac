"""Latency percentiles from the shared log-spaced histogram."""

import random

from neuron_explorer.contracts import stats_histogram


def test_percentiles_track_exact_values_within_bucket_width() -> None:
    rng = random.Random(7)
    values = [rng.uniform(1e5, 5e7) for _ in range(20000)]  # 0.1 ms .. 50 ms
    est = stats_histogram.percentiles_seconds(stats_histogram.histogram_from_values(values))
    assert est is not None
    values.sort()
    for key, q in stats_histogram.PERCENTILES:
        exact = values[round(q * (len(values) - 1))] / 1e9
        assert abs(est[key] - exact) / exact < 0.06, (key, est[key], exact)


def test_percentiles_are_monotone_and_none_when_empty() -> None:
    assert stats_histogram.percentiles_seconds([0, []]) is None
    assert stats_histogram.percentiles_seconds([5, [0, 0]]) is None
    est = stats_histogram.percentiles_seconds(stats_histogram.histogram_from_values([2e6, 3e6, 3e9, 10.0]))
    vals = [est[k] for k, _ in stats_histogram.PERCENTILES]
    assert vals == sorted(vals)
    assert vals[0] < 1e-6 and vals[-1] > 2.5


def test_delta_of_cumulative_snapshots_keeps_only_new_samples() -> None:
    pad = [0] * (stats_histogram.NUM_BUCKETS - 6)
    old = stats_histogram.to_run([0, 0, 3, 0, 1, 0] + pad)
    new = stats_histogram.to_run([0, 1, 5, 0, 1, 2] + pad)
    assert old == [2, [3, 0, 1]] and new == [1, [1, 5, 0, 1, 2]]
    assert stats_histogram.delta(new, old) == [1, [1, 2, 0, 0, 2]]
    assert stats_histogram.delta(new, None) == new
    assert stats_histogram.delta(new, [0, []]) == new
    est = stats_histogram.percentiles_seconds(stats_histogram.delta(new, old))
    assert est is not None and est["p0"] < est["p100"]


def test_out_of_range_latencies_land_in_edge_buckets() -> None:
    assert stats_histogram.bucket_index(10) == 0
    assert stats_histogram.bucket_index(1e15) == stats_histogram.NUM_BUCKETS - 1
