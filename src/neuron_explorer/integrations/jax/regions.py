"""JAX's labelled regions as framework events named by their label.

* ``jax.profiler.TraceAnnotation`` (and what builds on it: ``StepTraceAnnotation``,
  ``annotate_function``): every region, on the thread that ran it.  Inside a function being
  traced the region spans the tracing, which is what ran on the host then.
* ``jax.named_scope``: only regions entered at the top level (eager code).  Inside ``jit`` a
  named scope is a name-stack entry for the staged ops, entered while tracing, not a span of
  the execution; those names reach the device profile through the HLO's op metadata.

Each region is one ``framework_op`` record whose name argument is the label; the writer and
``view`` name the event by it.
"""

from __future__ import annotations

import contextlib
import threading

from neuron_explorer.contracts import events as ev
from neuron_explorer.runtime import clock

__all__ = ["install_regions", "time_annotations"]

now_ns = clock.now_ns


def install_regions(jx) -> None:
    """Record TraceAnnotation and top-level named_scope regions into the core's ring."""
    rt = jx.rt
    ring = jx.core.ring
    append, tick, intern = ring.append, ring.tick, rt.intern
    tids, get_ident = clock.native_ids, threading.get_ident
    FW = ev.FRAMEWORK_OP

    def record(t0: int, t1: int, label: str) -> None:
        try:
            tid = tids[get_ident()]
        except KeyError:
            tid = clock.native_tid()
        append((FW, t0, t1, tid, intern(label), 0, 0, 0, 0))
        tick()

    _patch_trace_annotation(record)
    _patch_named_scope(jx, record)


def _patch_trace_annotation(record) -> None:
    from jax._src import profiler as jp

    cls = jp.TraceAnnotation
    if getattr(cls, "_nx_regions", False):
        return
    time_annotations(cls, record, "_nx_region", now_ns)
    cls._nx_regions = True


def time_annotations(cls, on_exit, attr: str, now) -> tuple:
    """Patch ``TraceAnnotation``-like ``cls`` so each ``with`` calls ``on_exit(t0, t1, label)``
    (``now`` the clock); ``attr`` prefixes the attributes kept on the instance, so that two
    patches (the regions here, the plugin's trace) stack without sharing them.  Returns
    ``(cls, __init__, __enter__, __exit__)`` as they were, to restore."""
    orig_init, orig_enter, orig_exit = cls.__init__, cls.__enter__, cls.__exit__
    a_label, a_t0 = attr + "_label", attr + "_t0"

    def __init__(self, name, *a, **kw):
        orig_init(self, name, *a, **kw)
        setattr(self, a_label, str(name))

    def __enter__(self):
        r = orig_enter(self)
        setattr(self, a_t0, now())
        return r

    def __exit__(self, *exc):
        t1 = now()
        r = orig_exit(self, *exc)
        t0 = getattr(self, a_t0, None)
        if t0 is not None:
            on_exit(t0, t1, getattr(self, a_label, ""))
        return r

    cls.__init__, cls.__enter__, cls.__exit__ = __init__, __enter__, __exit__
    return cls, orig_init, orig_enter, orig_exit


def _patch_named_scope(jx, record) -> None:
    import jax

    orig = jax.named_scope
    if getattr(orig, "_nx_orig", None) is not None:
        return

    @contextlib.contextmanager
    def _timed(cm, label: str):
        t0 = now_ns()
        try:
            with cm as v:
                yield v
        finally:
            record(t0, now_ns(), label)

    def named_scope(name, *a, **kw):
        cm = orig(name, *a, **kw)
        if jx.trace_level.value is not jx.top_trace:
            return cm
        return _timed(cm, str(name))

    named_scope.__doc__ = orig.__doc__
    named_scope.__wrapped__ = orig  # type: ignore[attr-defined]
    named_scope._nx_orig = orig  # type: ignore[attr-defined]
    jax.named_scope = named_scope
