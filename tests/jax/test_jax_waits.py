"""JAX host waits, in process (``integrations.jax.waits``): ``block_until_ready`` and every read of
an array's value on the host (``.item()``, ``float()``, ``int()``, ``bool()``, ``operator.index``,
``tolist``, ``str``, ``jax.device_get``) call the recorder once with their span, and the program's
call is what it is without us: same value, same object, same exception, also when our recorder
fails.  Under the runtime each is a ``kbl_exec_wait`` naming the core's latest execution."""

from __future__ import annotations

import operator

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install jax jaxlib)")
import jax.numpy as jnp  # noqa: E402
from jax._src import api, array  # noqa: E402

from neuron_explorer.contracts import events as ev  # noqa: E402
from neuron_explorer.integrations.jax import waits  # noqa: E402
from neuron_explorer.integrations.jax.runtime import JaxRuntime  # noqa: E402
from neuron_explorer.runtime import clock  # noqa: E402
from neuron_explorer.runtime.config import CaptureConfig  # noqa: E402
from neuron_explorer.runtime.core import Runtime  # noqa: E402

JAX_JIT = jax._src.api.jit
PATCHED = ((array.ArrayImpl, "block_until_ready"), (api, "block_until_ready"), (jax, "block_until_ready"),
           (array.ArrayImpl, "item"), (array.ArrayImpl, "_value"))


def _restore(restore: list[tuple]) -> None:
    for owner, name, orig in reversed(restore):
        setattr(owner, name, orig)


@pytest.fixture
def timed():
    """``time_waits`` with a recorder that keeps the spans (``fail`` makes it raise); undone after."""
    spans: list[tuple[int, int]] = []
    state = {"fail": False}

    def record(t0: int, t1: int) -> None:
        if state["fail"]:
            raise RuntimeError("recorder broke")
        spans.append((t0, t1))

    before = {(o, n): vars(o)[n] for o, n in PATCHED}
    restore = waits.time_waits(record, clock.now_ns)
    yield spans, state
    _restore(restore)
    assert {(o, n): vars(o)[n] for o, n in PATCHED} == before


READS = [
    ("item", lambda x: x.item()),
    ("float", float),
    ("int", int),
    ("bool", bool),
    ("index", operator.index),
    ("complex", complex),
    ("tolist", lambda x: x.tolist()),
    ("str", str),
    ("format", lambda x: f"{x:.3f}"),
    ("device_get", jax.device_get),
    ("__array__", lambda x: x.__array__()),
]


@pytest.mark.parametrize("name,read", READS, ids=[r[0] for r in READS])
def test_each_read_is_one_wait_with_the_same_result(timed, name, read):
    spans, _ = timed
    make = jax.jit(lambda a: (a @ a).sum().astype(jnp.int32) if name == "index" else (a @ a).sum())
    a = jnp.ones((64, 64))
    want = read(make(a).block_until_ready()) if name != "index" else operator.index(make(a))
    spans.clear()
    t0 = clock.now_ns()
    got = read(make(a))  # (dispatched, maybe not computed yet)
    t1 = clock.now_ns()
    assert type(got) is type(want)
    if isinstance(want, np.ndarray):
        np.testing.assert_array_equal(got, want)
    else:
        assert got == want
    assert len(spans) == 1 and t0 <= spans[0][0] <= spans[0][1] <= t1, spans


def test_block_until_ready_counts_once_and_returns_the_same_object(timed):
    spans, _ = timed
    x = jnp.ones((8, 8)) * 2
    assert x.block_until_ready() is x
    tree = {"a": x, "b": [x + 1]}
    out = jax.block_until_ready(tree)
    assert out["a"] is x and out["b"][0] is tree["b"][0]
    assert jax.block_until_ready(x) is x
    assert len(spans) == 3  # the method, the tree, the single array: once each


def test_a_read_that_fails_fails_as_without_us(timed):
    spans, _ = timed
    x = jnp.arange(3.0)
    errors = []
    for read in (float, lambda v: v.item(), operator.index):
        try:
            read(x)
        except Exception as e:  # noqa: BLE001 - compared with the unpatched call's below
            errors.append((type(e), str(e)))
    d = jnp.ones(2)
    d.delete()
    for read in (lambda v: v.tolist(), lambda v: v.item(), lambda v: v.block_until_ready()):
        try:
            read(d)
        except Exception as e:  # noqa: BLE001
            errors.append((type(e), str(e)))
    n_failed = len(spans)
    # the same calls without the patch
    restore = [(o, n, getattr(o, n)) for o, n in PATCHED]
    for o, n, _ in restore:
        setattr(o, n, getattr(vars(o)[n], "__wrapped__", vars(o)[n]) if n != "_value" else
                property(vars(o)[n].fget.__wrapped__))
    try:
        plain = []
        for read in (float, lambda v: v.item(), operator.index):
            try:
                read(x)
            except Exception as e:  # noqa: BLE001
                plain.append((type(e), str(e)))
        for read in (lambda v: v.tolist(), lambda v: v.item(), lambda v: v.block_until_ready()):
            try:
                read(d)
            except Exception as e:  # noqa: BLE001
                plain.append((type(e), str(e)))
    finally:
        _restore(restore)
    assert errors == plain and len(errors) == 6
    assert n_failed == 1  # a read that raises waited for nothing; a block_until_ready is recorded all the same


def test_our_recorder_failing_leaves_the_call_alone(timed):
    spans, state = timed
    state["fail"] = True
    x = jnp.ones(()) * 5
    assert float(x) == 5.0 and x.item() == 5.0 and x.block_until_ready() is x
    assert int(jnp.int32(7) + 0) == 7
    assert spans == []


def test_our_own_waits_are_not_recorded(timed):
    spans, _ = timed
    x = jnp.ones(4)
    with waits.unrecorded():
        jax.block_until_ready(x)
        float(x[0])
        x.item(1)
    assert spans == []
    float(x[0])
    assert len(spans) == 1


def test_the_runtime_records_a_kbl_exec_wait_behind_the_latest_execution(tmp_path):
    rt = Runtime(CaptureConfig(output_dir=str(tmp_path), cpu_util=False, host_memory=False))
    jx = JaxRuntime(rt, rt.core())
    jx.install_waits()
    ring = jx.core.ring
    try:
        x = jnp.ones((16, 16))
        float(x.sum())  # before any execution: names none (-1)
        ring.append((ev.EXEC_PAIR, 1, 2, 0, 0, ring.exec_id(), 0, 0, 0))
        y = jax.jit(lambda a: a @ a)(x)
        assert y.block_until_ready() is y
        assert y.item(0) == 16.0
        rows = [r for r in ring.drain().tolist() if r[0] == ev.KBL_EXEC_WAIT]
        rt.flush(final=True, reason="test")
        assert y.item(1) == 16.0  # once the capture has stopped, nothing more
        after = [r for r in ring.drain().tolist() if r[0] == ev.KBL_EXEC_WAIT]
    finally:
        _restore(jx.waits_restore)
    assert [r[5] for r in rows] == [-1, 0, 0] and after == [], (rows, after)
    assert all(r[4] == -1 and r[1] <= r[2] and r[3] == clock.native_tid() for r in rows), rows


def test_a_patch_that_cannot_be_made_leaves_nothing_patched(monkeypatch):
    class Refuses(type):
        def __setattr__(cls, name, value):
            if name == "item":
                raise TypeError("read-only type")
            super().__setattr__(name, value)

    class Arrayish(metaclass=Refuses):
        def block_until_ready(self):
            return self

        def item(self):
            return 1

    before = {(o, n): vars(o)[n] for o, n in PATCHED[1:3]}
    monkeypatch.setattr(array, "ArrayImpl", Arrayish)
    with pytest.raises(TypeError, match="read-only type"):
        waits.time_waits(lambda t0, t1: None, clock.now_ns)
    assert {(o, n): vars(o)[n] for o, n in PATCHED[1:3]} == before
    assert vars(Arrayish)["block_until_ready"].__name__ == "block_until_ready" and "item" in vars(Arrayish)
    assert getattr(vars(Arrayish)["block_until_ready"], "__wrapped__", None) is None
