"""Flop counts of PyTorch graphs: what neuron-monitor's ``flops`` and a model's ``ModelInfo.flops``
come from (docs/decisions/0049-graph-flops.md).

Both ways use PyTorch's own per-operator formulas (``torch.utils.flop_counter.flop_registry``):
an operator without a formula adds nothing, and a graph in which no operator has one has no known
flop count (``None``), never 0.

* **Compiled graphs** (``graph_flops``): right after the backend compiled a Dynamo graph, the
  graph is run once more on *fake* tensors of the example inputs' shapes, in a fresh
  ``FakeTensorMode``, and its backward too when an output needs gradients.  Nothing real is
  computed or mutated (fake tensors have no data; a parameter or buffer the graph updates in
  place is updated only in its fake copy), and the user's code is not run again: a Dynamo graph
  holds only tensor operations.
* **Eager graphs**: a root module's first forward and its backward are counted off the autograd
  graph they build (``autograd_flops``: nothing dispatched, decision 0169).  What that walk
  cannot count, and an optimizer step (``FlopCounter``), runs its *first* call (or, after a walk
  that failed, its next) with a light dispatch mode that adds the formulas up.  It declares
  ``ignore_compile_internals`` so that a ``torch.compile`` inside the call compiles exactly as
  without it (Dynamo otherwise skips, for good, frames first seen while a dispatch mode is active).

The program's own tools must not see us (docs/decisions/0069-flops-unseen-by-user-profilers.md).
A dispatch mode is seen by a ``torch.profiler`` that records (a ``PythonDispatchMode`` event and
every op twice) and by the program's own dispatch modes (ours would run under theirs).  So while
one of them is on (``watched_by``), an eager graph's count waits for a call made when none is
(``FlopCounter.deferred``), and a compiled graph is counted on a helper thread, where neither the
profiler's callbacks nor the dispatch mode stack (both thread-local) reach.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any, Callable

from neuron_explorer.integrations.torch.frames import dispatch_handler, hide_redispatch
from neuron_explorer.runtime.ring import RateGate

__all__ = ["FORMULA_FREE_OPTIMIZERS", "FlopCounter", "count_first_call", "formula_free_step", "graph_flops",
           "learn_flops", "op_flops", "watched_by"]


def op_flops(registry: dict, func, args, kwargs: dict, out) -> float | None:
    """One ATen call's flops by PyTorch's formula; None when the op has none or it fails.

    torch's registry entries turn every argument into its shape with a pytree map before calling
    the formula (~27 us an op, 8x the dispatch mode's own cost); the formula itself is called
    here with the same shapes, made by ``_shapes`` (decision 0115).  A formula registered raw, or
    arguments ``_shapes`` does not take apart as the pytree map would, go through torch's entry."""
    f = registry.get(getattr(func, "overloadpacket", None))
    if f is None:
        return None
    try:
        raw = _raw_formula(f)
        if raw is not None:
            try:
                sargs, skw, sout = _shapes(args), _shapes(kwargs), _shapes(out)
            except _Unusual:
                raw = None
        v = float(raw(*sargs, out_shape=sout, **skw) if raw is not None else f(*args, **kwargs, out_val=out))
    except Exception:  # a formula that does not take these arguments: unknown, not an error
        return None
    return v if math.isfinite(v) else None


class _Unusual(Exception):
    """An argument ``_shapes`` does not know how torch's pytree map would take apart."""


_RAW: dict = {}  # torch's registry entry -> its raw formula (None: call the entry itself)
_Tensor: Any = None
_Size: Any = None


def _raw_formula(f):
    """The shape formula inside torch's ``shape_wrapper`` entry ``f``, or None."""
    try:
        return _RAW[f]
    except KeyError:
        pass
    raw = None
    try:
        global _Tensor, _Size
        import torch
        from torch.utils.flop_counter import shape_wrapper

        _Tensor, _Size = torch.Tensor, torch.Size
        if getattr(f, "__code__", None) is shape_wrapper(_raw_formula).__code__:
            raw = getattr(f, "__wrapped__", None)
    except Exception:  # noqa: BLE001 - a torch without it: its entries as they are
        raw = None
    _RAW[f] = raw
    return raw


def _shapes(x):
    """``x`` with each tensor replaced by its shape, as ``tree_map(get_shape, x)`` in
    ``torch.utils.flop_counter`` makes it for the containers ATen calls hold (lists, tuples,
    dicts); raises ``_Unusual`` on any other container."""
    t = type(x)
    if t is list:
        return [_shapes(v) for v in x]
    if t is tuple:
        return tuple([_shapes(v) for v in x])
    if t is dict:
        return {k: _shapes(v) for k, v in x.items()}
    if isinstance(x, _Tensor):
        return x.shape
    if t is not _Size and isinstance(x, (list, tuple, dict)):
        raise _Unusual(t.__name__)
    return x


def _counter_mode(torch):
    """The dispatch mode class (made once per process: importing it costs ~10 ms).

    torch wraps a mode's ``__torch_dispatch__`` in ``torch._disable_dynamo``, whose first call
    imports ``torch._dynamo``: 1.2-2 CPU-s in a program that never compiles (most eager ones),
    paid in the first step (decision 0115).  Ours opts out of that wrapping
    (``_should_skip_dynamo``) and takes the same wrapper itself only once Dynamo is loaded: as
    torch's, from then on, at no import cost; before that, no compiled code can be running."""
    global _MODE
    if _MODE is None:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import flop_registry

        modules = sys.modules
        try:  # (in torch._C: no Dynamo import)
            from torch._C._dynamo.eval_frame import get_eval_frame_callback as frame_callback
        except Exception:  # noqa: BLE001 - a torch without it: the wrapper once Dynamo is loaded
            frame_callback = None

        @dispatch_handler
        def count(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                out = func(*args, **kwargs)
            except BaseException as e:  # the op's error as the program sees it (frames.py)
                hide_redispatch(e)
                raise
            v = op_flops(flop_registry, func, args, kwargs, out)
            if v is not None:
                self.total += v
                self.known = True
            return out

        guarded = torch._disable_dynamo(count, recursive=True)  # (imports Dynamo at its first call)

        class _Mode(TorchDispatchMode):
            @classmethod
            def ignore_compile_internals(cls) -> bool:
                return True  # torch.compile inside compiles as it would without us

            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                return False  # no wrapper that imports Dynamo: ours below, once it is loaded

            def __init__(self) -> None:
                super().__init__()
                self.total = 0.0
                self.known = False

            @dispatch_handler
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                # torch's wrapper only swaps Dynamo's frame callback out and back in: with none
                # set (eager code, Dynamo loaded or not) it does nothing, at ~3 us an op
                if frame_callback is not None:
                    if frame_callback() is None:
                        return count(self, func, types, args, kwargs)
                elif modules.get("torch._dynamo") is None:
                    return count(self, func, types, args, kwargs)
                return guarded(self, func, types, args, kwargs)

        _MODE = _Mode
    return _MODE


_MODE = None


def watched_by(torch) -> str:
    """What of the program's own would see a dispatch mode of ours on this thread ("" for
    nothing): a recording ``torch.profiler`` (or any autograd profiler: NVTX, ITT), or a
    dispatch mode of its own (``FlopCounterMode``, ``FakeTensorMode``, ...).  Both are
    thread-local in PyTorch."""
    try:
        if torch._C._autograd._profiler_enabled():
            return "the program's torch.profiler is recording"
        if torch._C._len_torch_dispatch_stack() > 0:
            return "a dispatch mode of the program is active"
    except Exception:  # an older or newer torch without these: take it as watched, count nothing
        return "cannot tell whether the program's profiler is on"
    return ""


class FlopCounter:
    """``with FlopCounter(torch) as fc: ...`` then ``fc.flops`` (None when no op had a formula).
    Failing to set up counts nothing and never stops the code inside from running.  While the
    program's own profiler or dispatch mode watches (``watched_by``) it counts nothing and says
    why in ``deferred``: the caller counts a later call instead."""

    def __init__(self, torch, skip: bool = False) -> None:
        self.mode = None
        self.flops: float | None = None
        self.deferred = "" if skip else watched_by(torch)
        if self.deferred or skip:  # (skip: known to dispatch no op with a formula: None, uncounted)
            return
        try:
            self.mode = _counter_mode(torch)()
        except Exception:
            self.mode = None

    def __enter__(self) -> "FlopCounter":
        if self.mode is not None:
            try:
                self.mode.__enter__()
            except Exception:
                self.mode = None
        return self

    def __exit__(self, *exc) -> None:
        m = self.mode
        if m is None:
            return
        m.__exit__(None, None, None)
        self.flops = m.total if m.known else None


# torch's optimizers whose ``step`` dispatches no operator with a flop formula (elementwise and
# ``_foreach`` updates only): their first step's count is None without running it under the mode,
# which cost ~20 us for each of its ops (650 in a 6-layer transformer's Adam step: ~1/3 of the
# first step's ops).  Not Muon (Newton-Schulz: ``mm``), Adafactor (its row and column factors'
# product is a matmul), nor LBFGS (it calls the closure).
# test_formula_free_optimizers_dispatch_no_formula_op checks each against the mode.
FORMULA_FREE_OPTIMIZERS = ("ASGD", "Adadelta", "Adagrad", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop",
                           "Rprop", "SGD", "SparseAdam")


def formula_free_step(torch, args: tuple, kwargs: dict) -> bool:
    """Whether ``Optimizer.step(*args, **kwargs)`` (``args[0]`` the optimizer) is known to
    dispatch no operator with a flop formula: the optimizer's class is exactly one of torch's
    ``FORMULA_FREE_OPTIMIZERS`` (a subclass may override ``step``), no closure is passed (it runs
    the model) and no step hook is registered (hooks run the program's code inside the step)."""
    try:
        opt = args[0]
        cls = type(opt)
        optim = torch.optim
        if cls.__module__.split(".")[:2] != ["torch", "optim"] or getattr(optim, cls.__name__, None) is not cls:
            return False
        if cls.__name__ not in FORMULA_FREE_OPTIMIZERS or len(args) > 1 and args[1] is not None:
            return False
        if any(v is not None for v in kwargs.values()):
            return False
        o = sys.modules["torch.optim.optimizer"]  # (not an attribute of torch.optim)
        if opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks or o._global_optimizer_post_hooks:
            return False
        # our own pre-hook (memory.py's gradient snapshot behind a RateGate) counts no flops
        return all(isinstance(h, RateGate) for h in o._global_optimizer_pre_hooks.values())
    except Exception:  # noqa: BLE001 - anything unexpected: count as before
        return False


def graph_flops(gm, example_inputs) -> tuple[float | None, float | None]:
    """(forward, backward) flops of one execution of a Dynamo graph, counted on fake tensors of
    ``example_inputs``' shapes; backward is None for an inference graph.  Any failure (an op
    without a fake kernel, a data-dependent shape) leaves the count unknown: (None, None).
    While the program's profiler or dispatch mode watches this thread, counted on a helper
    thread (with this thread's grad mode) that they do not reach."""
    try:
        import torch
    except Exception:
        return None, None
    if not watched_by(torch):
        return _graph_flops(torch, gm, example_inputs)
    got: list = [(None, None)]
    grad = torch.is_grad_enabled()

    def count() -> None:
        with torch.set_grad_enabled(grad):
            got[0] = _graph_flops(torch, gm, example_inputs)

    try:
        t = threading.Thread(target=count, name="neuron-explorer-flops", daemon=True)
        t.start()
        t.join()
    except Exception:  # no thread to be had: unknown
        return None, None
    return got[0]


def _graph_flops(torch, gm, example_inputs) -> tuple[float | None, float | None]:
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        fm = FakeTensorMode(allow_non_fake_inputs=True)
        with fm:
            fakes = [_fake_like(torch, e) for e in example_inputs]
        mode = _counter_mode(torch)()  # (under our own fake mode: not FlopCounter, which would defer)
        with fm, mode:
            out = gm.forward(*fakes)  # the graph itself: no module hooks (ours or the user's)
            fwd, known = mode.total, mode.known
            ran = _backward(torch, out, fakes)
            bwd = mode.total - fwd if ran and mode.total > fwd else None
        return (fwd if known else None), bwd
    except Exception:
        return None, None


def _fake_like(torch, e: Any):
    if not isinstance(e, torch.Tensor):
        return e
    return torch.empty_strided(tuple(e.shape), tuple(e.stride()), dtype=e.dtype, device=e.device,
                               requires_grad=bool(e.requires_grad))


def _backward(torch, out, inputs: list) -> bool:
    """Run the backward of ``out`` (ones as gradients) w.r.t. the inputs that need gradients;
    False when nothing needs one (an inference graph)."""
    outs = [o for o in (out if isinstance(out, (list, tuple)) else (out,))
            if isinstance(o, torch.Tensor) and o.requires_grad]
    ins = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    if not outs or not ins or not torch.is_grad_enabled():
        return False
    torch.autograd.grad(outs, ins, [torch.ones_like(o) for o in outs], allow_unused=True)
    return True


def learn_flops(rt, model, flops: float | None) -> None:
    """Give a graph the flops counted after its load (``ModelInfo.flops``, the monitor's
    ``flops``); never raises into the user's call."""
    if flops is None or model is None or model.flops:
        return
    model.flops = flops
    if rt.stats is not None:
        try:
            rt.stats.set_model_flops(model.id, flops)
        except Exception:  # noqa: BLE001
            pass


def count_first_call(torch, rt, model, fn: Callable) -> Callable:
    """``fn`` whose first call counts the graph's flops (a graph compiled before the runtime
    started has no Dynamo graph left to count on fake tensors); later calls pay one flag test."""
    pending = [True]

    def run(*args, **kwargs):
        if pending[0]:
            with FlopCounter(torch) as fc:
                out = fn(*args, **kwargs)
            if not fc.deferred:  # (the program's profiler watched this call: count a later one)
                pending[0] = False
                learn_flops(rt, model, fc.flops)
            return out
        return fn(*args, **kwargs)

    return run
