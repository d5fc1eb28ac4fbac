"""The event summary's five reductions per group: ``_pqenc.group_stats`` (one C pass) against its
numpy twin ``group_stats_numpy`` (decision 0218)."""

from __future__ import annotations

import numpy as np
import pytest

from neuron_explorer.exporters import event_summary as es

I64 = np.iinfo(np.int64)


def _c():
    if es._c_group_stats is None:  # noqa: SLF001
        pytest.skip("the C extension is not built")
    return es._c_group_stats  # noqa: SLF001


def _both(gid, start, end, size):
    c = es.group_stats(gid, start, end, size)
    py = es.group_stats_numpy(gid, start, end, size)
    for a, b in zip(c, py):
        assert a.dtype == np.int64 and np.array_equal(a, b)
    return c


def test_the_c_pass_equals_numpys_five_passes_on_random_chunks() -> None:
    _c()
    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(0, 3000))
        size = int(rng.integers(1, 200))
        gid = rng.integers(0, size, n, dtype=np.int64)
        if trial % 3 == 0:  # the full int64 range: durations and totals wrap as numpy's do
            start = rng.integers(I64.min, I64.max, n, dtype=np.int64, endpoint=True)
            end = rng.integers(I64.min, I64.max, n, dtype=np.int64, endpoint=True)
        else:
            start = rng.integers(0, 10**15, n, dtype=np.int64)
            end = start + rng.integers(-5, 10**9, n, dtype=np.int64)
        count, total, first, last, longest = _both(gid, start, end, size)
        assert count.sum() == n
        empty = count == 0  # a group without events keeps the neutral values
        assert (first[empty] == I64.max).all() and (last[empty] == I64.min).all() and (total[empty] == 0).all()


def test_a_bad_call_is_refused() -> None:
    c = _c()
    z = np.zeros(4, np.int64)
    outs = [np.zeros(3, np.int64) for _ in range(5)]
    with pytest.raises(ValueError, match="outside"):
        c(np.array([0, 1, 3, 0], np.int64), z, z, *outs)
    with pytest.raises(ValueError, match="outside"):
        c(np.array([0, -1, 0, 0], np.int64), z, z, *outs)
    with pytest.raises(ValueError, match="one length"):
        c(z, z[:3], z, *outs)
    with pytest.raises(ValueError, match="one length"):
        c(z, z, z, *outs[:4], np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="int64"):
        c(z.astype(np.int32), z, z, *outs)
    with pytest.raises(ValueError, match="int64"):
        c(z, z.astype(np.float64), z, *outs)
    ro = np.zeros(3, np.int64)
    ro.setflags(write=False)
    with pytest.raises((TypeError, BufferError, ValueError)):
        c(z, z, z, *outs[:4], ro)
    with pytest.raises((TypeError, BufferError, ValueError)):
        c(z, np.zeros(8, np.int64)[::2], z, *outs)  # not contiguous


def test_a_chunk_summarizes_as_before() -> None:
    """chunk() with the C pass and with the twin writes the same table."""
    _c()
    rng = np.random.default_rng(9)
    n = 20_000
    tid = rng.integers(1000, 1010, n, dtype=np.int64)
    nc = rng.integers(0, 4, n).astype(np.int32)
    typ = rng.integers(0, 30, n).astype(np.int32)
    start = np.sort(rng.integers(0, 10**12, n, dtype=np.int64))
    end = start + rng.integers(0, 10**7, n, dtype=np.int64)
    names = [f"t{i}" for i in range(30)]
    a = es.chunk(tid, nc, typ, start, end, names, [None] * 30, [None] * 30)
    saved = es._c_group_stats  # noqa: SLF001
    es._c_group_stats = None  # noqa: SLF001
    try:
        b = es.chunk(tid, nc, typ, start, end, names, [None] * 30, [None] * 30)
    finally:
        es._c_group_stats = saved  # noqa: SLF001
    assert a.equals(b) and a.num_rows > 0
