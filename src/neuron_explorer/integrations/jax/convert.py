"""Converting a stopped ``jax.profiler.trace`` into a capture session.

What the trace holds becomes the capture's vocabulary:

- each ``TraceAnnotation`` -> ``framework_op`` (timed directly on the host clock by the plugin);
- each execution of a jitted computation on a device -> ``nrt_execute`` + ``nc_exec_running``
  (the host call and the device span), one ``Model`` per computation and core;
- each compilation seen in the trace -> ``model_load``;
- each host wait (``block_until_ready``, ``.item()``, ``float()`` and the other reads of an array's
  value: ``waits``) -> ``kbl_exec_wait`` (timed on the host clock by the plugin); each
  kernel on a device stream (GPU hosts) -> ``device_exec``; the PjRt execute call's share before
  the core starts -> ``runtime_execute`` (derived with the execution pair when the rows are stored);
- the XLA ops inside each execution -> a device profile (``.ntff``), one per computation and core
  in ``model`` mode (first execution only) or one per core in ``session`` mode;
- each computation's optimized HLO -> ``neff_<hash>_vnc_<nc>.neff``; JAX's Chrome trace ->
  ``trace.json``.

Clocks: XLA's profiler stamps events with its own clock; ``xplane.clock_map`` finds the offset to
the host monotonic clock from the plugin's markers (or, without them, from the trace's wall-clock
start), and the offset used and its uncertainty go into ``trace_info.pb``'s note.

The rows are built here as the runtime's ring would hold them, put into the capture's column
stores, and written by the capture writer (``capture.writer.write_session``), so a JAX session
has exactly the files and encoding of any other.
"""

from __future__ import annotations

import bisect
import gzip
import hashlib
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from neuron_explorer.capture.device import OpTable, write_device_trace, write_neff
from neuron_explorer.capture.store import CoreStore, enabled_mask
from neuron_explorer.capture.writer import write_session
from neuron_explorer.contracts import events as ev
from neuron_explorer.contracts.env import ConfigError
from neuron_explorer.contracts.layout import make_session_dir, model_ntff_name, neff_file_name, session_ntff_name
from neuron_explorer.integrations.jax import xplane
from neuron_explorer.integrations.jax.hlo import Hlo, OpFacts, executables, hlo_text_and_flops
from neuron_explorer.runtime.config import CaptureConfig
from neuron_explorer.runtime.core import Model, Runtime
from neuron_explorer.runtime.identity import ProcessIdentity
from neuron_explorer.runtime.ring import records_to_block
from neuron_explorer.util.atomic import atomic_write
from neuron_explorer.util.log import get_logger

if TYPE_CHECKING:
    from jax.profiler import ProfileData

    from neuron_explorer.capture.samplers import HostSampler

_COPY_CHUNK = 1 << 20


class Recording(Protocol):
    """What a stopped trace's recording holds for its conversion (``plugin.TraceRecording`` is one).
    Named here so that the conversion never imports the plugin that calls it."""

    log_dir: str | None  # the trace's directory, where JAX wrote its xplane.pb
    start_wall: int  # wall-clock ns when recording began (xplane.pb files older than that are not ours)
    pid: int
    anchors: list  # clock anchors (monotonic, wall, label): start first, stop last
    marks: dict[str, tuple[int, int]]  # host monotonic reads around each clock marker
    annotations: list[tuple[int, int, int, str]]  # (start, end, thread id, label)
    waits: list[tuple[int, int, int]]  # host waits: (start, end, thread id)
    sampler: "HostSampler | None"


def convert_trace(t: Recording) -> str | None:
    """Write the session for the trace ``t`` recorded; its directory, or None when the
    configuration is unusable (said on stderr)."""
    try:
        cfg = CaptureConfig.from_env()
    except ConfigError as e:
        get_logger(__name__).error(f"neuron-explorer: error: {e}")
        return None
    xp, tj = xplane.find_xplane(t.log_dir, t.start_wall, t.pid)
    rt = _runtime(cfg, t.anchors)
    conv = _Conversion(rt, cfg)
    conv.add_annotations(t.annotations)
    note = ["source: jax.profiler.trace"]
    if xp is None:
        note.append("no xplane.pb from this process found under the trace directory: annotations only")
    else:
        note += conv.add_trace(xplane.load(xp), t.marks, t.anchors[0])
    conv.add_waits(t.waits)
    conv.add_sync_points(t.anchors[-1][0])
    cores = conv.core_stores()
    d = make_session_dir(cfg.output_dir, rt.ident.instance_id, rt.ident.pid, rt.anchors[0][1])
    conv.write_device_files(d)
    if tj:
        with gzip.open(tj, "rb") as src:
            atomic_write(os.path.join(d, "trace.json"), iter(lambda: src.read(_COPY_CHUNK), b""))
    write_session(d, rt, cores, t.sampler, note="; ".join(note))
    return d


def _runtime(cfg: CaptureConfig, anchors: list) -> Runtime:
    """A runtime of its own for the session's tables (strings, models) and identity: the trace's
    process may have no runtime running at all."""
    rt = Runtime(cfg, ProcessIdentity.current())
    rt.anchors = list(anchors)
    rt.end_reason = "exit"
    platform = "cpu"
    try:
        import jax

        platform = jax.default_backend()
    except Exception:
        pass
    rt.device_kind = f"xla:{platform}"
    return rt


@dataclass
class _Computation:
    """A compiled computation (module name, program id) as the process still holds it."""
    hlo: Hlo | None
    facts: dict[str, OpFacts]
    hash: int
    flops: float


def _computations(execs: list[xplane.Execution]) -> dict[tuple, _Computation]:
    """HLO, op facts, graph hash and flops of each computation that ran; the hash is taken over
    the HLO text (else the program id), so equal graphs share a ``.neff`` name across runs."""
    exes = executables({g.module for g in execs})
    out: dict[tuple, _Computation] = {}
    for g in execs:
        k = g.key
        if k in out:
            continue
        text, flops = hlo_text_and_flops(exes.get(k))
        h = Hlo(text) if text else None
        basis = (k[0] + "\0" + (text or str(k[1]))).encode()
        out[k] = _Computation(h, h.op_facts() if h else {},
                              int.from_bytes(hashlib.blake2b(basis, digest_size=8).digest(), "little"), flops)
    return out


def _compile_spans(execs: list[xplane.Execution], found: xplane.TraceEvents) -> dict[tuple, tuple[int, int]]:
    """The compilation of each computation: a compile event names its module through nested
    "(module)" events; the k-th compile of a module name goes with the k-th computation of that
    name to run."""
    names = {g.module for g in execs}
    comp_of: dict[str, list[tuple[int, int]]] = {}
    for c0, c1, _pl, _ln, cname in sorted(found.compiles):
        if cname != "backend_compile_and_load" and any(c0 >= a and c1 <= b for v in comp_of.values()
                                                       for a, b in v):
            continue  # the client's compile inside a python-level compile already counted
        for m0, m1, mod in found.module_marks:
            if c0 <= m0 and m1 <= c1 + 1 and mod in names:
                comp_of.setdefault(mod, []).append((c0, c1))
                break
    firsts: dict[str, list[tuple]] = {}
    for g in execs:
        k = g.key
        if k not in firsts.setdefault(k[0], []):
            firsts[k[0]].append(k)
    compile_of: dict[tuple, tuple[int, int]] = {}
    for mod, ks in firsts.items():
        for k, c in zip(ks, comp_of.get(mod, [])):
            compile_of[k] = c
    return compile_of


class _HostCalls:
    """Matches executions to the host calls that started them: by run_id when the trace has it,
    else the latest execute call before the device start (each used once per core)."""

    def __init__(self, hosts: list[xplane.HostCall]) -> None:
        self.by_run: dict[Any, xplane.HostCall] = {}
        self.plain: list[xplane.HostCall] = []
        for h in sorted(hosts):
            if h.run_id is not None:
                self.by_run.setdefault(h.run_id, h)
            else:
                self.plain.append(h)
        self.used: set[tuple[int, int]] = set()
        self.pi = 0

    def match(self, g: xplane.Execution) -> xplane.HostCall | None:
        """Executions must come in start order."""
        run_id = g.ops[0].run_id
        host = self.by_run.get(run_id) if run_id is not None else None
        if host is None:
            plain = self.plain
            while self.pi + 1 < len(plain) and plain[self.pi + 1].start <= g.start:
                self.pi += 1
            if plain and plain[self.pi].start <= g.start and (self.pi, g.dev) not in self.used:
                host = plain[self.pi]
                self.used.add((self.pi, g.dev))
        return host


class _Conversion:
    """The ring rows (per core), models and device-op tables one trace turns into."""

    def __init__(self, rt: Runtime, cfg: CaptureConfig) -> None:
        self.rt = rt
        self.cfg = cfg
        self.records: dict[int, list[tuple]] = {}
        self.tables: dict[tuple, OpTable] = {}  # ("session", nc) or ("model", nc, model id)
        self.models: dict[tuple, Model] = {}  # by (computation, core)
        self.exec_ids: dict[int, int] = {}  # next execution id per core
        self.first_done: set[tuple] = set()  # (computation, core) with a model-mode profile
        self.host_tid = threading.get_native_id()
        self.started: list[tuple[int, int, int]] = []  # executions: (host start, core, execution id)

    def rec(self, nc: int, row: tuple) -> None:
        if self.cfg.nc_enabled(nc):
            self.records.setdefault(nc, []).append(row)

    def add_annotations(self, annotations: list[tuple[int, int, int, str]]) -> None:
        nc = self.rt.ident.default_core
        for t0, t1, tid, label in annotations:
            self.rec(nc, (ev.FRAMEWORK_OP, t0, t1, tid, self.rt.intern(label), 0, 0, 0, 0))

    def add_trace(self, pd: "ProfileData", marks: dict[str, tuple[int, int]],
                  anchor: tuple[int, int, str]) -> list[str]:
        """Executions, compilations and device ops of the trace; returns the notes to keep."""
        off, cnote = xplane.clock_map(pd, marks, anchor)
        labels = xplane.line_labels(pd)
        found = xplane.collect(pd)
        execs = xplane.executions(found.ops)
        comps = _computations(execs)
        compile_of = _compile_spans(execs, found)
        hosts = _HostCalls(found.hosts)
        for g in execs:
            nc = g.dev
            if not self.cfg.nc_enabled(nc):
                continue
            m = self._model(g, comps[g.key], compile_of.get(g.key), off)
            host = hosts.match(g)
            eid = self.exec_ids.get(nc, 0)
            self.exec_ids[nc] = eid + 1
            ds, de = g.start + off, g.end + off
            if host is not None:
                hs, he = host.start + off, host.end + off
                htid = labels.get((host.plane, host.line), ("", self.host_tid))[1]
            else:
                hs, he, htid = ds, de, self.host_tid
            self.rec(nc, (ev.EXEC_PAIR, hs, he, htid, m.id, eid, 0, ds, max(de, ds + 1)))
            self.started.append((hs, nc, eid))
            self._device_kernels(g, m, eid, labels, off)
            self._device_ops(g, m, eid, ds, de, comps[g.key].facts, labels, off)
        return [cnote, f"executions: {len(execs)}, computations: {len(comps)}, xla ops: "
                       f"{sum(len(g.ops) for g in execs)}"]

    def _model(self, g: xplane.Execution, comp: _Computation, c: tuple[int, int] | None, off: int) -> Model:
        """The computation's model on the execution's core, made (with its ``model_load``, when
        the trace saw it compile) at its first execution there."""
        k, nc = g.key, g.dev
        m = self.models.get((k, nc))
        if m is None:
            rt, h, hl = self.rt, comp.hash, comp.hlo
            m = rt.add_model(name=k[0], neff_name=f"neff_{h}", graph_hash=f"{h:016x}", backend=rt.device_kind,
                             kind="jit", nc_idx=nc, compile_ns=(c[1] - c[0]) if c else 0,
                             num_nodes=len(hl.entry_instructions()) if hl else 0,
                             flops=comp.flops, signature=hl.signature if hl else "",
                             artifacts={"code": hl.text if hl else "", "hlo": hl})
            self.models[(k, nc)] = m
            if c and rt.enabled[ev.MODEL_LOAD]:
                self.rec(nc, (ev.MODEL_LOAD, c[0] + off, c[1] + off, self.host_tid, m.id, c[1] - c[0], 0, 0, 0))
        return m

    def _device_ops(self, g: xplane.Execution, m: Model, eid: int, ds: int, de: int,
                    facts: dict[str, OpFacts], labels: dict, off: int) -> None:
        """The execution's XLA ops into its core's device-op table (session mode), or into the
        computation's table on its first execution on that core (model mode)."""
        mode = self.cfg.device_profile
        if mode is None:
            return
        nc = g.dev
        if mode == "session":
            tk: tuple = ("session", nc)
        else:
            if (g.key, nc) in self.first_done:
                return
            self.first_done.add((g.key, nc))
            tk = ("model", nc, m.id)
        table = self.tables.get(tk)
        if table is None:
            table = self.tables[tk] = OpTable()
        xi = table.add_execution(eid, m.id, m.name, m.neff_name, ds, de)
        for row in sorted(g.ops, key=lambda r: r.start):
            fl, nb, detail, src = facts.get(row.name, (None, None, "", ""))
            st = row.stats
            if "flops" in st:
                fl = float(st["flops"])
            if "bytes_accessed" in st:
                nb = int(st["bytes_accessed"])
            track = labels.get((row.plane, row.line), (row.line, 0))[0]
            table.add_op(row.start + off, row.end + off, row.name, track, xi, flops=fl, nbytes=nb,
                         detail=detail, source=src)

    def _device_kernels(self, g: xplane.Execution, m: Model, eid: int, labels: dict, off: int) -> None:
        """``device_exec``: each kernel the execution ran on a device stream (a ``/device:`` plane,
        as on GPU hosts; a CPU's ops run on host threads and are not kernels on a stream)."""
        if not self.rt.enabled[ev.DEVICE_EXEC]:
            return
        for row in g.ops:
            if row.plane.startswith("/device:"):
                tid = labels.get((row.plane, row.line), ("", self.host_tid))[1]
                self.rec(g.dev, (ev.DEVICE_EXEC, row.start + off, row.end + off, tid, m.id, eid, 0, 0, 0))

    def add_waits(self, waits: list[tuple[int, int, int]]) -> None:
        """``kbl_exec_wait`` for each host wait, on the core of the latest execution
        started before the wait ended (its id in the event), else on the process's core."""
        if not self.rt.enabled[ev.KBL_EXEC_WAIT]:
            return
        started = sorted(self.started)
        starts = [s[0] for s in started]
        for t0, t1, tid in waits:
            i = bisect.bisect_right(starts, t1) - 1
            nc, eid = (started[i][1], started[i][2]) if i >= 0 else (self.rt.ident.default_core, -1)
            self.rec(nc, (ev.KBL_EXEC_WAIT, t0, t1, tid, -1, eid, 0, -1, 0))

    def add_sync_points(self, t_sync: int) -> None:
        """One sync point per core at the stop anchor: both clocks are the host monotonic clock
        once converted; it names the core's last execution (-1: none)."""
        for nc in list(self.records) or [self.rt.ident.default_core]:
            if self.cfg.nc_enabled(nc):
                self.records.setdefault(nc, []).append(
                    (ev.TIMESTAMP_SYNC_POINT, t_sync, t_sync, self.host_tid, t_sync, t_sync,
                     self.exec_ids.get(nc, 0) - 1, 0, 0))

    def core_stores(self) -> dict[int, CoreStore]:
        """The rows, in time order, in the capture's column stores (one per core)."""
        cores: dict[int, CoreStore] = {}
        mask = enabled_mask(self.rt.enabled)
        for nc, rows in sorted(self.records.items()):
            rows.sort(key=lambda r: r[1])
            st = cores[nc] = CoreStore(nc, self.cfg.max_events_per_nc)
            st.add(records_to_block(rows), mask, len(rows))
        return cores

    def write_device_files(self, d: str) -> None:
        """The ``.ntff`` of each device-op table and, with a device profile on, a ``.neff`` per model."""
        rt, cfg = self.rt, self.cfg
        for tk, table in self.tables.items():
            nc = tk[1]
            if tk[0] == "session":
                name = session_ntff_name(nc, 0)
            else:
                name = model_ntff_name(rt.models[tk[2]].neff_name.replace("neff_", ""), nc)
            sync = [(e.start_ns, e.start_ns, e.exec_id) for e in table.executions]
            write_device_trace(os.path.join(d, name), table, instance_id=rt.ident.instance_id, pid=rt.ident.pid,
                               nc_idx=nc, mode=cfg.device_profile or "", device_kind=rt.device_kind, source="jax",
                               sync=sync)
        if cfg.device_profile is None:
            return
        for m in self.models.values():
            hl = m.artifacts.get("hlo")
            write_neff(os.path.join(d, neff_file_name(m.neff_name.replace("neff_", ""), m.nc_idx)),
                       neff_name=m.neff_name, graph_hash=m.graph_hash, model_name=m.name, backend=m.backend,
                       kind=m.kind, signature=m.signature, code=m.artifacts.get("code", ""), framework="jax",
                       compile_ns=m.compile_ns, nodes=hl.neff_nodes() if hl is not None else [])
