"""Queries behind the System Trace Viewer: one window of one set of tracks at screen resolution.

Why this shape: a 100M-event profile cannot be shipped to a browser (Chrome JSON of that size is tens
of GB), and it cannot be scanned per pan either (a DuckDB scan of 100M rows on two cores takes
seconds). So the server keeps, per profile:

* a *leaf* table: one row per (instance, process, thread, core, source, event name) with counts and
  time bounds. Every grouping mode is a coarsening of that key, so track lists for any mode are built
  from the leaves in Python without touching the events.
* a *window index* (:mod:`.index`): every event as (start, duration, id, flow id), sorted by start within its
  leaf, with a running maximum of ends per block of 128 events. A window's events are then one
  contiguous slice per visible leaf, found by binary search: a zoomed-in window costs what it returns
  (milliseconds), where a Parquet scan with a start-time predicate cost ~250 ms at 20M events because
  a process's part often holds a single row group.
* a *level-of-detail pyramid* (only for large profiles), stored the same way: per leaf, per time bucket
  of width ``W_k = W_0 * 4^k``, the count, total duration, first start, last end and (when the bucket
  holds one event) its id. A zoomed-out window reads the level whose buckets are just under a pixel
  wide, so the items read are about (visible tracks x screen pixels), whatever the profile size.

Both are built by one pass over the events when a profile is first opened and cached (memory-mapped
``.npy`` files under the user's cache directory, keyed by the event files' sizes and mtimes).
Windows holding few events (an exact count from the index) are answered from the events, wider ones
from the pyramid.

Both paths return the same thing: per visible row, the events at least a pixel long individually and
the shorter ones merged per pixel with a count. Times in responses are nanoseconds relative to the
profile's origin (``origin_ns``, sent once as a string) because Unix-epoch nanoseconds do not fit a
JavaScript number exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from . import index, index_build, paths
from neuron_explorer.contracts.dataset import (COUNTERS, DEVICE_EVENTS, DEVICE_PROFILES, EVENTS, METADATA, MODELS,
                                             WARNINGS, table_file)

DEVICE_PROFILES_FILE = table_file(DEVICE_PROFILES)

MODES: dict[str, str] = {
    "cpu_device": "CPU vs Device",
    "neuroncore": "NeuronCore",
    "thread": "Thread",
    "process": "Process",
    "instance": "Instance",
}
DEFAULT_MODE = "cpu_device"

# Preferred order of event rows inside a group: host calls above the core work they cause.
NAME_ORDER = ["nrt_load", "model_load", "nrt_execute", "runtime_execute", "kmgr_exec_core", "kbl_exec_wait",
              "nrt_tensor_read", "nrt_tensor_write", "device_exec", "nc_exec_running", "cc_exec_barrier",
              "cc_running", "nrt_model_switch", "timestamp_sync_point"]

RAW_BUDGET = 60_000  # read events directly below this estimate; use the pyramid above
MAX_WINDOW_ROWS = 400_000  # safety net: a window answer is ~ rows x pixels, far below this


class NotFound(LookupError):
    """The requested profile, event or device profile does not exist."""


class BadRequest(ValueError):
    """The request's parameters are malformed."""


def _q(s: str) -> str:
    """SQL string literal (for file paths we enumerated ourselves, never for request text)."""
    return "'" + s.replace("'", "''") + "'"


def _files_sql(files: list[str]) -> str:
    return "[" + ",".join(_q(f) for f in files) + "]"


def _proc_label(rank: int, pid: int) -> str:
    return f"rank {rank} · pid {pid}" if rank >= 0 else f"pid {pid}"


def _name_key(name: str) -> tuple[int, str]:
    return (NAME_ORDER.index(name) if name in NAME_ORDER else len(NAME_ORDER), name)


@dataclass
class Leaf:
    """One (instance, process, thread, core, source, name) combination and its extent."""

    leaf: int
    inst: str
    pid: int
    tid: int
    nc: int
    src: str
    name: str
    n: int
    mn: int
    mx: int
    maxdur: int


@dataclass
class Row:
    """One drawn track of a grouping mode: its group path, label and what feeds it."""

    key: str
    kind: str  # "events" | "counter"
    group: list[str]
    label: str
    leaves: list[int] = field(default_factory=list)
    series: list[tuple[str, int, str]] = field(default_factory=list)  # (instance, pid, counter)
    style: str = "line"  # counters: "line" | "stack"
    unit: str = ""
    count: int = 0
    name: str = ""

    def to_json(self, idx: int) -> dict[str, Any]:
        d: dict[str, Any] = {"idx": idx, "key": self.key, "kind": self.kind, "group": self.group,
                             "label": self.label, "count": self.count}
        if self.kind == "events":
            d["leaves"] = self.leaves
            d["name"] = self.name
        else:
            d["series"] = sorted({s[2] for s in self.series})
            d["style"] = self.style
            d["unit"] = self.unit
        return d


class Profile:
    """One ingested profile directory, prepared for window queries.

    Preparation reads the events once (leaves, the window index and, for large profiles, the pyramid)
    and keeps the small tables (leaves, counters) in an in-memory DuckDB. The index is written to a
    cache directory keyed by the profile's files, with the leaf table, so reopening a 100M-event
    profile reads no event at all.
    """

    def __init__(self, workspace: Path, name: str, con: duckdb.DuckDBPyConnection, cache_dir: Path | None,
                 pyramid_min_events: int, raw_budget: int = 60_000) -> None:
        self.workspace = workspace
        self.raw_budget = raw_budget
        self.flow_strategy = "auto"  # index.EventIndex.flows: "auto", or (tests) "gather" / "walk"
        self.name = name
        self.dir = paths.resolve_profile(workspace, name)
        self.con = con
        self.cache_dir = cache_dir
        self.pyramid_min_events = pyramid_min_events
        self.tag = "p" + hashlib.sha1(str(self.dir).encode()).hexdigest()[:12]
        self.ev_files = paths.table_files(workspace, self.dir, EVENTS)
        self.cnt_files = paths.table_files(workspace, self.dir, COUNTERS)
        self.dev_files = paths.table_files(workspace, self.dir, DEVICE_EVENTS)
        self.meta_file = paths.single_file(workspace, self.dir, table_file(METADATA))
        self.models_file = paths.single_file(workspace, self.dir, table_file(MODELS))
        self.warn_file = paths.single_file(workspace, self.dir, table_file(WARNINGS))
        self.devprof_file = paths.single_file(workspace, self.dir, DEVICE_PROFILES_FILE)
        self.levels: list[int] = []  # bucket width (ns) of each pyramid level
        self.prepare_s = 0.0
        self.index_build_s: float | None = None  # None: the index came from the cache (or there are no events)
        self._rows: dict[str, list[Row]] = {}
        self.stamp = _stamp(self.meta_file)
        self._prepare()

    # ---------------------------------------------------------------- preparation
    def _cursor(self) -> duckdb.DuckDBPyConnection:
        return self.con.cursor()

    def _fingerprint(self) -> str:
        h = hashlib.sha1()
        for _, _, f in self.ev_files:
            st = os.stat(f)
            h.update(f"{f}:{st.st_size}:{st.st_mtime_ns};".encode())
        h.update(f"{self.pyramid_min_events}:{index.FORMAT}".encode())
        return h.hexdigest()[:16]

    def _prepare(self) -> None:
        t = time.perf_counter()
        c = self._cursor()
        meta = c.execute(f"SELECT * FROM read_parquet({_q(self.meta_file)})").fetchall() if self.meta_file else []
        cols = [d[0] for d in c.description] if self.meta_file else []
        self.meta = [dict(zip(cols, r)) for r in meta]
        self.rank_of = {(m["instance_id"], int(m["process_id"])): int(m.get("rank", -1) if m.get("rank") is not None else -1)
                        for m in self.meta}
        self.nd_of = {(m["instance_id"], int(m["process_id"])): int(m.get("nd_idx") or 0) for m in self.meta}
        self.display_name = next((m.get("display_name") for m in self.meta if m.get("display_name")), self.name)
        tag = self.tag
        cache = None
        if self.cache_dir is not None and self.ev_files:
            cache = self.cache_dir / f"{tag}-{self._fingerprint()}.idx"
        idx = index.EventIndex.load(cache) if cache is not None else None
        leaves: list[Leaf] = []
        if idx is not None:  # the leaf table travels with the cached index: no scan at all
            leaves = [Leaf(i, *r) for i, r in enumerate(idx.meta["leaves"])]
        elif self.ev_files:
            rows = c.execute(f"""
                SELECT instance_id, process_id, coalesce(thread_id, -1), coalesce(nc_idx, -1),
                       coalesce(trace_event_source, ''), name, count(*), min(start_ts), max(end_ts),
                       max(duration_ns)
                FROM read_parquet({_files_sql([f for _, _, f in self.ev_files])})
                GROUP BY ALL ORDER BY 1, 2, 3, 4, 5, 6""").fetchall()
            for i, r in enumerate(rows):
                leaves.append(Leaf(i, str(r[0]), int(r[1]), int(r[2]), int(r[3]), str(r[4]), str(r[5]), int(r[6]),
                                   int(r[7]), int(r[8]), int(r[9] or 0)))
        self.leaves = leaves
        self.total_events = sum(lf.n for lf in leaves)
        c.execute(f"DROP TABLE IF EXISTS {tag}_leaves")
        c.execute(f"""CREATE TABLE {tag}_leaves (leaf INTEGER, inst VARCHAR, pid BIGINT, tid BIGINT, nc INTEGER,
                      src VARCHAR, name VARCHAR, maxdur BIGINT)""")
        if leaves:
            c.executemany(f"INSERT INTO {tag}_leaves VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                          [(lf.leaf, lf.inst, lf.pid, lf.tid, lf.nc, lf.src, lf.name, lf.maxdur) for lf in leaves])
        # counters: small (samples every ~10-100 ms), kept in memory
        c.execute(f"DROP TABLE IF EXISTS {tag}_cnt")
        if self.cnt_files:
            c.execute(f"""CREATE TABLE {tag}_cnt AS SELECT instance_id AS inst, process_id AS pid, ts, counter, value, unit
                          FROM read_parquet({_files_sql([f for _, _, f in self.cnt_files])}) ORDER BY counter, inst, pid, ts""")
        else:
            c.execute(f"CREATE TABLE {tag}_cnt (inst VARCHAR, pid BIGINT, ts BIGINT, counter VARCHAR, value DOUBLE, unit VARCHAR)")
        cstats = c.execute(f"SELECT min(ts), max(ts), count(*) FROM {tag}_cnt").fetchall()[0]
        self.counter_list = c.execute(f"SELECT DISTINCT inst, pid, counter, unit FROM {tag}_cnt ORDER BY ALL").fetchall()
        gap = c.execute(f"""SELECT max(d) FROM (SELECT ts - lag(ts) OVER (PARTITION BY inst, pid, counter ORDER BY ts) AS d
                            FROM {tag}_cnt)""").fetchall()[0][0] if cstats[2] else 0
        self.counter_gap = int(gap or 0)
        starts = [lf.mn for lf in leaves] + ([int(cstats[0])] if cstats[0] is not None else [])
        ends = [lf.mx for lf in leaves] + ([int(cstats[1])] if cstats[1] is not None else [])
        self.origin = min(starts) if starts else 0
        self.end = max(ends) if ends else self.origin
        self.duration = max(self.end - self.origin, 1)
        self.index: index.EventIndex | None = None
        if leaves:
            if idx is None:
                idx = index.EventIndex.cached(cache, self._build_index)
                self._prune_cache(cache)
            self.index = idx
        self.levels = list(self.index.levels) if self.index is not None else []
        # index times are relative to the earliest event start; responses to the profile origin
        self.shift = (self.index.base - self.origin) if self.index is not None else 0
        self.prepare_s = time.perf_counter() - t

    def _prune_cache(self, keep: Path | None) -> None:
        """Remove this profile's caches for older versions of its files (or of the cache format):
        at 100M events each is gigabytes. Unlinking files another server still maps is safe."""
        if keep is None or self.cache_dir is None:
            return
        try:
            stale = [x for x in self.cache_dir.iterdir() if x.name.startswith(self.tag + "-") and x != keep
                     and (x.name.endswith(".idx") or x.name.endswith(".parquet"))]  # .parquet: pre-index pyramids
        except OSError:
            return
        for x in stale:
            if x.is_dir() and not x.is_symlink():
                shutil.rmtree(x, ignore_errors=True)
            else:
                try:
                    x.unlink()
                except OSError:
                    pass

    def _flow_sql(self, part: str) -> str:
        """SQL for an event's flow id (0: none) from ``SystemProfileEvents.flow_id`` of a process's part.

        The column is a list with zero or one id per system event (a host call and its core execution
        share one, as do the ranks of one collective); a plain integer column is read as is, and parts
        without the column have no flows.
        """
        try:
            desc = self._cursor().execute(f"DESCRIBE SELECT * FROM read_parquet({_q(part)})").fetchall()
        except duckdb.Error:
            return "0::BIGINT"
        typ = next((str(r[1]).upper() for r in desc if r[0] == "flow_id"), None)
        if typ is None:
            return "0::BIGINT"
        if typ.endswith("[]"):
            return "coalesce(ev.flow_id[1], 0)::BIGINT"
        return "coalesce(ev.flow_id, 0)::BIGINT"

    def _build_index(self, out_dir: Path | None) -> index.EventIndex:
        """One pass over the events, one process at a time: (leaf, start, duration, id, flow id) sorted by
        leaf, start."""
        leaves = self.leaves
        base = min(lf.mn for lf in leaves)
        ext = max(lf.mx for lf in leaves) - base
        levels = index_build.pyramid_levels(max(ext, 1), len(leaves), self.total_events) \
            if self.total_events >= self.pyramid_min_events else []
        parts: dict[tuple[str, int], list[str]] = {}
        for inst, pid, f in self.ev_files:
            parts.setdefault((inst, pid), []).append(f)

        def read(files: list[str]) -> tuple[np.ndarray, ...]:
            flow_sql = self._flow_sql(files[0])
            cols = self._cursor().execute(f"""
                SELECT l.leaf::INTEGER AS leaf, ev.start_ts AS s, (ev.end_ts - ev.start_ts)::BIGINT AS d,
                       coalesce(ev.id, -1)::BIGINT AS id, {flow_sql} AS f
                FROM read_parquet({_files_sql(files)}) ev
                JOIN {self.tag}_leaves l ON l.inst = ev.instance_id AND l.pid = ev.process_id
                     AND l.tid = coalesce(ev.thread_id, -1) AND l.nc = coalesce(ev.nc_idx, -1)
                     AND l.src = coalesce(ev.trace_event_source, '') AND l.name = ev.name""").fetchnumpy()
            leaf = np.asarray(cols["leaf"])
            s = np.asarray(cols["s"], dtype=np.int64)
            # sorting here beats ORDER BY in the query (~1.6x); parts are usually sorted by start already,
            # so a stable sort by leaf alone is often enough
            o = np.argsort(leaf, kind="stable")
            leaf, s = leaf[o], s[o]
            if bool(((s[1:] < s[:-1]) & (leaf[1:] == leaf[:-1])).any()):
                o2 = np.lexsort((s, leaf))
                o, leaf, s = o[o2], leaf[o2], s[o2]
            return (leaf, s, np.asarray(cols["d"], dtype=np.int64)[o], np.asarray(cols["id"], dtype=np.int64)[o],
                    np.asarray(cols["f"], dtype=np.int64)[o])

        def chunks():
            # a process's part is often one row group, which DuckDB scans on one thread: read as many
            # processes at once as there are cores, keeping at most that many answers in memory
            workers = max(1, min(os.cpu_count() or 1, 4))
            with ThreadPoolExecutor(workers) as pool:
                pending: list = []
                for files in parts.values():
                    pending.append(pool.submit(read, files))
                    if len(pending) >= workers:
                        yield pending.pop(0).result()
                while pending:
                    yield pending.pop(0).result()

        t = time.perf_counter()
        idx = index.EventIndex.build(
            [lf.n for lf in leaves], [lf.maxdur for lf in leaves], base, levels, chunks(), out_dir,
            extra={"leaves": [[lf.inst, lf.pid, lf.tid, lf.nc, lf.src, lf.name, lf.n, lf.mn, lf.mx, lf.maxdur]
                              for lf in leaves]})
        self.index_build_s = time.perf_counter() - t
        return idx

    # ---------------------------------------------------------------- tracks
    def overview(self) -> dict[str, Any]:
        names: dict[str, int] = {}
        for lf in self.leaves:
            names[lf.name] = names.get(lf.name, 0) + lf.n
        return {
            "name": self.name, "display_name": self.display_name, "origin_ns": str(self.origin),
            "duration_ns": self.duration, "events": self.total_events, "modes": MODES, "default_mode": DEFAULT_MODE,
            "names": sorted(names.items(), key=lambda kv: _name_key(kv[0])),
            "processes": [{k: (v if isinstance(v, (int, float, str)) or v is None else str(v)) for k, v in m.items()}
                          for m in self.meta],
            "instances": sorted({lf.inst for lf in self.leaves} | {m["instance_id"] for m in self.meta}),
            "levels": self.levels, "prepare_s": round(self.prepare_s, 3),
            "index": {"bytes": self.index.nbytes() if self.index is not None else 0,
                      "build_s": round(self.index_build_s, 3) if self.index_build_s is not None else None},
            "device_profiles": len(self.device_profiles()),
            "warnings": self.warnings(),
        }

    def warnings(self) -> list[str]:
        if not self.warn_file:
            return []
        try:
            return [r[0] for r in self._cursor().execute(
                f"SELECT message FROM read_parquet({_q(self.warn_file)})").fetchall()]
        except duckdb.Error:
            return []

    def rows(self, mode: str) -> list[Row]:
        """The tracks of a grouping mode, in drawing order (cached: leaves never change)."""
        if mode not in MODES:
            raise BadRequest(f"unknown grouping mode {mode!r}; one of {', '.join(MODES)}")
        if mode not in self._rows:
            self._rows[mode] = self._counter_rows(mode) + self._event_rows(mode)
            self._rows[mode].sort(key=lambda r: self._row_sort(r))
        return self._rows[mode]

    def _rank(self, inst: str, pid: int) -> int:
        return self.rank_of.get((inst, pid), -1)

    def _row_sort(self, r: Row) -> tuple:
        return tuple(r._sort)  # type: ignore[attr-defined]

    def _event_rows(self, mode: str) -> list[Row]:
        rows: dict[tuple, Row] = {}
        for lf in self.leaves:
            rank = self._rank(lf.inst, lf.pid)
            proc = _proc_label(rank, lf.pid)
            psort = (rank if rank >= 0 else 1 << 30, lf.pid)
            dev = lf.src == "neuron_hw"
            nk = _name_key(lf.name)
            if mode == "cpu_device":
                cls = "Device" if dev else "CPU"
                sub = lf.nc if dev else lf.tid
                key = (lf.inst, lf.pid, cls, sub, lf.name)
                group = [lf.inst, proc, cls]
                label = f"{lf.name} · NC {lf.nc}" if dev else f"{lf.name} · tid {lf.tid}"
                sort = (lf.inst, 1, *psort, 1 if dev else 0, sub, nk)
            elif mode == "neuroncore":
                key = (lf.inst, lf.nc, lf.name)
                group = [lf.inst, f"NC {lf.nc}" if lf.nc >= 0 else "no core"]
                label = lf.name
                sort = (lf.inst, 1, lf.nc if lf.nc >= 0 else 1 << 30, nk)
            elif mode == "thread":
                key = (lf.inst, lf.pid, lf.tid, lf.name)
                group = [lf.inst, proc, f"thread {lf.tid}"]
                label = lf.name
                sort = (lf.inst, 1, *psort, lf.tid, nk)
            elif mode == "process":
                key = (lf.inst, lf.pid, lf.name)
                group = [lf.inst, proc]
                label = lf.name
                sort = (lf.inst, 1, *psort, 0, nk)
            else:
                key = (lf.inst, lf.name)
                group = [lf.inst]
                label = lf.name
                sort = (lf.inst, 1, nk)
            r = rows.get(key)
            if r is None:
                r = rows[key] = Row("|".join(map(str, key)), "events", group, label, name=lf.name)
                r._sort = sort  # type: ignore[attr-defined]
            r.leaves.append(lf.leaf)
            r.count += lf.n
        return list(rows.values())

    def _counter_rows(self, mode: str) -> list[Row]:
        """CPU utilization and host memory per instance and per process; device memory per device.

        Host-level counters are recorded by every process of an instance; one process (the lowest pid)
        speaks for the instance. ``device_mem.<category>`` counters (none are captured yet) form one
        stacked track per (instance, device), summed over the processes using that device.
        """
        by_inst: dict[str, dict[str, list[tuple[int, str]]]] = {}
        out: list[Row] = []
        per_proc: dict[tuple[str, int], list[tuple[str, str]]] = {}
        for inst, pid, counter, unit in self.counter_list:
            by_inst.setdefault(inst, {}).setdefault(counter, []).append((int(pid), unit))
            per_proc.setdefault((inst, int(pid)), []).append((counter, unit))
        for inst, counters in sorted(by_inst.items()):
            def first(cn: str) -> tuple[str, int, str]:
                return (inst, min(p for p, _ in counters[cn]), cn)
            cpu = [first(cn) for cn in counters if cn == "cpu_util.host_mean" or
                   (cn.startswith("cpu_util.cpu") and cn[12:].isdigit())]
            if cpu:
                r = Row(f"{inst}|cpu", "counter", [inst, "Counters"], "CPU utilization (host)", series=cpu,
                        style="line", unit="percent")
                r._sort = (inst, 0, 0)  # type: ignore[attr-defined]
                out.append(r)
            mem = [first(cn) for cn in ("host_mem.host_used", "host_mem.host_available") if cn in counters]
            if mem:
                r = Row(f"{inst}|mem", "counter", [inst, "Counters"], "Host memory (used / available)", series=mem,
                        style="stack", unit="bytes")
                r._sort = (inst, 0, 1)  # type: ignore[attr-defined]
                out.append(r)
            devs: dict[int, list[tuple[str, int, str]]] = {}
            for cn, plist in counters.items():
                if cn.startswith("device_mem."):
                    for pid, _ in plist:
                        devs.setdefault(self.nd_of.get((inst, pid), 0), []).append((inst, pid, cn))
            for nd, series in sorted(devs.items()):
                r = Row(f"{inst}|devmem|{nd}", "counter", [inst, "Counters"], f"Device memory · nd {nd}",
                        series=series, style="stack", unit="bytes")
                r._sort = (inst, 0, 2, nd)  # type: ignore[attr-defined]
                out.append(r)
        if mode in ("cpu_device", "thread", "process"):
            for (inst, pid), cl in sorted(per_proc.items()):
                rank = self._rank(inst, pid)
                proc = _proc_label(rank, pid)
                psort = (rank if rank >= 0 else 1 << 30, pid)
                names = {cn for cn, _ in cl}
                if "cpu_util.process" in names:
                    r = Row(f"{inst}|{pid}|cpu", "counter", [inst, proc], "CPU utilization (process)",
                            series=[(inst, pid, "cpu_util.process")], style="line", unit="percent")
                    r._sort = (inst, 1, *psort, -1, 0)  # type: ignore[attr-defined]
                    out.append(r)
                mem = [(inst, pid, cn) for cn in ("host_mem.process_rss", "host_mem.process_vms") if cn in names]
                if mem:
                    r = Row(f"{inst}|{pid}|mem", "counter", [inst, proc], "Host memory (process RSS / VMS)",
                            series=mem, style="line", unit="bytes")
                    r._sort = (inst, 1, *psort, -1, 1)  # type: ignore[attr-defined]
                    out.append(r)
        return out

    def _pick_rows(self, mode: str, idxs: list[int]) -> list[tuple[int, Row]]:
        rows = self.rows(mode)
        out = []
        for i in idxs:
            if i < 0 or i >= len(rows):
                raise BadRequest(f"row {i} out of range (0..{len(rows) - 1})")
            out.append((i, rows[i]))
        return out

    def _leaf_map(self, picked: list[tuple[int, Row]]) -> tuple[list[int], list[int]]:
        leaves, ridx = [], []
        for i, r in picked:
            for lf in r.leaves:
                leaves.append(lf)
                ridx.append(i)
        return leaves, ridx

    def _count(self, leaves: list[int], t0: float, t1: float) -> int:
        """Events of these leaves starting in [t0, t1): exact, two binary searches per leaf."""
        if self.index is None:
            return 0
        return sum(hi - lo for _, lo, hi in self.index.count_starting(leaves, t0 - self.shift, t1 - self.shift))

    def _files_for(self, leaves: list[int]) -> list[str]:
        procs = {(self.leaves[lf].inst, self.leaves[lf].pid) for lf in leaves}
        return [f for inst, pid, f in self.ev_files if (inst, pid) in procs]

    # ---------------------------------------------------------------- windows
    def window(self, mode: str, row_idx: list[int], t0: float, t1: float, px: int) -> dict[str, Any]:
        """Events of the given rows in [t0, t1) (relative ns) aggregated to ``px`` pixel columns."""
        t0, t1, px = _window_args(t0, t1, px)
        picked = [(i, r) for i, r in self._pick_rows(mode, row_idx) if r.kind == "events"]
        npp = max((t1 - t0) / px, 1e-9)
        first_row: dict[int, int] = {}
        for lf, r in zip(*self._leaf_map(picked)):
            first_row.setdefault(lf, r)  # a row asked for twice is answered once
        leaves, ridx = list(first_row), list(first_row.values())
        res: dict[str, Any] = {"t0": t0, "t1": t1, "px": px, "ns_per_px": npp, "level": None,
                               "row": [], "s": [], "e": [], "c": [], "d": [], "id": [], "leaf": []}
        if not leaves or self.index is None:
            return res
        level = None
        if self.levels and self._count(leaves, t0, t1) > self.raw_budget:
            # too many events to read: the finest level no wider than a pixel (or level 0 when even
            # that is wider: then buckets span a few pixels, still with exact counts)
            level = 0
            for k, w in enumerate(self.levels):
                if w <= npp:
                    level = k
        idx = self.index
        sh = self.shift  # index time = response time - shift
        if level is not None:
            items = idx.gather_level(level, leaves, ridx, t0 - sh, t1 - sh)
            single = (items["c"] == 1) & (items["e"] - items["s"] >= npp)
            res["level"] = level
        else:
            items = idx.gather_raw(leaves, ridx, t0 - sh, t1 - sh)
            single = items["d"] >= npp
            res["level"] = "raw"
        out = index.aggregate(items, t0 - sh, npp, single, MAX_WINDOW_ROWS)
        if sh:
            out["s"] = out["s"] + sh
            out["e"] = out["e"] + sh
        for k in ("row", "c", "d", "s", "e", "id", "leaf"):
            res[k] = out[k]  # int64 arrays: orjson writes them directly (OPT_SERIALIZE_NUMPY)
        return res

    def counters(self, mode: str, row_idx: list[int], t0: float, t1: float, px: int) -> dict[str, Any]:
        """Counter tracks in the window, averaged per pixel (per process first, then summed)."""
        t0, t1, px = _window_args(t0, t1, px)
        picked = [(i, r) for i, r in self._pick_rows(mode, row_idx) if r.kind == "counter"]
        npp = max((t1 - t0) / px, 1e-9)
        out: dict[str, Any] = {"t0": t0, "t1": t1, "px": px, "ns_per_px": npp, "rows": {}}
        if not picked:
            return out
        rs, insts, pids, cns = [], [], [], []
        for i, r in picked:
            for inst, pid, cn in r.series:
                rs.append(i)
                insts.append(inst)
                pids.append(pid)
                cns.append(cn)
        lo = self.origin + int(t0) - self.counter_gap
        hi = self.origin + math.ceil(t1) + self.counter_gap
        # every value from the request is a bound parameter, never SQL text
        sql = f"""
            WITH m AS (SELECT unnest($r::INTEGER[]) AS r, unnest($inst::VARCHAR[]) AS inst,
                              unnest($pid::BIGINT[]) AS pid, unnest($cn::VARCHAR[]) AS counter)
            SELECT r, counter, b, sum(v), sum(vmax) FROM (
                SELECT m.r, c.counter, c.pid, floor((c.ts - $origin - $t0) / $npp)::BIGINT AS b,
                       avg(c.value) AS v, max(c.value) AS vmax
                FROM {self.tag}_cnt c JOIN m ON c.inst = m.inst AND c.pid = m.pid AND c.counter = m.counter
                WHERE c.ts >= $lo AND c.ts <= $hi
                GROUP BY ALL) GROUP BY r, counter, b ORDER BY r, counter, b"""
        data = self._cursor().execute(sql, {"r": rs, "inst": insts, "pid": pids, "cn": cns, "origin": self.origin,
                                            "t0": t0, "npp": npp, "lo": lo, "hi": hi}).fetchall()
        rows: dict[int, dict[str, list]] = {}
        for r, cn, b, v, vmax in data:
            d = rows.setdefault(r, {}).setdefault(cn, [[], [], []])
            d[0].append(t0 + (b + 0.5) * npp)
            d[1].append(v)
            d[2].append(vmax)
        out["rows"] = {str(r): {cn: {"t": s[0], "v": s[1], "max": s[2]} for cn, s in series.items()}
                       for r, series in rows.items()}
        return out

    def flows(self, mode: str, t0: float, t1: float, limit: int = 2000) -> dict[str, Any]:
        """Flows (events sharing a ``SystemProfileEvents.flow_id``) with at least two events overlapping
        [t0, t1) (relative ns: the events a window shows), the ``limit`` smallest flow ids.

        Per flow: its id (a string: 64-bit) and its endpoints ``[event id, leaf, start, end]`` ordered by
        start (then event id). ``leaf`` is the profile's leaf number, the same in every grouping mode: the
        browser maps leaves to the rows of its mode (each row lists its leaves) and draws an arrow
        between consecutive endpoints. Answered from the event index (flow ids are stored with the
        events), without reading Parquet; a ``SystemProfileFlows`` table of older stores is ignored.
        """
        if mode not in MODES:
            raise BadRequest(f"unknown grouping mode {mode!r}; one of {', '.join(MODES)}")
        t0, t1, _ = _window_args(t0, t1, 1)
        out: dict[str, Any] = {"flows": [], "truncated": False}
        idx = self.index
        if idx is None:
            return out
        sh = self.shift
        r = idx.flows(t0 - sh, t1 - sh, limit, self.flow_strategy)
        out["truncated"] = r["truncated"]
        pos = r["pos"]
        if not len(pos):
            return out
        s = idx.s[pos] + sh
        ends = np.stack([idx.id[pos], idx.leaf_of(pos), s, s + idx.d[pos]], axis=1).tolist()
        off = r["off"].tolist()
        out["flows"] = [{"flow_id": str(fid), "ends": ends[off[j]:off[j + 1]]}
                        for j, fid in enumerate(r["fid"].tolist())]
        return out

    # ---------------------------------------------------------------- details, summary, search
    def event(self, event_id: int, leaf: int | None = None) -> dict[str, Any]:
        """Every column of one event, its attributes, flows, process and model, and its device link."""
        files = self._files_for([leaf]) if leaf is not None and 0 <= leaf < len(self.leaves) else \
            [f for _, _, f in self.ev_files]
        if not files:
            raise NotFound(f"event {event_id}")
        c = self._cursor()
        c.execute(f"SELECT * FROM read_parquet({_files_sql(files)}) WHERE id = ? LIMIT 1", [int(event_id)])
        cols = [d[0] for d in c.description]
        rows = c.fetchall()
        if not rows:
            raise NotFound(f"event {event_id}")
        ev = dict(zip(cols, rows[0]))
        props: dict[str, Any] = {}
        for k, v in ev.items():
            if k == "extra_attributes_json" or k in ("instance", "process"):  # hive partition echoes
                continue
            if k in ("start_ts", "end_ts") and v is not None:
                props[k] = str(v)
            elif isinstance(v, list):
                props[k] = [str(x) for x in v]
            else:
                props[k] = v
        try:
            attrs = json.loads(ev.get("extra_attributes_json") or "{}")
        except ValueError:
            attrs = {"extra_attributes_json": ev.get("extra_attributes_json")}
        key = (ev.get("instance_id"), int(ev.get("process_id") or 0))
        proc = next((m for m in self.meta if (m["instance_id"], int(m["process_id"])) == key), None)
        model = None
        if ev.get("model_name") and self.models_file:
            mc = self._cursor()
            mc.execute(f"SELECT * FROM read_parquet({_q(self.models_file)}) WHERE instance_id = ? AND process_id = ? "
                       "AND model_name = ? LIMIT 1", [key[0], key[1], ev["model_name"]])
            mcols = [d[0] for d in mc.description]
            mrow = mc.fetchall()
            model = dict(zip(mcols, mrow[0])) if mrow else None
        out: dict[str, Any] = {
            "id": int(ev["id"]), "name": ev.get("name"), "properties": props, "attributes": attrs,
            "relative": {"start": int(ev["start_ts"]) - self.origin, "end": int(ev["end_ts"]) - self.origin},
            "process": {k: (v if isinstance(v, (int, float, str)) or v is None else str(v)) for k, v in proc.items()}
            if proc else None,
            "model": model,
        }
        if ev.get("name") == "nc_exec_running":
            dp = self.device_profile_for(ev)
            out["device_profile"] = dp
            if dp is None:
                out["device_note"] = ("No device profile was captured for this execution (device profiles are "
                                      "captured with the device profiling mode; see Device Profiles List).")
        return out

    def summary(self, mode: str, t0: float, t1: float, row_idx: list[int] | None = None) -> dict[str, Any]:
        """Count, total and mean duration by event name of events starting in [t0, t1).

        Exact from the events when the range holds few enough of them; from the finest pyramid level
        otherwise (exact except for the two boundary buckets, flagged ``approximate``).
        """
        t0, t1, _ = _window_args(t0, t1, 1)
        rows = self.rows(mode)
        picked = self._pick_rows(mode, row_idx) if row_idx else list(enumerate(rows))
        leaves, _ = self._leaf_map([(i, r) for i, r in picked if r.kind == "events"])
        out: dict[str, Any] = {"t0": t0, "t1": t1, "by_name": [], "count": 0, "approximate": False}
        if not leaves:
            return out
        idx = self.index
        if idx is None:
            return out
        t0i, t1i = t0 - self.shift, t1 - self.shift
        sl = idx.count_starting(leaves, t0i, t1i)
        agg: dict[str, list[int]] = {}
        if self.levels and sum(hi - lo for _, lo, hi in sl) > 3_000_000:
            # finest pyramid level: exact but for the buckets straddling t0 and t1
            cs, ds = idx.a["p0_c"], idx.a["p0_d"]
            for lf, lo, hi in idx.level_starting(0, leaves, t0i, t1i):
                x = agg.setdefault(self.leaves[lf].name, [0, 0])
                x[0] += int(cs[lo:hi].sum(dtype=np.int64))
                x[1] += int(ds[lo:hi].sum(dtype=np.int64))
            out["approximate"] = True
        else:
            for lf, lo, hi in sl:
                x = agg.setdefault(self.leaves[lf].name, [0, 0])
                x[0] += hi - lo
                x[1] += int(idx.d[lo:hi].sum(dtype=np.int64))
        data = [(n, cnt, tot) for n, (cnt, tot) in agg.items() if cnt]
        by = [{"name": n, "count": int(cnt), "total_ns": int(tot or 0), "mean_ns": (tot or 0) / cnt if cnt else 0}
              for n, cnt, tot in data]
        by.sort(key=lambda x: -x["total_ns"])
        out["by_name"] = by
        out["count"] = sum(x["count"] for x in by)
        return out

    def search(self, mode: str, q: str) -> dict[str, Any]:
        """Event names containing ``q`` (case-insensitive), their counts and the rows showing them."""
        ql = q.strip().lower()
        if not ql:
            return {"q": q, "names": [], "rows": []}
        names: dict[str, int] = {}
        for lf in self.leaves:
            if ql in lf.name.lower():
                names[lf.name] = names.get(lf.name, 0) + lf.n
        rows = [i for i, r in enumerate(self.rows(mode)) if r.kind == "events" and ql in r.name.lower()]
        return {"q": q, "names": sorted(names.items(), key=lambda kv: -kv[1]), "rows": rows}

    def search_next(self, q: str, after: float, direction: int) -> dict[str, Any]:
        """The first matching event starting after (or, backwards, before) ``after`` relative ns."""
        ql = q.strip().lower()
        leaves = [lf.leaf for lf in self.leaves if ql and ql in lf.name.lower()]
        if not leaves:
            return {"found": False}
        if self.index is None:
            return {"found": False}
        hit = self.index.next_start(leaves, after - self.shift, direction >= 0)
        if hit is None:
            return {"found": False}
        leaf, i = hit
        s = int(self.index.s[i]) + self.shift
        return {"found": True, "id": int(self.index.id[i]), "s": s, "e": s + int(self.index.d[i]), "leaf": leaf,
                "name": self.leaves[leaf].name}

    # ---------------------------------------------------------------- device profiles
    def device_profiles(self) -> list[dict[str, Any]]:
        """Rows of DeviceProfiles.parquet (none when the profile has no device profiles)."""
        if not self.devprof_file:
            return []
        c = self._cursor()
        c.execute(f"SELECT * FROM read_parquet({_q(self.devprof_file)}) ORDER BY ALL")
        cols = [d[0] for d in c.description]
        return [{k: (v if isinstance(v, (int, float, str)) or v is None else str(v)) for k, v in zip(cols, r)}
                for r in c.fetchall()]

    def device_profile_for(self, ev: dict[str, Any]) -> dict[str, Any] | None:
        """The device profile covering an nc_exec_running event.

        ``view`` records it on the event (``device_profile_id``); for stores without that column, the one
        with the same process and core whose model names and exec id range include the event's.
        """
        dps = self.device_profiles()
        if ev.get("device_profile_id"):
            return next((d for d in dps if str(d.get("profile_id")) == str(ev["device_profile_id"])), None)
        for dp in dps:
            if (dp.get("instance_id") == ev.get("instance_id") and int(dp.get("process_id") or -1) == int(ev.get("process_id") or -2)
                    and int(dp.get("nc_idx") if dp.get("nc_idx") is not None else -1) == int(ev.get("nc_idx") if ev.get("nc_idx") is not None else -2)
                    and (not dp.get("model_name") or str(ev.get("model_name")) in str(dp.get("model_name")))):
                first, last = dp.get("exec_id_first"), dp.get("exec_id_last")
                x = ev.get("exec_id")
                if x is None or first is None or last is None or int(first) <= int(x) <= int(last):
                    return dp
        return None

    def device(self, profile_id: str) -> DeviceProfile:
        if not self.dev_files:
            raise NotFound("no device profiles were captured for this profile")
        dp = next((d for d in self.device_profiles() if str(d.get("profile_id")) == str(profile_id)), None)
        return DeviceProfile(self, str(profile_id), dp)


class DeviceProfile:
    """One device profile (the op/kernel events of an execution range on one core).

    Device tables are small next to system ones (one execution's instructions), so windows read the
    events directly: rows are the ``track`` column (engine / queue), with the same per-pixel merging.
    """

    def __init__(self, prof: Profile, profile_id: str, info: dict[str, Any] | None) -> None:
        self.p = prof
        self.profile_id = profile_id
        self.info = info
        # union_by_name: parts written by different producers may carry different optional columns
        self.files = _files_sql([f for _, _, f in prof.dev_files]) + ", union_by_name = true"
        c = prof._cursor()
        r = c.execute(f"""SELECT min(start_ts), max(end_ts), count(*) FROM read_parquet({self.files})
                          WHERE profile_id::VARCHAR = ?""", [profile_id]).fetchall()[0]
        if not r[2]:
            raise NotFound(f"device profile {profile_id}")
        self.origin, self.end, self.n = int(r[0]), int(r[1]), int(r[2])
        self.tracks = c.execute(f"""SELECT track, count(*), max(duration_ns) FROM read_parquet({self.files})
                                    WHERE profile_id::VARCHAR = ? GROUP BY track ORDER BY track""",
                                [profile_id]).fetchall()

    def overview(self) -> dict[str, Any]:
        return {"profile_id": self.profile_id, "info": self.info, "origin_ns": str(self.origin),
                "duration_ns": max(self.end - self.origin, 1), "events": self.n,
                "rows": [{"idx": i, "key": t, "kind": "events", "group": ["Device"], "label": t, "count": int(n),
                          "name": t, "leaves": [i]} for i, (t, n, _) in enumerate(self.tracks)]}

    def window(self, row_idx: list[int], t0: float, t1: float, px: int) -> dict[str, Any]:
        t0, t1, px = _window_args(t0, t1, px)
        npp = max((t1 - t0) / px, 1e-9)
        picked = [i for i in row_idx if 0 <= i < len(self.tracks)]
        res: dict[str, Any] = {"t0": t0, "t1": t1, "px": px, "ns_per_px": npp, "level": "raw",
                               "row": [], "s": [], "e": [], "c": [], "d": [], "id": [], "leaf": [], "name": []}
        if not picked:
            return res
        names = [self.tracks[i][0] for i in picked]
        maxdur = max(int(self.tracks[i][2] or 0) for i in picked)
        a0, a1 = self.origin + int(t0), self.origin + math.ceil(t1)
        data = self.p._cursor().execute(f"""
            WITH m AS (SELECT unnest($tracks::VARCHAR[]) AS track, unnest($rows::INTEGER[]) AS r),
            ev AS (SELECT track, name, start_ts - $origin AS s, end_ts - $origin AS e, duration_ns AS d
                   FROM read_parquet({self.files})
                   WHERE profile_id::VARCHAR = $pid AND start_ts >= $lo AND start_ts < $a1 AND end_ts >= $a0),
            x AS (SELECT m.r, ev.*, CASE WHEN ev.d >= $npp THEN -1 - row_number() OVER ()
                                    ELSE floor((ev.s - $t0) / $npp)::BIGINT END AS k FROM ev JOIN m USING (track))
            SELECT r, k, count(*)::BIGINT, sum(d)::BIGINT, min(s), max(e), min(s), r, min(name)
            FROM x GROUP BY r, k ORDER BY r, 5 LIMIT {MAX_WINDOW_ROWS}""",
            {"tracks": names, "rows": picked, "pid": self.profile_id, "origin": self.origin, "lo": a0 - maxdur,
             "a0": a0, "a1": a1, "npp": npp, "t0": t0}).fetchall()
        for r, _k, cnt, d, s, e, sid, leaf, name in data:
            res["row"].append(r)
            res["c"].append(cnt)
            res["d"].append(d)
            res["s"].append(s)
            res["e"].append(e)
            res["id"].append(sid)  # device events are addressed by (track, start)
            res["leaf"].append(leaf)
            res["name"].append(name)
        return res

    def event(self, row: int, start: int) -> dict[str, Any]:
        """All columns of the device event on track ``row`` starting at ``start`` (relative ns)."""
        if not 0 <= row < len(self.tracks):
            raise NotFound("no such track")
        c = self.p._cursor()
        c.execute(f"SELECT * FROM read_parquet({self.files}) WHERE profile_id::VARCHAR = ? AND track = ? "
                  "AND start_ts = ? LIMIT 1", [self.profile_id, self.tracks[row][0], self.origin + int(start)])
        cols = [d[0] for d in c.description]
        rows = c.fetchall()
        if not rows:
            raise NotFound("device event")
        ev = dict(zip(cols, rows[0]))
        try:
            attrs = json.loads(ev.pop("extra_attributes_json", None) or "{}")
        except ValueError:
            attrs = {}
        props = {k: (str(v) if k in ("start_ts", "end_ts") else v if isinstance(v, (int, float, str)) or v is None
                     else str(v)) for k, v in ev.items()}
        return {"name": ev.get("name"), "properties": props, "attributes": attrs,
                "relative": {"start": int(ev["start_ts"]) - self.origin, "end": int(ev["end_ts"]) - self.origin}}


MAX_REL_NS = 1 << 62  # times in requests are ns from the profile's origin: +-146 years is plenty


def _window_args(t0: float, t1: float, px: int) -> tuple[float, float, int]:
    try:
        t0, t1, px = float(t0), float(t1), int(px)
    except (TypeError, ValueError, OverflowError):
        raise BadRequest("t0, t1 must be numbers and px an integer") from None
    if not (math.isfinite(t0) and math.isfinite(t1)) or t1 <= t0:
        raise BadRequest("need finite t0 < t1")
    if not (-MAX_REL_NS <= t0 and t1 <= MAX_REL_NS):
        raise BadRequest(f"t0 and t1 must lie within +-{MAX_REL_NS} ns of the profile's origin")
    if not 1 <= px <= 20000:
        raise BadRequest("px must be in 1..20000")
    return t0, t1, px


def _stamp(path: str | None) -> tuple[int, int, int] | None:
    """Identity of a profile's metadata file: a re-ingested profile gets a new one."""
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns) if st else None


class Workspace:
    """The profiles of one workspace directory, opened lazily and shared by all requests."""

    def __init__(self, root: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                 pyramid_min_events: int = 2_000_000, threads: int | None = None,
                 raw_budget: int = RAW_BUDGET) -> None:
        self.root = Path(root).resolve()
        self.raw_budget = raw_budget
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.pyramid_min_events = pyramid_min_events
        self.con = duckdb.connect(":memory:")
        if threads:
            self.con.execute(f"SET threads = {int(threads)}")
        for opt in ("SET parquet_metadata_cache = true", "SET enable_object_cache = true"):
            try:
                self.con.execute(opt)
            except duckdb.Error:
                pass
        self._profiles: dict[str, Profile] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def list(self) -> list[dict[str, Any]]:
        """Profiles in the workspace, from their metadata only (cheap: nothing is prepared)."""
        out = []
        for name in paths.list_profile_dirs(self.root):
            d = self.root / name
            meta = paths.single_file(self.root, d, table_file(METADATA))
            if not meta:
                continue
            try:
                r = self.con.cursor().execute(f"""
                    SELECT count(*), count(DISTINCT instance_id), max(world_size), sum(events), min(start_wall_ns),
                           any_value(display_name)
                    FROM read_parquet({_q(meta)})""").fetchall()[0]
            except duckdb.Error:
                continue
            dev = paths.single_file(self.root, d, DEVICE_PROFILES_FILE)
            try:
                has_dev = bool(dev) and self.con.cursor().execute(
                    f"SELECT count(*) FROM read_parquet({_q(dev)})").fetchall()[0][0] > 0
            except duckdb.Error:
                has_dev = False
            out.append({"name": name, "processes": int(r[0]), "instances": int(r[1]),
                        "world_size": int(r[2] or 0), "events": int(r[3] or 0),
                        "start_wall_ns": str(r[4]) if r[4] is not None else None,
                        "display_name": r[5] or name, "types": ["system", "device"] if has_dev else ["system"]})
        return out

    def exists(self, name: str) -> bool:
        """Is ``name`` (still) a profile of the workspace?"""
        try:
            paths.resolve_profile(self.root, name)
            return True
        except (paths.PathRejected, OSError):
            return False

    def forget(self, name: str) -> None:
        """Drop a prepared profile (removed or replaced on disk): the next request prepares it anew."""
        with self._lock:
            self._profiles.pop(name, None)

    def profile(self, name: str) -> Profile:
        """The prepared profile (prepared once; concurrent first requests wait for the same work).

        A profile removed from the workspace while the server runs is NotFound (and forgotten); one
        re-ingested under the same name is prepared again."""
        paths.check_profile_name(name)
        with self._lock:
            p = self._profiles.get(name)
        if p is not None:
            if not self.exists(name):
                self.forget(name)
                raise NotFound(f"profile {name!r} is no longer in the workspace")
            if _stamp(p.meta_file) == p.stamp:
                return p
            self.forget(name)
        with self._lock:
            p = self._profiles.get(name)
            if p is not None:
                return p
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            p = self._profiles.get(name)
            if p is None:
                p = Profile(self.root, name, self.con, self.cache_dir, self.pyramid_min_events, self.raw_budget)
                with self._lock:
                    self._profiles[name] = p
        return p
