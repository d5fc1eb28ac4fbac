"""The per-row moving-block bootstrap as ``analysis.compare`` computed it before it worked on ranks
(decision 0146): ``numpy.quantile`` over the float resamples of each row.  Kept here only as the
reference the faster one must equal, number for number, on real diff data."""

from __future__ import annotations

from unittest import mock

import numpy as np

from neuron_explorer.analysis import compare as cmp
from neuron_explorer.diff import report
from neuron_explorer.diff.dataset import Side


def block_quantiles(values: np.ndarray, reps: int, rng: np.random.Generator,
                    qs: tuple[float, ...] = (0.5, 0.25)) -> np.ndarray:
    n = len(values)
    block = max(1, int(round(n ** (1 / 3))))
    k = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=(reps, k))
    idx = (starts[:, :, None] + np.arange(block)).reshape(reps, k * block)[:, :n]
    return np.quantile(values[idx], qs, axis=1)


def assert_diff_as_reference(base: Side, cand: Side) -> dict:
    """The diff document of ``base`` and ``cand`` is the same with the reference bootstrap, every
    interval and verdict; returns it.  Fails unless some row was actually bootstrapped."""
    doc = report.build(base, cand)
    with mock.patch.object(cmp, "_block_quantiles", block_quantiles):
        ref = report.build(base, cand)
    assert any(r.get("q25_ci_ns") for r in doc["rows"]), "no row was bootstrapped"
    for got, want in zip(doc["rows"], ref["rows"]):
        assert got == want, (got["kind"], got["key"])
    assert doc == ref
    return doc
