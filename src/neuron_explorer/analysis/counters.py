"""Counter series of a process: its CPU and memory samplers as (time, value, unit) columns.

Every output shows the same counters (Parquet's ``SystemProfileCounters``, Chrome JSON's ``C``
events, Perfetto's counter tracks), so they are read and placed on the wall clock here, once; the
exporters only encode them.
"""

from __future__ import annotations

import numpy as np

from neuron_explorer.analysis.events import ProcessEvents
from neuron_explorer.analysis.pbfile import packed_array
from neuron_explorer.analysis.reader import Session, wall_offset_ns
from neuron_explorer.contracts.dataset import DEVICE_MEMORY_PREFIX, MAIN_THREAD, MAIN_THREAD_WAIT
from neuron_explorer.util.cgroup import SOURCES as _CGROUP_SOURCES
from neuron_explorer.util.names import printable

Series = dict[str, tuple[np.ndarray, np.ndarray, str]]  # counter name -> (ts, values, unit)


def counter_series(s: Session) -> Series:
    """{counter name: (monotonic ts, values, unit)} from a session's samplers."""
    out: Series = {}
    if s.cpu is not None:
        ts = packed_array(s.cpu.ts_ns, "i8", s.path, "cpu_util.ts_ns")
        pct = packed_array(s.cpu.cpu_percent, "f4", s.path, "cpu_util.cpu_percent")
        ncpu = max(int(s.cpu.num_cpus), 1)
        if len(ts) and len(pct) == len(ts) * ncpu:
            pct = pct.reshape(len(ts), ncpu)
            cols = {"cpu_util.process": s.cpu.process_percent,
                    # (decision 0203: not in captures before it; the reader checked the lengths)
                    MAIN_THREAD: s.cpu.main_thread_percent, MAIN_THREAD_WAIT: s.cpu.main_thread_wait_percent}
            for name, raw in cols.items():
                _add_percent(out, name, ts, packed_array(raw, "f4", s.path, name)[: len(ts)])
            _add_percent(out, "cpu_util.host_mean", ts, pct.mean(axis=1))
            for i in range(ncpu):
                _add_percent(out, f"cpu_util.cpu{i}", ts, pct[:, i])
    if s.mem is not None:
        ts = packed_array(s.mem.ts_ns, "i8", s.path, "host_mem.ts_ns")
        for name in ("process_rss", "process_vms", "host_used", "host_available"):
            v = packed_array(getattr(s.mem, name), "i8", s.path, name)
            if len(v) == len(ts) and len(ts):
                out[f"host_mem.{name}"] = (ts, v, "bytes")
        out.update(device_memory_series(s))
    return out


def _add_percent(out: Series, name: str, ts: np.ndarray, v: np.ndarray) -> None:
    """A percent series without the samples its sampler could not read (NaN: the process gone, a
    schedstat not readable; no JSON value and no comparable counter), and none without a sample."""
    keep = ~np.isnan(v)
    if not keep.all():
        ts, v = ts[keep], v[keep]
    if len(v):
        out[name] = (ts, v, "percent")


def device_memory_series(s: Session) -> Series:
    """``device_mem.nc<N>.<category>`` series (bytes) from host_mem.pb; samples where a series was
    not known (-1) are left out.  The reader checked the shape (reader._check_device_memory)."""
    m = s.mem
    if m is None or not m.device_mem_names:
        return {}
    names = list(m.device_mem_names)
    ts = packed_array(m.device_mem_ts_ns, "i8", s.path, "device_mem_ts_ns")
    vals = packed_array(m.device_mem_values, "i8", s.path, "device_mem_values", len(ts) * len(names))
    vals = vals.reshape(len(ts), len(names))
    out: Series = {}
    for j, name in enumerate(names):
        keep = vals[:, j] >= 0
        if keep.any():
            out[DEVICE_MEMORY_PREFIX + name] = (ts[keep], vals[keep, j], "bytes")
    return out


def process_counters(pe: ProcessEvents) -> Series:
    """The process's counter series with their times on the events' clock (the wall clock plus the
    instance's alignment offset), so samples and events line up in every output."""
    off = wall_offset_ns(pe.session) + pe.clock_offset_ns
    return {name: (ts + off, vals, unit) for name, (ts, vals, unit) in counter_series(pe.session).items()}


CGROUP_SOURCES = frozenset(_CGROUP_SOURCES.values())
CGROUP_NAME_CHARS = 1024  # a cgroup's name as shown, at most


def recorded_memory_limit(mem, host_bytes: int) -> dict | None:
    """The cgroup memory limit host_mem.pb recorded (fields 14-16, decision 0182) as
    ``{"memory_limit_bytes", "memory_limit_source", "memory_limit_cgroup"}``, when it is positive,
    below the host's memory ``host_bytes`` (0: unknown) and from a source the capture writes; else
    None.  What a damaged file holds is checked here, so it cannot make up a limit."""
    lim = int(getattr(mem, "memory_limit", 0) or 0)
    src = str(getattr(mem, "memory_limit_source", "") or "")
    if 0 < lim and (host_bytes <= 0 or lim < host_bytes) and src in CGROUP_SOURCES:
        cgroup = printable(str(getattr(mem, "memory_limit_cgroup", "") or ""))[:CGROUP_NAME_CHARS]
        return {"memory_limit_bytes": lim, "memory_limit_source": src, "memory_limit_cgroup": cgroup}
    return None


def host_memory_bytes(s: Session) -> int:
    """The host's memory at the last host_mem sample (used + available), 0 when not recorded."""
    m = s.mem
    if m is None:
        return 0
    used = packed_array(m.host_used, "i8", s.path, "host_used")
    avail = packed_array(m.host_available, "i8", s.path, "host_available")
    return int(used[-1]) + int(avail[-1]) if len(used) and len(avail) else 0


def session_memory_limit(s: Session) -> dict | None:
    """``recorded_memory_limit`` of a session (its host_mem.pb against its host's memory)."""
    return recorded_memory_limit(s.mem, host_memory_bytes(s)) if s.mem is not None else None
