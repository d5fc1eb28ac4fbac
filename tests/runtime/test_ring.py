"""runtime.ring: the per-core ring (Python and C), its event accounting, thread watches, and the
Python rate gate on a fake clock.  (Wrap-around and the C ring's limits: tests/capture/test_hot_path.py.)"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from neuron_explorer.contracts.events import RECORD_WIDTH
from neuron_explorer.runtime import ring

IMPLS = [pytest.param(True, marks=pytest.mark.skipif(ring.NativeRing is None, reason="C extension not built")),
         False]


@pytest.mark.parametrize("native", IMPLS, ids=["c", "python"])
def test_an_execution_still_running_is_not_counted_until_it_closes(native):
    r = ring.Ring(3, 8, native=native)
    assert r.produced() == 0 and r.executions() == 0
    r.exec_open()
    r.exec_id()  # the id taken before the call (NDET, device profiles)
    assert r.produced() == 0  # running: not an event yet
    r.exec_close()
    assert r.produced() == 2 and r.executions() == 1
    r.tick(), r.tick()
    assert r.produced() == 4


@pytest.mark.parametrize("native", IMPLS, ids=["c", "python"])
def test_a_drain_hands_out_what_is_buffered_oldest_first_at_the_capacity(native):
    r = ring.Ring(0, 3, native=native)
    assert r.drain().shape == (0, RECORD_WIDTH)
    for i in range(3):
        r.append((i, -1, -(2**63), 2**63 - 1, 0, 0, 0, 0, i))
    got = r.drain()
    assert got.shape == (3, RECORD_WIDTH) and got[:, 0].tolist() == [0, 1, 2]
    assert got[0, 2] == -(2**63) and got[0, 3] == 2**63 - 1  # the int64 extremes survive
    r.append((9,) * RECORD_WIDTH)
    assert r.drain()[:, 0].tolist() == [9]


@pytest.mark.parametrize("native", IMPLS, ids=["c", "python"])
def test_a_record_takes_ints_and_their_like_and_refuses_what_int64_cannot_hold(native):
    r = ring.Ring(0, 4, native=native)
    t0 = 1_764_400_000_123_456_789  # a clock reading: three 30-bit digits
    r.append((1, t0, t0 + 5, np.int64(7), True, 0, 0, 0, -t0))  # __index__ taken, as int() would
    assert r.drain().tolist() == [[1, t0, t0 + 5, 7, 1, 0, 0, 0, -t0]]
    if not native:
        return  # (the Python ring stores the tuple; the C ring converts it on append)
    for bad in (2**63, -(2**63) - 1):
        with pytest.raises(OverflowError):
            r.append((1, bad, 0, 0, 0, 0, 0, 0, 0))
    with pytest.raises(TypeError):
        r.append((1, 2.5, 0, 0, 0, 0, 0, 0, 0))
    assert r.drain().shape == (0, RECORD_WIDTH)  # nothing of a refused record stored


def test_records_to_block_of_no_records():
    assert ring.records_to_block([]).shape == (0, RECORD_WIDTH)


def test_a_watch_counts_this_threads_executions_and_nests():
    r = ring.Ring(0, 4, native=False)
    outer = r.watch_thread()
    outer[2][0] += 1  # what an execution wrapper does while the dict is not empty
    inner = r.watch_thread()
    inner[2][0] += 2
    assert r.unwatch_thread(*inner) == 2
    assert r.unwatch_thread(*outer) == 3  # the inner watch's executions count for the outer one too
    assert r.watch == {}
    ident = {}

    def other():
        ident["w"] = r.watch_thread()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert ident["w"][0] != threading.get_ident() and list(r.watch) == [ident["w"][0]]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t


class Opt:  # stands for an optimizer: weak references, as torch's
    pass


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(ring, "time", c)
    return c


def test_the_python_gate_lets_a_call_through_per_period_or_after_enough_calls(clock):
    through = []
    gate = ring.PyRateGate(lambda o, *a: through.append(round(clock.t - 1000, 2)) or "ran", 0.2, 3, 0.5)
    a = Opt()
    for dt in (0.0, 0.1, 0.3, 0.35, 0.6, 0.86, 0.87):
        clock.t = 1000 + dt
        gate(a)
    # 0.1: within the period; 0.3: past it but only 2 calls held; 0.35: the 3rd call; 0.6 held; 0.86: max_s
    assert through == [0.0, 0.35, 0.86]
    clock.t = 900.0  # a clock that went back: the call goes through
    assert gate(a) == "ran" and through[-1] == -100.0


def test_the_python_gate_remembers_four_objects_and_holds_none_alive(clock):
    import gc
    import weakref

    through = []
    gate = ring.PyRateGate(lambda o: through.append(o), 10.0, 100, 10.0)
    objs = [Opt() for _ in range(5)]
    for o in objs:
        gate(o)
    gate(objs[4])  # remembered: held
    gate(objs[0])  # forgotten (the oldest slot was reused): goes through again
    assert through == objs + [objs[0]]
    gone = weakref.ref(objs[1])
    del objs, through[:]
    gc.collect()
    assert gone() is None
    plain = []
    gate2 = ring.PyRateGate(lambda o: plain.append(o), 10.0, 100, 10.0)
    gate2(1), gate2(1)  # an int has no weak reference: every call goes through
    assert plain == [1, 1]


@pytest.mark.parametrize("args", [(None, 1.0, 1, 1.0), (print, -1.0, 1, 1.0), (print, 1.0, 1, 2e6),
                                  (print, float("nan"), 1, 1.0)])
def test_the_python_gate_refuses_bad_settings(args):
    with pytest.raises(ValueError, match="RateGate"):
        ring.PyRateGate(*args)


def test_drained_blocks_are_int64_rows():
    r = ring.Ring(0, 2, native=False)
    r.append(tuple(range(RECORD_WIDTH)))
    b = r.drain()
    assert b.dtype == np.int64 and b.tolist() == [list(range(RECORD_WIDTH))]


@pytest.mark.skipif(ring.NativeRing is None, reason="C extension not built")
def test_the_c_ring_keeps_its_rows_in_order_as_it_grows_and_after_takes():
    """A C ring that may hold 256 KiB or more starts as a mapping of that size and grows by mremap
    (runtime/_fastpath.c): every row comes out, oldest first, across growths, takes and the drop
    at capacity."""
    from neuron_explorer.runtime._fastpath import RingBuffer

    w = RECORD_WIDTH
    r = RingBuffer(10_000, width=w)

    def row(i):
        return (i, -i, i * 7) + (i,) * (w - 3)

    for i in range(3000):  # within the first mapping (3,641 rows of 72 bytes)
        r.append(row(i))
        if i in (63, 64, 1000):  # a take at a growth's edge and in the middle leaves the rest in order
            got = np.frombuffer(r.take(), dtype=np.int64).reshape(-1, w)
            assert got[:, 0].tolist() == list(range(got[0, 0], i + 1)) and got[-1].tolist() == list(row(i))
    for i in range(3000, 16_000):  # 7,282, then the capacity (mremap); past it the oldest dropped
        r.append(row(i))
    got = np.frombuffer(r.take(), dtype=np.int64).reshape(-1, w)
    assert got[:, 0].tolist() == list(range(6000, 16_000))
    assert (got[:, 1] == -got[:, 0]).all() and (got[:, 2] == 7 * got[:, 0]).all() and (got[:, 3:].T == got[:, 0]).all()
    assert len(r) == 0 and r.take() == b""
    for i in range(20):  # a ring emptied by a take fills again from the front
        r.append(row(i))
    assert np.frombuffer(r.take(), dtype=np.int64).reshape(-1, w)[:, 0].tolist() == list(range(20))
    del r  # (the mapping unmapped)


@pytest.mark.skipif(ring.NativeRing is None, reason="C extension not built")
def test_a_small_c_ring_grows_from_64_rows_by_the_allocator():
    """A ring that cannot reach 256 KiB starts at 64 rows and doubles from the allocator: the rows
    come out in order across growths, a take and the drop at capacity."""
    from neuron_explorer.runtime._fastpath import RingBuffer

    w = RECORD_WIDTH
    r = RingBuffer(3000, width=w)
    for i in range(100):  # 64 -> 128
        r.append((i,) * w)
    assert np.frombuffer(r.take(), dtype=np.int64).reshape(-1, w)[:, 0].tolist() == list(range(100))
    for i in range(5000):  # ... 2048, then the capacity; past it the oldest dropped
        r.append((i,) * w)
    got = np.frombuffer(r.take(), dtype=np.int64).reshape(-1, w)
    assert got[:, 0].tolist() == list(range(2000, 5000)) and (got.T == got[:, 0]).all()
