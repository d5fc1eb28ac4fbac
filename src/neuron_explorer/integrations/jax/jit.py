"""Recording every call of a ``jax.jit`` function as one execution, without ``jax.profiler``.

``jax.jit`` returns a ``PjitFunction`` whose calls run in C++ (a cache hit never reaches Python),
so there is no hook inside JAX that sees each execution.  The runtime integration replaces the
public ``jax.jit`` (``runtime.install``) by one that hands back a stand-in for the
``PjitFunction``: a per-function class whose ``__call__`` times the call and appends one
``EXEC_PAIR`` record to the core's ring (``nrt_execute`` + ``nc_exec_running``) -- a C ``JitCall``
(runtime/_jit.h) with the extension, a Python closure without -- and
whose other attributes (``lower``, ``trace``, ``eval_shape``, ``clear_cache``, ``_fun``, ...) are
the ``PjitFunction``'s.  JAX's own functions (``jax.numpy``) bind ``jax._src.api.jit`` at import
and are not wrapped: an eager ``jnp`` op is not an execution, as an eager ATen op is not one.

A call is an execution only at the top level: a jitted function called while JAX traces
(inside another ``jit``, ``grad``, ``vmap``...) is staged out, not run, and is passed through.
The check is one read of JAX's thread-local trace state (~35 ns).

The lean path (no NDET, no device profile for this graph) is two clock reads, a thread-id lookup,
an execution id and one append.  Everything else (the first call that names and announces the
model, NDET's in-flight records, device profiles, a compilation inside the call) goes through
``_Jit.slow``.  On an asynchronous backend (XLA:CPU runs large computations asynchronously) the
host call is the dispatch; see docs/decisions/0028-jax-runtime-capture.md for what
``nc_exec_running`` means then.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import threading
from typing import Any, Callable

from neuron_explorer.contracts import events as ev
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.ring import JitCall as _CJitCall

__all__ = ["make_jitted", "model_name_for"]

now_ns = clock.now_ns
native_tid = clock.native_tid

_NEW = object()  # the gate of a function whose model is not registered yet


def model_name_for(fn: Callable) -> tuple[str, str, str]:
    """(model name, graph hash, source location) of a jitted Python function:
    ``step@train.py:41_<hash>``, the hash taken over its qualified name and location."""
    inner = getattr(fn, "__wrapped__", None) or fn
    name = getattr(inner, "__name__", None) or type(inner).__name__
    code = getattr(inner, "__code__", None)
    loc = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    qual = getattr(inner, "__qualname__", name)
    h = hashlib.blake2b(f"{getattr(inner, '__module__', '')}.{qual}@{loc}".encode(), digest_size=8).hexdigest()
    label = f"{name}@{os.path.basename(loc)}" if loc else name
    return f"{label}_{h}"[:64], h, loc


try:  # the type a jitted function has without us: what ``isinstance`` checks of a stand-in see
    from jaxlib._jax import PjitFunction as PJIT_TYPE
except Exception:  # noqa: BLE001 - a jaxlib that moved it: isinstance sees the stand-in's own class
    PJIT_TYPE = None


class JitProxy:
    """Base of the per-function stand-ins: everything but ``__call__`` is the PjitFunction's.

    The program must not see the difference (issue 29): the class is named ``PjitFunction`` (of
    ``jaxlib._jax``), ``__class__`` and so ``isinstance`` answer the real type, the instance holds
    the PjitFunction's own attributes (``__wrapped__``, ``_fun``, ``__signature__`` through it), and
    a stand-in pickles (plain pickle, cloudpickle, copy) as a call of ``jax.jit`` on the function
    with the same arguments: the receiving process makes its own jitted function, which its own
    runtime instruments when it runs one.  Our state lives on the per-function class, not in
    ``vars()``."""

    _nx_pjit: Callable
    _nx_state: "_Jit"
    # the keyword arguments ``jax.jit`` was called with, or None for a PjitFunction made before
    # the runtime started (adopted), which pickles as the PjitFunction itself does
    _nx_jit_kwargs: dict | None = None
    _nx_public_jit: Callable | None = None

    def __getattr__(self, item: str) -> Any:
        return getattr(type(self)._nx_pjit, item)

    def __get__(self, obj, objtype=None):
        """A jitted function stored on a class binds like a method, as the PjitFunction does."""
        if obj is None:
            return self
        return functools.partial(self, obj)

    def __repr__(self) -> str:
        return repr(type(self)._nx_pjit)

    @property
    def __class__(self):  # noqa: D401 - what ``x.__class__`` and ``isinstance`` see
        return PJIT_TYPE if PJIT_TYPE is not None else type(self)

    def __reduce_ex__(self, protocol: int):
        cls = type(self)
        kwargs, jit = cls._nx_jit_kwargs, cls._nx_public_jit
        if kwargs is None or jit is None:
            return cls._nx_pjit.__reduce_ex__(protocol)
        return functools.partial(jit, **kwargs) if kwargs else jit, (cls._nx_state.fun,)

    def __reduce__(self):
        return self.__reduce_ex__(2)


def make_jitted(jx, pjit_fn: Callable, fun: Callable, jit_kwargs: dict | None = None,
                public_jit: Callable | None = None) -> Callable:
    """The stand-in for ``pjit_fn`` (the PjitFunction made from ``fun``) that records its calls.

    ``jit_kwargs``: what ``jax.jit`` was given besides ``fun``, and ``public_jit`` the ``jax.jit``
    the program calls: a pickled stand-in is that call, made again where it is unpickled (None:
    pickled as the PjitFunction)."""
    state = _Jit(jx, pjit_fn, fun)
    call = state.make_call()
    cls = type("PjitFunction", (JitProxy,), {
        # (a C JitCall is no descriptor: the class's __call__ is called with the caller's arguments)
        "__call__": staticmethod(call) if inspect.isfunction(call) else call,
        "__module__": getattr(PJIT_TYPE, "__module__", __name__), "__qualname__": "PjitFunction",
        "_nx_pjit": pjit_fn, "_nx_state": state, "_nx_jit_kwargs": jit_kwargs, "_nx_public_jit": public_jit})
    proxy = cls.__new__(cls)
    try:
        vars(proxy).update(vars(pjit_fn))  # __name__, __qualname__, __doc__, __wrapped__, _fun, ...
    except TypeError:
        pass
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        if attr not in vars(proxy):
            try:
                vars(proxy)[attr] = getattr(pjit_fn, attr)
            except AttributeError:
                pass
    vars(proxy).setdefault("__wrapped__", fun)
    return proxy


class _Jit:
    """One jitted function: its model (made at the first top-level call) and its call paths."""

    def __init__(self, jx, pjit_fn: Callable, fun: Callable) -> None:
        self.jx = jx
        self.fn = pjit_fn
        self.fun = fun
        self.model = None
        # [None]: the lean path may run; anything else sends every call to ``slow``
        self.gate: list = [_NEW]
        self.lock = threading.Lock()

    def make_call(self) -> Callable:
        """What runs in place of the PjitFunction's call (the hot path): a C ``JitCall`` when the
        extension is built and the core's ring is its C ring (runtime/_jit.h), else the closure
        below, which does the same in Python."""
        jx, fn, gate = self.jx, self.fn, self.gate
        ring = jx.core.ring
        append, next_eid = ring.append, ring.exec_id
        PAIR = ev.EXEC_PAIR
        tids, get_ident = clock.native_ids, threading.get_ident
        level, top = jx.trace_level, jx.top_trace  # JAX's thread-local trace state and its top value
        compiles = jx.compiles  # compile spans JAX reported, taken by the call they happened in
        slow = self.slow
        mid_box = self.mid_box = [-1]
        if _CJitCall is not None and ring.buffer is not None and type(compiles) is list:
            return _CJitCall(fn, ring.buffer, ring.exec_counter, PAIR, mid_box, gate, level, top, compiles, slow,
                             self.record_compiled, jx.stats_rec)

        def call(*args, **kwargs):
            if gate[0] is not None or level.value is not top:
                return slow(args, kwargs)
            t0 = now_ns()
            try:
                out = fn(*args, **kwargs)
            except BaseException:
                if compiles:
                    self.record_compiled(t0, now_ns(), 1)
                else:
                    self.record(t0, now_ns(), 1, 0, 0)
                raise
            t1 = now_ns()
            if compiles:  # JAX compiled in this call (new shapes): the compile is not the execution
                self.record_compiled(t0, t1, 0)
                return out
            try:
                tid = tids[get_ident()]
            except KeyError:
                tid = native_tid()
            rec = (PAIR, t0, t1, tid, mid_box[0], next_eid(), 0, 0, 0)
            append(rec)
            stats = jx.stats_rec
            if stats is not None:
                stats(rec)
            return out

        return call

    def record(self, t0: int, t1: int, ret: int, ds: int, de: int, eid: int | None = None) -> int:
        """Append the execution's record (and feed neuron-monitor); returns its execution id."""
        jx = self.jx
        if eid is None:
            eid = jx.core.ring.exec_id()
        rec = (ev.EXEC_PAIR, t0, t1, native_tid(), self.mid_box[0], eid, ret, ds, de)
        jx.core.ring.append(rec)
        if jx.stats_rec is not None:
            jx.stats_rec(rec)
        return eid

    def record_compiled(self, t0: int, t1: int, ret: int) -> int:
        """Record a call [t0, t1] in which JAX may have compiled: the compile becomes the model's
        ``model_load``/``nrt_load`` and the execution starts where it ended (issue 29: a first
        execution that held its 4.7 s compile made the mean step look 50 ms long)."""
        ring = self.jx.core.ring
        ring.exec_open()  # (the id is taken before the load records: the sync point names it)
        try:
            eid = ring.exec_id()
            start = self.jx.take_compiles(self.model, t0, t1)
            return self.record(start, t1, ret, 0, 0, eid)
        finally:
            ring.exec_close()

    def slow(self, args: tuple, kwargs: dict):
        """Everything the lean path hands over: calls while JAX traces (passed through), the first
        call (which registers the model), NDET's in-flight records and device profiles."""
        jx = self.jx
        if jx.trace_level.value is not jx.top_trace or jx.stopped():
            return self.fn(*args, **kwargs)
        if self.model is None:
            with self.lock:
                if self.model is None:
                    self.model = jx.register(self.fun)
                    self.mid_box[0] = self.model.id
        self.gate[0] = jx.gate_for(self.model)
        return jx.run_general(self, args, kwargs)
