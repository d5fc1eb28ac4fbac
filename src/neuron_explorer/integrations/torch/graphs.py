"""``torch.compile`` graphs: Dynamo's compile hooks, graph registration and model announcements.

Dynamo hands every captured graph to the user's backend through
``OutputGraph.call_user_compiler``; we time that call (``nrt_load``; ``model_load`` spans the whole
compile from Dynamo's start callback), register the graph as a model, and wrap the callable the
backend returns (``execution.wrap_execution``), so each call records one execution.  The backward
graph of an AOTAutograd backend runs from the autograd engine through the ``backward`` of a
per-graph ``autograd.Function``; the forward's wrapper finds that class on its outputs once
gradients are on, and its ``backward`` is wrapped once per graph.  Whatever backend the user chose
keeps compiling and running the graph.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from typing import Any, Callable

from neuron_explorer.contracts import events as ev
from neuron_explorer.integrations.torch.execution import BackwardFinder, wrap_execution
from neuron_explorer.integrations.torch.flops import graph_flops
from neuron_explorer.integrations.torch.neffs import cache_neff
from neuron_explorer.integrations.torch.state import Installed
from neuron_explorer.integrations.torch.tensors import signature
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.core import CoreState, Model
from neuron_explorer.util.log import get_logger

__all__ = ["backward_finder", "install_compile_start", "install_dynamo", "instrument_backward", "record_load",
           "wrap_graph"]

now_ns = clock.now_ns
native_tid = clock.native_tid


def install_compile_start(inst: Installed, cb_mod) -> None:
    """Note when Dynamo starts compiling: the start of the graph's ``model_load``."""
    def on_start(*_args) -> None:
        inst.compile_start = now_ns()

    cb_mod.callback_handler.register_start_callback(on_start)


def install_dynamo(inst: Installed, torch, core: CoreState, og_mod) -> None:
    """Wrap ``OutputGraph.call_user_compiler`` so each compiled graph is registered and wrapped."""
    OG = og_mod.OutputGraph
    orig = OG.call_user_compiler

    def call_user_compiler(self, gm, example_inputs):
        t_backend = now_ns()
        compiled = orig(self, gm, example_inputs)
        t_end = now_ns()
        try:
            model = register_graph(inst, core, self, gm, example_inputs, t_backend, t_end)
            return wrap_graph(inst, torch, core, model, compiled)
        except Exception as e:  # never break the user's compile
            get_logger(__name__).warning(f"neuron-explorer: warning: graph not instrumented: {e}")
            return compiled

    call_user_compiler.__wrapped__ = orig  # type: ignore[attr-defined]
    OG.call_user_compiler = call_user_compiler


def register_graph(inst: Installed, core: CoreState, og, gm, example_inputs, t_backend: int, t_end: int) -> Model:
    """Add a compiled forward graph to the runtime's models and record its load events."""
    rt = inst.rt
    backend = _backend_name(getattr(og, "compiler_fn", None))
    code = gm.code
    digest = hashlib.blake2b((backend + "\0" + code).encode(), digest_size=8).digest()
    hval = int.from_bytes(digest, "little")
    co_name = getattr(getattr(getattr(og, "root_tx", None), "f_code", None), "co_name", "graph")
    module = _compiled_module(og)
    src, modpath, nodes, label = _graph_facts(gm, rt.config.source_locations, inst.torch_dir)
    consts = 0
    for p in list(gm.parameters()) + list(gm.buffers()):
        consts += p.numel() * p.element_size()
    start = inst.compile_start or t_backend
    fwd_flops, bwd_flops = graph_flops(gm, example_inputs)
    model = rt.add_model(
        name=_model_name(module or co_name, label if module is None else "", hval), neff_name=f"neff_{hval}",
        graph_hash=f"{hval:016x}", backend=backend,
        kind="forward", nc_idx=core.nc, compile_ns=t_end - start, source_location=src, module_path=modpath,
        num_nodes=len(nodes), constants_bytes=consts, signature=signature(example_inputs),
        artifacts={"code": code, "nodes": nodes, "bwd_flops": bwd_flops}, load_span=(start, t_backend, t_end),
        flops=fwd_flops or 0.0,
    )
    inst.compile_start = 0
    record_load(rt, core, model, start, t_backend, t_end)
    rt.sync_point(core, core.exec_count - 1)
    announce_model(inst, model, len(code))
    cache_neff(rt, model)
    return model


def record_load(rt, core: CoreState, model: Model, start: int, t_backend: int, t_end: int) -> None:
    """``model_load`` (``start``..``t_end``: the whole compile) and ``nrt_load`` (the backend's
    share, from ``t_backend``), each when its type is enabled."""
    tid = native_tid()
    if rt.enabled[ev.MODEL_LOAD]:
        core.ring.append((ev.MODEL_LOAD, start, t_end, tid, model.id, t_end - start, 0, 0, 0))
        core.ring.tick()
    if rt.enabled[ev.NRT_LOAD]:
        core.ring.append((ev.NRT_LOAD, t_backend, t_end, tid, model.id, 0, 0, 0, 0))
        core.ring.tick()


def wrap_graph(inst: Installed, torch, core: CoreState, model: Model, compiled: Callable) -> Callable:
    """The callable Dynamo runs instead of the backend's: it records each execution and looks for
    the graph's backward."""
    # Dynamo wraps what call_user_compiler returns (this wrapper) in torch._dynamo.disable; an
    # inner callable that is already such a wrapper would be a second, redundant layer (two
    # eval-frame switches per call), so call the function it wraps.
    fn = compiled
    while getattr(fn, "_torchdynamo_orig_callable", None) is not None and \
            getattr(fn, "_torchdynamo_wrapper_id", None) == id(fn):
        fn = fn._torchdynamo_orig_callable
    model.artifacts["callable"] = fn  # what a device profiler precaches node info from
    dp = inst.rt.devprof
    if dp is not None and hasattr(dp, "precache"):
        dp.precache(model)  # a graph loaded while device profiles are on
    return wrap_execution(inst.rt, torch, core, model, fn, backward_finder(inst, torch, core, model))


def backward_finder(inst: Installed, torch, core: CoreState, model: Model) -> BackwardFinder:
    """``find(out) -> bool`` for a forward graph's wrapper: once gradients are on, instrument the
    backward behind the outputs and say it need not be called again.  Backward graphs and graphs
    run with gradients on but no grad_fn (inference) stop looking at once."""
    done = False

    def find_backward(out) -> bool:
        nonlocal done
        if done:
            return True
        if torch.is_grad_enabled():
            done = True
            instrument_backward(inst, torch, core, model, out)
            return True
        return False

    return find_backward


def instrument_backward(inst: Installed, torch, core: CoreState, model: Model, out) -> bool:
    """Wrap the backward of the autograd.Function behind this graph's outputs, once per graph."""
    outs = out if isinstance(out, (list, tuple)) else (out,)
    node = None
    for t in outs:
        gf = getattr(t, "grad_fn", None)
        if gf is not None:
            node = gf
            break
    if node is None:
        return False
    fcls = getattr(node, "_forward_cls", None)
    if fcls is None or getattr(fcls, "_neuron_explorer_wrapped", False):
        return True
    rt = inst.rt
    orig_bw = fcls.backward
    bh = int.from_bytes(hashlib.blake2b(f"{model.graph_hash}:backward".encode(), digest_size=8).digest(), "little")
    bmodel = rt.add_model(
        name=model.name + "_bwd", neff_name=f"neff_{bh}", graph_hash=f"{bh:016x}",
        backend=model.backend, kind="backward", nc_idx=core.nc, source_location=model.source_location,
        module_path=model.module_path, signature="(grad_outputs)", flops=model.artifacts.get("bwd_flops") or 0.0,
    )
    announce_model(inst, bmodel)
    cache_neff(rt, bmodel)
    bmodel.artifacts["callable"] = orig_bw
    wrapped = wrap_execution(rt, torch, core, bmodel, orig_bw)
    fcls.backward = staticmethod(wrapped)
    fcls._neuron_explorer_wrapped = True
    return True


def announce_model(inst: Installed, model: Model, code_bytes: int = 0) -> None:
    """Tell neuron-monitor's counters about a loaded graph and the memory it holds."""
    rt = inst.rt
    stats = rt.stats
    if stats is None:
        return
    try:
        stats.on_model_load(model.id, model.name, model.nc_idx, model.flops or None, code_bytes=code_bytes,
                            constants_bytes=model.constants_bytes)
        consts = sum(m.constants_bytes for m in rt.models)
        code = sum(len(m.artifacts.get("code", "")) for m in rt.models)
        stats.set_memory({"constants": consts}, {model.nc_idx: {"constants": consts, "model_code": code}})
    except Exception as e:
        inst.warn_once("stats", f"monitor counters not updated: {e}")


# ---------------------------------------------------------------------------------------------
# naming a graph


# this package's own directory: its frames (the eager hooks' Module.__call__) are not the user's code
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _user_frame(stack_trace: str, torch_dir: str) -> tuple[str, str] | None:
    """The innermost (file, line) of a node's stack trace that is not inside PyTorch or this package."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', stack_trace)
    for f, line in reversed(frames):
        if not f.startswith(torch_dir) and not f.startswith(_OWN_DIR):
            return f, line
    theirs = [fr for fr in frames if not fr[0].startswith(_OWN_DIR)]
    return theirs[-1] if theirs else None


def _graph_facts(gm, with_source: bool, torch_dir: str) -> tuple[str, str, list[tuple[str, str, str, str, str]], str]:
    """(file:line of the user's code, module path, nodes, a short label) of an FX graph.

    Each node is (name, op, target, source location, module path); the locations are filled only
    when the source-debug variables ask for them.  The label (``train.py:41``) names the graph."""
    src = mod = label = ""
    nodes = []
    for node in gm.graph.nodes:
        nsrc = nmod = ""
        st = node.meta.get("stack_trace") if (with_source or not label) else None
        if st:
            fr = _user_frame(st, torch_dir)
            if fr is not None:
                label = label or f"{os.path.basename(fr[0])}:{fr[1]}"
                if with_source:
                    nsrc = f"{fr[0]}:{fr[1]}"
        if not label:
            nms0 = node.meta.get("nn_module_stack")
            if nms0:  # a module's graph: name it after the compiled module's class
                first = list(nms0.values())[0]
                cls = first[1] if isinstance(first, tuple) and len(first) > 1 else None
                label = getattr(cls, "__name__", "") or ""
        if with_source:
            nms = node.meta.get("nn_module_stack")
            if nms:
                last = list(nms.values())[-1]
                nmod = last[0] if isinstance(last, tuple) else str(last)
            src = src or nsrc
            mod = mod or nmod
        nodes.append((node.name, node.op, str(node.target), nsrc, nmod))
    return src, mod, nodes, label


# the frames Dynamo starts in when it compiles a module's call: a compiled module's forward (or
# Module's call methods), the graphs after a graph break in them, and ``torch.compile(module)``'s
# wrapper frame around a module (external_utils.wrap_inline: the module is its ``fn``)
_MODULE_FRAMES = re.compile(r"(torch_dynamo_resume_in_)?(forward|_call_impl|_wrapped_call_impl)(_at_\d+)?")


def _compiled_module(og) -> str | None:
    """The class name of the module whose call Dynamo compiled into this graph (``Net`` for
    ``torch.compile(Net())``), None for a function."""
    tx = getattr(og, "root_tx", None)
    co_name = getattr(getattr(tx, "f_code", None), "co_name", "")
    try:
        local = getattr(tx, "f_locals", None) or {}
        if _MODULE_FRAMES.fullmatch(co_name):
            mod = local.get("self")
        elif co_name == "inner":
            mod = local.get("fn")
        else:
            return None
    except Exception:  # a Dynamo whose translator keeps other locals: named as a function
        return None
    torch = sys.modules.get("torch")
    return type(mod).__name__ if torch is not None and isinstance(mod, torch.nn.Module) else None


def _model_name(co_name: str, label: str, hval: int) -> str:
    """``f@train.py:41_<hash>`` for a function, ``Net_<hash>`` for a module (``co_name`` is then
    the module's class and ``label`` empty)."""
    if co_name in ("inner", "_call_impl", "_wrapped_call_impl", "forward") and label and ":" not in label:
        base = label
    elif label:
        base = f"{co_name}@{label}"
    else:
        base = co_name
    return f"{base}_{hval:016x}"[:64]


def _backend_name(compiler_fn: Any) -> str:
    """The name of the user's backend (``inductor``, ``aot_eager``, a function's name), seen
    through Dynamo's wrappers: the debug wrapper's ``compiler_fn`` and, for a module wrapped in
    DDP, DDPOptimizer's ``compile_fn`` around the real backend."""
    c = compiler_fn
    for _ in range(4):
        name = getattr(c, "compiler_name", None)
        if isinstance(name, str):
            return name
        inner = getattr(c, "compiler_fn", None) or getattr(getattr(c, "__self__", None), "backend_compile_fn", None)
        if inner is None:
            break
        c = inner
    return getattr(c, "__name__", type(c).__name__)
