"""The capture's hot paths in C (``runtime/_fastpath.c`` and the headers it includes).

Everything here has a Python twin that runs when the extension is not built, or with
``NEURON_EXPLORER_PURE_PYTHON=1``: ``runtime/ring.py`` imports these names and sets each to None
(``RateGate``: to ``PyRateGate``), and every caller takes its Python path on None.  The twin is the
reference the tests hold the C code to; each entry below names it.  The C side decides the common
case without a Python frame and calls back into the twin's Python code for everything else.

Module functions are positional-only (``METH_VARARGS``/``METH_O``); the types' constructors also
take keywords.  Records are rows of int64: ``WIDTH`` (``contracts.events.RECORD_WIDTH``, 9) for the
capture ring, 11 for NDET's ring (``ndet/format.py``).
"""

import os
from collections.abc import Callable, Iterator, Sequence
from types import FunctionType
from typing import Any, final

from _typeshed import ReadableBuffer, WriteableBuffer
from numpy.typing import NDArray
from typing_extensions import CapsuleType

WIDTH: int
"""Fields of a capture ring record (``contracts.events.RECORD_WIDTH``)."""

_Inflight = dict[tuple[int, int], tuple[int, ...]]
# ExecWrapper(ndet=...): (inflight, NDET ring, exec_open counter, exec_close counter, core, kind, state[, slots])
_Ndet = (tuple[_Inflight, RingBuffer, Iterator[int], Iterator[int], int, int, int]
         | tuple[_Inflight, RingBuffer, Iterator[int], Iterator[int], int, int, int, SlotTable | None])
# ExecWrapper(scan=...): (scanner, numerr(eid, t0, t1, tid, nan, inf), the ret of a numerical error)
_Scan = tuple[NanScanner, Callable[[int, int, int, int, int, int], object], int]

@final
class RingBuffer:
    """The newest ``capacity`` records of ``width`` int64 fields, in a circular buffer that grows by
    doubling up to ``capacity`` (the oldest record is overwritten beyond it).  The C wrappers write
    their rows straight into it; Python producers ``append`` tuples.

    Twin: ``runtime.ring.Ring`` without the extension, a ``deque(maxlen=capacity)`` of tuples that
    ``drain`` packs with ``records_to_block``."""

    def __new__(cls, capacity: int, width: int = 9) -> RingBuffer: ...
    def append(self, record: Sequence[int], /) -> None:
        """One record of exactly ``width`` ints (``deque.append``); ``ValueError`` otherwise."""
    def take(self) -> bytes:
        """The records held, oldest first, as native int64 bytes (``width`` per record), and the
        ring emptied: what ``numpy.frombuffer(...).reshape(-1, width)`` views without a copy."""
    def __len__(self) -> int: ...
    @property
    def capacity(self) -> int:
        """Records kept."""
    @property
    def width(self) -> int:
        """Fields per record (1..16)."""

@final
class SlotTable:
    """NDET's in-flight execution records while their calls run, in 32 C slots the C execution
    wrapper fills and frees (a hang shows as a record still in flight).  When all are taken the
    wrapper uses the recorder's dict instead.

    Twin: the dict ``NdetRecorder.exec_begin`` keeps, ``(core, exec id) -> record``
    (``ndet/recorder.py``); ``records()`` is what its ``values()`` would hold."""

    def __new__(cls) -> SlotTable: ...
    def records(self) -> list[tuple[int, ...]]:
        """The in-flight records held, as tuples of 11 ints."""
    def __len__(self) -> int: ...

@final
class Counter:
    """``itertools.count(start)`` that the C wrapper advances in place, without making an int per
    id; ``repr`` is ``count(N)`` like the original.  Twin: ``itertools.count``."""

    def __new__(cls, start: int = 0) -> Counter: ...
    def __iter__(self) -> Counter: ...
    def __next__(self) -> int:
        """The next id (``OverflowError`` at the int64 limit)."""
    @property
    def value(self) -> int:
        """The id ``next()`` hands out next, without taking it."""

@final
class Stamp:
    """A completion callback for a collective's future: its first call (on the backend's thread)
    stores the clock and that thread's id and nothing else, so the backend holds the GIL for no
    Python frame; the training thread records the span from ``t`` later.  Twin: the Python
    callback ``collectives._Done`` (which records the span itself on the backend's thread)."""

    def __new__(cls) -> Stamp: ...
    def __call__(self, *args: object, **kwargs: object) -> None: ...
    @property
    def t(self) -> int:
        """``CLOCK_MONOTONIC`` ns of the first call; 0 before it."""
    @property
    def tid(self) -> int:
        """The OS thread id of the first call."""

def stamps_alive() -> int:
    """How many ``Stamp`` objects are not freed yet (0 in a forked child until it makes one)."""

@final
class RateGate:
    """``gate(obj, *rest, **kw)`` calls ``fn(obj, *rest, **kw)`` unless the last call for ``obj``
    that went through was less than ``period_s`` ago, or less than ``max_s`` ago with fewer than
    ``calls`` calls since (then it returns None).  Up to four objects are remembered by weak
    reference; an object without weak references always goes through.  For a hook that runs every
    step and works only now and then (the device-memory source's optimizer pre-hook).

    Twin: ``runtime.ring.PyRateGate``, the same rule in Python."""

    def __new__(cls, fn: Callable[..., Any], period_s: float, calls: int, max_s: float) -> RateGate: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    @property
    def fn(self) -> Callable[..., Any]:
        """What the gate calls."""

@final
class NanScanner:
    """``scanner(outputs) -> (nan count, inf count)`` over a graph's outputs (a tensor, or tensors in
    tuples, lists and dicts), reading CPU float16/bfloat16/float32/float64 memory through DLPack's C
    exchange API (``api``: the capsule ``tensor_type.__dlpack_c_exchange_api__``, or None).  Any other
    tensor (another device, a subclass, another float type, a refused export) goes to
    ``slow(tensor) -> (nan, inf)``; integer, bool and complex tensors are skipped.

    Twin: ``integrations/torch/tensors.py`` ``_python_scanner`` (``torch.isnan``/``isinf`` sums);
    ``nan_scanner`` picks one."""

    def __new__(cls, tensor_type: type, api: CapsuleType | None,
                slow: Callable[[Any], tuple[int, int]]) -> NanScanner: ...
    def __call__(self, outputs: Any, /) -> tuple[int, int]: ...
    @property
    def reads_memory(self) -> bool:
        """Whether CPU float tensors are read in C (False: every tensor goes to ``slow``)."""

@final
class ExecWrapper:
    """A compiled graph's execution recorder: ``wrapper(*args, **kw)`` calls ``fn`` with the
    caller's arguments as they are and appends ``(head, t0, t1, tid, mid, next(counter), ret, 0, 0)``
    to ``ring`` (ret 1 when ``fn`` raised; the exception passes through unchanged).  Yields to
    ``general(*args, **kw)`` while ``devprof[0]`` holds a device profiler (unless ``settled[0]`` is
    that profiler); feeds ``stats(record)`` (neuron-monitor); calls ``backward(out)`` after each
    successful call until it returns true; with ``ndet`` keeps the call in flight (``SlotTable`` or
    the dict) and writes NDET's ended record; with ``scan`` counts NaN/Inf in the outputs and calls
    ``numerr`` when there are any; counts the call in ``watch[thread ident]`` when that thread is
    watched.  Attributes can be set on it (``__wrapped__``, ``_boxed_call``, ...).

    Twin: ``integrations/torch/execution.py``: ``_lean_wrapper`` (the common case) and
    ``general_path`` (NDET, NaN check, device profiles); ``c_execution`` builds this one."""

    def __new__(cls, fn: Callable[..., Any], ring: RingBuffer, counter: Iterator[int], head: int, mid: int,
                devprof: list[Any], general: Callable[..., Any],
                stats: Callable[[tuple[int, ...]], object] | None = None,
                backward: Callable[[Any], object] | None = None, ndet: _Ndet | None = None,
                scan: _Scan | None = None, settled: list[Any] | None = None,
                watch: dict[int, list[int]] | None = None) -> ExecWrapper: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    @property
    def fn(self) -> Callable[..., Any]:
        """The wrapped graph."""
    @property
    def backward_pending(self) -> bool:
        """Whether ``backward`` is still called after each call (the backward not found yet)."""
    def __getattr__(self, name: str) -> Any: ...
    def __setattr__(self, name: str, value: Any) -> None: ...

@final
class EagerStep:
    """An optimizer class's ``step``: ``slow(*args, **kw)`` (the Python path) until
    ``settle(opt, run)``, then ``run(...)`` (an ``ExecWrapper``) records ``opt``'s steps without a
    Python frame; ``fn`` (torch's hooked step) as it is while recording is off
    (``enabled[index]`` false) or inside a root module or recorded backward (``tl.depth > 0``).
    Binds like a method.

    Twin: the Python ``step`` wrapper of ``integrations/torch/eager.py`` (``profile_hook_step``),
    which is ``slow`` here."""

    def __new__(cls, fn: Callable[..., Any], tl: Any, enabled: list[bool], index: int,
                slow: Callable[..., Any]) -> EagerStep: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, obj: object, owner: type | None = None) -> Any: ...
    def settle(self, optimizer: object | None, run: ExecWrapper | None, /) -> None:
        """Record ``optimizer``'s later steps with ``run``; ``settle(None, None)`` forgets."""
    @property
    def settled(self) -> object | None:
        """The optimizer whose steps are recorded in C, or None."""
    @property
    def fn(self) -> Callable[..., Any]:
        """Torch's step."""
    def __getattr__(self, name: str) -> Any: ...
    def __setattr__(self, name: str, value: Any) -> None: ...

@final
class EagerLocal:
    """The eager hooks' per-thread ``depth`` and ``grad_root`` (0 and None on a thread that has not
    set them), kept in C thread-local storage: the gates read them without an attribute lookup.
    One instance in use per process.  Twin: ``_Local`` (a ``threading.local``) of
    ``integrations/torch/eager.py``."""

    depth: int
    grad_root: Any
    def __new__(cls) -> EagerLocal: ...

@final
class JitCall:
    """The call of a ``jax.jit`` stand-in (``_jit.h``): ``slow(args, kwargs)`` unless ``gate[0]`` is
    None and ``level.value`` is ``top`` (not tracing); else ``fn(*args, **kwargs)`` with the
    caller's arguments as they are, then ``record_compiled(t0, t1, ret)`` when ``compiles`` is not
    empty, or ``(head, t0, t1, tid, mid_box[0], next(counter), ret, 0, 0)`` into ``ring`` and
    ``stats`` (ret 1 when ``fn`` raised; the exception passes through unchanged).

    Twin: ``integrations/jax/jit.py``: ``_Jit.make_call``'s closure."""

    def __new__(cls, fn: Callable[..., Any], ring: RingBuffer, counter: Iterator[int], head: int,
                mid_box: list[int], gate: list[Any], level: Any, top: Any, compiles: list[Any],
                slow: Callable[[tuple[Any, ...], dict[str, Any]], Any],
                record_compiled: Callable[[int, int, int], object],
                stats: Callable[[tuple[int, ...]], object] | None = None) -> JitCall: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    @property
    def fn(self) -> Callable[..., Any]:
        """The PjitFunction called."""

def now_ns() -> int:
    """CLOCK_MONOTONIC in nanoseconds, the clock the wrappers stamp (``time.perf_counter_ns``'s)."""

def thread_id() -> int:
    """The OS thread id the wrappers record (``threading.get_native_id``), cached per thread."""

def pause_executions(flag: object, /) -> bool:
    """Benchmarks only (``bench/ndet_bench.py``): while true, execution wrappers and C regions call
    through and record nothing.  Returns the previous setting.  The runtime never sets it."""

def forward_signal(sig: int, fd: int, /) -> None:
    """Put a C handler in front of ``sig``'s current one: it writes the signal number to ``fd`` (a
    non-blocking pipe a watcher thread reads), then calls the previous handler.  Wakes the watcher
    even while the main thread is blocked in C.  Twin: ``signal.set_wakeup_fd`` (``runtime/signals.py``)."""

def stop_forwarding() -> None:
    """Put back the handlers ``forward_signal`` replaced (one replaced since is left alone)."""

def die_by_signal(sig: int, /) -> None:
    """Default disposition, unblock, ``raise(sig)``: the process ends as it would have unprofiled.
    Returns only if ``sig``'s default action does not end the process.  Twin: the ``ctypes`` path of
    ``runtime.signals._die_by_signal``."""

def module_call_gate(func: FunctionType, tl: Any, inner: Callable[..., Any], graph_type: type, /) -> None:
    """Give the Python ``Module.__call__`` function ``func`` a C vectorcall that answers, without
    running its frame, the calls with nothing to record: nested calls (``tl.depth > 0``) and
    ``graph_type`` (FX graph module) instances go straight to ``inner``; the compiled root marked by
    ``module_call_skip`` runs ``inner`` at depth 1.  Everything else runs ``func``'s own code, the
    twin (``integrations/torch/eager.py``).  One function per process holds the gate."""

def module_call_skip(mod: object, /) -> None:
    """Mark ``mod`` (weakly) as the compiled root whose calls ``module_call_gate`` runs at depth 1."""

def module_call_root(mod: object, run: Callable[..., Any] | None = None, ex: object = None,
                     enabled: list[bool] | None = None, index: int = 0,
                     grad_on: Callable[[], bool] | None = None, /) -> None:
    """Settle ``mod`` (weakly) as the recorded root whose calls at depth 0 ``module_call_gate``
    answers in C while ``enabled[index]``: depth 1, ``tl.grad_root = ex`` when it is None and
    ``grad_on()``, ``run(mod, *args, **kwargs)`` (its graph's ``ExecWrapper``), depth 0.
    ``module_call_root(None)`` forgets.  Twin: the Python ``__call__`` and ``record``."""

def backward_gate(name: str, tl: Any, orig: Callable[..., Any], slow: Callable[..., Any],
                  pending: dict[Any, Any] | None = None, after: Callable[[], Any] | None = None,
                  enabled: list[bool] | None = None, index: int = 0, queued: int | None = None, /
                  ) -> Callable[..., Any]:
    """A builtin function named ``name`` (with ``orig``'s docstring) standing for
    ``torch.autograd.backward``/``grad``: ``orig`` when ``tl.grad_root`` is None or ``tl.depth > 0``;
    the settled run (``backward_settle``) when ``tl.grad_root`` is the graph settled and
    ``enabled[index]``: grad_root None, depth 1, ``run(*args, **kwargs)``, depth 0, then ``after()``
    when ``pending`` is not empty or the ``long`` at address ``queued`` (the C++ collective kernels'
    queue size) is not 0; else ``slow``, the Python wrapper of ``integrations/torch/eager.py``
    (its twin)."""

def backward_settle(gate: Callable[..., Any], ex: object, run: Callable[..., Any] | None, /) -> None:
    """Let ``gate`` (a ``backward_gate``) record the backward after a root run of graph ``ex`` with
    ``run`` (its ``ExecWrapper``); ``backward_settle(gate, None, None)`` forgets."""

def region_methods(cls: type, enter: Callable[[Any], Any], exit: Callable[..., Any], ring: RingBuffer,
                   ticks: Iterator[int], strings: dict[str, int], intern: Callable[[str], int],
                   enabled: list[bool], index: int, /) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """``(__enter__, __exit__)`` method descriptors for ``record_function`` (``cls``): enter stamps
    the start on the instance, then calls torch's ``enter``; exit calls torch's ``exit``, then (while
    ``enabled[index]``) appends the region's framework event to ``ring`` (its label's id from
    ``strings``, else ``intern``) and advances ``ticks`` (the ring's event counter: a ``Counter``
    in place, any other iterator by ``next``).  None when the process already has them.
    Twin: the Python ``__enter__`` / ``__exit__`` of ``integrations/torch/regions.py``
    ``install_regions``."""

def expand_pairs(rows: ReadableBuffer | NDArray[Any], out: WriteableBuffer | NDArray[Any], last_model: int,
                 runtime_rows: bool, types: tuple[int, int, int, int, int], /) -> tuple[int, int]:
    """A drain's records (``rows``: n records of ``WIDTH`` native int64) expanded into the capture's
    events, written to ``out`` as ``WIDTH`` columns of m events: each EXEC_PAIR becomes nrt_execute,
    [runtime_execute,] nc_exec_running, plus nrt_model_switch where the core's graph changes, all
    stably sorted by start.  ``types``: the ids of (EXEC_PAIR, nrt_execute, runtime_execute,
    nc_exec_running, nrt_model_switch).  Returns ``(m, last_model)``; ``ValueError`` when ``out`` is
    too small.  Runs without the GIL on large drains.  Twin: ``capture/store.py`` ``_expand_rows``
    (numpy), the reference its tests compare with."""

def read_file(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], /) -> bytes | None:
    """The whole file at ``path`` (a small ``/proc`` file), read with the GIL held, or None where it
    cannot be opened or read (any errno; also beyond 64 MiB).  Twin: ``util/procfs.py``
    ``read_python`` (decision 0217)."""

def grad_entries(groups: Any, tensor_type: Any, core: int, /) -> list[tuple[int, int, int]]:
    """``(storage.data_ptr(), core, int(storage.nbytes()))`` of the ``untyped_storage()`` of each
    gradient (``getattr(p, "grad", None)`` when a ``tensor_type``) of each parameter of each group's
    ``get("params", ())``, in order; the calls' exceptions propagate.
    Twin: ``integrations/torch/memory.py`` ``_grad_entries`` (without ``core_of``)."""
