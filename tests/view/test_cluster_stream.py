"""``DaskEngine.stream``'s order: results are fetched as their tasks finish, in any order, and
handed over in the order of the items (the diff merges files in file order: decision 0179); a
failed task is raised and the tasks not yet done are cancelled.  In process, with stand-in futures."""

from __future__ import annotations

import pytest

from neuron_explorer.view import cluster


class _Future:
    def __init__(self, key: str, status: str = "finished", error: BaseException | None = None) -> None:
        self.key, self.status, self.error = key, status, error

    def done(self) -> bool:
        return self.status != "pending"

    def result(self):
        raise self.error  # (only called for a failed task)


class _Client:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancel(self, futs) -> None:
        self.cancelled += [f.key for f in futs]


def _engine() -> cluster.DaskEngine:
    e = cluster.DaskEngine.__new__(cluster.DaskEngine)  # (no cluster: only the ordering is tested)
    e.client = _Client()
    return e


def test_results_in_item_order_whatever_order_the_tasks_finish():
    futs = [_Future(f"k-{i}") for i in range(5)]
    finished = [(futs[i], f"r{i}") for i in (3, 0, 4, 1, 2)]
    e = _engine()
    assert list(e._in_order(futs, iter(finished))) == ["r0", "r1", "r2", "r3", "r4"]
    assert e.client.cancelled == []


def test_a_failed_task_is_raised_and_the_rest_cancelled():
    futs = [_Future("k-0"), _Future("k-1", "error", OSError("worker lost")), _Future("k-2", "pending")]
    e = _engine()
    got = e._in_order(futs, iter([(futs[0], "r0"), (futs[1], None)]))
    assert next(got) == "r0"
    with pytest.raises(cluster.ClusterError, match="worker lost"):
        next(got)
    assert e.client.cancelled == ["k-2"]


def test_results_abandoned_cancel_the_tasks_not_done():
    futs = [_Future("k-0"), _Future("k-1", "pending"), _Future("k-2", "pending")]
    e = _engine()
    got = e._in_order(futs, iter([(futs[0], "r0")]))
    assert next(got) == "r0"
    got.close()
    assert e.client.cancelled == ["k-1", "k-2"]
