"""PyTorch device profiles: the op/kernel-level events inside compiled-graph executions.

While a profiled execution runs, a ``TorchDispatchMode`` sees every ATen operator the graph calls
(all of them for eager-style backends such as aot_eager; Inductor's extern kernels such as mm),
and the kernels of an Inductor-generated module are wrapped for the duration of the call, so its
fused C++/Triton kernels appear too.  Each op gets its span on the core's clock, flops (PyTorch's
own flop formulas, where one exists), bytes read and written, and input shapes.

``model`` mode records the first execution of each unique graph on each core; ``session`` mode
records every execution.  On CUDA, op spans are launch times on the host; the CUDA-event timing of
the whole execution is in ``nc_exec_running``.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from typing import Any

from neuron_explorer.capture.device import OpTable, write_device_trace
from neuron_explorer.contracts.layout import model_ntff_name, session_ntff_name
from neuron_explorer.integrations.torch.flops import op_flops
from neuron_explorer.integrations.torch.frames import dispatch_handler, hide_redispatch
from neuron_explorer.integrations.torch.neffs import write_neffs
from neuron_explorer.integrations.torch.tensors import tensor_bytes, tensor_summary
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.core import Model, Runtime

__all__ = ["DeviceProfiler"]

now_ns = clock.now_ns


def _shapes(args) -> str:
    """The input shapes shown in an op's detail column (tensors only)."""
    return ", ".join(tensor_summary(args, include_others=False))


class _Recorder:
    """Records ops into an OpTable for one execution (created per profiled call)."""

    def __init__(self, torch, table: OpTable, exec_idx: int) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import flop_registry

        recorder = self

        class Mode(TorchDispatchMode):
            @classmethod
            def ignore_compile_internals(cls) -> bool:
                return True  # a torch.compile inside an eager graph compiles as without us

            @dispatch_handler
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                t0 = now_ns()
                try:
                    out = func(*args, **kwargs)
                except BaseException as e:  # the op's error as the program sees it (frames.py)
                    hide_redispatch(e)
                    raise
                t1 = now_ns()
                recorder.op(func, args, kwargs, out, t0, t1)
                return out

        self.mode = Mode()
        self.table = table
        self.exec_idx = exec_idx
        self.flops_of = flop_registry
        self.flops: float | None = None  # the execution's, where an op had a formula

    def op(self, func, args, kwargs, out, t0: int, t1: int) -> None:
        flops = op_flops(self.flops_of, func, args, kwargs, out)
        if flops is not None:
            self.flops = (self.flops or 0.0) + flops
        self.table.add_op(t0, t1, str(func.name()), "aten", self.exec_idx, flops=flops,
                          nbytes=tensor_bytes(args) + tensor_bytes(out), detail=_shapes(args))

    def kernel(self, name: str, t0: int, t1: int, args) -> None:
        self.table.add_op(t0, t1, name, "inductor", self.exec_idx, nbytes=tensor_bytes(args), detail=_shapes(args))


_KERNEL_PREFIXES = ("cpp_fused", "triton_", "cpp_")


def _inductor_kernels(fn) -> tuple[Any, list[str]] | None:
    """The generated module behind an Inductor-compiled callable, and its kernel names."""
    seen = set()
    stack = [fn]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None:
            continue
        seen.add(id(obj))
        cc = getattr(obj, "current_callable", None)
        if cc is not None:
            mod = sys.modules.get(getattr(cc, "__module__", "") or "")
            if mod is not None:
                names = [n for n, v in vars(mod).items() if n.startswith(_KERNEL_PREFIXES) and callable(v)]
                return mod, names
        for attr in ("__wrapped__", "compiled_fn", "_compiled_fn", "forward", "__self__"):
            stack.append(getattr(obj, attr, None))
        for cell in getattr(obj, "__closure__", None) or ():
            try:
                stack.append(cell.cell_contents)
            except ValueError:
                pass
        if len(seen) > 200:
            break
    return None


class DeviceProfiler:
    """Decides which executions to profile and keeps their op tables until they are written."""

    def __init__(self, rt: Runtime, mode: str, precache: bool = True) -> None:
        """``precache`` (``NeuronConfig(precache_node_info=True)``, the default): find what the op
        recorder needs of each graph loaded so far now, and of each graph loaded later at its load,
        instead of inside the graph's first profiled execution."""
        self.rt = rt
        self.mode = mode  # "model" or "session"
        self.lock = threading.Lock()
        self.done: set[tuple[int, int]] = set()  # (nc, model_id) profiled (model mode)
        self.tables: dict[tuple[int, int], OpTable] = {}  # (nc, model_id or -1) -> ops
        self.written_neffs: set[str] = set()
        self.inductor: dict[int, tuple[Any, list[str]] | None] = {}
        self.active = True
        self.precaching = precache
        self._last = threading.local()  # .flops: those of the last execution profiled on the thread
        # an on-demand window (``window()``): every execution is profiled until the window's start
        # is known (it is learnt from drained rings, after the fact), only those that start inside
        # it are written, and model mode keeps each graph's first one there
        self.windowed = False
        self.win_lo: int | None = None
        self.win_hi: int | None = None
        self.in_window: set[tuple[int, int]] = set()  # (nc, model_id) profiled inside the window
        self.keep_nc: Any = None  # the window's core filter (a callable), or None: every core
        if precache:
            for m in list(rt.models):
                self.precache(m)

    def precache(self, model: Model) -> None:
        """Per-graph metadata ahead of the graph's first profiled execution: an Inductor graph's
        generated module and kernel names (a walk over the compiled callable's closures).  A graph
        whose code is not there yet (a backward is compiled at its first call) is looked up when
        it is first profiled, as without precaching."""
        fn = model.artifacts.get("callable")
        if not self.precaching or fn is None or model.backend != "inductor" or model.id in self.inductor:
            return
        kinfo = _inductor_kernels(fn)
        if kinfo is not None:
            self.inductor[model.id] = kinfo

    def wants(self, nc: int, model_id: int) -> bool:
        """Profile this execution?  Every one in session mode, a graph's first on a core in model mode."""
        if not self.active:
            return False
        if self.windowed:
            if self.keep_nc is not None and not self.keep_nc(nc):
                return False  # (a core the request's filter leaves out: as the environment's)
            return self.mode == "session" or (nc, model_id) not in self.in_window
        return self.mode == "session" or (nc, model_id) not in self.done

    def settled(self, nc: int, model_id: int) -> bool:
        """Will this profiler never want this graph's calls on this core again?  True in ``model``
        mode once the graph has been profiled there: the execution wrappers then keep to their
        lean path while it is on, so steady state costs what the system profile costs."""
        if self.windowed:
            return self.mode == "model" and (nc, model_id) in self.in_window
        return self.mode == "model" and (nc, model_id) in self.done

    def window(self, keep_nc=None) -> None:
        """Profile for an on-demand window whose bounds are told later (``set_window``), on the
        cores ``keep_nc(nc)`` accepts (None: every one)."""
        self.windowed, self.keep_nc = True, keep_nc

    def set_window(self, lo: int | None, hi: int | None) -> None:
        """The window: executions that start after ``lo`` and no later than ``hi`` (None: open).
        Tables are filtered when written, not here: an execution may be recording its ops."""
        with self.lock:
            self.win_lo, self.win_hi = lo, hi
            if lo is None:
                return
            if self.mode == "model":
                for (nc, _), table in self.tables.items():
                    self.in_window.update((nc, e.model_id) for e in table.executions if e.start_ns > lo)
            if hi is not None:
                self.active = False  # (what starts after the window is not wanted)

    def last_flops(self) -> float | None:
        """The flops of the last execution this thread profiled (None: no op had a formula): an
        eager graph's first call, profiled, learns its count here rather than under a second
        dispatch mode (integrations/torch/flops.py)."""
        return getattr(self._last, "flops", None)

    def run(self, torch, nc: int, model: Model, exec_id: int, fn, args, kwargs):
        """Run one execution under the op recorder."""
        key = (nc, -1) if self.mode == "session" else (nc, model.id)
        t0 = now_ns()
        with self.lock:
            self.done.add((nc, model.id))
            if self.win_lo is not None and t0 > self.win_lo:
                self.in_window.add((nc, model.id))
            table = self.tables.get(key)
            if table is None:
                table = self.tables[key] = OpTable()
        idx = table.add_execution(exec_id, model.id, model.name, model.neff_name, t0, t0)
        rec = _Recorder(torch, table, idx)
        kinfo = self.inductor.get(model.id, False)
        if kinfo is False:
            kinfo = self.inductor[model.id] = _inductor_kernels(fn) if model.backend == "inductor" else None
        restore = []
        if kinfo is not None:
            mod, names = kinfo
            for n in names:
                orig = getattr(mod, n)

                def timed(*a, __orig=orig, __n=n, **k):
                    s = now_ns()
                    r = __orig(*a, **k)
                    rec.kernel(__n, s, now_ns(), a)
                    return r

                setattr(mod, n, timed)
                restore.append((n, orig))
        try:
            with rec.mode:
                return fn(*args, **kwargs)
        finally:
            for n, orig in restore:
                setattr(kinfo[0], n, orig)
            table.executions[idx].end_ns = now_ns()
            self._last.flops = rec.flops

    def write(self, session_dir: str) -> None:
        """Write the op tables as ``.ntff`` files and the graphs as ``.neff`` files (the capture sink
        calls this when it writes the session)."""
        rt = self.rt
        with self.lock:
            tables = dict(self.tables)
            lo = self.win_lo
            if self.windowed:  # only the window's executions (none while its start is unknown)
                tables = {k: _between(t, lo, self.win_hi, self.mode == "model") for k, t in tables.items()
                          if lo is not None}
                tables = {k: t for k, t in tables.items() if t.executions}
        for (nc, mid), table in tables.items():
            if self.mode == "session":
                name = session_ntff_name(nc, 0)
            else:
                m = rt.models[mid]
                name = model_ntff_name(m.neff_name.replace("neff_", ""), nc)
            write_device_trace(os.path.join(session_dir, name), table, instance_id=rt.ident.instance_id,
                               pid=rt.ident.pid, nc_idx=nc, mode=self.mode, device_kind=rt.device_kind,
                               source="torch", sync=[])
        write_neffs(rt, session_dir, self.written_neffs)


def _between(table: OpTable, lo: int, hi: int | None, first_only: bool) -> OpTable:
    """The executions of ``table`` that start after ``lo`` and no later than ``hi``, with their
    ops (``first_only``: the first such execution only)."""
    keep = [i for i, e in enumerate(table.executions) if e.start_ns > lo and (hi is None or e.start_ns <= hi)]
    if first_only:
        keep = keep[:1]
    if len(keep) == len(table.executions):
        return table
    new = OpTable()
    idx = {}
    for i in keep:
        e = table.executions[i]
        idx[i] = new.add_execution(e.exec_id, e.model_id, e.model_name, e.neff_name, e.start_ns, e.end_ns)
    names = {v: k for k, v in table.strings.items()}
    for j, x in enumerate(table.exec_idx):
        if x in idx:
            new.add_op(table.start_ns[j], table.end_ns[j], names[table.name[j]], names[table.track[j]], idx[x],
                       None if math.isnan(table.flops[j]) else table.flops[j],
                       None if table.nbytes[j] < 0 else table.nbytes[j], names[table.detail[j]],
                       names[table.source[j]])
    return new
