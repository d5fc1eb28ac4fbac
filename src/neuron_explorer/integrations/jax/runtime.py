"""JAX under the runtime (``NEURON_RT_INSPECT_ENABLE=1``, ``neuron-explorer inspect``, NDET, the
monitor's counters): no ``jax.profiler`` in the program.

``install(rt, jax)`` runs when the program imports jax (``boot`` registers it with
``integrations.importhook``).  It

* replaces the public ``jax.jit`` so every jitted function records its top-level calls
  (``jit.make_jitted``): one model per jitted function and core, named after the function;
* listens to JAX's compile events (``jax.monitoring`` time spans: tracing, lowering, the backend
  compile), which the call they happen in turns into ``model_load`` (trace start to compiled) and
  ``nrt_load`` (the backend compile), with the optimized HLO's flops for neuron-monitor;
* records ``TraceAnnotation`` and top-level ``named_scope`` regions as framework events named by
  their label (``regions``);
* with ``NEURON_RT_INSPECT_DEVICE_PROFILE``, records the XLA ops of profiled executions
  (``devprof``);
* records the host's waits on dispatched work (``block_until_ready``, and ``.item()``,
  ``float()`` and the other reads of an array's value on the host) as ``kbl_exec_wait``
  (``waits``).

NDET and neuron-monitor count JAX executions because they are fed the same records as PyTorch's:
the capture ring, ``NdetRecorder.exec_begin/exec_end`` and ``AppStats.runtime_feed``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

from neuron_explorer.contracts import events as ev
from neuron_explorer.integrations.jax.jit import PJIT_TYPE, make_jitted, model_name_for
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.core import DEVICE_PROFILER, EXECUTIONS, CoreState, Model, Runtime
from neuron_explorer.util.log import get_logger

__all__ = ["JaxRuntime", "install", "installed"]

now_ns = clock.now_ns
native_tid = clock.native_tid

_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
_BACKEND_EVENT = "/jax/core/compile/backend_compile_duration"
_STALE_NS = 10_000_000_000  # compile spans no call claimed within 10 s are dropped
_SLACK_NS = 200_000  # the wall-to-monotonic conversion of JAX's compile spans is good to microseconds
_SLOW = object()  # a gate value: every call of the function takes the general path

_installed: "JaxRuntime | None" = None


def installed() -> "JaxRuntime | None":
    """The JAX integration of this process (None before ``install``)."""
    return _installed


def install(rt: Runtime, jax) -> "JaxRuntime | None":
    """Install the JAX hooks the enabled event types need; once per process."""
    global _installed
    if _installed is not None:
        return _installed
    core = rt.core()
    if core is None:
        return None  # this process's core is filtered out at capture time
    jx = _installed = JaxRuntime(rt, core)
    rt.sync_point(core)
    if rt.enabled[EXECUTIONS]:  # any type an execution produces is kept, or NDET or the monitor counts them
        jx.install_jit(jax)
        jx.install_compile_listener()
    if rt.enabled[ev.FRAMEWORK_OP]:
        from neuron_explorer.integrations.jax.regions import install_regions

        install_regions(jx)
    if rt.enabled[ev.KBL_EXEC_WAIT]:
        try:
            jx.install_waits()
        except Exception as e:  # a JAX without these names: no waits, the rest still recorded
            jx.warn_once("waits", f"host waits not timed: {e}")
    return jx


def _trace_state() -> tuple[Any, Any]:
    """(an object whose ``.value`` is this thread's current trace, the top-level trace)."""
    from jax._src import core as jcore

    level = getattr(jcore, "trace_state_strong_ref", None)
    top = getattr(jcore, "eval_trace", None)
    if level is not None and top is not None and getattr(level, "value", None) is top:
        return level, top

    class _Level:  # an older or newer JAX: the public-ish check, slower (~0.2 us)
        @property
        def value(self):
            return top_marker if jcore.trace_state_clean() else None

    top_marker = object()
    return _Level(), top_marker


class JaxRuntime:
    """What the JAX hooks share: the core's ring, JAX's trace state, compile spans, models."""

    def __init__(self, rt: Runtime, core: CoreState) -> None:
        self.rt = rt
        self.core = core
        self.trace_level, self.top_trace = _trace_state()
        self.stats_rec = rt.stats.runtime_feed(core.nc) if rt.stats is not None else None
        # (thread ident, event, start_ns, end_ns, module name) reported by jax.monitoring
        self.compiles: list[tuple[int, str, int, int, str]] = []
        self.announced: set[int] = set()
        self.devprof = None  # devprof.JaxDeviceProfiler when a device profile is requested
        self.warned: set[str] = set()
        self.orig_jit: Callable | None = None
        self.public_jit: Callable | None = None
        self.waits_restore: list[tuple] = []  # (owner, name, original) of what install_waits patched

    def warn_once(self, key: str, msg: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            get_logger(__name__).warning(f"neuron-explorer: warning: {msg}")

    def stopped(self) -> bool:
        return self.rt.stopped

    # -- installing --------------------------------------------------------------------------
    def install_jit(self, jax) -> None:
        """Replace ``jax.jit`` (the public name only: JAX's own modules keep theirs)."""
        orig = jax.jit
        if orig in _OUR_JITS:
            return
        self.orig_jit = orig
        jit = self.public_jit = _public_jit(self, orig)
        _OUR_JITS.append(jit)
        jax.jit = jit
        self._maybe_devprof()

    def install_waits(self) -> None:
        """Record each host wait (``block_until_ready``, a read of an array's value on the host:
        ``waits.time_waits``) as a ``kbl_exec_wait`` naming the core's latest execution (none
        once the capture has stopped)."""
        from neuron_explorer.integrations.jax.waits import time_waits

        rt, core = self.rt, self.core
        append, tick = core.ring.append, core.ring.tick
        tids, get_ident = clock.native_ids, threading.get_ident
        wait = ev.KBL_EXEC_WAIT

        def record(t0: int, t1: int) -> None:
            if rt.stopped:
                return
            try:
                tid = tids[get_ident()]
            except KeyError:
                tid = native_tid()
            append((wait, t0, t1, tid, -1, core.exec_count - 1, 0, -1, 0))
            tick()

        self.waits_restore = time_waits(record, now_ns)

    def wrap_pjit(self, res, fun, jit_kwargs: dict | None):
        """The recording stand-in of the PjitFunction ``res`` made from ``fun`` (anything else, or
        a stand-in that cannot be made, is given back as it is)."""
        if PJIT_TYPE is not None and type(res) is not PJIT_TYPE:
            return res
        try:
            return make_jitted(self, res, fun, jit_kwargs, self.public_jit)
        except Exception as e:  # never break the user's jit
            self.warn_once("jit", f"jitted function not instrumented: {e}")
            return res

    def adopt(self) -> int:
        """Instrument what the program made with ``jax.jit`` before the runtime started (a
        neuron-monitor found after the program's first steps: JAX loads our plugin only when it
        first initialises a backend, after a module's ``@jax.jit`` functions exist).

        In the module globals of every module but the standard library's, JAX's and ours, and in
        the plain classes of the program's own modules (not installed in the interpreter's
        library directories), a PjitFunction becomes its recording stand-in, JAX's ``jit`` itself
        (``from jax import jit``) becomes ours, and so does the function of a
        ``functools.partial`` of it.  Jitted functions held only in local variables, closures or
        other objects are not reached.  Nothing is read but types and dictionaries (no attribute
        of the program's objects is looked up: a deprecated name would warn, a lazy module load).
        Returns how many were replaced (docs/decisions/0076-jax-jit-unseen-and-adopted.md)."""
        import abc
        import functools
        import types

        orig, public = self.orig_jit, self.public_jit
        if orig is None or public is None:
            return 0
        made: dict[int, Any] = {}

        def replacement(v):
            t = type(v)
            if t is PJIT_TYPE:
                new = made.get(id(v))
                if new is None:
                    fun = vars(v).get("__wrapped__") or vars(v).get("_fun")
                    new = made[id(v)] = self.wrap_pjit(v, fun, None) if fun is not None else v
                return new if new is not v else None
            if v is orig:
                return public
            if t is functools.partial and v.func is orig:
                return functools.partial(public, *v.args, **v.keywords)
            return None

        skip = _NOT_ADOPTED | sys.stdlib_module_names
        libs = _library_dirs()
        n = 0
        for name, mod in list(sys.modules.items()):
            if name.partition(".")[0] in skip or not issubclass(type(mod), types.ModuleType):
                continue
            try:
                g = object.__getattribute__(mod, "__dict__")  # (a lazy module is not loaded)
            except AttributeError:
                continue
            file = g.get("__file__")
            own = name == "__main__" or (type(file) is str and not file.startswith(libs))
            for key, v in list(g.items()):
                new = replacement(v)
                if new is not None:
                    g[key] = new
                    n += 1
                elif own and type(v) in (type, abc.ABCMeta) and vars(v).get("__module__") == name:
                    for attr, cv in list(vars(v).items()):
                        new = replacement(cv)
                        if new is not None:
                            try:
                                setattr(v, attr, new)
                                n += 1
                            except (AttributeError, TypeError):
                                pass
        return n

    def _maybe_devprof(self) -> None:
        rt = self.rt
        if rt.config.device_profile and any(s.name == "capture" for s in rt.sinks):
            from neuron_explorer.integrations.jax.devprof import JaxDeviceProfiler

            dp = JaxDeviceProfiler(self, rt.config.device_profile, rt.devprof)
            self.devprof = dp
            rt.register(DEVICE_PROFILER, dp)

    def install_compile_listener(self) -> None:
        """Collect JAX's compile spans (wall-clock seconds) on the host monotonic clock."""
        from jax import monitoring

        pending = self.compiles

        def on_span(event: str, start: float, end: float, **kw) -> None:
            if event != _TRACE_EVENT and event != _BACKEND_EVENT:
                return
            t1 = now_ns()
            off = t1 - time.time_ns()  # monotonic - wall, read now (end is a moment ago)
            pending.append((threading.get_ident(), event, int(start * 1e9) + off, int(end * 1e9) + off,
                            str(kw.get("fun_name", ""))))

        monitoring.register_event_time_span_listener(on_span)

    # -- models ------------------------------------------------------------------------------
    def register(self, fun: Callable) -> Model:
        """The model of a jitted function on this process's core (made at its first call)."""
        name, h, loc = model_name_for(fun)
        hval = int(h, 16)
        m = self.rt.add_model(name=name, neff_name=f"neff_{hval}", graph_hash=h, backend="xla",
                              kind="jit", nc_idx=self.core.nc, source_location=loc,
                              artifacts={"fun_name": getattr(fun, "__name__", "")})
        if self.devprof is not None:
            self.devprof.add_model(m)
        return m

    def gate_for(self, model: Model):
        """None when the model's calls may take the lean path, else a value that keeps them on
        the general one (NDET's in-flight records, device profiles)."""
        if self.rt.ndet is not None:
            return _SLOW
        dp = self.devprof
        if dp is not None and dp.wants(self.core.nc, model.id):
            return _SLOW
        return None

    def announce(self, model: Model) -> None:
        """Tell neuron-monitor's counters about a loaded graph (its flops once compiled)."""
        stats = self.rt.stats
        if stats is None:
            return
        try:
            code = len(model.artifacts.get("code", ""))
            stats.on_model_load(model.id, model.name, model.nc_idx, model.flops or None, code_bytes=code)
        except Exception as e:
            self.warn_once("stats", f"monitor counters not updated: {e}")

    def take_compiles(self, model: Model | None, t0: int, t1: int) -> int:
        """Turn the compile spans this thread reported during the call [t0, t1] into the model's
        ``model_load`` (trace start to compiled) and ``nrt_load`` (the backend compile).  Returns
        where the execution proper starts: when the compile ended, or ``t0`` if there was none.

        Compiling is loading a graph, not running it: the call's span is split at the end of the
        compile, so no execution holds one (docs/decisions/0077-jax-compile-apart.md)."""
        me = threading.get_ident()
        mine, keep = [], []
        for c in list(self.compiles):
            if c[0] == me:
                if t0 - _SLACK_NS <= c[2] and c[3] <= t1 + _SLACK_NS:
                    mine.append(c)
            elif t1 - c[3] < _STALE_NS:
                keep.append(c)
        self.compiles[:] = keep
        if model is None or not any(c[1] == _BACKEND_EVENT for c in mine):
            return t0
        start = min(c[2] for c in mine)
        backend = [c for c in mine if c[1] == _BACKEND_EVENT]
        end = max(c[3] for c in backend)
        self._loaded(model, start, end, backend[-1])
        return min(max(t0, end), t1)

    def _loaded(self, model: Model, start: int, end: int, backend: tuple) -> None:
        rt, ring, tid = self.rt, self.core.ring, native_tid()
        model.compile_ns += end - start
        module = backend[4]
        if module:
            model.artifacts["module"] = module
            self._hlo(model, module)
        if rt.enabled[ev.MODEL_LOAD]:
            ring.append((ev.MODEL_LOAD, start, end, tid, model.id, end - start, 0, 0, 0))
            ring.tick()
        if rt.enabled[ev.NRT_LOAD]:
            ring.append((ev.NRT_LOAD, backend[2], backend[3], tid, model.id, 0, 0, 0, 0))
            ring.tick()
        rt.sync_point(self.core, self.core.exec_count - 1)
        self.announce(model)

    def _hlo(self, model: Model, module: str) -> None:
        """The optimized HLO and XLA's flops of the executable just compiled (the newest live
        executable of that module name)."""
        try:
            from neuron_explorer.integrations.jax.hlo import Hlo, hlo_text_and_flops, newest_executable

            model.artifacts["module"] = module  # (pairs XLA's executions with ours: devprof)
            text, flops = hlo_text_and_flops(newest_executable(module))
        except Exception:
            return
        if text:
            model.flops = flops
            model.artifacts["code"] = text
            hl = Hlo(text)
            model.artifacts["hlo"] = hl
            model.num_nodes = len(hl.entry_instructions())
            model.signature = hl.signature

    # -- the general path --------------------------------------------------------------------
    def run_general(self, j, args: tuple, kwargs: dict):
        """One execution with every feature: NDET's begin/end records, a device profile, the
        compilation the call may include.  The execution id is taken first, so the call is
        bracketed as running for the event count."""
        rt, core, model = self.rt, self.core, j.model
        ring, nc, mid = core.ring, core.nc, model.id
        eid = ring.exec_id()
        ring.exec_open()
        t0 = now_ns()
        ndet = rt.ndet
        if ndet is not None:
            ndet.exec_begin(nc, mid, eid, t0)
        ret, t_ret, ds, de = 0, 0, 0, 0
        try:
            dp = self.devprof
            if dp is not None and dp.wants(nc, mid):
                out, t_ret, de = dp.profile(model, eid, j.fn, args, kwargs, t0)
                ds = t0
            else:
                out = j.fn(*args, **kwargs)
        except BaseException:
            ret = 1
            raise
        finally:
            t1 = t_ret or now_ns()
            if self.compiles:  # the compile in this call is the model's load, not the execution
                t0 = self.take_compiles(model, t0, t1)
                if ds:
                    ds = max(ds, t0)
            rec = (ev.EXEC_PAIR, t0, t1, native_tid(), mid, eid, ret, ds, max(de, ds + 1) if de else 0)
            ring.append(rec)
            ring.exec_close()
            if ndet is not None:
                ndet.exec_end(nc, mid, eid, t0, de or t1, ret)
            if self.stats_rec is not None:
                self.stats_rec(rec)
            if mid not in self.announced:
                self.announced.add(mid)
                if not model.compile_ns:
                    self.announce(model)
            j.gate[0] = self.gate_for(model)
        return out


#: top-level packages whose ``jax.jit`` uses stay JAX's (eager ``jnp`` ops are not executions) or ours
_NOT_ADOPTED = frozenset({"jax", "jaxlib", "neuron_explorer", "jax_plugins"})

def _library_dirs() -> tuple[str, ...]:
    """Where the interpreter's installed packages and standard library live: modules outside are
    the program's own."""
    import site
    import sysconfig

    dirs = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # (a virtualenv's old site module)
        pass
    return tuple(sorted(os.path.join(d, "") for d in dirs if d))


#: the ``jax.jit`` replacements made in this process (so a second install wraps nothing twice)
_OUR_JITS: list[Callable] = []


def _public_jit(jx: "JaxRuntime", orig: Callable) -> Callable:
    """The function that stands for ``jax.jit``: the original's result, made a recording stand-in.

    It must look like ``jax.jit`` to the program: the original's name, docstring, ``__dict__`` and
    ``__wrapped__`` (so ``inspect.signature`` and ``inspect.unwrap`` give what they give without
    us).  Its ``__module__`` is ``jax``, where it is installed: pickle stores a function as a
    reference to its module's attribute and checks that the attribute is that very function, so
    ``pickle.dumps(jax.jit)`` and ``functools.partial(jax.jit, ...)`` pickle as ``jax.jit`` (the
    receiving process's own ``jax.jit``, ours or JAX's), where ``jax._src.api.jit`` (JAX's, kept for
    JAX's own modules) would refuse it."""
    import functools

    def jit(*args, **kwargs):
        res = orig(*args, **kwargs)
        if args and callable(args[0]):
            return jx.wrap_pjit(res, args[0], kwargs if len(args) == 1 else None)
        if callable(res):  # ``jax.jit(static_argnums=...)`` used as a decorator factory
            def decorate(fun, *a, **k):
                return jx.wrap_pjit(res(fun, *a, **k), fun, None if a or k else kwargs)
            return decorate
        return res

    functools.update_wrapper(jit, orig)
    jit.__wrapped__ = vars(orig).get("__wrapped__", orig)  # type: ignore[attr-defined]
    jit.__module__ = "jax"
    return jit
