"""A bounded per-core event buffer.

Records are rows of ``RECORD_WIDTH`` ints.  With the C extension (``_fastpath.RingBuffer``) they
are stored as int64 rows in a circular buffer: the C execution wrapper writes its rows straight
into it, Python producers call ``append`` with a tuple, and ``drain`` hands everything out as one
(n, RECORD_WIDTH) array without converting record by record.  Without the extension a
``deque(maxlen=capacity)`` of tuples does the same.  Either way ``append`` is one C call, atomic
under the GIL, so the completion callbacks of collectives may record from another thread.

``tick`` counts every other event produced, so the number of overwritten events is known.
Executions are counted apart: ``exec_id`` hands out the core's execution ids, and each id stands
for exactly one ``EXEC_PAIR`` record, i.e. two events (``nrt_execute`` + ``nc_exec_running``), so
the execution hot path needs no ``tick`` at all.
"""

from __future__ import annotations

import itertools
import os
import struct
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from itertools import starmap
from typing import TYPE_CHECKING, Any

import numpy as np

from neuron_explorer.contracts.events import RECORD_WIDTH as W

if TYPE_CHECKING:
    from . import _fastpath as _c

# The C extension's ring, execution wrapper, NDET in-flight slots, NaN/Inf scanner, eager
# optimizer step and the eager hooks' and regions' gates (runtime/_fastpath.c, _finite.h, _step.h,
# _hooks.h); all None without the extension or with NEURON_EXPLORER_PURE_PYTHON=1, and the Python
# versions run instead (runtime/_fastpath.pyi names each one's twin).
EagerStep: type[_c.EagerStep] | None
ExecWrapper: type[_c.ExecWrapper] | None
NanScanner: type[_c.NanScanner] | None
NativeRing: type[_c.RingBuffer] | None
SlotTable: type[_c.SlotTable] | None
Counter: type[_c.Counter] | None
RateGate: type[_c.RateGate] | type[PyRateGate]
backward_gate: Callable[..., Callable[..., Any]] | None
backward_settle: Callable[..., None] | None
module_call_gate: Callable[..., None] | None
module_call_root: Callable[..., None] | None
module_call_skip: Callable[[object], None] | None
EagerLocal: type[_c.EagerLocal] | None
region_methods: Callable[..., tuple[Callable[..., Any], Callable[..., Any]] | None] | None
expand_pairs: Callable[..., tuple[int, int]] | None
if TYPE_CHECKING:
    NativeRingBuffer = _c.RingBuffer  # (the C ring's type, for annotations in other packages)
try:
    from ._fastpath import EagerStep, ExecWrapper, NanScanner, RingBuffer as NativeRing, SlotTable
except ImportError:  # pragma: no cover - a build without a C compiler
    EagerStep = ExecWrapper = NanScanner = NativeRing = SlotTable = None
try:  # (apart: an extension built before the gates existed keeps the rest of the C path)
    from ._fastpath import backward_gate, module_call_gate, module_call_skip, region_methods
except ImportError:  # pragma: no cover - no extension, or one built from older sources
    backward_gate = module_call_gate = module_call_skip = region_methods = None
try:  # the eager roots' and backwards' calls in C, with the thread state they read (_local.h)
    from ._fastpath import EagerLocal, backward_settle, module_call_root
except ImportError:  # pragma: no cover - no extension, or one built from older sources
    EagerLocal = backward_settle = module_call_root = None


class PyRateGate:
    """``RateGate`` without the extension, the same rule in Python (see ``_fastpath.c``):
    ``gate(obj, *rest)`` calls ``fn(obj, *rest)`` unless the last call for ``obj`` that went
    through was less than ``period_s`` ago, or less than ``max_s`` ago with fewer than ``calls``
    calls since; up to four objects are remembered by weak reference."""

    __slots__ = ("fn", "_period", "_calls", "_max", "_seen", "_next")

    def __init__(self, fn, period_s: float, calls: int, max_s: float) -> None:
        if not callable(fn) or not 0 <= period_s <= 1e6 or not 0 <= max_s <= 1e6:
            raise ValueError("RateGate: fn must be callable, period_s and max_s in [0, 1e6] seconds")
        self.fn, self._period, self._calls, self._max = fn, period_s, int(calls), max_s
        self._seen: list[list | None] = [None] * 4  # [weak reference, when it went through, calls held]
        self._next = 0

    def __call__(self, obj, *rest, **kwargs):
        now = time.monotonic()
        e = next((e for e in self._seen if e is not None and e[0]() is obj), None)
        if e is not None:
            age, e[2] = now - e[1], e[2] + 1
            if age >= 0 and (age < self._period or (age < self._max and e[2] < self._calls)):
                return None
        out = self.fn(obj, *rest, **kwargs)
        if e is None:
            try:
                e = [weakref.ref(obj), now, 0]
            except TypeError:  # an object without weak references: its every call goes through
                return out
            free = [i for i, old in enumerate(self._seen) if old is None or old[0]() is None]
            if free:
                self._seen[free[0]] = e
            else:
                self._seen[self._next] = e
                self._next = (self._next + 1) % len(self._seen)
        e[1], e[2] = now, 0
        return out


try:  # ids the C wrapper takes without making an int (itertools.count otherwise); a hook's rate gate;
    # a drain's execution pairs expanded into columns (capture.store, numpy otherwise)
    from ._fastpath import Counter, RateGate, expand_pairs
except ImportError:  # pragma: no cover - no extension, or one built from older sources
    Counter, RateGate, expand_pairs = None, PyRateGate, None
grad_entries: Callable[[Any, Any, int], list[tuple[int, int, int]]] | None
try:  # the gradient snapshot's loop (integrations/torch/memory.py's ``_grad_entries`` otherwise)
    from ._fastpath import grad_entries
except ImportError:  # pragma: no cover - no extension, or one built from older sources
    grad_entries = None
read_file: Callable[[str], bytes | None] | None
try:  # a small /proc file read with the GIL held (util/procfs.py's reader otherwise: decision 0217)
    from ._fastpath import read_file
except ImportError:  # pragma: no cover - no extension, or one built from older sources
    read_file = None
Stamp: type[_c.Stamp] | None
stamps_alive: Callable[[], int] | None
try:  # a collective's completion callback that only keeps the time (integrations/torch/collectives.py's
    # Python callback otherwise: decision 0220)
    from ._fastpath import Stamp, stamps_alive
except ImportError:  # pragma: no cover - no extension, or one built from older sources
    Stamp = stamps_alive = None
JitCall: type[_c.JitCall] | None
try:  # the jax.jit stand-in's call (runtime/_jit.h; integrations/jax/jit.py's closure otherwise)
    from ._fastpath import JitCall
except ImportError:  # pragma: no cover - no extension, or one built from older sources
    JitCall = None
if os.environ.get("NEURON_EXPLORER_PURE_PYTHON", "0") not in ("", "0"):
    JitCall = None
    EagerStep = ExecWrapper = NanScanner = NativeRing = SlotTable = Counter = expand_pairs = None
    RateGate = PyRateGate
    grad_entries = read_file = Stamp = stamps_alive = None
    backward_gate = module_call_gate = module_call_skip = region_methods = None
    EagerLocal = backward_settle = module_call_root = None

# One record as W native int64s: ``b"".join(starmap(_pack, records))`` converts a list of tuples
# in C (~40% fewer instructions per record than numpy.fromiter over the chained tuples).
_pack = struct.Struct("=%dq" % W).pack


def records_to_block(records: list[tuple]) -> np.ndarray:
    """Ring records (tuples of W ints) as an (n, W) int64 array."""
    return np.frombuffer(b"".join(starmap(_pack, records)), dtype=np.int64).reshape(-1, W)


def _count_of(counter) -> int:
    """The next value of a ``Counter`` or an ``itertools.count`` without advancing it."""
    value = getattr(counter, "value", None)
    return value if value is not None else int(repr(counter)[6:-1])  # "count(N)"


class Ring:
    __slots__ = ("nc", "capacity", "buffer", "_q", "append", "ticks", "tick", "exec_counter", "exec_id",
                 "open_counter", "exec_open", "close_counter", "exec_close", "watch")

    def __init__(self, nc: int, capacity: int, native: bool | None = None) -> None:
        """``native``: use the C buffer (default: when the extension is built)."""
        self.nc = nc
        self.capacity = capacity
        use_c = NativeRing is not None if native is None else native
        self.buffer: _c.RingBuffer | None = None
        self._q: deque[tuple[int, ...]] | None = None
        self.append: Callable[[tuple[int, ...]], None]
        if use_c and NativeRing is not None:
            self.buffer = NativeRing(capacity)  # the C wrapper writes here directly
            self.append = self.buffer.append
        else:
            self._q = deque(maxlen=capacity)
            self.append = self._q.append
        ids = Counter if use_c and Counter is not None else itertools.count
        # every other event produced: ``tick()`` from Python; C producers (record_function regions,
        # runtime/_hooks.h) advance ``ticks`` in place, with no int made (a Counter with the extension)
        self.ticks = ids()
        self.tick = self.ticks.__next__
        # Execution ids of this core.  Whoever takes an id must append exactly one EXEC_PAIR record
        # for it (also when the execution fails): produced() counts two events per id.  The common
        # wrapper takes the id when the call has returned, right before the append; a wrapper that
        # needs the id before the call (NDET, device profiles) brackets the call with exec_open()
        # and exec_close() so an execution still running is not counted as an overwritten event.
        self.exec_counter = ids()  # the C wrapper advances it directly
        self.exec_id = self.exec_counter.__next__
        self.open_counter = ids()  # (the C wrapper's NDET path advances these directly)
        self.exec_open = self.open_counter.__next__
        self.close_counter = ids()
        self.exec_close = self.close_counter.__next__
        # Threads being watched: thread ident -> [executions recorded on that thread since].  An
        # eager root's first call watches its own thread to learn whether compiled graphs ran
        # inside it (another thread's executions on the same core must not count); every
        # execution wrapper counts here while the dict is not empty (see watch_thread).
        self.watch: dict[int, list[int]] = {}

    def watch_thread(self) -> tuple[int, list[int] | None, list[int]]:
        """Start counting the executions recorded on this thread: ``(ident, previous, cell)``;
        ``cell[0]`` counts them until ``unwatch_thread`` (a watch inside a watch keeps counting
        for the outer one too)."""
        ident = threading.get_ident()
        prev = self.watch.get(ident)
        cell = self.watch[ident] = [0]
        return ident, prev, cell

    def unwatch_thread(self, ident: int, prev: list[int] | None, cell: list[int]) -> int:
        """Stop the watch ``watch_thread`` started; the executions it counted."""
        if prev is None:
            self.watch.pop(ident, None)
        else:
            prev[0] += cell[0]
            self.watch[ident] = prev
        return cell[0]

    def executions(self) -> int:
        """Execution ids handed out so far."""
        return _count_of(self.exec_counter)

    def produced(self) -> int:
        """Events produced so far: the ticks, plus two per execution that has been recorded."""
        running = _count_of(self.open_counter) - _count_of(self.close_counter)
        return _count_of(self.ticks) + 2 * (_count_of(self.exec_counter) - running)

    def drain(self) -> np.ndarray:
        """Remove and return what is buffered, oldest first, as an (n, RECORD_WIDTH) int64 array;
        safe against concurrent appends."""
        if self.buffer is not None:
            return np.frombuffer(self.buffer.take(), dtype=np.int64).reshape(-1, W)
        q = self._q
        assert q is not None  # (no C buffer: the deque)
        n = len(q)
        pop = q.popleft
        return records_to_block([pop() for _ in range(n)])
