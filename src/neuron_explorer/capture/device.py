"""Device profiles (``.ntff``) and compiled graphs (``.neff``): building and writing them.

A device profile holds the op/kernel-level events inside one core's executions, column-wise like
``ntrace.pb``.  Both the PyTorch device profiler and the JAX integration build an ``OpTable`` and
hand it to ``write_device_trace``; ``view`` reads the result back with ``read_device_trace``.

File names follow the Neuron layout: ``<hash>_instid_0_vnc_<nc>.ntff`` for a model-mode profile
(first execution of one graph on one core), ``profile_nc_<nc>_session_<k>.ntff`` for a session-mode
profile (every execution on a core) and ``neff_<hash>_vnc_<nc>.neff`` for the graph itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from neuron_explorer.capture.writer import FORMAT_VERSION, _col
from neuron_explorer.contracts import messages
from neuron_explorer.contracts.columns import OP_COLUMNS
from neuron_explorer.util.atomic import atomic_write

# The names below become files in a session directory (and in ``neff_cache_dir``): the graph hash
# passes through ``safe_component`` and the indices through int(), so no value can add a path
# separator or '..' (today they are computed numbers; a converter reading another tool's trace
# must not be able to change that).


@dataclass(slots=True)
class DeviceExecution:
    """One execution of a graph on a core (the schema's ``DeviceExecution``); ``end_ns`` is set when
    the execution ends."""

    exec_id: int
    model_id: int
    model_name: str
    neff_name: str
    start_ns: int
    end_ns: int


@dataclass
class OpTable:
    """Op rows of one device trace, appended one at a time (a recorder) or in bulk (a converter)."""

    strings: dict[str, int] = field(default_factory=lambda: {"": 0})
    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    name: list[int] = field(default_factory=list)
    track: list[int] = field(default_factory=list)
    exec_idx: list[int] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    detail: list[int] = field(default_factory=list)
    source: list[int] = field(default_factory=list)
    executions: list[DeviceExecution] = field(default_factory=list)

    def sid(self, s: str) -> int:
        i = self.strings.get(s)
        if i is None:
            i = self.strings[s] = len(self.strings)
        return i

    def add_execution(self, exec_id: int, model_id: int, model_name: str, neff_name: str,
                      start_ns: int, end_ns: int) -> int:
        self.executions.append(DeviceExecution(exec_id, model_id, model_name, neff_name, start_ns, end_ns))
        return len(self.executions) - 1

    def add_op(self, start_ns: int, end_ns: int, name: str, track: str, exec_idx: int,
               flops: float | None = None, nbytes: int | None = None, detail: str = "", source: str = "") -> None:
        self.start_ns.append(start_ns)
        self.end_ns.append(end_ns)
        self.name.append(self.sid(name))
        self.track.append(self.sid(track))
        self.exec_idx.append(exec_idx)
        self.flops.append(math.nan if flops is None else float(flops))
        self.nbytes.append(-1 if nbytes is None else int(nbytes))
        self.detail.append(self.sid(detail))
        self.source.append(self.sid(source))

    def __len__(self) -> int:
        return len(self.start_ns)


def write_device_trace(path: str, table: OpTable, *, instance_id: str, pid: int, nc_idx: int, mode: str,
                       device_kind: str, source: str, sync: Sequence[tuple[int, int, int]] = (),
                       peak_flops: float = 0.0) -> None:
    strings = [""] * len(table.strings)
    for s, i in table.strings.items():
        strings[i] = s
    ops: dict[str, int | bytes] = {"count": len(table)}
    for c in OP_COLUMNS:  # the table's lists are named after the columns
        ops[c.name] = _col(np.asarray(getattr(table, c.name), dtype=c.dtype), c.dtype)
    atomic_write(path, messages.encode(
        "DeviceTrace", format_version=FORMAT_VERSION, instance_id=instance_id, pid=pid, nc_idx=nc_idx, mode=mode,
        device_kind=device_kind, strings=strings, executions=[asdict(e) for e in table.executions], ops=ops,
        sync=[{"cpu_timestamp_ns": cpu, "nc_timestamp_ns": dev, "exec_id": eid} for cpu, dev, eid in sync],
        peak_flops=peak_flops, source=source))


def write_neff(path: str, *, neff_name: str, graph_hash: str, model_name: str, backend: str, kind: str,
               signature: str, code: str, framework: str, compile_ns: int = 0,
               nodes: Sequence[tuple[str, str, str, str, str]] = ()) -> None:
    """Save a compiled graph; ``nodes`` are (name, op, target, source_location, module_path)."""
    atomic_write(path, messages.encode(
        "NeffFile", format_version=FORMAT_VERSION, neff_name=neff_name, graph_hash=graph_hash,
        model_name=model_name, backend=backend, kind=kind, signature=signature, code=code,
        nodes=[{"name": name, "op": op, "target": target, "source_location": src, "module_path": mod}
               for name, op, target, src, mod in nodes],
        framework=framework, compile_ns=compile_ns))


