"""Recording the executions of one compiled graph: the hot path (docs/decisions/0006-c-hot-path.md).

``wrap_execution`` returns the callable that runs a graph in place of the backend's, and records
one execution per call.  Everything that can be decided when the graph is loaded is decided there,
so each variant carries no branch it does not need:

* the C ``ExecWrapper`` (``runtime/_fastpath.c``) when the extension is built: no Python frame of
  its own, rows written straight into the core's ring, with NDET on also NDET's in-flight (a C
  slot) and ended records, and with the NaN check the C scanner's pass over the outputs
  (``runtime/_finite.h``);
* the lean Python wrapper, the same without the extension (and without NDET or the NaN check);
* the general path, for what the lean ones hand over: NDET's begin/end records without a C ring,
  the NaN check without the C scanner, and device profiles (the lean wrappers yield to it per call
  while a profiler wants the call: every call in ``session`` mode, until the graph has been
  profiled on its core in ``model`` mode).

The hot path is two clock reads, an inline thread-id lookup, an execution id (a C counter that
also counts the record's two events) and one append; graph switches and the
nrt_execute/nc_exec_running split are derived when the rings are drained.  Execution ids number
the executions of a core in the order they complete (the order they start for a wrapper that needs
the id up front); on one thread that is the same thing.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from neuron_explorer.contracts import events as ev
from neuron_explorer.integrations.torch.frames import hide_our_frames
from neuron_explorer.integrations.torch.tensors import nan_scanner
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.core import CoreState, Model, Runtime
from neuron_explorer.runtime.ring import (
    ExecWrapper as _CWrapper,  # None: the Python wrappers run
    NanScanner as _CScanner,
)
from neuron_explorer.util.log import get_logger

__all__ = ["BackwardFinder", "c_execution", "count_watched", "general_path", "numerical_error", "profiler_settled",
           "report_scan_failure", "wrap_execution"]

now_ns = clock.now_ns
native_tid = clock.native_tid

# ``find_backward(out) -> bool``: called with a successful call's outputs until it returns True
BackwardFinder = Callable[[Any], bool]


def wrap_execution(rt: Runtime, torch, core: CoreState, model: Model, fn: Callable,
                   find_backward: BackwardFinder | None = None) -> Callable:
    """Return a callable that runs ``fn`` and records one execution per call (see the module)."""
    # Forward outputs only: a NaN anywhere shows up in the loss (a forward output) at the step it
    # appears, while scanning every gradient of the backward graph would cost a kernel per tensor.
    nan_check = rt.config.nan_check and rt.enabled[ev.NUMERICAL_ERR] and model.kind != "backward"
    stats_rec = rt.stats.runtime_feed(core.nc) if rt.stats is not None else None
    ndet = rt.ndet
    scan = nan_scanner(torch) if nan_check else None
    # [the device profiler that no longer wants this graph's calls] (model mode, once profiled):
    # the lean wrappers then stay on their path while that profiler is on
    settled: list = [None]
    general = general_path(rt, torch, core, model, fn, scan, stats_rec, find_backward, settled)
    # NDET's record targets for the C wrapper (None: NDET is off, or its ring is not a C ring)
    nd_hooks = ndet.exec_hooks() if ndet is not None and hasattr(ndet, "exec_hooks") else None
    c_scan = scan is None or (_CScanner is not None and isinstance(scan, _CScanner))
    if c_scan and _CWrapper is not None and core.ring.buffer is not None and (ndet is None or nd_hooks):
        run = _c_wrapper(rt, core, model, fn, general, stats_rec, find_backward, nd_hooks, scan, settled)
    elif ndet is None and not nan_check:
        run = _lean_wrapper(rt, core, model, fn, general, stats_rec, find_backward, settled)
    else:
        def run(*args, **kwargs):
            try:
                return general(args, kwargs)
            except BaseException as e:  # the program's traceback, without our frames (frames.py)
                hide_our_frames(e)
                raise
    return _stand_in_for(run, fn)


def c_execution(rt: Runtime, core: CoreState, model: Model, fn: Callable, run_general: Callable, stats_rec,
                settled: list, scan=None) -> Callable | None:
    """The C wrapper recording ``fn``'s calls as executions of ``model`` (no backward search; the
    NaN check of its outputs with ``scan``, a ``nan_scanner``, unless None), yielding to
    ``run_general(args, kwargs)`` (made with the same ``settled`` list and ``scan``) while a device
    profiler wants the call; None when it cannot run here (no extension, a Python ring, NDET
    without its C hooks, or a scanner that is not the C one).  The steady state of eager root
    modules, backwards and optimizer steps with NDET or the NaN check on (integrations/torch/eager.py)."""
    ndet = rt.ndet
    nd_hooks = ndet.exec_hooks() if ndet is not None and hasattr(ndet, "exec_hooks") else None
    if _CWrapper is None or core.ring.buffer is None or (ndet is not None and not nd_hooks) or \
            (scan is not None and not isinstance(scan, _CScanner)):
        return None
    return _c_wrapper(rt, core, model, fn, run_general, stats_rec, None, nd_hooks, scan, settled)


def _stand_in_for(run: Callable, fn: Callable) -> Callable:
    """Give the wrapper what callers read off the callable it replaces (AOTAutograd reads
    ``_boxed_call``), and ``__wrapped__``."""
    for attr in ("_boxed_call", "zero_grad"):
        if hasattr(fn, attr):
            try:
                setattr(run, attr, getattr(fn, attr))
            except AttributeError:
                pass
    run.__wrapped__ = fn  # type: ignore[attr-defined]
    return run


def _c_wrapper(rt: Runtime, core: CoreState, model: Model, fn: Callable, general: Callable, stats_rec,
               find_backward: BackwardFinder | None, nd_hooks, scan, settled: list) -> Callable:
    """The lean path in C: no Python frame of its own, rows written straight into the ring; with
    NDET it also writes NDET's in-flight and ended records, and with the NaN check it scans the
    outputs in C and calls back only when something is not finite (see runtime/_fastpath.c)."""
    ring = core.ring
    nd = None
    if nd_hooks is not None:
        inflight, nd_ring, kind, state, slots = nd_hooks
        nd = (inflight, nd_ring, ring.open_counter, ring.close_counter, core.nc, kind, state, slots)
    scan_args = None
    if scan is not None:
        scan_args = (scan, numerical_error(rt, core, model), ev.RET_NUM_ERR)

    def run_general(*args, **kwargs):  # what the C wrapper yields to (a device profile wants the call)
        try:
            return general(args, kwargs)
        except BaseException as e:  # the program's traceback, without our frames (frames.py)
            hide_our_frames(e)
            raise

    return _CWrapper(fn, ring.buffer, ring.exec_counter, ev.EXEC_PAIR, model.id, rt.devprof_cell,
                     run_general, stats_rec, find_backward, nd, scan_args, settled, ring.watch)


def numerical_error(rt: Runtime, core: CoreState, model: Model) -> Callable:
    """``record(eid, t0, t1, tid, nan, inf)``: what the C wrapper calls when an execution's outputs
    hold NaN or Inf (rare), before it appends the execution itself with ``ret`` RET_NUM_ERR."""
    append, tick, mid, nc, ndet = core.ring.append, core.ring.tick, model.id, core.nc, rt.ndet

    def record(eid: int, t0: int, t1: int, tid: int, nan: int, inf: int) -> None:
        append((ev.NUMERICAL_ERR, t0, t1, tid, mid, eid, ev.RET_NUM_ERR, nan, inf))
        tick()
        if ndet is not None:
            ndet.numerical_error(nc, mid, eid, t0, t1, nan, inf)

    return record


def _lean_wrapper(rt: Runtime, core: CoreState, model: Model, fn: Callable, general: Callable, stats_rec,
                  find_backward: BackwardFinder | None, settled: list) -> Callable:
    """The lean path in Python (no NDET, no NaN check): what the C wrapper does, one frame more."""
    append = core.ring.append
    next_eid = core.ring.exec_id
    mid = model.id
    PAIR = ev.EXEC_PAIR
    tids = clock.native_ids
    get_ident = threading.get_ident
    devprof_cell = rt.devprof_cell  # [DeviceProfiler or None], read per call without a property
    look = find_backward
    watch = core.ring.watch

    def run(*args, **kwargs):
        nonlocal look
        dp = devprof_cell[0]
        if dp is not None and dp is not settled[0]:  # a device profiler wants the call: id first
            try:
                return general(args, kwargs)
            except BaseException as e:  # the program's traceback, without our frames (frames.py)
                hide_our_frames(e)
                raise
        t0 = now_ns()
        try:
            out = fn(*args, **kwargs)
        except BaseException as e:
            rec = (PAIR, t0, now_ns(), native_tid(), mid, next_eid(), 1, 0, 0)
            append(rec)
            if watch:
                count_watched(watch)
            if stats_rec is not None:
                stats_rec(rec)
            hide_our_frames(e)  # the program's traceback, without our frames (frames.py)
            raise
        t1 = now_ns()
        try:
            tid = tids[get_ident()]
        except KeyError:
            tid = native_tid()
        # the id is taken when the call has returned, next to the append, so the event count
        # never includes a call still running
        rec = (PAIR, t0, t1, tid, mid, next_eid(), 0, 0, 0)
        append(rec)
        if watch:
            count_watched(watch)
        if stats_rec is not None:
            stats_rec(rec)  # the same tuple: neuron-monitor counts it off the hot path
        if look and look(out):
            look = None
        return out

    return run


def count_watched(watch: dict) -> None:
    """Count one execution for this thread when it is watched (``Ring.watch``: an eager root's
    first call asks whether compiled graphs ran inside it; the C wrapper does the same)."""
    cell = watch.get(threading.get_ident())
    if cell is not None:
        cell[0] += 1


def profiler_settled(dp, nc: int, model_id: int) -> bool:
    """Will device profiler ``dp`` never want this graph's calls on core ``nc`` again (``model``
    mode, the graph profiled there)?  False for a profiler that cannot say."""
    settled = getattr(dp, "settled", None)
    return settled is not None and settled(nc, model_id)


def general_path(rt: Runtime, torch, core: CoreState, model: Model, fn: Callable, scan, stats_rec,
                  find_backward: BackwardFinder | None, settled: list | None = None) -> Callable:
    """``run_general(args, kwargs)``: every feature (NDET begin/end records, the NaN check with
    ``scan(outs) -> (nan, inf)`` unless ``scan`` is None, device profiles).  The execution id is
    needed before the call, so the call is bracketed as running for the event count.

    ``settled``: a one-item list the lean wrappers read per call; once the device profiler on
    will never want this graph's calls again (``model`` mode, the graph profiled on its core),
    it is put there, and they stop handing calls over while that profiler is on."""
    ring = core.ring
    append, tick = ring.append, ring.tick
    next_eid, exec_open, exec_close = ring.exec_id, ring.exec_open, ring.exec_close
    mid, nc, PAIR = model.id, core.nc, ev.EXEC_PAIR
    ndet = rt.ndet
    scan = scan if callable(scan) else None  # (callers without a check pass None or False)
    nan_check = scan is not None
    look = find_backward
    watch = ring.watch
    scan_failed = False  # reported once (report_scan_failure)

    def run_general(args, kwargs):
        nonlocal look, scan_failed
        eid = next_eid()
        exec_open()
        t0 = now_ns()
        if ndet is not None:
            ndet.exec_begin(nc, mid, eid, t0)
        ret = 0
        try:
            dp = rt.devprof
            if dp is not None and dp.wants(nc, mid):
                out = dp.run(torch, nc, model, eid, fn, args, kwargs)
            else:
                out = fn(*args, **kwargs)
            if settled is not None and dp is not None and profiler_settled(dp, nc, mid):
                settled[0] = dp
        except BaseException:
            ret = 1
            raise
        finally:
            t1 = now_ns()
            tid = native_tid()
            if ret == 0 and nan_check:
                try:  # a check must never change how the user's step behaves
                    nan, inf = scan(out)
                except Exception as e:  # noqa: BLE001
                    nan = inf = 0
                    if not scan_failed:
                        scan_failed = True
                        report_scan_failure(model, e)
                if nan or inf:
                    ret = ev.RET_NUM_ERR
                    append((ev.NUMERICAL_ERR, t0, t1, tid, mid, eid, ret, nan, inf))
                    tick()
                    if ndet is not None:
                        ndet.numerical_error(nc, mid, eid, t0, t1, nan, inf)
            rec = (PAIR, t0, t1, tid, mid, eid, ret, 0, 0)
            append(rec)
            exec_close()
            if watch:
                count_watched(watch)
            if ndet is not None:
                ndet.exec_end(nc, mid, eid, t0, t1, ret)
            if stats_rec is not None:
                stats_rec(rec)
        if look and look(out):
            look = None
        return out

    return run_general


def report_scan_failure(model: Model, e: BaseException) -> None:
    """Say once per graph (the caller keeps the flag) that its NaN/Inf check raised: the outputs
    then count as finite, as the C wrapper treats its scan's errors (decision 0042)."""
    get_logger(__name__).warning(f"neuron-explorer: warning: the NaN/Inf check of {model.name} failed, its outputs "
                                 f"count as finite: {type(e).__name__}: {e}")
