"""One ingested profile directory, prepared for window queries: its files, leaves, counters and index.

Why this shape: a 100M-event profile cannot be shipped to a browser (Chrome JSON of that size is tens
of GB), and it cannot be scanned per pan either (a DuckDB scan of 100M rows on two cores takes
seconds). So the server keeps, per profile:

* a *leaf* table: one row per (instance, process, thread, core, source, event name) with counts and
  time bounds. Every grouping mode is a coarsening of that key, so track lists for any mode are built
  from the leaves in Python without touching the events (:mod:`neuron_explorer.ui.rows`).
* a *window index* (:mod:`neuron_explorer.ui.index`): every event as (start, duration, id, flow id),
  sorted by start within its leaf, with a running maximum of ends per block of 128 events. A window's
  events are then one contiguous slice per visible leaf, found by binary search: a zoomed-in window
  costs what it returns (milliseconds), where a Parquet scan with a start-time predicate cost ~250 ms
  at 20M events because a process's part often holds a single row group.
* a *level-of-detail pyramid* (only for large profiles), stored the same way: per leaf, per time bucket
  of width ``W_k = W_0 * 4^k``, the count, total duration, first start, last end and (when the bucket
  holds one event) its id. A zoomed-out window reads the level whose buckets are just under a pixel
  wide, so the items read are about (visible tracks x screen pixels), whatever the profile size.

Both are built by one pass over the events when a profile is first opened and cached (memory-mapped
``.npy`` files under the user's cache directory, keyed by the event files' sizes and mtimes), with the
leaf table, so reopening a 100M-event profile reads no event at all. The queries over a prepared
profile are in :mod:`neuron_explorer.ui.queries`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import duckdb
import numpy as np

from neuron_explorer.contracts.dataset import (
    COUNTERS,
    DEVICE_EVENTS,
    DEVICE_PROFILES,
    EVENT_OVERVIEW,
    EVENT_SUMMARY,
    EVENTS,
    METADATA,
    MODELS,
    WARNINGS,
    table_file,
)
from neuron_explorer.ui import background, coarse, index, index_build, ingest_summary, overview, paths
from neuron_explorer.ui.params import one_line
from neuron_explorer.ui.rows import DEFAULT_LAYOUT, Leaf, Row, build_rows, memory_limits, mode_of_grouping
from neuron_explorer.ui.sql import files_sql, quote, records
from neuron_explorer.util.log import get_logger

RAW_BUDGET = 60_000  # read events directly below this estimate; use the pyramid above
FIRST_PAINT_GRACE_S = 3.0  # a cold open's index build waits at most this long for the first coarse answer
COARSE_MIN_EVENTS = 1_000_000  # below this a cold open builds the index before the first paint (~1 s)

# share of the whole preparation each phase stands for, for one progress bar: (start, end)
PHASES = {"reading metadata": (0.0, 0.02), "scanning events": (0.02, 0.3), "loading counters": (0.3, 0.33),
          "building index": (0.33, 0.85), "building pyramid": (0.85, 0.99), "ready": (1.0, 1.0)}


class Progress:
    """How far a profile's preparation has got: written by the preparing thread, read by ``/status``.

    Why: preparing a 100M-event profile the first time takes minutes (one scan, the index build);
    the browser shows this instead of a blank widget. Plain attribute writes, no lock: a reader may
    see a phase one step stale, never a torn value that matters."""

    def __init__(self) -> None:
        self.phase = "starting"
        self.done = 0
        self.total = 0
        self.started = time.time()
        self.error: str | None = None
        self.coarse = False  # the coarse level is served while the index builds
        self.reported = False  # the error went out once in /status
        self.settled = threading.Event()  # set once coarse, ready or failed: what a waiting /status waits for

    def step(self, phase: str, done: int = 0, total: int = 0) -> None:
        self.phase, self.done, self.total = phase, done, total

    def fraction(self) -> float:
        a, b = PHASES.get(self.phase, (0.0, 0.0))
        return a + (b - a) * (self.done / self.total if self.total else 0.0)

    def to_json(self) -> dict[str, Any]:
        state = "error" if self.error else ("ready" if self.phase == "ready" else "preparing")
        return {"state": state, "phase": self.phase, "done": self.done, "total": self.total,
                "fraction": round(self.fraction(), 4), "elapsed_s": round(time.time() - self.started, 2),
                "coarse": self.coarse and state == "preparing", **({"error": self.error} if self.error else {})}


class Profile:
    """One ingested profile directory, prepared for window queries.

    Preparation reads the events once (leaves, the window index and, for large profiles, the pyramid)
    and keeps the small tables (leaves, counters) in an in-memory DuckDB. The index is written to a
    cache directory keyed by the profile's files, with the leaf table, so reopening a 100M-event
    profile reads no event at all.
    """

    def __init__(self, workspace: Path, name: str, con: duckdb.DuckDBPyConnection, cache_dir: Path | None,
                 pyramid_min_events: int, raw_budget: int = RAW_BUDGET, progress: Progress | None = None,
                 index_gate: threading.Event | None = None, coarse_min_events: int = COARSE_MIN_EVENTS) -> None:
        self.workspace = workspace
        self.progress = progress if progress is not None else Progress()
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
        self.devprof_file = paths.single_file(workspace, self.dir, table_file(DEVICE_PROFILES))
        self.levels: list[int] = []  # bucket width (ns) of each pyramid level
        self.prepare_s = 0.0
        self.index_build_s: float | None = None  # None: the index came from the cache (or there are no events)
        self._rows: dict[tuple[str, str], list[Row]] = {}
        self._leaf_lock = threading.Lock()
        self._leaf_table_of: list[Leaf] | None = None  # the leaves the DuckDB leaf table holds
        self.stamp = stamp(self.meta_file)
        self.index: index.EventIndex | None = None
        self.coarse: coarse.CoarseLevel | None = None  # served until the index is ready
        self.index_error: str | None = None
        self._index_ready = threading.Event()
        self._index_gate = index_gate  # tests: hold the background build until set
        self.coarse_min_events = coarse_min_events
        self.first_paint = threading.Event()  # set once a coarse window or busy answer went out
        # what the tracks and the first paint were read from: "index" (the cache), "summary" (what view
        # wrote beside the events), "overview" (the one file view wrote for the whole profile), "events" (a
        # scan), "events+summary" (some processes each way), "none"
        self.first_paint_from = "index"
        self.overview_problem: str | None = None  # why the events overview was not used (one line)
        self._prepare()

    def wait_index(self) -> "Profile":
        """Wait until the index is built (at once when it came from the cache); a failed build is one
        line (OSError: a 500 answer)."""
        self.first_paint.set()  # someone needs the index now: no grace for a first paint
        self._index_ready.wait()
        if self.index_error is not None:
            raise OSError(f"building the event index failed: {self.index_error}")
        return self

    @property
    def index_ready(self) -> bool:
        return self._index_ready.is_set() and self.index_error is None

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of the workspace's connection (one per query: requests run on several threads)."""
        return self.con.cursor()

    def rows(self, mode: str, layout: str = DEFAULT_LAYOUT) -> list[Row]:
        """The tracks of a grouping mode and layout, in drawing order (cached: leaves never change)."""
        if (mode, layout) not in self._rows:
            self._rows[(mode, layout)] = build_rows(mode, self.leaves, self.counter_list, self.rank_of, self.nd_of,
                                                    layout, self.limits)
        return self._rows[(mode, layout)]

    @property
    def names(self) -> list[str]:
        """The profile's event names; ``leaf_name`` numbers each leaf's name in this list."""
        return self._names

    def rank(self, leaf: int) -> int:
        """The global rank of a leaf's process (-1 when not distributed)."""
        lf = self.leaves[leaf]
        return self.rank_of.get((lf.inst, lf.pid), -1)

    def process(self, inst: str, pid: int) -> dict[str, Any] | None:
        """The ProfileMetadata row of a process."""
        return next((m for m in self.meta if (m["instance_id"], int(m["process_id"])) == (inst, pid)), None)

    # ---------------------------------------------------------------- preparation
    def _prepare(self) -> None:
        """The part a first paint needs (metadata, leaves, counters and, on a cold open, the coarse
        level); the index is then loaded from the cache or built in a background thread."""
        t = time.perf_counter()
        self.progress.step("reading metadata")
        self._read_metadata()
        cache = self._cache_path()
        # the counters (one DuckDB query over every process's file, ~0.2 CPU-s at 512 processes) load
        # beside the leaves: DuckDB leaves the GIL, and on a loaded machine two threads get more of
        # the cores than one (decision 0185); leaving the block waits for them, whatever happened
        with ThreadPoolExecutor(1, thread_name_prefix=f"counters-{self.name}") as pool:
            counters = pool.submit(self._load_counters)
            idx = index.EventIndex.load(cache) if cache is not None else None
            # the leaf table travels with the cached index: no scan at all
            if idx is not None:
                self._set_leaves([Leaf(i, *r) for i, r in enumerate(idx.meta["leaves"])])
                self._prune_cache(cache)
            else:
                self._set_leaves(*self._scan_leaves())
            self.progress.step("loading counters")
            self._cstats = counters.result()
        self._set_extent()
        self.prepare_s = time.perf_counter() - t
        if idx is None and self.leaves and self.total_events < self.coarse_min_events:
            # small: the index takes about as long as the coarse paint would, so no coarse phase
            self.coarse = None
            idx = self._build_checked(cache)
            self._prune_cache(cache)
        if idx is not None or not self.leaves:
            self._set_index(idx)
        else:
            self.progress.coarse = True
            self.progress.settled.set()
            background.start(self._build_in_background, cache, name=f"index-{self.name}",
                             what=f"the index of {self.name}")

    def _set_leaves(self, leaves: list[Leaf], coarse_level: "coarse.CoarseLevel | None" = None) -> None:
        self.leaves, self.coarse = leaves, coarse_level
        self.total_events = sum(lf.n for lf in leaves)
        self._names = sorted({lf.name for lf in leaves})
        pos = {n: i for i, n in enumerate(self._names)}
        self.leaf_name = np.array([pos[lf.name] for lf in leaves], dtype=np.int64)
        self._rows = {}

    def _set_extent(self) -> None:
        """The profile's origin and end (events and counters) and the index's base."""
        cstats = self._cstats
        starts = [lf.mn for lf in self.leaves] + ([int(cstats[0])] if cstats[0] is not None else [])
        ends = [lf.mx for lf in self.leaves] + ([int(cstats[1])] if cstats[1] is not None else [])
        self.origin = min(starts) if starts else 0
        self.end = max(ends) if ends else self.origin
        self.duration = max(self.end - self.origin, 1)
        # index times are relative to the earliest event start; responses to the profile origin
        self.base = min(lf.mn for lf in self.leaves) if self.leaves else self.origin
        self.shift = self.base - self.origin

    def _build_checked(self, cache: Path | None) -> index.EventIndex:
        """The index from the cache or built. A summary that passed its checks but whose tracks are not
        the events' (damaged inside a page the checks do not read) fails the build's count check: the
        leaves are then read from the events and the build runs again (the browser's next tracks
        request sees them)."""
        try:
            return index.EventIndex.cached(cache, self._build_index)
        except ValueError:
            if self.first_paint_from == "events":
                raise
        self._set_leaves(*self._scan_leaves(use_summary=False))
        self._set_extent()
        return index.EventIndex.cached(cache, self._build_index)

    def _set_index(self, idx: index.EventIndex | None) -> None:
        if idx is not None and not self.index_ready:  # the leaves with their exact longest durations
            self.leaves = [Leaf(i, *r) for i, r in enumerate(idx.meta["leaves"])]
        self.levels = list(idx.levels) if idx is not None else []
        self.index = idx
        self.progress.step("ready")
        self.progress.settled.set()
        self._index_ready.set()

    def _build_in_background(self, cache: Path | None) -> None:
        """Build (or load, when another server just wrote it) the index, then switch to it."""
        try:
            if self._index_gate is not None:
                self._index_gate.wait()
            # let the first paint's requests (overview, tracks, windows, busy shares) have the cores
            # before the build takes them: they wait behind it otherwise, on a loaded 2-core machine
            # several seconds (a client asking nothing delays the build by the grace at most)
            self.first_paint.wait(FIRST_PAINT_GRACE_S)
            idx = self._build_checked(cache)
            self._prune_cache(cache)
            self._set_index(idx)
        except Exception as e:  # noqa: BLE001 - reported by /status and by the requests that wait
            first = one_line(e)
            self.index_error = self.progress.error = first
            self.progress.settled.set()
            self._index_ready.set()

    def _read_metadata(self) -> None:
        c = self.cursor()
        self.meta = records(c.execute(f"SELECT * FROM read_parquet({quote(self.meta_file)})")) if self.meta_file else []
        self.rank_of = {(m["instance_id"], int(m["process_id"])):
                        int(m.get("rank", -1) if m.get("rank") is not None else -1) for m in self.meta}
        self.nd_of = {(m["instance_id"], int(m["process_id"])): int(m.get("nd_idx") or 0) for m in self.meta}
        self.limits = memory_limits(self.meta)  # cgroup memory limits, drawn on memory tracks
        self.display_name = next((m.get("display_name") for m in self.meta if m.get("display_name")), self.name)
        # the grouping `view` was asked for (stored per process; one ingestion has one): the default mode
        prim, sec = (next((m.get(k) for m in self.meta if m.get(k)), None)
                     for k in ("system_trace_primary_group", "system_trace_secondary_group"))
        self.stored_grouping = {"primary": prim, "secondary": sec}
        self.default_mode = mode_of_grouping(prim, sec)

    def _cache_path(self) -> Path | None:
        if self.cache_dir is None or not self.ev_files:
            return None
        return self.cache_dir / f"{self.tag}-{self._fingerprint()}.idx"

    def _fingerprint(self) -> str:
        """The cache key: every event file's path, size and mtime, and what shapes the index."""
        h = hashlib.sha1()
        for _, _, f in self.ev_files:
            st = os.stat(f)
            h.update(f"{f}:{st.st_size}:{st.st_mtime_ns};".encode())
        h.update(f"{self.pyramid_min_events}:{index_build.FORMAT}".encode())
        return h.hexdigest()[:16]

    def _scan_leaves(self, use_summary: bool = True) -> tuple[list[Leaf], "coarse.CoarseLevel | None"]:
        """The leaf table and the coarse level from one aggregate per process (the index is not cached):
        over the summaries ``view`` wrote beside the events when they are the events files' (a few kB
        per process), else over the events (``ingest_summary``).

        The event group is an attribute of a leaf, not part of its key: a name has one group (the
        capture's type table), and the join that numbers events by leaf stays on the key's columns."""
        self.first_paint_from = "none"
        if not self.ev_files:
            return [], None
        got_ov = self._from_overview() if use_summary else None
        if got_ov is not None:
            return got_ov
        with ingest_summary.Scratch() as db:  # one database for this open's reads of summaries
            got, summarised, ext = self._from_summaries(db, use_summary)
        if ext is None:
            return [], None
        w, aligned = ext[3], ext[4]
        parts = list(self._parts().items())
        rest = [i for i in range(len(parts)) if i not in set(summarised)]
        self.first_paint_from = "+".join(x for x, n in (("events", rest), ("summary", summarised)) if n)
        # the others: one aggregate of the events per process, a few at a time (the same rows as one
        # query over every file, with progress to show on a cold open)
        with ThreadPoolExecutor(max(1, min(os.cpu_count() or 1, 4))) as pool:
            for k, part in enumerate(pool.map(lambda i: self._scan_part(*parts[i][0], parts[i][1], aligned, w, ext[2]),
                                              rest)):
                got.extend(part)
                self.progress.step("scanning events", len(summarised) + k + 1, len(parts))
        got.sort(key=lambda x: x[0][:6])
        leaves = [Leaf(i, *r) for i, (r, _) in enumerate(got)]
        return leaves, coarse.build(got, ext[0], w)

    def _from_overview(self) -> tuple[list[Leaf], "coarse.CoarseLevel"] | None:
        """The leaf table and the coarse level from the events overview ``view`` wrote for the whole
        profile (one file), when it is there and passes every check; None otherwise, after one
        warning when it is there but unusable (``overview``)."""
        f = paths.single_file(self.workspace, self.dir, table_file(EVENT_OVERVIEW))
        if f is None:
            return None
        parts = list(self._parts().items())
        try:
            rows, level, _ = overview.read_coarse(f, str(Path(f).parent / EVENTS), parts)
        except overview.Unusable as e:
            self.overview_problem = f"the events overview of {self.name} is not used: {e}"
            get_logger(__name__).warning(f"neuron-explorer: {self.overview_problem}")
            return None
        self.first_paint_from = "overview"
        self.progress.step("scanning events", len(parts), len(parts))
        return [Leaf(i, *r) for i, r in enumerate(rows)], level

    def _from_summaries(self, db: "ingest_summary.Scratch", use_summary: bool) -> tuple[list, list[int], tuple | None]:
        """The coarse rows of the processes whose summaries are their events', the indices of those
        processes, and (earliest start, latest end, longest duration, bucket width, aligned base);
        that last is None when there is no event."""
        cur = self.cursor()
        sums = ingest_summary.matching(self.ev_files, paths.table_files(self.workspace, self.dir, EVENT_SUMMARY), db) \
            if use_summary else {}
        ext4 = None
        try:  # (the columns matching's checks read: a failure means the files changed under us)
            # every process summarised: no event read before the first paint
            if sums and len(sums) == len(self.ev_files):
                ext4 = ingest_summary.extent(list(sums.values()), db)
            shift = ingest_summary.max_shift(list(sums.values()), db) if ext4 is None else ext4[3]
        except ingest_summary.DAMAGED:
            sums, shift = {}, 0
        ext = ext4[:3] if ext4 is not None else coarse.extent(cur, [f for _, _, f in self.ev_files])
        if ext is None:
            return [], [], None
        # buckets aligned to multiples of their width: whole summary buckets merge into them exactly
        w = max(coarse.bucket_width(max(ext[1] - ext[0], 1)), 1 << shift)
        aligned = ext[0] - ext[0] % w
        parts = list(self._parts().items())
        summarised = [i for i, (_, files) in enumerate(parts) if all(f in sums for f in files)]
        got: list = []
        self.progress.step("scanning events", 0, len(parts))
        if summarised:  # one query over every summary; a process whose summary is damaged where the
            # checks did not read gets None, and its events are scanned instead
            got_parts = ingest_summary.scan([[sums[f] for f in parts[i][1]] for i in summarised], aligned,
                                            w.bit_length() - 1, db)
            for i, cols in zip(summarised, got_parts):
                if cols is not None:
                    got.extend(coarse.split_part(*parts[i][0], cols, ext[2]))
            summarised = [i for i, cols in zip(summarised, got_parts) if cols is not None]
            self.progress.step("scanning events", len(summarised), len(parts))
        return got, summarised, (*ext, w, aligned)

    def _scan_part(self, inst: str, pid: int, files: list[str], aligned: int, w: int, max_duration: int) -> list:
        got = self.cursor().execute(coarse.scan_sql(files, aligned, w)).fetchnumpy()
        return coarse.split_part(inst, pid, got, max_duration)

    def _parts(self) -> dict[tuple[str, int], list[str]]:
        """The event files of each process."""
        parts: dict[tuple[str, int], list[str]] = {}
        for inst, pid, f in self.ev_files:
            parts.setdefault((inst, pid), []).append(f)
        return parts

    def leaf_table(self) -> str:
        """The name of this profile's leaf table in DuckDB (leaf, inst, pid, tid, nc, src, name), for the
        joins that number events by leaf: the index build's and argument search's.

        Why made on first use and not by the build: a profile reopened from a cached index (every
        restart of the server) builds nothing, and argument search then failed with "Table ... _leaves
        does not exist". Made again whenever the leaves were replaced (a damaged summary's leaves are
        read again from the events), so a join never sees another leaf numbering than the index's."""
        with self._leaf_lock:
            if self._leaf_table_of is not self.leaves:
                self._store_leaves()
                self._leaf_table_of = self.leaves
        return f"{self.tag}_leaves"

    def _store_leaves(self) -> None:
        """The leaf table in DuckDB, from an Arrow table (row-by-row inserts took ~0.2 CPU-s: it is
        made when a join first needs it, not before the first paint)."""
        import pyarrow as pa

        c = self.cursor()
        tag = self.tag
        cols = ("leaf", "inst", "pid", "tid", "nc", "src", "name")
        types = (pa.int32(), pa.string(), pa.int64(), pa.int64(), pa.int32(), pa.string(), pa.string())
        tbl = pa.table({k: pa.array([getattr(lf, k) for lf in self.leaves], type=t) for k, t in zip(cols, types)})
        c.register(f"{tag}_leaves_in", tbl)
        try:
            c.execute(f"CREATE OR REPLACE TABLE {tag}_leaves AS SELECT * FROM {tag}_leaves_in")
        finally:
            c.unregister(f"{tag}_leaves_in")

    def _load_counters(self) -> tuple:
        """Counters are small (samples every ~10-100 ms): kept in memory. Returns (min ts, max ts, count)."""
        c = self.cursor()
        tag = self.tag
        c.execute(f"DROP TABLE IF EXISTS {tag}_cnt")
        if self.cnt_files:
            c.execute(f"""CREATE TABLE {tag}_cnt AS
                          SELECT instance_id AS inst, process_id AS pid, ts, counter, value, unit
                          FROM read_parquet({files_sql([f for _, _, f in self.cnt_files])})
                          ORDER BY counter, inst, pid, ts""")
        else:
            c.execute(f"CREATE TABLE {tag}_cnt "
                      "(inst VARCHAR, pid BIGINT, ts BIGINT, counter VARCHAR, value DOUBLE, unit VARCHAR)")
        cstats = c.execute(f"SELECT min(ts), max(ts), count(*) FROM {tag}_cnt").fetchall()[0]
        self.counter_list = c.execute(f"SELECT DISTINCT inst, pid, counter, unit FROM {tag}_cnt "
                                      "ORDER BY ALL").fetchall()
        gap = c.execute(f"""SELECT max(d) FROM
                            (SELECT ts - lag(ts) OVER (PARTITION BY inst, pid, counter ORDER BY ts) AS d
                             FROM {tag}_cnt)""").fetchall()[0][0] if cstats[2] else 0
        self.counter_gap = int(gap or 0)
        return cstats

    def _prune_cache(self, keep: Path | None) -> None:
        """Remove this profile's caches for older versions of its files (or of the cache format), and
        the temporary directories of its builds whose process ended: at 100M events each is
        gigabytes. Unlinking files another server still maps is safe."""
        if keep is None or self.cache_dir is None:
            return
        try:
            stale = [x for x in self.cache_dir.iterdir() if x.name.startswith(self.tag + "-") and x != keep
                     and (x.name.endswith(".idx") or x.name.endswith(".parquet")  # .parquet: pre-index pyramids
                          or index.EventIndex.orphaned_build(x))]  # a build its server's exit cut short
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

    # ---------------------------------------------------------------- the index build
    def _flow_sql(self, part: str) -> str:
        """SQL for the flow ids of an event from ``SystemProfileEvents.flow_id`` of a process's part.

        The column is a list (a host call is in its core execution's flow and, when a framework region
        issued it, in the region's; the ranks of one collective share one); a plain integer column is
        read as a one-element list, and parts without the column have no flows.
        """
        try:
            desc = self.cursor().execute(f"DESCRIBE SELECT * FROM read_parquet({quote(part)})").fetchall()
        except duckdb.Error:
            return "[]::BIGINT[]"
        typ = next((str(r[1]).upper() for r in desc if r[0] == "flow_id"), None)
        if typ is None:
            return "[]::BIGINT[]"
        if typ.endswith("[]"):
            return "ev.flow_id::BIGINT[]"
        return "CASE WHEN ev.flow_id IS NULL THEN []::BIGINT[] ELSE [ev.flow_id::BIGINT] END"

    def _read_events(self, inst: str, pid: int, files: list[str]) -> tuple[np.ndarray, ...]:
        """(leaf, start, duration, id, first flow id, extra rows, extra flow ids) of one process's events,
        sorted by leaf, start (see :func:`neuron_explorer.ui.index_build.build_arrays`). The process is
        the part's (its directory), as in the leaf scan."""
        tab = self.cursor().sql(f"""
            SELECT l.leaf::INTEGER AS leaf, ev.start_ts AS s, (ev.end_ts - ev.start_ts)::BIGINT AS d,
                   coalesce(ev.id, -1)::BIGINT AS id, {self._flow_sql(files[0])} AS f
            FROM read_parquet({files_sql(files)}) ev
            JOIN (SELECT * FROM {self.leaf_table()} WHERE inst = {quote(inst)} AND pid = {int(pid)}) l
                 ON l.tid = coalesce(ev.thread_id, -1) AND l.nc = coalesce(ev.nc_idx, -1)
                 AND l.src = coalesce(ev.trace_event_source, '') AND l.name = ev.name""").to_arrow_table()
        leaf = index_build.column_np(tab.column("leaf"), np.int32)
        s = index_build.column_np(tab.column("s"), np.int64)
        first, xrow, xflow = index_build.split_flows(tab.column("f"))
        # sorting here beats ORDER BY in the query (~1.6x); parts are usually sorted by start already,
        # so a stable sort by leaf alone is often enough
        o = np.argsort(leaf, kind="stable")
        leaf, s = leaf[o], s[o]
        if bool(((s[1:] < s[:-1]) & (leaf[1:] == leaf[:-1])).any()):
            o2 = np.lexsort((s, leaf))
            o, leaf, s = o[o2], leaf[o2], s[o2]
        if len(xrow):  # the rows of further flow ids, renumbered in the sorted order
            inv = np.empty(len(o), dtype=np.int64)
            inv[o] = np.arange(len(o))
            xrow = inv[xrow]
        col = index_build.column_np
        return (leaf, s, col(tab.column("d"), np.int64)[o], col(tab.column("id"), np.int64)[o], first[o], xrow, xflow)

    def _event_chunks(self) -> Iterator[tuple[np.ndarray, ...]]:
        """Every process's events, read a few processes at a time.

        A process's part is often one row group, which DuckDB scans on one thread: read as many
        processes at once as there are cores, keeping at most that many answers in memory."""
        parts = self._parts()
        workers = max(1, min(os.cpu_count() or 1, 4))
        done = 0
        self.progress.step("building index", 0, len(parts))
        with ThreadPoolExecutor(workers) as pool:
            pending: list = []
            for (inst, pid), files in parts.items():
                pending.append(pool.submit(self._read_events, inst, pid, files))
                if len(pending) >= workers:
                    yield pending.pop(0).result()
                    done += 1
                    self.progress.step("building index", done, len(parts))
            while pending:
                yield pending.pop(0).result()
                done += 1
                self.progress.step("building index", done, len(parts))

    def _build_index(self, out_dir: Path | None) -> index.EventIndex:
        """One pass over the events, one process at a time (see ``_event_chunks``)."""
        self.leaf_table()
        leaves = self.leaves
        base = min(lf.mn for lf in leaves)
        ext = max(lf.mx for lf in leaves) - base
        levels = index_build.pyramid_levels(max(ext, 1), len(leaves), self.total_events) \
            if self.total_events >= self.pyramid_min_events else []
        t = time.perf_counter()
        exact: list[Leaf] = []

        def with_maxdur(md: list[int]) -> dict[str, Any]:
            # the scan gave each leaf's longest duration as a bound: the index build knows it exactly
            exact.extend(dataclasses.replace(lf, maxdur=m) for lf, m in zip(leaves, md))
            return {"leaves": [lf.to_list() for lf in exact]}

        idx = index.EventIndex.build([lf.n for lf in leaves], [lf.maxdur for lf in leaves], base, levels,
                                     self._event_chunks(), out_dir, extra=with_maxdur,
                                     on_level=lambda k: self.progress.step("building pyramid", k, len(levels)))
        self.index_build_s = time.perf_counter() - t
        return idx


def stamp(path: str | None) -> tuple[int, int, int] | None:
    """Identity of a profile's metadata file: a re-ingested profile gets a new one."""
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns) if st else None
