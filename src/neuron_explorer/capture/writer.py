"""Writes a capture session directory: ntrace.pb, trace_info.pb, cpu_util.pb, host_mem.pb.

Every file is written to a temporary name in the same directory and renamed into place, so a
reader (or a process killed mid-write) never leaves a torn file behind (``util.atomic``); the
capture sink's system events are the exception: they are appended to segment files
(``capture.segments``, decision 0111), whose torn last block a reader skips.
``write_session`` is the one place that decides which files a session has; the capture sink and
the JAX conversion both call it.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from neuron_explorer.contracts import events as ev, messages
from neuron_explorer.contracts.columns import (
    EVENT_COLUMNS,
    EVENT_COUNT_FIELD,
    FORMAT_VERSION,
    SYSTEM_TRACE_EVENTS_FIELD,
)
from neuron_explorer.contracts.env import job_environment
from neuron_explorer.util.atomic import atomic_write, atomic_write_all
from neuron_explorer.util.pbwire import LEN, VARINT, encode_varint_scalar, tag

from .. import __version__

if TYPE_CHECKING:
    from ..runtime.config import CaptureConfig
    from ..runtime.core import Runtime
    from .samplers import HostSampler
    from .segments import SegmentWriter
    from .store import CoreStore


def _col(a: np.ndarray, dtype: str) -> bytes:
    return np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()


def _len_prefix(field: int, nbytes: int) -> bytes:
    """Tag and length of a length-delimited protobuf field."""
    return tag(field, LEN) + encode_varint_scalar(nbytes)


def _stored_columns(cores: dict[int, "CoreStore"]) -> tuple[np.ndarray, np.ndarray]:
    """The events of every core as one (W, n) block of columns, and their cores."""
    parts, ncs = [], []
    for nc, store in sorted(cores.items()):
        cols = store.columns()
        parts.append(cols)
        ncs.append(np.full(cols.shape[1], nc, dtype="<i4"))
    if not parts:
        return np.empty((ev.RECORD_WIDTH, 0), dtype=np.int64), np.empty(0, dtype="<i4")
    if len(parts) == 1:
        return parts[0], ncs[0]
    return np.concatenate(parts, axis=1), np.concatenate(ncs)


_COUNT_TAG = tag(EVENT_COUNT_FIELD, VARINT)


def encode_events(cores: dict[int, "CoreStore"]) -> list[bytes | memoryview]:
    """The serialized ``EventColumns`` message as a list of buffers (column arrays are not copied
    into a protobuf object: the tags and lengths are written around the raw column bytes)."""
    return encode_columns(*_stored_columns(cores))


def encode_columns(cols: np.ndarray, nc: np.ndarray | int) -> list[bytes | memoryview]:
    """``EventColumns`` of the (W, n) block ``cols`` whose events belong to core(s) ``nc``."""
    n = cols.shape[1]
    if not isinstance(nc, np.ndarray):
        nc = np.full(n, nc, dtype="<i4")
    out: list[bytes | memoryview] = [_COUNT_TAG + encode_varint_scalar(n)]
    for c in EVENT_COLUMNS:
        col = nc if c.row is None else cols[c.row]
        col = np.ascontiguousarray(col, dtype=c.dtype)  # a copy only where the wire type is narrower
        data = col.data.cast("B")
        out += [_len_prefix(c.field, len(data)), data]
    return out


def _models(rt: "Runtime") -> list[bytes]:
    """The runtime's models, each an encoded ``ModelInfo``."""
    return [messages.encode(
        "ModelInfo", id=m.id, name=m.name, neff_name=m.neff_name, graph_hash=m.graph_hash, backend=m.backend,
        kind=m.kind, compile_ns=m.compile_ns, nc_idx=m.nc_idx, source_location=m.source_location,
        module_path=m.module_path, num_nodes=m.num_nodes, flops=m.flops,
        constants_bytes=m.constants_bytes, signature=m.signature,
    ) for m in list(rt.models)]


@functools.cache
def _event_types() -> tuple[bytes, ...]:
    return tuple(messages.encode("EventTypeInfo", id=t.id, name=t.name, group=t.group, source=t.source,
                                 args=list(t.args)) for t in ev.EVENT_TYPES)


def encode_tables(rt: "Runtime", models: list[bytes] | None = None) -> bytes:
    """``ntrace.pb``'s tables: a ``SystemTrace`` with the event types, strings and models."""
    return messages.encode("SystemTrace", format_version=FORMAT_VERSION, event_types=_event_types(),
                           strings=list(rt.string_list), models=_models(rt) if models is None else models)


def encode_system_trace(rt: "Runtime", cores: dict[int, "CoreStore"]) -> list:
    """``ntrace.pb`` with its events inline, as a list of buffers to write in order (a
    ``SystemTrace`` message: the tables through protobuf, then the ``events`` field built around
    the column bytes): what a whole-session write (the JAX conversion) makes."""
    events = encode_events(cores)
    return [encode_tables(rt), _len_prefix(SYSTEM_TRACE_EVENTS_FIELD, sum(len(b) for b in events))] + events


def append_events(session_dir: str, rt: "Runtime", cores: dict[int, "CoreStore"], segments: "SegmentWriter") -> None:
    """The incremental write of the system trace (decision 0111): ``ntrace.pb``'s tables when they
    changed (renamed into place first, so that every event appended after refers to strings and
    models already on disk), then each core's new events appended to its segment files."""
    models = _models(rt)
    key = (len(rt.string_list), b"".join(models))
    if key != segments.tables_key:
        atomic_write(os.path.join(session_dir, "ntrace.pb"), encode_tables(rt, models))
        segments.tables_key = key
    for nc, store in sorted(cores.items()):
        cols = store.take()
        n = cols.shape[1]
        if n:
            segments.append(nc, store.capacity, n, encode_columns(cols, nc))
            store.wrote(n)


def platform_name() -> str:
    """Like ``platform.platform()`` (``Linux-6.1.0-x86_64``), from ``os.uname()`` alone:
    ``platform.platform()`` may spawn ``uname -p``, which must never happen from the flush thread
    (a fork from a thread, in the user's process, upsets multiprocessing's forkserver)."""
    u = os.uname()
    return f"{u.sysname}-{u.release}-{u.machine}"


_PLATFORM = platform_name()


def _versions() -> dict[str, str]:
    v = {"neuron_explorer": __version__, "python": platform.python_version(), "platform": _PLATFORM}
    for mod in ("torch", "jax"):
        m = sys.modules.get(mod)
        if m is not None and hasattr(m, "__version__"):
            v[mod] = str(m.__version__)
    return v


def encode_trace_info(rt: "Runtime", cores: dict[int, "CoreStore"], session_dir: str, note: str = "",
                      cfg=None, start_anchor=None, end_reason: str | None = None,
                      job: dict[str, str] | None = None) -> bytes:
    """trace_info.pb.  ``job``: what names the process's job (default: the launcher's variables in
    this process's environment now, ``contracts.env.job_environment``)."""
    ident = rt.ident
    cfg = cfg or rt.config
    start_anchor = start_anchor or rt.anchors[0]
    config = dict(cfg.raw_env)
    enabled_ncs = _record_nc_filter(config, cfg.nc_filter) if cfg.nc_filter is not None else None
    return messages.encode(
        "TraceInfo",
        format_version=FORMAT_VERSION, instance_id=ident.instance_id, hostname=ident.hostname, pid=ident.pid,
        process_tag=ident.process_tag, rank=ident.rank, local_rank=ident.local_rank,
        world_size=ident.world_size, node_rank=ident.node_rank, nd_idx=rt.nd_idx, device_kind=rt.device_kind,
        nc_indices=sorted(cores),
        anchors=[{"monotonic_ns": mono, "wall_ns": wall, "label": label} for mono, wall, label in rt.anchors],
        config=config,
        cores=[{"nc_idx": nc, "capacity": st.capacity, "recorded": st.recorded, "kept": st.kept,
                "dropped": st.dropped} for nc, st in sorted(cores.items())],
        versions=_versions(), argv=list(sys.argv),
        session_dir=session_dir, end_reason=end_reason or rt.end_reason,
        runtime_events_seen=any(st.recorded for st in cores.values()) or bool(rt.models),
        note=note, start_wall_ns=start_anchor[1],
        enabled_event_types=[t.name for t in ev.EVENT_TYPES if rt.enabled[t.id]],
        enabled_ncs=enabled_ncs, job=job_environment() if job is None else job,
    )


ENABLED_NCS_LISTED = 4096  # a core filter with more members is recorded as text, not expanded


def _record_nc_filter(config: dict[str, str], ncs) -> list[int] | None:
    """The filter's cores for ``enabled_ncs`` (int32) when that is small; a wide range such as
    ``0-99999999999`` goes into ``config["enabled_ncs"]`` as typed instead of being expanded."""
    if ncs.size <= ENABLED_NCS_LISTED and ncs.ranges[-1][1] < 2**31:
        return list(ncs.members(ENABLED_NCS_LISTED))
    config["enabled_ncs"] = str(ncs)
    return None


def encode_cpu_util(s: "HostSampler") -> bytes:
    ts, pct, proc, main, dropped = s.cpu_columns()
    return messages.encode(
        "CpuUtil", format_version=FORMAT_VERSION, num_cpus=s.ncpu, period_ns=int(s.period_s * 1e9),
        ts_ns=_col(ts, "i8"), cpu_percent=_col(pct.ravel(), "f4"), process_percent=_col(proc, "f4"),
        monitored_pid=s.pid, dropped_samples=dropped, main_thread_wait_percent=_col(main[:, 1], "f4"),
        main_thread_percent=_col(main[:, 0], "f4"))


def encode_host_mem(s: "HostSampler") -> bytes:
    ts, rows, dropped = s.mem_columns()
    msg = {"format_version": FORMAT_VERSION, "period_ns": int(s.period_s * 1e9), "ts_ns": _col(ts, "i8"),
           "monitored_pid": s.pid, "dropped_samples": dropped}
    for i, name in enumerate(("process_rss", "process_vms", "host_total", "host_used", "host_available")):
        msg[name] = _col(rows[:, i], "i8")
    dts, names, values, dev_dropped = s.device_memory_columns()
    if names:  # device memory by category (docs/decisions/0031-device-memory-by-category.md)
        msg.update(device_mem_ts_ns=_col(dts, "i8"), device_mem_names=list(names),
                   device_mem_values=_col(values.ravel(), "i8"), dropped_samples=max(dropped, dev_dropped))
    lim = s.memory_limit(int(rows[-1, 2])) if len(rows) else None  # (column 2: host_total)
    if lim is not None:  # the cgroup's limit, below the host's memory (docs/decisions/0182-cgroup-memory-limit.md)
        msg.update(memory_limit=lim.bytes, memory_limit_source=lim.source, memory_limit_cgroup=lim.cgroup)
    return messages.encode("HostMem", **msg)


def write_session(session_dir: str, rt: "Runtime", cores: dict[int, "CoreStore"],
                  sampler: "HostSampler | None" = None, *, note: str = "", cfg: "CaptureConfig | None" = None,
                  start_anchor: tuple[int, int, str] | None = None, end_reason: str | None = None,
                  segments: "SegmentWriter | None" = None) -> None:
    """Write (or rewrite) a session's files as one: ``ntrace.pb`` when the system profile is on,
    ``trace_info.pb``, and the host samples the sampler took.  All are renamed into place together
    once all are written, so a failed write (a full disk) raises and leaves the previous complete
    set, not a mix.  With ``segments`` (the capture sink) the system trace is appended instead
    (``append_events``) before the other files are renamed into place: their counts never promise
    events that are not on disk.  ``cfg``, ``start_anchor`` and ``end_reason`` default to the runtime's (see
    ``encode_trace_info``); device profiles (``.ntff``, ``.neff``) are their writers' business."""
    cfg = cfg or rt.config
    files: list[tuple[str, Callable[[], bytes | Iterable]]] = []
    if cfg.system_profile and segments is not None:
        append_events(session_dir, rt, cores, segments)
    elif cfg.system_profile:
        files.append(("ntrace.pb", lambda: encode_system_trace(rt, cores)))
    files.append(("trace_info.pb", lambda: encode_trace_info(
        rt, cores, session_dir, note, cfg, start_anchor, end_reason)))
    if sampler is not None and sampler.cpu:
        files.append(("cpu_util.pb", lambda: encode_cpu_util(sampler)))
    if sampler is not None and sampler.mem:
        files.append(("host_mem.pb", lambda: encode_host_mem(sampler)))
    atomic_write_all([(os.path.join(session_dir, name), encode) for name, encode in files])
