"""The execution hot path: execution ids and event counting in the ring, the records the compiled
graph wrapper appends, and the drain's expansion of execution records (C, and numpy's reference)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from neuron_explorer.capture import store
from neuron_explorer.contracts import events as ev
from neuron_explorer.integrations.torch import execution, graphs
from neuron_explorer.integrations.torch.state import Installed
from neuron_explorer.runtime.config import CaptureConfig
from neuron_explorer.runtime.core import DEVICE_PROFILER, NDET, STATS, Runtime
from neuron_explorer.runtime.ring import NativeRing, Ring, expand_pairs, records_to_block
from tests.capture.helpers import expand_rows


@pytest.mark.parametrize("native", [pytest.param(True, marks=pytest.mark.skipif(
    execution._CWrapper is None, reason="C extension not built or disabled")), False], ids=["c", "python"])
def test_ring_counts_two_events_per_execution_id(native):
    r = Ring(0, 4, native=native)
    assert (r.exec_id(), r.exec_id(), r.exec_id()) == (0, 1, 2)
    r.tick()
    assert r.executions() == 3
    assert r.produced() == 3 * 2 + 1
    for i in range(6):
        r.append((i, 2**62, -5) + (i,) * 6)
    got = r.drain()
    assert got.dtype == np.int64 and got.shape == (4, ev.RECORD_WIDTH)
    assert got[:, 0].tolist() == [2, 3, 4, 5]  # bounded: the oldest were overwritten
    assert got[0].tolist() == [2, 2**62, -5] + [2] * 6
    assert r.drain().shape == (0, ev.RECORD_WIDTH)


@pytest.mark.skipif(execution._CWrapper is None, reason="C extension not built")
def test_c_counter_is_an_itertools_count_the_wrapper_advances_in_place():
    from neuron_explorer.runtime._fastpath import Counter
    from neuron_explorer.runtime.ring import _count_of

    r = Ring(0, 4, native=True)
    assert type(r.exec_counter) is Counter and type(r.open_counter) is Counter
    c = Counter(5)
    assert (next(c), next(c), c.value, repr(c), iter(c) is c) == (5, 6, 7, "count(7)", True)
    assert _count_of(c) == 7 and _count_of(Counter()) == 0
    last = Counter(2**63 - 2)
    assert next(last) == 2**63 - 2
    with pytest.raises(OverflowError, match="no ids left"):
        next(last)  # never wraps to a negative id
    assert last.value == 2**63 - 1
    for bad in ("1", 1.5, 2**63):
        with pytest.raises((TypeError, OverflowError)):
            Counter(bad)


@pytest.mark.skipif(execution._CWrapper is None, reason="C extension not built")
def test_c_ring_grows_wraps_and_refuses_bad_records():
    r = Ring(0, 1000, native=True)
    for i in range(130):  # grows past its first allocation
        r.append((i,) * 9)
    assert r.drain()[:, 0].tolist() == list(range(130))
    for i in range(2500):  # wraps around, keeping the newest 1000
        r.append((i,) * 9)
    assert r.drain()[:, 0].tolist() == list(range(1500, 2500))
    with pytest.raises(ValueError, match="9 fields"):
        r.append((1, 2))
    with pytest.raises(TypeError):
        r.append((1.5,) * 9)
    with pytest.raises(OverflowError):
        r.append((2**64,) * 9)
    assert len(r.drain()) == 0  # nothing half-written
    from neuron_explorer.runtime._fastpath import RingBuffer

    wide = RingBuffer(2, width=11)  # NDET's ended records
    for i in range(3):
        wide.append(tuple(range(i, i + 11)))
    assert np.frombuffer(wide.take(), dtype=np.int64).reshape(-1, 11)[:, 0].tolist() == [1, 2]
    with pytest.raises(ValueError, match="11 fields"):
        wide.append((1,) * 9)
    with pytest.raises(ValueError):
        RingBuffer(4, width=17)


class _NoGradTorch:
    """Just what the wrapper asks of torch for a graph run without gradients."""

    @staticmethod
    def is_grad_enabled() -> bool:
        return False


@pytest.fixture(params=["c", "python"])
def wrapper_impl(request, monkeypatch):
    """Run a test against the C wrapper (runtime/_fastpath.c) and the pure-Python one."""
    if request.param == "python":
        monkeypatch.setattr(execution, "_CWrapper", None)
    elif os.environ.get("NEURON_EXPLORER_PURE_PYTHON", "0") not in ("", "0"):
        pytest.skip("NEURON_EXPLORER_PURE_PYTHON is set")
    elif execution._CWrapper is None:
        # the extension is built by the install (setup.py); its absence is a build failure
        pytest.fail("neuron_explorer.runtime._fastpath is not built (make ext, or pip install -e ., compiles it)")
    return request.param


def _runtime(tmp_path) -> Runtime:
    return Runtime(CaptureConfig(output_dir=str(tmp_path), cpu_util=False, host_memory=False))


def test_wrapper_records_one_execution_per_call(tmp_path, wrapper_impl):
    rt = _runtime(tmp_path)
    core = rt.core()
    model = rt.add_model(name="g", neff_name="n", graph_hash="0", backend="b", kind="forward", nc_idx=core.nc)
    before = core.ring.produced()

    def graph(a, b=1):
        if a < 0:
            raise ValueError("bad input")
        return a + b

    run = graphs.wrap_graph(Installed(rt), _NoGradTorch, core, model, graph)
    assert (type(run).__name__ == "ExecWrapper") == (wrapper_impl == "c")
    assert run.__wrapped__ is graph
    assert run(1) == 2
    assert run(1, b=5) == 6
    with pytest.raises(ValueError):
        run(-1)
    seen = {}

    def other_thread():
        seen["tid"] = threading.get_native_id()
        run(2)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()

    recs = core.ring.drain()
    assert [r[0] for r in recs] == [ev.EXEC_PAIR] * 4
    assert [r[4] for r in recs] == [model.id] * 4
    assert [r[5] for r in recs] == [0, 1, 2, 3]  # execution ids
    assert [r[6] for r in recs] == [0, 0, 1, 0]  # ret: the failed call is recorded as a failure
    assert all(r[1] <= r[2] for r in recs)
    assert [r[3] for r in recs] == [threading.get_native_id()] * 3 + [seen["tid"]]
    assert core.exec_count == 4
    assert core.ring.produced() - before == 8  # nrt_execute + nc_exec_running per call


def _pairs(starts, mids, ret=0):
    return np.array([(ev.EXEC_PAIR, s, s + 3, 9, m, i, ret, 0, 0) for i, (s, m) in enumerate(zip(starts, mids))],
                    dtype=np.int64).reshape(-1, ev.RECORD_WIDTH)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("last_model", [-1, 0, 1])
def test_pairs_expand_the_same_whatever_order_the_drain_has(last_model, native):
    rng = np.random.default_rng(7)
    starts = np.cumsum(rng.integers(1, 10, 200))
    mids = rng.integers(0, 3, 200)
    block = _pairs(starts, mids)
    out, last = expand_rows(block, last_model, native=native)
    # reversed rows have decreasing starts: the expansion sorts them back
    out_reversed, _ = expand_rows(block[::-1].copy(), last_model, native=native)
    np.testing.assert_array_equal(out, out_reversed)
    assert last == int(mids[-1])
    # every execution became nrt_execute + nc_exec_running, plus one switch per change of graph
    prev = np.concatenate([[last_model], mids[:-1]])
    n_sw = int(((mids != prev) & (prev >= 0)).sum())
    assert len(out) == 2 * len(block) + n_sw
    assert (out[:, 0] == ev.NRT_MODEL_SWITCH).sum() == n_sw
    assert not (out[:, 0] == ev.EXEC_PAIR).any()


def _random_drain(rng, n: int, order: str) -> np.ndarray:
    """A drain as the hooks could leave it: pairs among other events, starts in order, reversed,
    mostly in order or full of ties (in order or not), some core spans measured apart."""
    rows = np.zeros((n, ev.RECORD_WIDTH), dtype=np.int64)
    rows[:, 0] = rng.choice([ev.EXEC_PAIR, ev.EXEC_PAIR, 16, 3], n)
    starts = np.sort(rng.integers(0, 10**6, n))
    if order == "reversed":
        starts = starts[::-1]
    elif order == "mostly":
        out = rng.integers(0, n, max(1, n // 20))
        starts[out] = rng.integers(0, 10**6, len(out))
    elif order == "ties":
        starts = rng.integers(0, 20, n)
    elif order == "sorted_ties":
        starts = np.sort(rng.integers(0, 20, n))
    rows[:, 1] = starts
    rows[:, 2] = starts + rng.integers(0, 10, n)
    rows[:, 3:7] = rng.integers(-2, 4, (n, 4))
    if rng.random() < 0.5:
        rows[:, 7] = starts + rng.integers(-5, 30, n)
        rows[:, 8] = (rows[:, 7] + rng.integers(0, 30, n)) * (rng.random(n) < 0.5)
    return rows


@pytest.mark.skipif(expand_pairs is None, reason="no C extension")
@pytest.mark.parametrize("order", ["sorted", "reversed", "mostly", "ties", "sorted_ties"])
def test_the_c_expansion_writes_what_numpy_writes(order):
    """Fuzzed drains, small ones and ones past the C sort's runs of 32 (merges), with and
    without runtime rows: the C pass and the numpy reference agree event for event."""
    rng = np.random.default_rng(11)
    for trial in range(120):
        rows = _random_drain(rng, int(rng.integers(0, 40 if trial % 2 else 2000)), order)
        last, runtime_rows = int(rng.integers(-1, 3)), bool(trial % 3)
        c_cols, c_last = store.expand_exec_pairs(rows, last, runtime_rows)
        np_cols, np_last = store.expand_exec_pairs(rows, last, runtime_rows, native=False)
        np.testing.assert_array_equal(c_cols, np_cols)
        assert c_last == np_last
        assert c_cols.flags.c_contiguous and c_cols.shape[0] == ev.RECORD_WIDTH


@pytest.mark.skipif(expand_pairs is None, reason="no C extension")
def test_the_c_expansion_refuses_torn_rows_and_a_short_output():
    types = (ev.EXEC_PAIR, ev.NRT_EXECUTE, ev.RUNTIME_EXECUTE, ev.NC_EXEC_RUNNING, ev.NRT_MODEL_SWITCH)
    rows = _pairs([1, 2, 3], [0, 1, 0])
    with pytest.raises(ValueError, match="whole number of records"):
        expand_pairs(rows.tobytes()[:-8], np.empty(100, dtype=np.int64), -1, False, types)
    with pytest.raises(ValueError, match="too small"):
        expand_pairs(rows, np.empty(ev.RECORD_WIDTH * 5, dtype=np.int64), -1, False, types)
    out = np.empty(ev.RECORD_WIDTH * 8, dtype=np.int64)
    assert expand_pairs(rows, out, -1, False, types) == (8, 0)  # 3 x 2 events and 2 switches


def test_records_to_block_round_trips():
    recs = [(ev.EXEC_PAIR, 2**62, -5, 123456, 3, 4, 1003, 0, 2**40), (1, 2, 3, 4, 5, 6, 7, 8, 9)]
    block = records_to_block(recs)
    assert block.dtype == np.int64 and block.shape == (2, ev.RECORD_WIDTH)
    assert [tuple(int(v) for v in row) for row in block] == recs


class _FakeNdet:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def exec_begin(self, nc, mid, eid, t0) -> None:
        self.calls.append(("begin", eid))

    def exec_end(self, nc, mid, eid, t0, t1, ret) -> None:
        self.calls.append(("end", eid, ret))


@pytest.mark.parametrize("with_ndet", [False, True])
def test_running_call_is_not_counted_until_recorded(tmp_path, with_ndet, wrapper_impl):
    rt = _runtime(tmp_path)
    if with_ndet:
        rt.register(NDET, _FakeNdet())  # takes the general wrapper, which needs the id before the call
    core = rt.core()
    model = rt.add_model(name="g", neff_name="n", graph_hash="0", backend="b", kind="forward", nc_idx=core.nc)
    base = core.ring.produced()
    inside = []

    def graph(x):
        inside.append(core.ring.produced() - base)
        return x

    run = graphs.wrap_graph(Installed(rt), _NoGradTorch, core, model, graph)
    run(1)
    run(2)
    assert inside == [0, 2]  # a flush during the call would not count it as an overwritten event
    assert core.ring.produced() - base == 4
    assert [r[5] for r in core.ring.drain()] == [0, 1]
    if with_ndet:
        assert rt.ndet.calls == [("begin", 0), ("end", 0, 0), ("begin", 1), ("end", 1, 0)]


class _GradTorch:
    grad = False

    @classmethod
    def is_grad_enabled(cls) -> bool:
        return cls.grad


@pytest.mark.parametrize("feed", ["callable", pytest.param("ring", marks=pytest.mark.skipif(
    NativeRing is None, reason="C extension not built or disabled"))])
def test_wrapper_feeds_stats_looks_for_backward_and_yields_to_device_profiles(tmp_path, wrapper_impl, monkeypatch,
                                                                              feed):
    """The stats feed is any callable, or (what neuron-monitor's counters give) a C ring's append,
    which the C wrapper pushes the row into without making a tuple: the same rows either way."""
    rt = _runtime(tmp_path)
    fed = []
    ring = NativeRing(100, ev.RECORD_WIDTH) if feed == "ring" else None

    class _Stats:
        def runtime_feed(self, nc):
            return ring.append if ring is not None else fed.append

    rt.register(STATS, _Stats())
    core = rt.core()
    model = rt.add_model(name="g", neff_name="n", graph_hash="0", backend="b", kind="forward", nc_idx=core.nc)
    looked = []
    monkeypatch.setattr(graphs, "instrument_backward", lambda inst_, torch_, core_, model_, out: looked.append(out))

    def graph(x, *, scale=1):
        return x * scale

    graph._boxed_call = True
    run = graphs.wrap_graph(Installed(rt), _GradTorch, core, model, graph)
    assert run._boxed_call is True  # AOTAutograd reads it off the callable it is given
    _GradTorch.grad = False
    assert run(2, scale=3) == 6  # gradients off: nothing to look for yet
    _GradTorch.grad = True
    try:
        assert run(3) == 3
        assert run(4) == 4  # found once: not looked for again
    finally:
        _GradTorch.grad = False
    assert looked == [3]

    class _DevProf:
        def wants(self, nc, mid):
            return True

        def run(self, torch_, nc, model_, eid, fn, args, kwargs):
            fn_calls.append(eid)
            return fn(*args, **kwargs)

    fn_calls = []
    rt.register(DEVICE_PROFILER, _DevProf())
    assert run(5, scale=2) == 10  # a device-profile session takes the general path, which needs the id first
    rt.unregister(DEVICE_PROFILER)
    assert fn_calls == [3]
    recs = core.ring.drain()
    assert [r[5] for r in recs] == [0, 1, 2, 3]
    if ring is not None:
        fed = [tuple(r) for r in np.frombuffer(ring.take(), dtype=np.int64).reshape(-1, ev.RECORD_WIDTH).tolist()]
    assert fed == [tuple(r) for r in recs.tolist()]  # neuron-monitor sees each record as appended


def test_forked_child_records_its_own_thread_id(tmp_path, wrapper_impl):
    import os

    rt = _runtime(tmp_path)
    core = rt.core()
    model = rt.add_model(name="g", neff_name="n", graph_hash="0", backend="b", kind="forward", nc_idx=core.nc)
    run = graphs.wrap_graph(Installed(rt), _NoGradTorch, core, model, lambda: None)
    run()  # the parent's thread id is now cached
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            run()
            rec = core.ring.drain()[-1]
            os.write(w, f"{rec[3]} {os.getpid()}".encode())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 100).decode().split()
    os.waitpid(pid, 0)
    assert int(got[0]) == int(got[1])  # the child's main thread id is its pid, not the parent's
    assert core.ring.drain()[0][3] == threading.get_native_id()


def test_ndet_execution_records_are_the_same_from_both_wrappers(tmp_path, wrapper_impl):
    from neuron_explorer.contracts import ndet_log as fmt
    from neuron_explorer.recorders.ndet import NdetRecorder

    rt = _runtime(tmp_path)
    rt.register(NDET, NdetRecorder(rt, str(tmp_path), 10**12, require_framework=False))
    core = rt.core()
    model = rt.add_model(name="g", neff_name="n", graph_hash="0", backend="b", kind="forward", nc_idx=core.nc)
    base = core.ring.produced()
    during = []

    def graph(x):
        during.append((rt.ndet.in_flight(), core.ring.produced() - base))
        if x < 0:
            raise KeyError("bad")  # the wrapper's own dict KeyError handling must not swallow it
        return x

    run = graphs.wrap_graph(Installed(rt), _NoGradTorch, core, model, graph)
    assert (type(run).__name__ == "ExecWrapper") == (wrapper_impl == "c")
    assert run(7) == 7
    with pytest.raises(KeyError, match="bad"):
        run(-1)
    nc = core.nc
    (flight0, count0), (flight1, count1) = during
    assert count0 == 0 and count1 == 2  # a running call is not counted
    assert [r[:4] + r[5:] for r in flight0] == [(fmt.KIND_EXEC, fmt.STATE_IN_FLIGHT, nc, 0, 0, model.id, 0, 0, 0, 0)]
    assert flight1[0][7] == 1
    assert rt.ndet.in_flight() == []
    rt.ndet._drain()
    ended = [tuple(r) for r in rt.ndet._ordered_history()[0].tolist()]
    assert [(r[0], r[1], r[2], r[3], r[6], r[7]) for r in ended] == \
        [(fmt.KIND_EXEC, 0, nc, 0, model.id, 0), (fmt.KIND_EXEC, 0, nc, 1, model.id, 1)]
    assert ended[0][4] == flight0[0][4] <= ended[0][5]  # the begin time logged in flight is the start
    recs = core.ring.drain()
    assert recs[:, 5].tolist() == [0, 1] and recs[:, 6].tolist() == [0, 1]
    assert recs[:, 1].tolist() == [r[4] for r in ended] and recs[:, 2].tolist() == [r[5] for r in ended]
    assert core.ring.produced() - base == 4


def test_paused_wrappers_call_the_graph_and_record_nothing(tmp_path):
    """``pause_executions`` (bench/ndet_bench.py --same-process only) makes the C wrapper a plain call."""
    if execution._CWrapper is None:
        pytest.skip("the C wrapper is not in use")
    from neuron_explorer.runtime import _fastpath

    rt = _runtime(tmp_path)
    core = rt.core()
    model = rt.add_model(name="g", neff_name="n", graph_hash="0", backend="b", kind="forward", nc_idx=core.nc)
    run = graphs.wrap_graph(Installed(rt), _NoGradTorch, core, model, lambda a: a + 1)
    assert _fastpath.pause_executions(True) is False
    try:
        assert run(1) == 2
        assert len(core.ring.drain()) == 0
    finally:
        assert _fastpath.pause_executions(False) is True
    assert run(2) == 3
    assert [r[5] for r in core.ring.drain()] == [0]  # the paused call took no execution id


@pytest.mark.parametrize("off", [None, "nrt_load", "nrt_execute", "framework_op"])
def test_the_store_filters_by_type_as_a_gather_of_the_mask_would(off):
    """``CoreStore.add`` skips the mask's gather when every type in the drain's range of ids is on
    (capture/store.py): what it keeps and counts is what the gather keeps, with a type off inside
    the range, at its edge, an id past the registered types, or none off."""
    from neuron_explorer.capture.store import CoreStore, enabled_mask

    rng = np.random.default_rng(5)
    block = _random_drain(rng, 300, "mostly")
    block[:, 0] = rng.choice([ev.EXEC_PAIR, ev.FRAMEWORK_OP, 7], len(block))
    names = [t.name for t in ev.EVENT_TYPES]
    for extra in (None, len(names) + 3):
        if extra is not None:
            block[5, 0] = extra  # a type id no event type has: dropped by the mask
        mask = enabled_mask([t.name != off for t in ev.EVENT_TYPES])
        s = CoreStore(0, 10**6)
        s.add(block, mask, len(block))
        cols, _ = store.expand_exec_pairs(block, -1, bool(mask[ev.RUNTIME_EXECUTE]))
        keep = mask.take(cols[0])
        np.testing.assert_array_equal(s.columns(), cols.compress(keep, axis=1))
        assert s.filtered == int((~keep).sum())
