"""PyTorch instrumentation, installed without code changes.

* ``torch.compile`` graphs: Dynamo hands every captured graph to the user's backend through
  ``OutputGraph.call_user_compiler``; we time that call (``nrt_load``; ``model_load`` spans the
  whole compile from Dynamo's start callback) and wrap the callable the backend returns, so each
  call records one execution.  The backward graph of an AOTAutograd backend runs from the autograd
  engine through the ``backward`` of a per-graph ``autograd.Function``; we wrap that method once
  per graph.  Whatever backend the user chose keeps compiling and running the graph.
* Collectives: the c10d operators (``c10d::allreduce_`` and friends) go through the dispatcher
  for Python calls and for the C++ callers such as DDP's reducer alike.  A kernel registered for
  the ``BackendSelect`` key (always in the key set, even under inference mode) sees every call,
  re-dispatches below itself to the real backend, and records the span when the ``Work`` future
  completes.
* Host/device copies on CUDA hosts: ``Tensor.to``/``cuda``/``cpu`` are wrapped (only when CUDA is
  available; a CPU-only process has no such copies).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from typing import Any

import numpy as np

from neuron_explorer.runtime import clock
from neuron_explorer.contracts import events as ev
from neuron_explorer.runtime.core import CoreState, Runtime
from neuron_explorer.runtime.ring import ExecWrapper as _CWrapper  # None: the Python wrapper runs
from neuron_explorer.integrations.importhook import when_imported

now_ns = clock.now_ns
native_tid = clock.native_tid


_state: dict[str, Any] = {"compile_start": 0, "installed": False, "lib": None}


def install(rt: Runtime, torch) -> None:
    if _state["installed"]:
        return
    _state["installed"] = True
    if torch.cuda.is_available():
        rt.device_kind = "cuda:" + torch.cuda.get_device_name(max(rt.ident.local_rank, 0) % torch.cuda.device_count())
        rt.nd_idx = max(rt.ident.local_rank, 0)
    core = rt.core()
    if core is None:
        return  # this process's core is filtered out at capture time
    rt.sync_point(core)
    if rt.enabled[ev.CC_RUNNING] or rt.enabled[ev.CC_EXEC_BARRIER]:
        _install_collectives(rt, torch, core)
    if rt.enabled[ev.NC_EXEC_RUNNING] or rt.enabled[ev.NRT_EXECUTE] or rt.enabled[ev.MODEL_LOAD] or \
            rt.enabled[ev.NRT_LOAD] or rt.enabled[ev.NUMERICAL_ERR]:
        when_imported("torch._dynamo.trace_rules", lambda m: m.add("neuron_explorer"))  # never trace our hooks
        when_imported("torch._dynamo.callback", lambda m: _install_compile_start(m))
        when_imported("torch._dynamo.output_graph", lambda m: _install_dynamo(rt, torch, core, m))
    if torch.cuda.is_available() and (rt.enabled[ev.NRT_TENSOR_READ] or rt.enabled[ev.NRT_TENSOR_WRITE]):
        _install_copies(rt, torch, core)


# ---------------------------------------------------------------------------------------------
# torch.compile graphs


def _install_compile_start(cb_mod) -> None:
    def on_start(*_args) -> None:
        _state["compile_start"] = now_ns()

    cb_mod.callback_handler.register_start_callback(on_start)


_TORCH_DIR = None


def _user_frame(stack_trace: str) -> tuple[str, str] | None:
    """The innermost (file, line) of a node's stack trace that is not inside PyTorch itself."""
    global _TORCH_DIR
    if _TORCH_DIR is None:
        import torch

        _TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
    frames = re.findall(r'File "([^"]+)", line (\d+)', stack_trace)
    for f, line in reversed(frames):
        if not f.startswith(_TORCH_DIR):
            return f, line
    return frames[-1] if frames else None


def _graph_facts(gm, with_source: bool) -> tuple[str, str, list[tuple[str, str, str, str, str]], str]:
    """(file:line of the user's code, module path, nodes, a short label) of an FX graph.

    Each node is (name, op, target, source location, module path); the locations are filled only
    when the source-debug variables ask for them.  The label (``train.py:41``) names the graph."""
    src = mod = label = ""
    nodes = []
    for node in gm.graph.nodes:
        nsrc = nmod = ""
        st = node.meta.get("stack_trace") if (with_source or not label) else None
        if st:
            fr = _user_frame(st)
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


def tensor_summary(xs, include_others: bool = True) -> list[str]:
    """``float32[16, 32]`` for each tensor-like (and the type name of anything else, optionally)."""
    parts = []
    for x in xs:
        shape = getattr(x, "shape", None)
        if shape is not None:
            parts.append(f"{str(getattr(x, 'dtype', '')).replace('torch.', '')}{list(shape)}")
        elif include_others:
            parts.append(type(x).__name__)
    return parts


def _model_name(co_name: str, label: str, hval: int) -> str:
    """``f@train.py:41_<hash>`` for a function, ``Sequential_<hash>`` for a module."""
    if co_name in ("inner", "_call_impl", "_wrapped_call_impl", "forward") and label and ":" not in label:
        base = label
    elif label:
        base = f"{co_name}@{label}"
    else:
        base = co_name
    return f"{base}_{hval:016x}"[:64]


def _signature(example_inputs) -> str:
    return "(" + ", ".join(tensor_summary(example_inputs)) + ")"


def _backend_name(compiler_fn) -> str:
    inner = getattr(compiler_fn, "compiler_fn", None) or compiler_fn
    for c in (compiler_fn, inner):
        name = getattr(c, "compiler_name", None)
        if isinstance(name, str):
            return name
    return getattr(inner, "__name__", type(inner).__name__)


def _install_dynamo(rt: Runtime, torch, core: CoreState, og_mod) -> None:
    OG = og_mod.OutputGraph
    orig = OG.call_user_compiler

    def call_user_compiler(self, gm, example_inputs):
        t_backend = now_ns()
        compiled = orig(self, gm, example_inputs)
        t_end = now_ns()
        try:
            return _register_graph(rt, torch, core, self, gm, example_inputs, compiled, t_backend, t_end)
        except Exception as e:  # never break the user's compile
            print(f"neuron-explorer: warning: graph not instrumented: {e}", file=sys.stderr)
            return compiled

    call_user_compiler.__wrapped__ = orig  # type: ignore[attr-defined]
    OG.call_user_compiler = call_user_compiler


def _register_graph(rt, torch, core, og, gm, example_inputs, compiled, t_backend, t_end):
    backend = _backend_name(getattr(og, "compiler_fn", None))
    code = gm.code
    digest = hashlib.blake2b((backend + "\0" + code).encode(), digest_size=8).digest()
    hval = int.from_bytes(digest, "little")
    co_name = getattr(getattr(getattr(og, "root_tx", None), "f_code", None), "co_name", "graph")
    src, modpath, nodes, label = _graph_facts(gm, rt.config.source_locations)
    consts = 0
    for p in list(gm.parameters()) + list(gm.buffers()):
        consts += p.numel() * p.element_size()
    start = _state["compile_start"] or t_backend
    model = rt.add_model(
        name=_model_name(co_name, label, hval), neff_name=f"neff_{hval}", graph_hash=f"{hval:016x}", backend=backend,
        kind="forward", nc_idx=core.nc, compile_ns=t_end - start, source_location=src, module_path=modpath,
        num_nodes=len(nodes), constants_bytes=consts, signature=_signature(example_inputs),
        artifacts={"code": code, "nodes": nodes},
    )
    _state["compile_start"] = 0
    tid = native_tid()
    if rt.enabled[ev.MODEL_LOAD]:
        core.ring.append((ev.MODEL_LOAD, start, t_end, tid, model.id, t_end - start, 0, 0, 0))
        core.ring.tick()
    if rt.enabled[ev.NRT_LOAD]:
        core.ring.append((ev.NRT_LOAD, t_backend, t_end, tid, model.id, 0, 0, 0, 0))
        core.ring.tick()
    rt.sync_point(core, core.exec_count - 1)
    _announce_model(rt, model, len(code))
    if rt.neff_cache_dir:
        from neuron_explorer.integrations.torch.device import cache_neff

        cache_neff(rt, model)
    return _wrap_execution(rt, torch, core, model, compiled)


def _announce_model(rt: Runtime, model, code_bytes: int = 0) -> None:
    """Tell neuron-monitor's counters about a loaded graph and the memory it holds."""
    stats = rt.stats
    if stats is None:
        return
    try:
        stats.on_model_load(model.id, model.name, model.nc_idx, None, code_bytes=code_bytes,
                            constants_bytes=model.constants_bytes)
        consts = sum(m.constants_bytes for m in rt.models)
        code = sum(len(m.artifacts.get("code", "")) for m in rt.models)
        stats.set_memory({"constants": consts}, {model.nc_idx: {"constants": consts, "model_code": code}})
    except Exception as e:
        _warn_once("stats", f"monitor counters not updated: {e}")


_NUMPY_FLOATS: set = set()


def _nan_scan(torch, outs) -> tuple[int, int]:
    """(NaN count, Inf count) of a graph's floating-point outputs.

    CPU tensors of numpy-compatible float types are checked through a zero-copy numpy view (a few
    microseconds, against ~15 us for the equivalent torch ops); others with one fused torch check.
    The counts are computed only when something is not finite (rare)."""
    if not _NUMPY_FLOATS:
        _NUMPY_FLOATS.update((torch.float32, torch.float64, torch.float16))
    bad = []
    for t in outs if isinstance(outs, (list, tuple)) else (outs,):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or not t.numel():
            continue
        if t.dtype in _NUMPY_FLOATS and t.device.type == "cpu" and t.layout == torch.strided:
            finite = bool(np.isfinite(t.detach().numpy()).all())
        else:
            finite = bool(torch.isfinite(t).all())
        if not finite:
            bad.append(t)
    nan = inf = 0
    for t in bad:
        nan += int(torch.isnan(t).sum())
        inf += int(torch.isinf(t).sum())
    return nan, inf


def _wrap_execution(rt: Runtime, torch, core: CoreState, model, fn, backward_of_outputs: bool = True):
    """Return a callable that runs ``fn`` and records one execution per call.

    The hot path is two clock reads, an inline thread-id lookup, an execution id (a C counter that
    also counts the record's two events), one tuple and one append; graph switches and the
    nrt_execute/nc_exec_running split are derived when the rings are drained.  Everything that can
    be decided when the graph is loaded is decided here, so the common wrapper carries no NDET or
    NaN-check branches at all.  Execution ids number the executions of a core in the order they
    complete (the order they start for a wrapper that needs the id up front); on one thread that is
    the same thing.
    """
    if backward_of_outputs:
        # Dynamo wraps what call_user_compiler returns (this wrapper) in torch._dynamo.disable; an
        # inner callable that is already such a wrapper would be a second, redundant layer (two
        # eval-frame switches per call), so call the function it wraps.
        while getattr(fn, "_torchdynamo_orig_callable", None) is not None and \
                getattr(fn, "_torchdynamo_wrapper_id", None) == id(fn):
            fn = fn._torchdynamo_orig_callable
    ring = core.ring
    append = ring.append
    tick = ring.tick
    next_eid = ring.exec_id
    mid = model.id
    PAIR = ev.EXEC_PAIR
    tids = clock.native_ids
    get_ident = clock._get_ident
    # Forward outputs only: a NaN anywhere shows up in the loss (a forward output) at the step it
    # appears, while scanning every gradient of the backward graph would cost a kernel per tensor.
    nan_check = rt.config.nan_check and rt.enabled[ev.NUMERICAL_ERR] and model.kind != "backward"
    stats_rec = rt.stats.runtime_feed(core.nc) if rt.stats is not None else None
    ndet = rt.ndet
    nc = core.nc
    # the forward graph looks for its backward once outputs carry a grad_fn; backward graphs and
    # graphs run with gradients on but no grad_fn (inference) stop looking at once
    bw_pending = backward_of_outputs

    def find_backward(out) -> bool:
        """Look for the backward once gradients are on; True when it need not be called again."""
        nonlocal bw_pending
        if torch.is_grad_enabled():
            bw_pending = False
            _instrument_backward(rt, torch, core, model, out)
            return True
        return False

    devprof_cell = rt.devprof_cell  # [DeviceProfiler or None], read per call without a property
    exec_open = ring.exec_open
    exec_close = ring.exec_close

    def run_general(args, kwargs):
        """Every feature: NDET begin/end records, the NaN check, device profiles.  The execution id
        is needed before the call, so the call is bracketed as running for the event count."""
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
        except BaseException:
            ret = 1
            raise
        finally:
            t1 = now_ns()
            tid = native_tid()
            if ret == 0 and nan_check:
                nan, inf = _nan_scan(torch, out)
                if nan or inf:
                    ret = ev.RET_NUM_ERR
                    append((ev.NUMERICAL_ERR, t0, t1, tid, mid, eid, ret, nan, inf))
                    tick()
                    if ndet is not None:
                        ndet.numerical_error(nc, mid, eid, t0, t1, nan, inf)
            rec = (PAIR, t0, t1, tid, mid, eid, ret, 0, 0)
            append(rec)
            exec_close()
            if ndet is not None:
                ndet.exec_end(nc, mid, eid, t0, t1, ret)
            if stats_rec is not None:
                stats_rec(rec)
        if bw_pending:
            find_backward(out)
        return out

    # NDET's record targets for the C wrapper (None: NDET is off, or its ring is not a C ring)
    nd_hooks = ndet.exec_hooks() if ndet is not None and hasattr(ndet, "exec_hooks") else None
    if not nan_check and _CWrapper is not None and ring.buffer is not None and (ndet is None or nd_hooks):
        nd = None
        if nd_hooks is not None:
            inflight, nd_ring, kind, state = nd_hooks
            nd = (inflight, nd_ring, ring.open_counter, ring.close_counter, nc, kind, state)
        # the same lean path in C: no Python frame of its own, rows written straight into the ring;
        # with NDET it also writes NDET's in-flight and ended records (see runtime/_fastpath.c)
        run = _CWrapper(fn, ring.buffer, ring.exec_counter, PAIR, mid, rt.devprof_cell,
                        lambda *a, **k: run_general(a, k), stats_rec, find_backward if bw_pending else None, nd)
    elif ndet is None and not nan_check:
        def run(*args, **kwargs):
            if devprof_cell[0] is not None:  # a device-profile session is on: it needs the id first
                return run_general(args, kwargs)
            t0 = now_ns()
            try:
                out = fn(*args, **kwargs)
            except BaseException:
                rec = (PAIR, t0, now_ns(), native_tid(), mid, next_eid(), 1, 0, 0)
                append(rec)
                if stats_rec is not None:
                    stats_rec(rec)
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
            if stats_rec is not None:
                stats_rec(rec)  # the same tuple: neuron-monitor counts it off the hot path
            if bw_pending:
                find_backward(out)
            return out
    else:
        def run(*args, **kwargs):
            return run_general(args, kwargs)

    for attr in ("_boxed_call", "zero_grad"):
        if hasattr(fn, attr):
            try:
                setattr(run, attr, getattr(fn, attr))
            except AttributeError:
                pass
    run.__wrapped__ = fn  # type: ignore[attr-defined]
    return run


def _instrument_backward(rt, torch, core, model, out) -> bool:
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
    orig_bw = fcls.backward
    bh = int.from_bytes(hashlib.blake2b(f"{model.graph_hash}:backward".encode(), digest_size=8).digest(), "little")
    bmodel = rt.add_model(
        name=model.name + "_bwd", neff_name=f"neff_{bh}", graph_hash=f"{bh:016x}",
        backend=model.backend, kind="backward", nc_idx=core.nc, source_location=model.source_location,
        module_path=model.module_path, signature="(grad_outputs)",
    )
    _announce_model(rt, bmodel)
    if rt.neff_cache_dir:
        from neuron_explorer.integrations.torch.device import cache_neff

        cache_neff(rt, bmodel)
    wrapped = _wrap_execution(rt, torch, core, bmodel, orig_bw, backward_of_outputs=False)
    fcls.backward = staticmethod(wrapped)
    fcls._neuron_explorer_wrapped = True
    return True


# ---------------------------------------------------------------------------------------------
# collectives

_COLLECTIVE_OPS = {
    # c10d operator -> name shown in events
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce_coalesced",
    "broadcast_": "broadcast", "allgather_": "all_gather", "_allgather_base_": "all_gather_into_tensor",
    "allgather_coalesced_": "all_gather_coalesced", "allgather_into_tensor_coalesced_": "all_gather_into_tensor_coalesced",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor_coalesced",
    "reduce_": "reduce", "gather_": "gather", "scatter_": "scatter", "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all_single", "send": "send", "recv_": "recv", "recv_any_source_": "recv_any_source",
    "barrier": "barrier", "monitored_barrier_": "monitored_barrier",
}


def _tensors_in(x, out: list) -> None:
    if isinstance(x, (list, tuple)):
        for y in x:
            _tensors_in(y, out)
    elif hasattr(x, "element_size") and hasattr(x, "numel"):
        out.append(x)


def _install_collectives(rt: Runtime, torch, core: CoreState) -> None:
    c10d = torch._C._distributed_c10d if hasattr(torch._C, "_distributed_c10d") else None
    if c10d is None:
        return
    PG, Work = c10d.ProcessGroup, c10d.Work
    _patch_work_wait(Work)
    lib = torch.library.Library("c10d", "IMPL")
    _state["lib"] = lib  # registrations live as long as the library object
    below = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
    keys_of = torch._C._dispatch_keys
    seqs: dict[str, int] = {}
    groups: dict[str, tuple[int, str]] = {}
    ring = core.ring
    append, tick = ring.append, ring.tick

    def group_info(pg) -> tuple[str, int]:
        """(name, string id of "r0,r1,...") for a process group, cached by name."""
        name = pg.group_name
        g = groups.get(name)
        if g is None:
            ranks = None
            try:
                import torch.distributed as dist

                for p, n in dist.distributed_c10d._world.pg_names.items():
                    if n == name:
                        ranks = dist.get_process_group_ranks(p)
                        break
            except Exception:
                ranks = None
            if ranks is None:
                ranks = list(range(pg.size()))
            # two process groups over the same ranks keep separate sequence spaces: every group
            # but the default one carries its name after the ranks ("0,1#3")
            label = ",".join(map(str, ranks)) + ("" if name == "0" else f"#{name}")
            g = groups[name] = (len(ranks), rt.intern(label))
        return name, g[1]

    for opname, shown in _COLLECTIVE_OPS.items():
        packet = getattr(torch.ops.c10d, opname, None)
        if packet is None:
            continue
        op = packet.default
        schema = op._schema
        names = [a.name for a in schema.arguments]
        if "process_group" not in names:
            continue
        pg_pos = names.index("process_group")
        is_barrier = "barrier" in opname
        etype = ev.CC_EXEC_BARRIER if is_barrier else ev.CC_RUNNING
        if not rt.enabled[etype]:
            continue
        op_sid = rt.intern(shown)
        lib.impl(opname, _make_kernel(op, pg_pos, etype, op_sid, is_barrier, PG, Work, keys_of, below,
                                      seqs, group_info, append, tick, rt, core.nc), "BackendSelect")


def _warn_once(key: str, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        print(f"neuron-explorer: warning: {msg}", file=sys.stderr)


_warned: set[str] = set()


_pending_cc: dict[int, tuple] = {}  # id(Work) -> (Work, finish(t1, status)) until the end is recorded


def _cc_complete(key: int, t1: int, status: int) -> None:
    p = _pending_cc.pop(key, None)  # atomic under the GIL: the first of wait/callback records
    if p is not None:
        p[1](t1, status)


def _blocking_caller(frame) -> bool:
    """Is the collective called by torch.distributed's own function with async_op=False?  Those
    call ``work.wait()`` right after the op returns."""
    try:
        return (frame.f_code.co_filename.endswith("distributed_c10d.py")
                and frame.f_locals.get("async_op") is False)
    except Exception:
        return False


def _patch_work_wait(Work) -> None:
    """Record a collective's end when its Work is waited on, on the waiting thread."""
    orig = Work.wait
    if getattr(orig, "_neuron_explorer", False):
        return

    def wait(self, *args, **kwargs):
        try:
            r = orig(self, *args, **kwargs)
        except BaseException as e:
            _cc_complete(id(self), now_ns(), _error_status(e))
            raise
        _cc_complete(id(self), now_ns(), 0)
        return r

    wait._neuron_explorer = True
    wait.__doc__ = orig.__doc__
    Work.wait = wait


def _error_status(e: BaseException) -> int:
    """The runtime status code of a failed collective: 5 (timeout) or 1 (failure)."""
    text = str(e).lower()
    return 5 if "timed out" in text or "timeout" in text else 1


def _future_status(fut) -> int:
    """The runtime status code of a completed collective: 0 or that of its error."""
    try:
        fut.value()
        return 0
    except Exception as e:
        return _error_status(e)


def _make_kernel(op, pg_pos, etype, op_sid, is_barrier, PG, Work, keys_of, below, seqs, group_info,
                 append, tick, rt, nc):
    def kernel(*args, **kwargs):
        t0 = now_ns()
        tid = native_tid()
        ts: list = []
        _tensors_in(args[0] if pg_pos > 0 else args, ts)
        ndet = rt.ndet
        info = None
        try:
            pg = PG.unbox(args[pg_pos] if len(args) > pg_pos else kwargs["process_group"])
            gname, gsid = group_info(pg)
            seq = seqs.get(gname, 0)
            seqs[gname] = seq + 1
            nbytes = 0 if is_barrier else sum(t.numel() * t.element_size() for t in ts)
            dtype_sid = rt.intern(str(ts[0].dtype).replace("torch.", "")) if ts and not is_barrier else 0
            token = -1
            if ndet is not None:  # the begin record exists before the collective can hang
                token = ndet.cc_begin(nc, rt.string_list[op_sid], seq, rt.string_list[gsid], nbytes,
                                      rt.string_list[dtype_sid], t0)
            info = (seq, nbytes, dtype_sid, gsid, token)
        except Exception as e:  # recording must not break the collective
            _warn_once("cc", f"collective not recorded: {e}")
        try:
            # continue the dispatch below this key, on the tensors' own backend (CPU, CUDA, ...)
            result = op.redispatch(keys_of(ts[0]) & below, *args, **kwargs)
        except BaseException:
            if info is not None and ndet is not None:
                ndet.cc_end(info[4], now_ns(), 1)
            raise
        if info is not None:
            seq, nbytes, dtype_sid, gsid, token = info

            def finish(t1, status, t0=t0, tid=tid, seq=seq, nbytes=nbytes, dtype_sid=dtype_sid, gsid=gsid,
                       token=token):
                append((etype, t0, t1, tid, op_sid, seq, nbytes, dtype_sid, gsid))
                tick()
                if ndet is not None:
                    ndet.cc_end(token, t1, status)

            try:
                work = Work.unbox(result[-1] if isinstance(result, (tuple, list)) else result)
                # The end is recorded by whichever comes first: the caller's Work.wait() returning
                # (patched below; on the calling thread, no GIL hand-off) or, for work waited on
                # elsewhere (async ops, DDP's buckets in C++), a callback on the future.  A blocking
                # call from torch.distributed waits at once, so it needs no callback: the callback
                # runs on the backend's thread and taking the GIL from it cost ~80 us per call.
                key = id(work)
                _pending_cc[key] = (work, finish)  # keeps the Python wrapper (and its id) alive
                if not _blocking_caller(sys._getframe(1)):
                    work.get_future().add_done_callback(
                        lambda fut, key=key: _cc_complete(key, now_ns(), _future_status(fut)))
            except Exception as e:
                _warn_once("cc", f"collective completion not recorded: {e}")
        return result

    return kernel


# ---------------------------------------------------------------------------------------------
# host/device copies (CUDA hosts only)


def _install_copies(rt: Runtime, torch, core: CoreState) -> None:
    T = torch.Tensor
    ring = core.ring
    append, tick = ring.append, ring.tick
    dev_sid = {}

    def sid(d) -> int:
        s = dev_sid.get(d)
        if s is None:
            s = dev_sid[d] = rt.intern(str(d))
        return s

    def wrap(name):
        orig = getattr(T, name)

        def method(self, *args, **kwargs):
            src = self.device
            t0 = now_ns()
            out = orig(self, *args, **kwargs)
            dst = getattr(out, "device", src)
            if dst != src and (src.type == "cpu" or dst.type == "cpu"):
                if dst.type != "cpu":
                    torch.cuda.current_stream(dst).synchronize()
                t1 = now_ns()
                etype = ev.NRT_TENSOR_WRITE if src.type == "cpu" else ev.NRT_TENSOR_READ
                if rt.enabled[etype]:
                    append((etype, t0, t1, native_tid(), self.numel() * self.element_size(), sid(src), sid(dst), 0, 0))
                    tick()
            return out

        method.__wrapped__ = orig  # type: ignore[attr-defined]
        setattr(T, name, method)

    for name in ("to", "cuda", "cpu"):
        wrap(name)
