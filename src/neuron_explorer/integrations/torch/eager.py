"""Eager PyTorch as executions (docs/decisions/0025-eager-executions.md).

Most programs never call ``torch.compile``; their "graphs" are modules run op by op.  The unit
recorded here:

* a call of a **root module** (an ``nn.Module`` called while no module's forward runs on this
  thread) is one execution of the graph ``<ModuleClass>_<structure hash>``;
* the autograd backward that follows is one execution of ``<that name>_bwd`` (the first root run
  with gradients on since the previous backward names it);
* ``optimizer.step()`` is one execution of ``<OptimizerClass>_<hash>``.

Each gets what a compiled graph gets: ``model_load``/``nrt_load`` at its first call, the
``EXEC_PAIR`` record (``nrt_execute`` + ``nc_exec_running``), device profiles through the same op
recorder, a ``.neff`` describing it, NDET records and the neuron-monitor feed.

``Module.__call__`` is replaced once; with the extension, a call inside a root costs one read of a C
thread-local (runtime/_local.h), and from a root's second recorded call on, its calls and the
backward after them are recorded by C gates with no Python frame of ours (runtime/_hooks.h,
docs/decisions/0161-eager-roots-in-c.md).  A root whose first call ran compiled graphs
(``torch.compile`` inside it, or a compiled module) is not recorded from then on: the compiled
graphs are its executions, never both.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import sys
import threading
import weakref
from typing import Callable

from neuron_explorer.contracts import events as ev
from neuron_explorer.contracts.env import EAGER
from neuron_explorer.integrations.importhook import when_imported
from neuron_explorer.integrations.torch.autograd_flops import GraphFlops
from neuron_explorer.integrations.torch.collectives import entry_status, future_status
from neuron_explorer.integrations.torch.execution import (
    c_execution,
    general_path,
    numerical_error,
    profiler_settled,
    report_scan_failure,
)
from neuron_explorer.integrations.torch.flops import FlopCounter, formula_free_step, learn_flops
from neuron_explorer.integrations.torch.frames import hide_our_frames
from neuron_explorer.integrations.torch.graphs import announce_model, record_load
from neuron_explorer.integrations.torch.neffs import cache_neff
from neuron_explorer.integrations.torch.state import Installed, env_switch
from neuron_explorer.integrations.torch.tensors import nan_scanner, signature
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.core import EXECUTIONS, CoreState, Model, Runtime
from neuron_explorer.runtime.ring import (
    EagerLocal,
    EagerStep,
    backward_gate,
    backward_settle,
    module_call_gate,
    module_call_root,
    module_call_skip,
)

__all__ = ["Eager", "install_eager"]

now_ns = clock.now_ns
native_tid = clock.native_tid


class _Local(threading.local):
    """The per-thread state without the extension (``EagerLocal``, runtime/_local.h, with it)."""

    depth = 0  # > 0 while a root module (or a recorded backward) runs on this thread
    grad_root = None  # the _Exec of the first root run with gradients on since the last backward


class _Exec:
    """One eager graph: its model, and whether its calls are recorded."""

    __slots__ = ("model", "known", "skip", "bwd", "make_bwd", "general", "register", "settled", "c_run", "check",
                 "walked")

    def __init__(self, model: Model | None, skip: bool = False) -> None:
        self.model = model
        self.known = skip  # a first call decided whether compiled graphs run inside
        self.skip = skip  # compiled graphs run inside: they are the executions
        self.bwd: _Exec | None = None
        self.make_bwd: Callable[[], "_Exec"] | None = None
        self.general: dict | None = None  # callable -> its execution.general_path, once needed
        # registers the model (model_load, .neff, monitor) once a first call is recorded: a module
        # whose compiled graphs are the executions leaves no graph of its own
        self.register: Callable[[], Model] | None = None
        # [the device profiler done with this graph], filled by its general path (see
        # execution.general_path), read by its C wrapper; and (callable, that C wrapper) once made
        self.settled: list = [None]
        self.c_run: tuple | None = None
        # the NaN/Inf scanner of its outputs (a root module's, with the check on), set at its first
        # recorded call; None: not checked
        self.check = None
        # its flops could not be read off the autograd graph (autograd_flops): its next first
        # call counts them under the dispatch mode
        self.walked = False

    def materialize(self) -> Model:
        if self.model is None and self.register is not None:
            with _registering:
                if self.model is None and self.register is not None:
                    self.model, self.register = self.register(), None
        return self.model


_SKIP = _Exec(None, skip=True)  # what cannot be registered runs unrecorded
# Held while a graph is registered: two threads calling modules of one structure for the first time
# at once (registration reads parameters and writes a .neff, so the GIL changes hands) would
# otherwise register the graph twice.  Only first calls take it.
_registering = threading.RLock()


def _dead_ref() -> None:
    """An empty one-entry cache's reference: it matches no module or optimizer."""
    return None


class Eager:
    """The eager hooks of one process: the model registry and the recording function."""

    def __init__(self, inst: Installed, torch, core: CoreState) -> None:
        self.inst, self.rt, self.torch, self.core = inst, inst.rt, torch, core
        self.tl = EagerLocal() if EagerLocal is not None else _Local()
        self.by_hash: dict[str, _Exec] = {}
        self.by_module: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.by_optimizer: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.record, self.c_run = _recorder(self.rt, torch, core)
        # the last module / optimizer looked up and its graph: a training loop calls the same root
        # and steps the same optimizer every step, and a WeakKeyDictionary lookup makes a weakref
        # and runs Python code each time (a one-entry cache checked by identity costs a call)
        self._last_mod: tuple = (_dead_ref, None)
        self._last_opt: tuple = (_dead_ref, None)

    # -- models -------------------------------------------------------------------------------
    def module_exec(self, mod, args) -> _Exec:
        """The graph of root module ``mod``: registered at its first call (``model_load``).  A
        module that cannot be registered (unhashable, a ``repr`` that raises) is not recorded: the
        user's call must never fail because of us."""
        last = self._last_mod
        if last[0]() is mod:
            return last[1]
        try:
            ex = self.by_module.get(mod)
            if ex is None:
                with _registering:
                    ex = self.by_module.get(mod)
                    if ex is None:
                        ex = self.by_module[mod] = self._register_module(mod, args)
            self._last_mod = (weakref.ref(mod), ex)
            return ex
        except Exception as e:
            self.inst.warn_once(f"eager:{type(mod).__qualname__}",
                                f"{type(mod).__qualname__} calls not recorded as executions: {e}")
            return _SKIP

    def _register_module(self, mod, args) -> _Exec:
        if hasattr(mod, "_orig_mod") or getattr(mod, "_compiled_call_impl", None) is not None or \
                isinstance(mod, self.torch.fx.GraphModule):
            # torch.compile'd, or an FX graph that a compiled graph runs (AOTAutograd's backends
            # call theirs as modules): Dynamo's graphs are the executions
            return _Exec(None, skip=True)
        t0 = now_ns()
        cls = type(mod)
        parts = [f"{cls.__module__}.{cls.__qualname__}"]
        parts += [f"{n}:{type(m).__qualname__}" for n, m in mod.named_modules()]
        consts = 0
        for n, p in list(mod.named_parameters()) + list(mod.named_buffers()):
            parts.append(f"{n}:{tuple(p.shape)}:{p.dtype}")
            consts += p.numel() * p.element_size()
        key = "\n".join(parts)
        ex = self.by_hash.get(key)
        if ex is not None:
            return ex
        nodes = [(n or "<root>", "call_module", f"{type(m).__module__}.{type(m).__qualname__}", _source_of(type(m)), n)
                 for n, m in mod.named_modules()]
        code = f"# eager module {parts[0]}\n{mod!r}\n"
        sig, src, t1 = signature(args), _source_of(cls), now_ns()
        ex = self.by_hash[key] = _Exec(None)
        ex.register = lambda: self._add(cls.__name__, key, "forward", code, nodes, consts, sig, src, t0, t1=t1)
        ex.make_bwd = lambda: _Exec(self._add(ex.model.name, key + "\0bwd", "backward", code, nodes, 0,
                                              "(grad_outputs)", src, now_ns(), "_bwd"))
        return ex

    def optimizer_exec(self, opt) -> _Exec:
        """The graph of an optimizer's ``step`` (class and parameter shapes); not recorded when it
        cannot be registered."""
        last = self._last_opt
        if last[0]() is opt:
            return last[1]
        try:
            ex = self.by_optimizer.get(opt)
            if ex is None:
                with _registering:
                    ex = self._optimizer_exec(opt)
            self._last_opt = (weakref.ref(opt), ex)
            return ex
        except Exception as e:
            self.inst.warn_once(f"eager:{type(opt).__qualname__}",
                                f"{type(opt).__qualname__} steps not recorded as executions: {e}")
            return _SKIP

    def _optimizer_exec(self, opt) -> _Exec:
        ex = self.by_optimizer.get(opt)
        if ex is None:
            t0 = now_ns()
            cls = type(opt)
            shapes = [tuple(p.shape) for g in opt.param_groups for p in g["params"]]
            key = f"{cls.__module__}.{cls.__qualname__}\n{shapes}"
            ex = self.by_hash.get(key)
            if ex is None:
                code = f"# optimizer {cls.__qualname__}.step over {len(shapes)} parameters\n"
                nodes = [(f"param_{i}", "optimizer_step", str(list(s)), "", "") for i, s in enumerate(shapes)]
                src = _call_site(self.inst.torch_dir) or _source_of(cls)
                ex = self.by_hash[key] = _Exec(self._add(cls.__name__, key, "optimizer", code, nodes, 0,
                                                         f"({len(shapes)} parameters)", src, t0))
            self.by_optimizer[opt] = ex
        return ex

    def _add(self, base: str, key: str, kind: str, code: str, nodes: list, consts: int, sig: str, src: str,
             t0: int, suffix: str = "", t1: int = 0) -> Model:
        """Register a graph: ``base`` names it (``Sequential`` -> ``Sequential_<hash>``; a
        backward is its forward's name plus ``suffix``)."""
        rt, core = self.rt, self.core
        hval = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
        t1 = t1 or now_ns()
        name = base + suffix if suffix else f"{base}_{hval:016x}"[:64]
        model = rt.add_model(name=name, neff_name=f"neff_{hval}", graph_hash=f"{hval:016x}",
                             backend="eager", kind=kind, nc_idx=core.nc, compile_ns=t1 - t0, source_location=src,
                             module_path="", num_nodes=len(nodes), constants_bytes=consts, signature=sig,
                             artifacts={"code": code, "nodes": nodes})
        record_load(rt, core, model, t0, t0, t1)
        announce_model(self.inst, model, len(code))
        cache_neff(rt, model)
        return model

    def backward_exec(self, ex: _Exec) -> _Exec:
        if ex.bwd is None:
            with _registering:
                if ex.bwd is None:
                    ex.bwd = ex.make_bwd() if ex.make_bwd is not None and ex.model is not None \
                        else _Exec(None, skip=True)
        return ex.bwd


_OWN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _call_site(torch_dir: str) -> str:
    """``file:line`` of the innermost frame on this thread that is neither ours nor PyTorch's: the
    user's ``opt.step()`` (or ``scaler.step(opt)``) of an optimizer's first step; "" when none."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith(_OWN_DIR) and not (torch_dir and name.startswith(torch_dir)):
            return f"{name}:{f.f_lineno}"
        f = f.f_back
    return ""


def _source_of(cls) -> str:
    """``file:line`` of a class's ``forward`` (or ``step``, as the optimizer's class defines it:
    not the wrappers around it), from its code object: no source read."""
    for attr in ("forward", "step"):
        code = getattr(inspect.unwrap(getattr(cls, attr, None)), "__code__", None)
        if code is not None:
            return f"{code.co_filename}:{code.co_firstlineno}"
    mod = sys.modules.get(cls.__module__)
    return getattr(mod, "__file__", "") or ""


def _recorder(rt: Runtime, torch, core: CoreState) -> tuple[Callable, Callable]:
    """``record(ex, fn, args, kwargs)``: run ``fn`` as one execution of ``ex`` (see the module);
    and ``c_run(ex, fn)``: the C wrapper that records ``fn``'s calls as ``ex``'s steady state (None
    while the graph's first call is to come, when it is not recorded, or without the extension).

    The first call of a graph is timed without an id up front, so whether compiled graphs ran
    inside (the core's execution counter moved) decides if it is recorded at all; later calls of
    a recorded graph take the C wrapper (as a compiled graph's calls: the lean path in C, NDET's
    records and the scan in C when they are on, the general path while a device profiler wants
    the call); without the extension, the general path (id first, NDET begin/end, the check,
    device profiles) when NDET or the check is on, else the general path while a device profiler
    wants the call, and the lean one in Python.

    The NaN/Inf check (``NEURON_EXPLORER_NAN_CHECK``, on by default with NDET) reads a root
    module's outputs, as a compiled forward graph's: a NaN shows up there at the step it appears.
    A backward's gradients and an optimizer's parameters are not read (decision 0097)."""
    ring, nc, PAIR = core.ring, core.nc, ev.EXEC_PAIR
    append, next_eid = ring.append, ring.exec_id
    watch_thread, unwatch_thread = ring.watch_thread, ring.unwatch_thread
    stats_rec = rt.stats.runtime_feed(nc) if rt.stats is not None else None
    ndet = rt.ndet
    devprof_cell = rt.devprof_cell
    enabled = rt.enabled
    scan = nan_scanner(torch) if rt.config.nan_check and enabled[ev.NUMERICAL_ERR] else None

    def checker(model: Model):
        """The scanner of ``model``'s outputs, or None (only forward graphs are checked)."""
        return scan if model.kind == "forward" else None

    def check_first(ex: _Exec, out, eid: int, t0: int, t1: int) -> int:
        """The NaN check of a first call's outputs (later calls are checked by the C wrapper or
        the general path): its ret, after recording the numerical error if there is one.  A check
        that raises leaves the outputs counted as finite."""
        try:
            nan, inf = ex.check(out)
        except Exception as e:  # noqa: BLE001 - never the user's error
            report_scan_failure(ex.model, e)
            return 0
        if not (nan or inf):
            return 0
        numerical_error(rt, core, ex.model)(eid, t0, t1, native_tid(), nan, inf)
        return ev.RET_NUM_ERR

    def finish(mid: int, eid: int, t0: int, t1: int, ret: int, begun: bool) -> None:
        rec = (PAIR, t0, t1, native_tid(), mid, eid, ret, 0, 0)
        append(rec)
        if ndet is not None:
            if not begun:
                ndet.exec_begin(nc, mid, eid, t0)
            ndet.exec_end(nc, mid, eid, t0, t1, ret)
        if stats_rec is not None:
            stats_rec(rec)

    def general(ex: _Exec, fn, args, kwargs):
        """Id first, NDET begin/end, device profiles: the compiled graphs' general path, made once
        per graph and callable (a backward runs ``autograd.backward`` or ``autograd.grad``)."""
        paths = ex.general
        if paths is None:
            paths = ex.general = {}
        run = paths.get(fn)
        if run is None:
            run = paths[fn] = general_path(rt, torch, core, ex.model, fn, ex.check, stats_rec, None, ex.settled)
        return run(args, kwargs)

    def c_run(ex: _Exec, fn):
        if not ex.known or ex.skip or ex.model is None:
            return None
        made = ex.c_run
        if made is None or made[0] is not fn:
            # c_execution's general path is called as run_general(args, kwargs): one tuple, one dict
            made = ex.c_run = (fn, c_execution(rt, core, ex.model, fn, lambda a, k: general(ex, fn, a, k),
                                               stats_rec, ex.settled, ex.check))
        return made[1]

    tids, get_ident = clock.native_ids, threading.get_ident

    def record(ex: _Exec, fn, args, kwargs):
        if ex.skip or not enabled[EXECUTIONS]:
            return fn(*args, **kwargs)
        if not ex.known:
            return first(ex, fn, args, kwargs)
        # the C wrapper (which yields to the general path while a device profiler wants the call):
        # the lean path without a Python frame, NDET's records and the NaN check in C when they are
        # on; without the extension, the general path when those are on, else the lean one below
        made = ex.c_run
        run = made[1] if made is not None and made[0] is fn else c_run(ex, fn)
        if run is not None:
            return run(*args, **kwargs)
        if ndet is not None or ex.check is not None:
            return general(ex, fn, args, kwargs)
        dp = devprof_cell[0]  # (model mode: once the graph is profiled, the lean path again)
        if dp is not None and not profiler_settled(dp, nc, ex.model.id):
            return general(ex, fn, args, kwargs)
        t0 = now_ns()  # the lean path: what execution._lean_wrapper does
        try:
            out = fn(*args, **kwargs)
        except BaseException:
            finish(ex.model.id, next_eid(), t0, now_ns(), 1, False)
            raise
        t1 = now_ns()
        try:
            tid = tids[get_ident()]
        except KeyError:
            tid = native_tid()
        rec = (PAIR, t0, t1, tid, ex.model.id, next_eid(), 0, 0, 0)
        append(rec)
        if stats_rec is not None:
            stats_rec(rec)
        return out

    Module, backward = torch.nn.Module, torch.autograd.backward  # (torch's own: patched after this)

    def walk_for(fn, args, kwargs) -> GraphFlops | None:
        """The graph walk that counts this first call, if it is one a walk can count."""
        if fn is backward:
            return GraphFlops.backward(args, kwargs)
        if args and isinstance(args[0], Module):
            return GraphFlops.forward(torch, args[0], args[1:], kwargs)
        return None

    def first(ex: _Exec, fn, args, kwargs):
        """A graph's first call: recorded unless compiled graphs ran inside it, on this thread
        (``Ring.watch``: the core's execution counter also moves with other threads' calls);
        its flops are read off the autograd graph (a root's forward and backward:
        autograd_flops.py) or counted on the way (flops.py), or, while the program's own
        profiler or dispatch mode watches the latter, on the first call made when none does."""
        dp = devprof_cell[0]
        if dp is not None and dp.wants(nc, ex.materialize().id):
            ex.check = checker(ex.model)  # (before its general path is made)
            # profiled from its first call (model mode profiles only that one); should compiled
            # graphs run inside, this one call is recorded besides them, then never again.  The
            # op recorder counts its flops with the same formulas: no second dispatch mode
            watched = watch_thread()
            try:
                return general(ex, fn, args, kwargs)
            finally:
                ran = unwatch_thread(*watched)  # (its own execution is one of them)
                ex.known = True
                ex.skip = ran > 1
                learn_flops(rt, ex.model, getattr(dp, "last_flops", lambda: None)())
        # a root module's or backward's flops read off the autograd graph, nothing dispatched
        # (autograd_flops; a graph it cannot count: its next call under the mode); an optimizer
        # of torch's known to dispatch no op with a formula: None without the dispatch mode,
        # which would cost ~20 us an op (flops.formula_free_step)
        fc = None if ex.walked else walk_for(fn, args, kwargs)
        if fc is None:
            fc = FlopCounter(torch, skip=ex.model is not None and ex.model.kind == "optimizer"
                             and formula_free_step(torch, args, kwargs))
        watched = watch_thread()
        t0 = now_ns()
        ret = 1
        try:
            with fc:
                out = fn(*args, **kwargs)
            ret = 0
        finally:
            t1 = now_ns()
            if unwatch_thread(*watched):
                ex.skip = True  # compiled graphs ran inside: they are the executions
            else:
                if ret == 0 and type(fc) is GraphFlops:
                    fc.done(out)  # (after the call's end: the walk is not the execution's time)
                mid, eid = ex.materialize().id, next_eid()
                ex.check = checker(ex.model)
                if ret == 0 and ex.check is not None:
                    ret = check_first(ex, out, eid, t0, t1)
                finish(mid, eid, t0, t1, ret, False)
                learn_flops(rt, ex.model, fc.flops)
            # the program's own profiler watched the call, or the graph's walk failed: no flops
            # counted, the next call is a first call again (it records the same; flops/0069)
            failed = type(fc) is GraphFlops and not ex.skip and (fc.failed or fc.inputs is not None)  # (not walked)
            ex.walked = ex.walked or bool(failed)
            ex.known = not fc.deferred and not failed
        return out

    return record, c_run


def install_eager(inst: Installed, torch, core: CoreState) -> Eager:
    """Replace ``Module.__call__``, ``torch.autograd.backward`` and the optimizers' step wrapper."""
    eg = Eager(inst, torch, core)
    _patch_module_call(eg, torch)
    _patch_backward(eg, torch)
    _patch_optimizer(eg, torch)
    return eg


def _patch_module_call(eg: Eager, torch) -> None:
    Module = torch.nn.Module
    inner = Module.__call__  # _wrapped_call_impl
    tl = eg.tl
    record, module_exec, grad_on = eg.record, eg.module_exec, torch.is_grad_enabled
    # FX graph modules are never roots (_register_module skips them: the compiled graph that runs
    # them is the execution). AOTAutograd's backward graph module is called from the autograd
    # engine, outside any root, every step: a type check here keeps it out of the one-entry cache,
    # which would otherwise alternate between it and the compiled root (a WeakKeyDictionary lookup
    # each call)
    GraphModule = torch.fx.GraphModule

    def __call__(self, *args, **kwargs):
        try:
            if tl.depth or isinstance(self, GraphModule):
                return inner(self, *args, **kwargs)
            ex = module_exec(self, args)
            tl.depth = 1
            try:
                if ex.skip:  # a compiled module: its graphs are the executions
                    if gate_skip is not None:
                        gate_skip(self)  # its next calls take the C gate's short cut (runtime/_hooks.h)
                    return inner(self, *args, **kwargs)
                if tl.grad_root is None and grad_on():
                    tl.grad_root = ex
                out = record(ex, inner, (self,) + args, kwargs)
                made = ex.c_run
                if made is not None and settle_root is not None and made[0] is inner and made[1] is not None:
                    settle(self, made[1], ex)
                return out
            finally:
                tl.depth = 0
        except BaseException as e:  # the program's traceback, without our frames (frames.py)
            hide_our_frames(e)
            raise

    __call__.__wrapped__ = inner  # type: ignore[attr-defined]
    # torch's own names: Dynamo wraps a compiled module's call in an extra frame unless the
    # callable is named _wrapped_call_impl (its errors then showed that frame and our polyfill)
    __call__.__name__, __call__.__qualname__ = inner.__name__, inner.__qualname__
    # the calls that reach it through its vectorcall (``mod(x)``, an FX graph module's super call)
    # and have nothing to record are answered in C, the others run the code above (_hooks.h)
    gate_skip = settle_root = None
    if module_call_gate is not None:
        module_call_gate(__call__, tl, inner, GraphModule)
        gate_skip, settle_root = module_call_skip, module_call_root
    enabled = eg.rt.enabled

    def settle(mod, run, ex: _Exec) -> None:
        """The C gate records ``mod``'s next root calls with ``run`` (its graph's C wrapper, made
        once the graph's first call was recorded): no Python frame of ours (runtime/_hooks.h)."""
        if ex.known and not ex.skip:
            try:
                settle_root(mod, run, ex, enabled, EXECUTIONS, grad_on)
            except Exception:  # noqa: BLE001 - a module without weak references: the Python path
                pass

    Module.__call__ = __call__
    # Dynamo short-cuts a module call to its forward only when __call__ is the one it saw at its
    # import, and must not trace our frame: give it ours as that one, and Module's own to inline.
    # (once the package is imported: importing Dynamo's modules from inside its import breaks it)
    when_imported("torch._dynamo", lambda m: _tell_dynamo(__call__, inner))


def _tell_dynamo(ours: Callable, inner: Callable) -> None:
    for name in ("torch._dynamo.utils", "torch._dynamo.variables.nn_module"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "unpatched_nn_module_call", None) in (inner, ours):
            mod.unpatched_nn_module_call = ours
    try:
        from torch._dynamo.decorators import substitute_in_graph

        substitute_in_graph(ours, skip_signature_check=True)(_polyfill_for(inner))
    except Exception:  # an older or newer Dynamo: it traces our frame (a graph break at worst)
        pass


def _polyfill_for(inner: Callable) -> Callable:
    """What Dynamo traces in place of our ``__call__`` when it does not short-cut a module call to
    its forward (a module with hooks, ``nn.Module.__call__(m, x)``): Module's own.  Its code must
    not come from a file of this package, which Dynamo is told to skip (it would then refuse to
    inline the polyfill: "'SkipFunctionVariable' object has no attribute 'get_code'", and the
    user's ``torch.compile`` failed on any model with a forward hook)."""
    ns: dict = {"inner": inner}
    exec(compile("def module_call(self, *args, **kwargs):\n    return inner(self, *args, **kwargs)\n",
                 "<neuron-explorer: Module.__call__ for Dynamo>", "exec"), ns)
    return ns["module_call"]


def _patch_backward(eg: Eager, torch) -> None:
    ag = torch.autograd
    tl, record, pending = eg.tl, eg.record, eg.inst.pending_cc
    # ``after`` runs when collectives wait for their end: in ``pending``, or queued by the C++
    # kernels until ``after`` adopts them
    queued = eg.inst.cc_queued or (lambda: 0)

    def after() -> None:
        try:  # never turn the user's backward into our error
            _end_waited_collectives(eg.inst)
        except Exception as e:  # noqa: BLE001
            eg.inst.warn_once("end-waited", f"collective ends after a backward not recorded: {e}")

    def wrap(orig):
        gate = None  # the C gate in front of ``run`` (with the extension)

        @functools.wraps(orig)
        def run(*args, **kwargs):
            try:
                ex = tl.grad_root
                if ex is None or tl.depth:
                    return orig(*args, **kwargs)
                tl.grad_root = None
                tl.depth = 1  # recomputed forwards (activation checkpointing) are part of it
                try:
                    bwd = eg.backward_exec(ex)
                    out = record(bwd, orig, args, kwargs)
                finally:
                    tl.depth = 0
                    if pending or queued():
                        after()
                made = bwd.c_run
                if gate is not None and made is not None and made[0] is orig and made[1] is not None and \
                        bwd.known and not bwd.skip:
                    try:  # the gate records this graph's next backwards in C (runtime/_hooks.h)
                        backward_settle(gate, ex, made[1])
                    except Exception:  # noqa: BLE001 - never the user's error: the Python path stays
                        pass
                return out
            except BaseException as e:  # the program's traceback, without our frames (frames.py)
                hide_our_frames(e)
                raise

        if backward_gate is None:
            return run
        # in C (runtime/_hooks.h): torch's own function when no eager root is waiting for its
        # backward (a compiled training step), the settled graph's backward, else ``run``
        gate = backward_gate(orig.__name__, tl, orig, run, pending, after, eg.rt.enabled, EXECUTIONS,
                             eg.inst.cc_queued_address)
        return gate

    ag.backward = wrap(ag.backward)
    ag.grad = wrap(ag.grad)


def _end_waited_collectives(inst: Installed) -> None:
    """Record the end of collectives the backward waited for whose completion callback has not
    run yet: DDP's reducer waits for its buckets before the backward returns, but the callback
    needs the GIL from the backend's thread and may come too late for the process's final write
    (the last step's all-reduce went missing).  Their end is then the backward's end, an upper
    bound; those whose callback ran keep its exact time (a C ``Stamp``'s: ``finish`` takes it)."""
    if inst.adopt_cc is not None:  # the C++ kernels' records of the backward's collectives
        inst.adopt_cc()
    t1 = now_ns()
    for key, entry in list(inst.pending_cc.items()):
        try:
            s = entry[11]  # entry: (Work, finish, ...): see Installed.pending_cc
            if s is not None and s.t:  # stamped: recorded at the stamp's time
                inst.cc_complete(key, t1, entry_status(entry))
                continue
            done = getattr(entry[0], "done", None)  # (the C++ kernels' entry holds the WorkStamp)
            if done is not None:
                if done:
                    inst.cc_complete(key, t1, entry_status(entry))
                continue
            # (its future completes before the Work's own flag is set: DDP waited on the future)
            fut = entry[0].get_future()
            if fut.done():
                inst.cc_complete(key, t1, future_status(fut))
        except Exception:  # noqa: BLE001 - (a Work without a future: its Work.wait records it)
            continue


def _patch_optimizer(eg: Eager, torch) -> None:
    """Wrap what ``Optimizer.profile_hook_step`` returns (torch puts it in place of each optimizer
    class's ``step``).  With the extension the wrapper calls ``_fastpath.EagerStep``
    (runtime/_step.h): the Python ``step`` below records an optimizer's first steps, then hands the
    C object a C wrapper for that optimizer, which records its later steps with no Python frame of
    ours but the one calling it (the step of a compiled training loop is usually eager: in Python
    it cost ~1% of a small step)."""
    Optimizer = torch.optim.Optimizer
    orig = Optimizer.profile_hook_step
    tl, record, optimizer_exec, c_run = eg.tl, eg.record, eg.optimizer_exec, eg.c_run
    enabled = eg.rt.enabled

    def profile_hook_step(func):
        hooked = orig(func)
        fast = None

        @functools.wraps(hooked)
        def step(*args, **kwargs):
            try:
                if tl.depth or not args:
                    return hooked(*args, **kwargs)
                ex = optimizer_exec(args[0])
                try:
                    return record(ex, hooked, args, kwargs)
                finally:
                    if fast is not None:
                        _settle(eg, fast, args[0], c_run(ex, hooked))
            except BaseException as e:  # the program's traceback, without our frames (frames.py)
                hide_our_frames(e)
                raise

        step._neuron_explorer_step = True  # type: ignore[attr-defined]
        if EagerStep is None:
            return step
        fast = EagerStep(hooked, tl, enabled, EXECUTIONS, step)

        # A Python function in the class, as torch's own: Dynamo, tracing a compiled function that
        # calls opt.step(), called a C object standing there without the optimizer.  One frame.
        @functools.wraps(hooked)
        def c_step(*args, **kwargs):
            try:
                return fast(*args, **kwargs)
            except BaseException as e:  # the program's traceback, without our frames (frames.py)
                hide_our_frames(e)
                raise

        c_step._neuron_explorer_recorder = fast  # type: ignore[attr-defined]
        c_step._neuron_explorer_step = True  # type: ignore[attr-defined]
        return c_step

    Optimizer.profile_hook_step = staticmethod(profile_hook_step)
    _rehook_built(Optimizer, profile_hook_step)


def _rehook_built(Optimizer, profile_hook_step) -> None:
    """Optimizer classes whose first instance was built before the hooks were installed (a program
    that imports ``neuron_explorer.torch`` after making its optimizer) already have torch's step
    wrapper: wrap their step as the hooks would have.  Their steps were missed otherwise."""
    seen, todo = set(), list(Optimizer.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
        step = cls.__dict__.get("step")
        func = getattr(step, "__wrapped__", None)
        if not getattr(step, "hooked", False) or getattr(step, "_neuron_explorer_step", False) or func is None:
            continue
        try:
            cls.step = profile_hook_step(func)
            cls.step.hooked = True  # as Optimizer._patch_step_function marks it
        except Exception:  # noqa: BLE001 - a class that refuses: its steps stay unrecorded
            pass


def _settle(eg: Eager, fast, opt, run) -> None:
    """Let ``fast`` (an EagerStep) record ``opt``'s next steps with ``run`` (a C wrapper), or
    forget the optimizer it had when ``run`` is None (its steps then stay on the Python path)."""
    try:
        if run is None:
            if fast.settled is not None:
                fast.settle(None, None)
        elif fast.settled is not opt:
            fast.settle(opt, run)
    except Exception as e:  # noqa: BLE001 - an optimizer without weak references: Python path
        eg.inst.warn_once("eager-step", f"optimizer steps recorded on the Python path: {e}")


def eager_enabled() -> bool:
    """``NEURON_EXPLORER_EAGER=0`` turns the eager hooks off (compiled graphs are still recorded)."""
    return env_switch(EAGER, "eager executions")
