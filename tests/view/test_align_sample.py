"""Clock alignment on a bounded sample of collectives: the same keys on every process, same offset."""

import numpy as np

from neuron_explorer.analysis import align


def _times(keys: np.ndarray, skew: int, rng) -> align.Times:
    start = keys * 1000 + rng.integers(0, 50, len(keys))
    end = keys * 1000 + 500 + skew + rng.integers(-3, 4, len(keys))
    return keys, start, end


def test_sample_keeps_matching_keys_and_the_offset():
    rng = np.random.default_rng(0)
    # process a saw 300k collectives, b only the first 100k of them (b's capture started later)
    a = _times(np.arange(300_000, dtype=np.int64), 0, rng)
    b = _times(np.arange(100_000, dtype=np.int64), -7_000, rng)
    sa, sb = align.sample(a, 4096), align.sample(b, 4096)
    assert len(sa[0]) <= 2 * 4096 and len(sb[0]) <= 2 * 4096 and len(sa[0]) > 1000
    common = np.intersect1d(sa[0], sb[0])
    assert len(common) >= min(len(sa[0]), len(sb[0])) * 0.2  # the coarser sample is inside the finer one
    assert set(np.intersect1d(sa[0], np.arange(100_000))) <= set(sb[0]) or set(sb[0]) <= set(sa[0])
    full = align.estimate_offsets({"i-a": [a], "i-b": [b]})
    part = align.estimate_offsets({"i-a": [sa], "i-b": [sb]})
    assert full["i-b"].offset_ns == 7_000 and abs(part["i-b"].offset_ns - 7_000) <= 1
    assert part["i-b"].samples == len(common)


def test_small_processes_are_not_sampled():
    rng = np.random.default_rng(1)
    t = _times(np.arange(100, dtype=np.int64), 0, rng)
    assert align.sample(t, 4096) is t


def test_the_sample_shrinks_as_processes_grow():
    assert align.sample_cap(8) == align.ALIGN_SAMPLES
    assert align.sample_cap(512) * 512 <= align.ALIGN_SAMPLES_TOTAL
    assert align.sample_cap(10**6) == 1024
