"""analysis._sweep.check_events (one C pass over a chunk of a capture's events, decision 0215)
against its numpy twin analysis.reader._check_chunk_numpy, on random chunks; and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from neuron_explorer.analysis import native
from neuron_explorer.analysis.reader import _check_chunk_numpy

I64 = np.iinfo(np.int64)


def _chunk(rng: np.random.Generator):
    n = int(rng.choice([0, 1, 2, 7, 100, 5000]))
    nt = int(rng.integers(1, 20))
    over = rng.random() < 0.15  # some type id beyond the declared ones
    typ = rng.integers(0, nt + (3 if over else 0), n).astype("<u2")
    slots = []
    for _ in range(int(rng.integers(0, 6))):
        low, high = np.full(nt, I64.min), np.full(nt, I64.max)
        limited = rng.random(nt) < 0.5
        size = int(rng.integers(0, 50))
        low[limited] = np.where(rng.random(int(limited.sum())) < 0.5, 0, I64.min)
        high[limited] = size
        values = rng.integers(-3, size + (3 if rng.random() < 0.3 else 0), n).astype("<i8")
        if n and rng.random() < 0.2:
            values[rng.integers(0, n)] = rng.choice([I64.min, I64.max, -1, 1 << 40])
        slots.append((values, low, high))
    start = rng.integers(-(1 << 62), 1 << 62, n).astype("<i8")
    end = start + rng.integers(0, 1 << 20, n)
    return typ, nt, tuple(slots), start, end


@pytest.mark.skipif(native.sweep is None, reason="the C extension analysis._sweep is not built")
def test_the_c_pass_finds_what_its_numpy_twin_finds():
    rng = np.random.default_rng(215)
    kinds = set()
    for _ in range(3000):
        typ, nt, slots, start, end = _chunk(rng)
        want = _check_chunk_numpy(typ, nt, slots, start, end)
        got = native.sweep.check_events(typ, nt, slots, start, end)
        if want[1] >= 0:  # a slot out of range: the caller stops there, and the twin skips the range
            assert got[:3] == want[:3], (got, want)
        else:
            assert got == want, (got, want)
        kinds.add("type" if want[0] >= nt else "slot" if want[1] >= 0 else "empty" if not len(typ) else "ok")
    assert kinds == {"type", "slot", "empty", "ok"}


@pytest.mark.skipif(native.sweep is None, reason="the C extension analysis._sweep is not built")
def test_the_c_pass_refuses_what_it_cannot_read():
    check = native.sweep.check_events
    typ, z = np.zeros(3, dtype="<u2"), np.zeros(3, dtype="<i8")
    lim = np.zeros(2, dtype=np.int64)
    with pytest.raises(TypeError):
        check(typ.astype(np.int32), 2, (), z, z)
    with pytest.raises(TypeError):
        check(typ, 2, ((z.astype(np.int32), lim, lim),), z, z)
    with pytest.raises(ValueError):
        check(typ, 2, (), z[:2], z)
    with pytest.raises(ValueError):
        check(typ, 3, ((z, lim, lim),), z, z)  # limits shorter than the type count
    with pytest.raises(ValueError):
        check(typ, 2, ((z, lim, lim),) * 6, z, z)
    assert check(typ, 2, ((z, lim, lim + 1),), z, z) == (0, -1, -1, 0, 0)
    assert check(typ, 2, ((z + 1, lim, lim + 1),), z, z)[1:3] == (0, 0)
