"""JAX device profiles under the runtime: the XLA ops inside profiled executions.

XLA's own profiler is the only thing that sees the ops (thunks/kernels) of a compiled
computation, so a profiled execution runs inside an XLA ``ProfilerSession`` (what
``jax.profiler`` uses underneath, started here by us; the program needs no ``jax.profiler``).
The session's XSpace is read with the code that converts ``jax.profiler.trace`` output
(``xplane``): its ops are grouped into executions, placed on the host monotonic clock by two
marker events bracketed by clock reads, and matched to the executions we recorded by time.

A profiled execution is waited for (``block_until_ready`` on its outputs), so its
``nc_exec_running`` is the real compute span; unprofiled executions are never waited for.

* ``model`` mode: a graph's first execution on the core, one short session each
  (``<hash>_instid_0_vnc_<nc>.ntff``);
* ``session`` mode: every execution, in one session that is read and restarted at each write of
  the capture (``profile_nc_<nc>_session_0.ntff``), and stopped before the program's own
  ``jax.profiler.trace`` starts (only one XLA profiler session may run at a time).

The profiler of the other framework in the same process (PyTorch's), if any, keeps its
executions: ``wants``/``run``/``write`` hand its models to it.
"""

from __future__ import annotations

import bisect
import os
import re
import threading

from neuron_explorer.capture.device import OpTable, write_device_trace, write_neff
from neuron_explorer.contracts.layout import model_ntff_name, neff_file_name, session_ntff_name
from neuron_explorer.integrations.jax import xplane
from neuron_explorer.integrations.jax.marks import MARK_START, MARK_STOP
from neuron_explorer.integrations.jax.waits import unrecorded
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.core import Model

__all__ = ["JaxDeviceProfiler"]

now_ns = clock.now_ns
_SESSION_BATCH = 4096  # session mode: executions held before the XSpace is read early


class JaxDeviceProfiler:
    """Decides which JAX executions to profile, runs them under XLA's profiler, keeps the op tables."""

    def __init__(self, jx, mode: str, prev=None) -> None:
        self.jx = jx
        self.mode = mode  # "model" or "session"
        self.prev = prev  # another framework's device profiler, or None
        self.lock = threading.RLock()
        self.models: dict[int, Model] = {}  # the JAX models seen
        self.done: set[tuple[int, int]] = set()  # (nc, model id) profiled (model mode)
        self.tables: dict[tuple[int, int], OpTable] = {}  # (nc, model id or -1) -> ops
        self.session = None  # the running XLA profiler session (session mode)
        self.marks: dict[str, tuple[int, int]] = {}
        self.pending: list[tuple[int, Model, int, int]] = []  # (exec id, model, start, ready)
        self.written_neffs: set[str] = set()
        self.warned = False

    # -- the runtime's device-profiler interface ---------------------------------------------
    def wants(self, nc: int, model_id: int) -> bool:
        """Profile this execution?  JAX models: every one in session mode, a graph's first on a
        core in model mode.  Other models: as the other framework's profiler says."""
        if model_id not in self.models:
            return self.prev.wants(nc, model_id) if self.prev is not None else False
        return self.mode == "session" or (nc, model_id) not in self.done

    def add_model(self, model: Model) -> None:
        """A JAX model (registered by the integration at its first call)."""
        self.models[model.id] = model

    def run(self, torch, nc: int, model: Model, exec_id: int, fn, args, kwargs):
        """PyTorch's general path asks this for its own executions."""
        return self.prev.run(torch, nc, model, exec_id, fn, args, kwargs)

    # -- profiling ---------------------------------------------------------------------------
    def profile(self, model: Model, eid: int, fn, args: tuple, kwargs: dict, t0: int):
        """Run one execution under XLA's profiler; (outputs, host call end, outputs ready)."""
        import jax

        nc = self.jx.core.nc
        with self.lock:
            self.done.add((nc, model.id))
            if not self._start():
                out = fn(*args, **kwargs)
                return out, now_ns(), 0
            out = fn(*args, **kwargs)
            t_ret = now_ns()
            try:
                with unrecorded():  # (our wait, not the program's: no kbl_exec_wait)
                    jax.block_until_ready(out)
            except Exception:
                pass  # e.g. an output donated meanwhile: the host call is all we know
            t_ready = now_ns()
            if self.jx.compiles:  # a first call compiled: its HLO gives the ops their flops
                self.jx.take_compiles(model, t0, t_ready)
            self.pending.append((eid, model, t0, t_ready))
            if self.mode == "model" or len(self.pending) >= _SESSION_BATCH:
                self.harvest()
        return out, t_ret, t_ready

    def _start(self) -> bool:
        """Make sure an XLA profiler session runs (False when one cannot be started, e.g. the
        program's own ``jax.profiler.trace`` is running)."""
        if self.session is not None:
            return True
        try:
            from jax._src import profiler as jp
            from jax._src.lib import _profiler

            if getattr(getattr(jp, "_profile_state", None), "profile_session", None) is not None:
                return False
            self.session = _profiler.ProfilerSession()
        except Exception as e:
            if not self.warned:
                self.warned = True
                self.jx.warn_once("devprof", f"JAX device profile not recorded: {e}")
            return False
        self.marks = {}
        self._mark(MARK_START)
        return True

    def _mark(self, name: str) -> None:
        from jax._src.lib import _profiler

        tm = _profiler.TraceMe(name)
        t0 = now_ns()
        with tm:
            pass
        self.marks[name] = (t0, now_ns())

    def harvest(self) -> None:
        """Stop the running session and file its ops under the executions waiting for them."""
        with self.lock:
            s = self.session
            if s is None:
                return
            self._mark(MARK_STOP)
            self.session = None
            pending, self.pending = self.pending, []
            try:
                raw = s.stop()
                from jax.profiler import ProfileData

                pd = ProfileData.from_serialized_xspace(raw)
            except Exception as e:
                self.jx.warn_once("devprof-read", f"JAX device profile not read: {e}")
                return
            self._file_ops(pd, pending)

    def _file_ops(self, pd, pending: list[tuple[int, Model, int, int]]) -> None:
        """The session's XLA executions, matched by time to the executions we recorded."""
        nc = self.jx.core.nc
        off, _note = xplane.clock_map(pd, self.marks, clock.anchor("devprof"))
        labels = xplane.line_labels(pd)
        found = xplane.executions(xplane.collect(pd).ops)
        rows: dict[int, int] = {}  # exec id -> its row in its table
        for g, hit in zip(found, pair_executions([(g.start + off, g.module) for g in found], pending)):
            if hit is None:
                continue
            eid, model, t0, t_ready = hit
            key = (nc, -1) if self.mode == "session" else (nc, model.id)
            table = self.tables.get(key)
            if table is None:
                table = self.tables[key] = OpTable()
            xi = rows.get(eid)
            if xi is None:
                xi = rows[eid] = table.add_execution(eid, model.id, model.name, model.neff_name, t0, t_ready)
            facts = _facts(model)
            for row in sorted(g.ops, key=lambda r: r.start):
                fl, nb, detail, src = facts.get(row.name, (None, None, "", ""))
                track = labels.get((row.plane, row.line), (row.line, 0))[0]
                table.add_op(row.start + off, row.end + off, row.name, track, xi, flops=fl, nbytes=nb,
                             detail=detail, source=src)

    # -- writing -----------------------------------------------------------------------------
    def write(self, session_dir: str) -> None:
        """Write the op tables (``.ntff``) and the JAX graphs (``.neff``); then the other
        framework's files."""
        if self.mode == "session":
            self.harvest()  # the next profiled execution starts a new session
        rt = self.jx.rt
        with self.lock:
            tables = dict(self.tables)
            models = list(self.models.values())
        for (nc, mid), table in tables.items():
            if mid < 0:
                name = session_ntff_name(nc, 0)
            else:
                name = model_ntff_name(rt.models[mid].neff_name.replace("neff_", ""), nc)
            sync = [(e.start_ns, e.start_ns, e.exec_id) for e in table.executions]
            write_device_trace(os.path.join(session_dir, name), table, instance_id=rt.ident.instance_id,
                               pid=rt.ident.pid, nc_idx=nc, mode=self.mode, device_kind=rt.device_kind,
                               source="jax", sync=sync)
        for m in models:
            _write_neff(session_dir, m, self.written_neffs)
        if self.prev is not None:
            self.prev.write(session_dir)


def pair_executions(found: list[tuple[int, str | None]], pending: list[tuple[int, Model, int, int]],
                    slack: int = 200_000) -> list[tuple[int, Model, int, int] | None]:
    """The recorded execution of each of XLA's (``found``: their starts on our clock and module
    names, in start order), or None.

    We profile one execution at a time, under the lock, and wait for its outputs, so XLA ran ours
    of one module in the order we recorded them: where a module has as many executions in XLA's
    trace as we recorded, the i-th is the i-th, whatever the clock mapping says (on a loaded host
    a preempted marker read moved it past the slack, and one execution of six went unmatched).
    The others are paired by time (``_execution_at``: where the trace splits one execution in
    two, both halves are ours).  Where every recorded execution names its module and the names
    agree with the trace's, XLA's executions of other modules (the program's own eager ops
    between steps) are not ours."""
    out = [_execution_at(pending, t, slack) for t, _m in found]
    ours: dict[str, list[tuple[int, Model, int, int]]] = {}
    for p in pending:
        ours.setdefault(_module_key(p[1].artifacts.get("module")), []).append(p)
    theirs: dict[str, list[int]] = {}
    for i, (_t, m) in enumerate(found):
        theirs.setdefault(_module_key(m), []).append(i)
    for key, ps in ours.items():
        ix = theirs.get(key, [])
        if key and len(ix) == len(ps):
            for i, p in zip(ix, ps):
                out[i] = p
    keys = [_module_key(m) for _t, m in found]
    if "" not in ours and any(k in ours for k in keys):  # (names that never agree say nothing)
        out = [hit if k in ours else None for hit, k in zip(out, keys)]
    return out


def _module_key(name: str | None) -> str:
    """A module's name as XLA's trace and JAX's compile log both spell it (``jit(f)`` and
    ``jit_f``: every run of other characters one underscore); "" when unknown."""
    return re.sub(r"[^0-9A-Za-z]+", "_", name or "").strip("_")


def _execution_at(pending: list[tuple[int, Model, int, int]], t: int, slack: int = 200_000):
    """The recorded execution whose span holds ``t`` (XLA's start of an execution), else the
    nearest one within ``slack`` (the clock mapping is good to microseconds; executions run
    back to back, so the nearest wins over the first)."""
    i = bisect.bisect_right(pending, t, key=lambda p: p[2])  # pending is in start order
    best, dist = None, slack + 1
    for p in pending[max(i - 2, 0):i + 2]:
        d = 0 if p[2] <= t <= p[3] else min(abs(t - p[2]), abs(t - p[3]))
        if d < dist:
            best, dist = p, d
            if d == 0:
                break
    return best


def _facts(model: Model) -> dict:
    """Per-op flops, bytes, detail and source of the model's optimized HLO (cached on it)."""
    f = model.artifacts.get("facts")
    if f is None:
        hl = model.artifacts.get("hlo")
        f = model.artifacts["facts"] = hl.op_facts() if hl is not None else {}
    return f


def _write_neff(session_dir: str, m: Model, written: set[str]) -> None:
    """The graph's optimized HLO as ``neff_<hash>_vnc_<nc>.neff`` (rewritten once its code is known)."""
    code = m.artifacts.get("code", "")
    key = f"{m.neff_name}/{m.nc_idx}/{bool(code)}"
    path = os.path.join(session_dir, neff_file_name(m.neff_name.replace("neff_", ""), m.nc_idx))
    if key in written and os.path.exists(path):
        return
    hl = m.artifacts.get("hlo")
    write_neff(path, neff_name=m.neff_name, graph_hash=m.graph_hash, model_name=m.name, backend=m.backend,
               kind=m.kind, signature=m.signature, code=code, framework="jax", compile_ns=m.compile_ns,
               nodes=hl.neff_nodes() if hl is not None else [])
    written.add(key)
