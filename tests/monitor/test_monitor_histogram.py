"""Latency percentiles from the shared log-spaced histogram."""

import random

from neuron_explorer.monitor import histogram


def test_percentiles_track_exact_values_within_bucket_width() -> None:
    rng = random.Random(7)
    values = [rng.uniform(1e5, 5e7) for _ in range(20000)]  # 0.1 ms .. 50 ms
    est = histogram.percentiles_seconds(histogram.histogram_from_values(values))
    assert est is not None
    values.sort()
    for key, q in histogram.PERCENTILES:
        exact = values[round(q * (len(values) - 1))] / 1e9
        assert abs(est[key] - exact) / exact < 0.06, (key, est[key], exact)


def test_percentiles_are_monotone_and_none_when_empty() -> None:
    assert histogram.percentiles_seconds({}) is None
    est = histogram.percentiles_seconds(histogram.histogram_from_values([2e6, 3e6, 3e9, 10.0]))
    vals = [est[k] for k, _ in histogram.PERCENTILES]
    assert vals == sorted(vals)
    assert vals[0] < 1e-6 and vals[-1] > 2.5


def test_delta_of_cumulative_snapshots_keeps_only_new_samples() -> None:
    old = histogram.to_sparse([0, 3, 0, 1] + [0] * (histogram.NUM_BUCKETS - 4))
    new = histogram.to_sparse([0, 5, 0, 1] + [0] * (histogram.NUM_BUCKETS - 4))
    assert histogram.delta(new, old) == {1: 2}
    assert histogram.delta(new, None) == {1: 5, 3: 1}


def test_out_of_range_latencies_land_in_edge_buckets() -> None:
    assert histogram.bucket_index(10) == 0
    assert histogram.bucket_index(1e15) == histogram.NUM_BUCKETS - 1
