"""One side of a diff: the items of a ``view`` Parquet dataset, read with pyarrow only.

What is read (contracts.dataset names the tables and columns): from ``SystemProfileEvents`` the
graph executions (``nc_exec_running`` by ``model_name``), the collectives (``cc_running`` and
``cc_exec_barrier`` by op, group and bytes, their ranks matched by group, op and sequence number)
and the framework regions (``trace_event_source = framework``, by name); ``ProfileModels`` for each
graph's structure; ``ProfileMetadata`` for ranks; ``SystemProfileCounters`` for device memory.

The events table is read one file (one process) at a time, only the columns wanted (no
``pyarrow.dataset``: it would import pandas, a third of a second), so memory holds the compact
per-item arrays, never a whole table.  An unreadable file is a warning
naming it; the rest is still read.  Where ``view`` kept a file's diff items beside it
(``exporters.diff_items``) and they pass their checks, those are read instead of the events: the
same part, without the events or the step detector (docs/decisions/0163-diff-items-written-by-view.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from neuron_explorer.analysis import stepalign, steps as steps_mod
from neuron_explorer.analysis.occurrences import (  # noqa: F401 - (names a diff's readers used from here)
    COLLECTIVES,
    EXEC,
    FRAMEWORK,
    STEP_COLUMNS,
    STEP_TYPES,
    Acc,
    FilePart,
    int_column,
    one_line,
    pack_part,
    read_file,
    unpack_steps,
)
from neuron_explorer.analysis.packed import Packed, concat, concat_pieces, unpack
from neuron_explorer.contracts import dataset as dsc
from neuron_explorer.exporters import diff_items


class DatasetError(Exception):
    """The path is not a dataset ``view`` wrote, or nothing in it can be read."""


@dataclass
class Occurrences:
    """One item's occurrences on one side: the sample (``value``, ns) and where it is (process
    index, start and end on the aligned Unix-ns clock, event id) so that a viewer can jump to it.
    Sorted by start (a stable sort: ties in file order), unless ``order`` is given: then the arrays
    are in another order and ``order`` is their stable sort by start (a side's step table, whose
    millions of rows are not gathered into time order: ``StepTable``; an item's rows as read,
    ``spans``)."""

    value: np.ndarray
    start: np.ndarray
    end: np.ndarray
    held_proc: np.ndarray | None  # None: an event's process index is its id's high 32 bits (``proc``)
    ids: np.ndarray
    order: np.ndarray | TimeOrder | None = None
    distinct: np.ndarray | None = None  # the distinct process indices, when already known
    ranked: Any = None  # ``analysis.compare.order`` of ``value``, once found (``diff.report``)

    @property
    def proc(self) -> np.ndarray:
        """Each row's process index: the one held, else the id's high 32 bits (an event id is its
        process index << 32 plus its number there: ``read_file``'s and the diff items' ``proc``),
        made when asked for instead of concatenated and held for millions of rows (decision 0199)."""
        return np.asarray(self.ids) >> 32 if self.held_proc is None else self.held_proc

    def processes(self) -> np.ndarray:
        """The distinct process indices of the rows (``distinct`` when already known)."""
        return distinct_procs(self.proc) if self.distinct is None else self.distinct

    def proc_at(self, i: int) -> int:
        """``int(proc[i])``, without the whole column."""
        return int(self.ids[i]) >> 32 if self.held_proc is None else int(self.held_proc[i])

    @staticmethod
    def build(value, start, end, proc, ids) -> Occurrences:
        order = np.argsort(start, kind="stable")
        return Occurrences(*(np.asarray(a, dtype=np.int64)[order] for a in (value, start, end, proc, ids)))

    @staticmethod
    def spans(start: np.ndarray, end: np.ndarray, proc: np.ndarray | None, ids: np.ndarray,
              distinct: np.ndarray | None = None, value: np.ndarray | None = None) -> Occurrences:
        """``build(end - start, start, end, proc, ids)`` as the rows a diff reads of it, without
        gathering them: the arrays stay in the order given, with ``order`` (their stable sort by
        start) where the starts are not in order.  An item's rows come one process after another
        (8M executions of one graph a side of the 20M bench pair): gathering them into time order
        was half of the cost of making it (decision 0192).  ``proc`` None: the ids' high bits;
        ``value``: ``end - start`` when already made (then ``end`` and ``ids`` may be
        ``PieceColumn``s, kept as they are)."""
        start = np.asarray(start, dtype=np.int64)
        if value is None:
            end, ids = (np.asarray(a, dtype=np.int64) for a in (end, ids))
        if proc is not None:
            proc = np.asarray(proc, dtype=np.int64)
        return Occurrences(end - start if value is None else value, start, end, proc, ids, time_order(start),
                           distinct=distinct)

    def in_time(self, at: np.ndarray) -> np.ndarray:
        """The indices of the ``at``-th occurrences in time order."""
        return at if self.order is None else self.order[at]

    def __len__(self) -> int:
        return len(self.value)


def time_order(start: np.ndarray) -> TimeOrder | None:
    """The stable sort by ``start`` (int64) of rows, as a diff reads it (``TimeOrder``); None where
    the rows are already in start order."""
    start = np.asarray(start)
    if len(start) < 2:
        return None
    breaks = np.flatnonzero(start[1:] < start[:-1])
    return None if not len(breaks) else TimeOrder(start, breaks + 1)


class TimeOrder:
    """``numpy.argsort(start, kind="stable")`` read at a few positions without sorting every row
    (decision 0201).  A diff reads an item's time order at the 512 positions the bootstrap keeps
    (``compare.thin``) and at its first (``report._at``); its rows come as runs already in start
    order (one process, or one file, after another: ``breaks``, where each run begins), so the
    rows at the positions are found from a count of the starts' buckets (``_by_buckets``), or
    by one partition of the starts and a binary search of each run (``_by_runs``; rows of equal
    start: in row order, i.e. the runs in order, then within the run).  Anything else (many runs,
    many positions, ``numpy.asarray``) gets the whole sort, made once."""

    MAX_RUNS = 1024  # beyond it (or below SMALL rows): the whole sort
    SMALL = 1 << 15

    def __init__(self, start: np.ndarray, breaks: np.ndarray) -> None:
        self.start = start
        self.bounds = np.concatenate(([0], np.asarray(breaks, dtype=np.int64), [len(start)]))
        self._whole: np.ndarray | None = None
        self._pos = self._rows = np.zeros(0, dtype=np.int64)  # positions read so far, sorted; their rows

    def __len__(self) -> int:
        return len(self.start)

    def whole(self) -> np.ndarray:
        if self._whole is None:
            self._whole = np.argsort(self.start, kind="stable")
        return self._whole

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        w = self.whole()
        return w if dtype is None else w.astype(dtype, copy=False)

    def __getitem__(self, key):
        n = len(self.start)
        if isinstance(key, slice):
            pos = np.arange(*key.indices(n), dtype=np.int64)
        elif isinstance(key, (int, np.integer)):
            return self[np.array([key], dtype=np.int64)][0]
        else:
            pos = np.asarray(key)
        if (self._whole is not None or pos.ndim != 1 or pos.dtype.kind not in "iu" or n < self.SMALL
                or len(self.bounds) - 1 > self.MAX_RUNS or len(pos) > n // 64):
            return self.whole()[key]
        pos = pos.astype(np.int64)
        if len(pos) and (int(pos.min()) < -n or int(pos.max()) >= n):
            return self.whole()[key]  # (numpy's IndexError)
        pos = np.where(pos < 0, pos + n, pos)
        return self._select(pos)

    def _select(self, pos: np.ndarray) -> np.ndarray:
        """The rows at positions ``pos`` (any order): those found before are remembered (a step table's
        order is read for each of its columns, at the same positions)."""
        if not len(pos):
            return np.zeros(0, dtype=np.int64)
        new = np.setdiff1d(pos, self._pos, assume_unique=False)
        if len(new):
            pos_all = np.concatenate((self._pos, new))
            rows_all = np.concatenate((self._rows, self._find(new)))
            o = np.argsort(pos_all)
            self._pos, self._rows = pos_all[o], rows_all[o]
        return self._rows[np.searchsorted(self._pos, pos)]

    def _find(self, uk: np.ndarray) -> np.ndarray:
        """The rows at the distinct sorted positions ``uk``: by buckets of start (``_by_buckets``)
        where they are few enough, else by a partition (``_by_runs``)."""
        got = self._by_buckets(uk)
        return self._by_runs(uk) if got is None else got

    def _by_buckets(self, uk: np.ndarray) -> np.ndarray | None:
        """The rows at the distinct sorted positions ``uk`` from buckets of start (the starts' high
        bits, about eight rows a bucket): one count of each bucket tells which bucket holds each
        position and where in it; only the rows of those buckets are sorted (a stable sort of
        their starts, taken in row order: the whole stable sort's order among them).  Three passes
        over the starts instead of a partition at 512 positions (a third of its CPU on 4M rows,
        decision 0209).  None where those rows would be many (starts bunched on a few values: the
        partition then) or the starts span more than 2**62."""
        s, b = self.start, self.bounds
        n = len(s)
        lo, hi = int(s[b[:-1]].min()), int(s[b[1:] - 1].max())  # (each run in start order)
        if hi - lo >= 1 << 62:
            return None
        shift = max(0, (hi - lo).bit_length() - max(n >> 3, 1).bit_length())
        bucket = s - lo
        bucket >>= shift  # (monotone in the start)
        counts = np.bincount(bucket)
        upto = np.cumsum(counts)
        at = np.searchsorted(upto, uk, side="right")  # the bucket of each position
        need = np.zeros(len(counts), dtype=bool)
        need[at] = True
        needed = np.flatnonzero(need)
        kept = counts[needed]
        if int(kept.sum()) > max(n >> 4, 64 * len(uk) + 1024):
            return None
        rows = np.flatnonzero(need[bucket])  # (ascending: ties keep row order in the stable sort)
        del bucket
        in_order = rows[np.argsort(s[rows], kind="stable")]
        first = np.cumsum(kept) - kept  # where each needed bucket's rows begin in ``in_order``
        return in_order[first[np.searchsorted(needed, at)] + (uk - (upto[at] - counts[at]))]

    def _by_runs(self, uk: np.ndarray) -> np.ndarray:
        """The rows at the distinct sorted positions ``uk`` by a partition of the starts and a
        binary search of each run."""
        vals = np.partition(self.start, uk)[uk]  # the start at each position of the sorted order
        b = self.bounds
        less = np.zeros(len(uk), dtype=np.int64)
        left = np.empty((len(b) - 1, len(uk)), dtype=np.int64)
        equal = np.empty_like(left)
        for j in range(len(b) - 1):
            run = self.start[b[j]:b[j + 1]]
            lo = np.searchsorted(run, vals, "left")
            left[j] = lo
            equal[j] = np.searchsorted(run, vals, "right") - lo
            less += lo
        d = uk - less  # which of the rows of that start (0: the first in row order)
        cum = np.cumsum(equal, axis=0)
        j = np.argmax(cum > d, axis=0)
        col = np.arange(len(uk))
        before = cum[j, col] - equal[j, col]
        rows = b[j] + left[j, col] + (d - before)
        return rows


@dataclass
class StepTable:
    """Every step of every process of a side as columns (``cols``: number, rank, proc, start_ns,
    end_ns and ``STEP_COLUMNS``), one process after another in file order, each as the step
    detector gave it; ``order``: the stable sort of all rows by start (the time order a sample is
    thinned in; of the rows as near the median, ``at`` is the first in it).  The rows are not gathered into time
    order: the figures a diff reads of a whole column do not depend on the order, and gathering
    15 columns of millions of rows was a quarter of a 20M-event diff
    (docs/decisions/0168-diff-at-20m.md).  ``segments``: each process's (process index, rank,
    first row, end row)."""

    cols: dict[str, Any]  # numpy arrays; ``_READ_IN_PLACES``' columns ``PieceColumn``s
    order: np.ndarray | TimeOrder | None  # None: the rows are in start order
    segments: list[tuple[int, int, int, int]]

    def __len__(self) -> int:
        return len(self.cols["start_ns"])

    def occurrences(self, col: str, distinct: np.ndarray | None = None) -> Occurrences:
        c = self.cols
        return Occurrences(c[col], c["start_ns"], c["end_ns"], c["proc"], c["number"], self.order, distinct=distinct)

    def rank_rows(self) -> dict[int, np.ndarray | slice]:
        """Each rank's rows in time order (the stable sort by start of that rank's rows): a slice
        where the rank is one process whose steps are in start order, else indices."""
        by_rank: dict[int, list[tuple[int, int]]] = {}
        for _proc, rank, lo, hi in self.segments:
            by_rank.setdefault(rank, []).append((lo, hi))
        start = self.cols["start_ns"]
        out: dict[int, np.ndarray | slice] = {}
        for rank, segs in by_rank.items():
            if len(segs) == 1:
                lo, hi = segs[0]
                if hi - lo < 2 or (start[lo + 1:hi] >= start[lo:hi - 1]).all():
                    out[rank] = slice(lo, hi)
                    continue
            rows = np.concatenate([np.arange(lo, hi) for lo, hi in segs])  # (ascending: ties stay in row order)
            out[rank] = rows[np.argsort(start[rows], kind="stable")]
        return out


@dataclass
class Process:
    instance_id: str
    process_id: int
    rank: int
    session: str = ""


@dataclass
class Side:
    """Everything a diff needs of one profile (any number of processes, ranks and hosts)."""

    path: str
    processes: dict[int, Process] = field(default_factory=dict)  # process_index -> process
    graphs: dict[str, Occurrences] = field(default_factory=dict)
    models: dict[str, dict] = field(default_factory=dict)  # graph name -> ProfileModels facts (first version)
    versions: dict[str, set[str]] = field(default_factory=dict)  # graph name -> signatures compiled
    compile_ns: dict[str, int] = field(default_factory=dict)  # graph name -> summed compile time
    compiles: dict[str, Occurrences] = field(default_factory=dict)  # graph name -> its model_load events
    collectives: dict[tuple[str, str, int], Occurrences] = field(default_factory=dict)
    regions: dict[str, Occurrences] = field(default_factory=dict)
    region_graph: dict[str, str | None] = field(default_factory=dict)  # region -> the one graph it wraps
    memory_peak: dict[int, int] = field(default_factory=dict)  # process index -> peak device bytes
    memory_level: dict[int, int] = field(default_factory=dict)  # process index -> 90th percentile of samples
    # process index -> how far the level moves within the run: |level of the first half of the samples
    # - level of the second half| (the run measured against itself)
    memory_noise: dict[int, int] = field(default_factory=dict)
    # every step of every process as columns (``StepTable``); the step detector's methods found
    step_table: StepTable = field(default_factory=lambda: _step_table(None, {}))
    step_methods: set[str] = field(default_factory=set)
    events: int = 0
    warnings: list[str] = field(default_factory=list)
    # what slowed the reading but changed nothing in the diff (diff items that could not be used):
    # said on stderr, not in the document, which is the same either way
    notes: list[str] = field(default_factory=list)
    items_files: int = 0  # events files whose diff items were read instead of them

    def rank_of(self, proc: int) -> int:
        p = self.processes.get(int(proc))
        return p.rank if p is not None else -1


def _strings(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A (dictionary) string column as a numpy object array, None for nulls."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks else pa.array([], pa.string())
    if pa.types.is_dictionary(col.type):
        col = col.cast(pa.string())
    return np.asarray(col.to_pylist(), dtype=object)  # (to_numpy imports pandas)


def read_side(path: str, engine=None) -> Side:
    """Read the dataset at ``path`` (a directory ``view`` wrote) into a ``Side``.  ``engine``: a
    ``view`` engine (``pipeline.LocalEngine`` with worker processes, ``cluster.DaskEngine``) whose
    workers read the events files (``read_part``); None: in this process, one after another."""
    return open_side(path, engine).read()


def open_side(path: str, engine=None) -> SideReading:
    """The dataset at ``path`` checked, its metadata and models read, and its events files asked
    for: on a Dask cluster they are read from now on (``cluster.DaskEngine.stream``), so that the
    workers read one side while this process merges the other (``SideReading.read``)."""
    if not os.path.isdir(path):
        raise DatasetError(f"{path}: not a directory")
    if not os.path.isdir(os.path.join(path, dsc.EVENTS)):
        raise DatasetError(f"{path}: no {dsc.EVENTS} table (not a Parquet dataset written by neuron-explorer view)")
    side = Side(path)
    _read_metadata(side)
    _read_models(side)
    root = os.path.join(side.path, dsc.EVENTS)
    files = table_files(root)
    kinds = {n: str(m.get("kind") or "") for n, m in side.models.items()}
    items = os.path.join(side.path, dsc.DIFF_ITEMS)
    if engine is None or len(files) < 2:
        parts: Iterable[FilePart] = (read_part(p, root, items, kinds) for p in files)
    elif hasattr(engine, "stream"):
        parts = engine.stream(read_part_packed, files, root, items, kinds)
    else:
        parts = engine.map(read_part_packed, files, _NoProgress(), root, items, kinds)
    return SideReading(side, files, parts, engine)


@dataclass
class SideReading:
    """A side whose events files are being read (``open_side``): ``read`` merges their parts, in
    file order, and reads the device memory."""

    side: Side
    files: list[str]
    parts: Iterable[FilePart]
    engine: Any = None

    def read(self) -> Side:
        _read_events(self.side, self.files, self.parts, self.engine)
        _read_memory(self.side)
        return self.side


def table_files(root: str) -> list[str]:
    """The Parquet files of a partitioned table (``<Table>/<key>=<v>/<key>=<v>/*.parquet``), sorted;
    symlinks and anything else are not followed."""
    out = []
    for top, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        out += [os.path.join(top, n) for n in sorted(names)
                if n.endswith(".parquet") and os.path.isfile(os.path.join(top, n))
                and not os.path.islink(os.path.join(top, n))]
    return out


def _single(side: Side, table: str, columns: list[str]) -> pa.Table | None:
    f = os.path.join(side.path, dsc.table_file(table))
    if not os.path.exists(f):
        return None
    try:
        t = pq.ParquetFile(f).read(use_threads=False)  # (read_table imports pyarrow.dataset and pandas)
    except (OSError, pa.ArrowException) as e:
        side.warnings.append(f"{f}: unreadable ({one_line(e)}); skipped")
        return None
    missing = [c for c in columns if c not in t.column_names]
    if missing:
        side.warnings.append(f"{f}: no column {', '.join(missing)}; skipped")
        return None
    return t


def _read_metadata(side: Side) -> None:
    t = _single(side, dsc.METADATA, ["instance_id", "process_id", "rank", "process_index"])
    if t is None:
        return
    sess = t.column("session").to_pylist() if "session" in t.column_names else [""] * t.num_rows
    for inst, pid, rank, ix, s in zip(t.column("instance_id").to_pylist(), t.column("process_id").to_pylist(),
                                      t.column("rank").to_pylist(), t.column("process_index").to_pylist(), sess):
        if ix is not None:
            side.processes[int(ix)] = Process(str(inst), int(pid or 0), -1 if rank is None else int(rank), s or "")


def _read_models(side: Side) -> None:
    t = _single(side, dsc.MODELS, ["model_name"])
    if t is None:
        return
    for row in t.to_pylist():
        name = row.get("model_name")
        if not name:
            continue
        side.models.setdefault(name, {k: row.get(k) for k in ("kind", "num_nodes", "signature", "backend",
                                                              "graph_hash", "source_location")})
        side.versions.setdefault(name, set()).add(str(row.get("signature") or ""))
        side.compile_ns[name] = side.compile_ns.get(name, 0) + int(row.get("compile_ns") or 0)


class _NoProgress:
    def step(self) -> None:
        pass

    def within(self, fraction: float) -> None:
        pass


def _read_events(side: Side, files: list[str], parts: Iterable[FilePart], engine=None) -> None:
    root = os.path.join(side.path, dsc.EVENTS)
    graphs, regions, colls, loads = Acc(), Acc(), Acc(), Acc()
    region_links: dict[str, set] = {}
    steps: dict[int, steps_mod.Steps] = {}
    read = 0
    notes: list[str] = []
    for part in parts:  # (in file order: the same arrays whoever read them)
        if part.note is not None:
            notes.append(part.note)
        if part.error is not None:
            side.warnings.append(part.error)
            continue
        unpack_steps(part)  # (a worker's part: its columns packed, ``read_part_packed``)
        for st in part.steps.values():  # a figure all zero here is zeros in the table: let go now (decision 0205)
            for k in [k for k, c in st.columns.items() if _zero(c)]:
                del st.columns[k]
        side.events += part.events
        side.items_files += part.from_items
        read += 1
        for acc, got in ((graphs, part.graphs), (regions, part.regions), (colls, part.colls), (loads, part.loads)):
            for key, pieces in got.items():
                acc.parts.setdefault(key, []).extend(pieces)
        for name, links in part.region_links.items():
            region_links.setdefault(name, set()).update(links)
        steps.update(part.steps)
    if files and not read:
        where = "" if engine is None or getattr(engine, "local", True) else \
            " by the cluster's workers (do they see this path? put it on storage they share: --work-dir)"
        raise DatasetError(f"{root}: no events file could be read{where}")
    if notes:
        more = f" (and {len(notes) - 1} more events files' likewise)" if len(notes) > 1 else ""
        side.notes.append(notes[0] + more)
    side.step_methods = {st.method for st in steps.values() if len(st)}
    _align_numbers(side, steps, colls)
    side.step_table = _step_table(side, steps)
    del steps
    for name, (start, end, ids, value), distinct in _spans(graphs):
        side.graphs[name] = Occurrences.spans(start, end, None, ids, distinct, value)
    for name, (start, end, ids, value), distinct in _spans(loads):
        side.compiles[name] = Occurrences.spans(start, end, None, ids, distinct, value)
    for name, (start, end, ids, value), distinct in _spans(regions):
        side.regions[name] = Occurrences.spans(start, end, None, ids, distinct, value)
        links = region_links.get(name, set())
        side.region_graph[name] = next(iter(links)) if len(links) == 1 and None not in links else None
    _collectives(side, colls)


def _spans(acc: Acc):
    """``acc.items()`` of pieces (start, end, proc, ids) without their process column: each key's
    (start, end, ids) concatenated and the distinct process indices of its pieces (sorted).  A
    piece's process index is its ids' high 32 bits (``Occurrences.proc``): the whole column is not
    concatenated, and the distinct indices are found per piece (one file's rows, most often one
    process: a comparison, no count) instead of over millions of rows."""
    for key in list(acc.parts):
        pieces = acc.parts.pop(key)
        distinct = np.unique(np.concatenate([distinct_procs(unpack(p[2])) for p in pieces]))
        if len(pieces) > 1 and not any(isinstance(c, Packed) for p in pieces for c in (p[1], p[3])):
            # ends and ids kept as their pieces (a diff reads one row of them: ``report._at``), the
            # lengths written piece by piece: two columns of millions of rows not concatenated
            start = concat([p[0] for p in pieces])
            value = np.empty(len(start), dtype=np.int64)
            lo = 0
            for p in pieces:
                hi = lo + len(p[1])
                np.subtract(np.asarray(p[1], dtype=np.int64), start[lo:hi], out=value[lo:hi])
                lo = hi
            yield key, (start, PieceColumn([p[1] for p in pieces]), PieceColumn([p[3] for p in pieces]), value), \
                distinct
        else:
            yield key, (*concat_pieces([(p[0], p[1], p[3]) for p in pieces]), None), distinct


class PieceColumn:
    """An int64 column kept as its pieces, one after another: one row (``[i]``, an int) is read from
    its piece, a slice within one piece is a view of it, an index array is gathered piece by piece
    (decision 0205); anything else (``numpy.asarray``, a slice across pieces) sees the whole column,
    concatenated then (decision 0199)."""

    dtype = np.dtype(np.int64)

    def __init__(self, pieces: list[np.ndarray]) -> None:
        self.pieces = pieces
        self.ends = np.cumsum([len(p) for p in pieces])

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = np.concatenate([np.asarray(p, dtype=np.int64) for p in self.pieces]) if self.pieces \
            else np.zeros(0, dtype=np.int64)
        return whole if dtype is None else whole.astype(dtype, copy=False)

    def __getitem__(self, i):
        if isinstance(i, (int, np.integer)):
            n = len(self)
            j = int(i) + n if i < 0 else int(i)
            if not 0 <= j < n:
                raise IndexError(i)
            k = int(np.searchsorted(self.ends, j, side="right"))
            return np.int64(self.pieces[k][j - (int(self.ends[k - 1]) if k else 0)])
        if isinstance(i, slice) and len(self.pieces):
            a, b, step = i.indices(len(self))
            k = int(np.searchsorted(self.ends, a, side="right"))
            first = int(self.ends[k - 1]) if k else 0
            if step == 1 and a < b and k < len(self.pieces) and b <= int(self.ends[k]):
                return np.asarray(self.pieces[k], dtype=np.int64)[a - first:b - first]
        if isinstance(i, np.ndarray) and i.ndim == 1 and i.dtype.kind in "iu" and len(self.pieces):
            return self._gather(i)
        return np.asarray(self)[i]

    def _gather(self, idx: np.ndarray) -> np.ndarray:
        """``numpy.asarray(self)[idx]`` read from the pieces (the same values, errors and order)."""
        n = len(self)
        j = idx.astype(np.int64)
        j = np.where(j < 0, j + n, j)
        if len(j) and (int(j.min()) < 0 or int(j.max()) >= n):
            raise IndexError(f"index out of bounds for a column of {n}")
        k = np.searchsorted(self.ends, j, side="right")
        out = np.empty(len(j), dtype=np.int64)
        for u in np.unique(k).tolist():
            m = k == u
            out[m] = np.asarray(self.pieces[u], dtype=np.int64)[j[m] - (int(self.ends[u - 1]) if u else 0)]
        return out

    def __rshift__(self, bits: int) -> np.ndarray:
        return np.asarray(self) >> bits


def distinct_procs(proc: np.ndarray) -> np.ndarray:
    """The distinct process indices of a sample (int64): one (no hash), small indices by a count
    of at most ``1 << 16`` (a constant, whatever the file says), else ``numpy.unique``."""
    proc = np.asarray(proc, dtype=np.int64)
    if not len(proc) or (proc == proc[0]).all():
        return proc[:1]
    if int(proc.min()) >= 0 and int(proc.max()) < (1 << 16):
        return np.flatnonzero(np.bincount(proc))
    return np.unique(proc)


def read_part(path: str, events_root: str, items_root: str, kinds: dict[str, str]) -> FilePart:
    """One events file's ``FilePart``: from the diff items ``view`` wrote beside it when they are
    there and pass their checks (``exporters.diff_items``: the same part, without reading the
    events), else ``read_file`` of the events.  Items that are there but cannot be used leave a
    one-line ``note``; none at all (an older ``view``, another writer) is no problem."""
    ip = os.path.join(items_root, os.path.relpath(path, events_root))
    note = None
    if os.path.isfile(ip) and not os.path.islink(ip):
        try:
            return diff_items.read(ip, path, kinds)
        except diff_items.Unusable as e:
            note = f"{ip}: diff items not used ({e}); its events file read instead"
    part = read_file(path, *diff_items.model_args(kinds))
    part.note = note
    return part


def read_part_packed(path: str, events_root: str, items_root: str, kinds: dict[str, str]) -> FilePart:
    """``read_part`` on a worker: the part's columns packed for the trip back (``pack_part``; the
    merge widens them again, the same int64 values)."""
    return pack_part(read_part(path, events_root, items_root, kinds))


def _align_numbers(side: Side, steps: dict[int, steps_mod.Steps], colls: Acc) -> None:
    """The side's step numbers tied across its ranks by their collectives (``analysis.stepalign``):
    a rank whose capture lost its first steps is numbered as the others, and a note says so."""
    spans = {p: (st.number, st.start_ns, st.end_ns) for p, st in steps.items() if len(st)}
    for key in list(colls.parts):  # each collective's columns concatenated once, here, for ``_collectives`` too
        nbytes, seq, rank, start, end, ids = concat_pieces([p[:5] + p[6:] for p in colls.parts[key]])
        colls.parts[key] = [(nbytes, seq, rank, start, end, None, ids)]  # (no process column: the ids' high bits)
    cols = ((g, o, pieces[0][1], pieces[0][3], pieces[0][6] >> 32)  # (a process index: its ids' high bits)
            for (o, g), pieces in colls.parts.items())
    anchors = stepalign.process_anchors(cols, spans)
    procs = sorted(spans, key=lambda p: (side.rank_of(p), p))
    moved = []
    for p, d in zip(procs, stepalign.offsets([steps[p].numbered for p in procs], [anchors.get(p) for p in procs])):
        if d:
            steps[p].number = steps[p].number + d
            moved.append(f"rank {side.rank_of(p)} by {d:+d}")
    if moved:
        more = f" and {len(moved) - 5} more" if len(moved) > 5 else ""
        side.notes.append(f"step numbers shifted to agree with the collectives' sequence numbers (a capture that "
                          f"lost its first steps): {', '.join(moved[:5])}{more}")


# step columns a diff reads only in places (a row, a rank's rows, the per-step table's pairs), never
# whole: kept as the processes' pieces (``PieceColumn``), not concatenated (decision 0205)
_READ_IN_PLACES = ("end_ns", "own_ns", "collective_ns")


def _step_table(side: Side | None, steps: dict[int, steps_mod.Steps]) -> StepTable:
    """Every step of every process as columns (``StepTable``), one process after another; each
    process's figures let go once they are in (held once, not twice)."""
    sts = [(proc, st) for proc, st in steps.items() if len(st)]
    names = ("number", "rank", "proc", "start_ns", "end_ns") + STEP_COLUMNS
    segments, lo = [], 0
    for proc, st in sts:
        segments.append((int(proc), side.rank_of(proc) if side is not None else -1, lo, lo + len(st)))
        lo += len(st)
    if not sts:
        z = np.zeros(0, dtype=np.int64)
        return StepTable({k: z for k in names}, None, [])
    lengths = [hi - first for _p, _r, first, hi in segments]  # (constant per process: one repeat each)
    # rank and process index as int32 (half the pages of int64; every figure made of them is the
    # same: a key widens them, a row's index is read as an int)
    out: dict[str, Any] = {"rank": np.repeat(np.array([seg[1] for seg in segments], dtype=np.int32), lengths),
           "proc": np.repeat(np.array([seg[0] for seg in segments], dtype=np.int32), lengths)}
    for k in names[:1] + names[3:]:
        cols: list[np.ndarray | Packed | None] = []
        for _proc, st in sts:
            c: np.ndarray | Packed | None
            if k == "number":
                c = st.number
            elif k == "start_ns":
                c = st.start_ns
            elif k == "end_ns":
                c = st.end_ns
            else:
                c = st.columns.pop(k) if k in st.columns else None
            cols.append(c if c is None or isinstance(c, Packed) else np.asarray(c, dtype=np.int64))
        if k in STEP_COLUMNS and all(_zero(c) for c in cols):
            # a figure no step has (a part of the breakdown the profile never shows: four of ten at
            # 20M): fresh zero pages, not millions of zeros copied into written ones
            out[k] = np.zeros(lo, dtype=np.int64)
        elif k in _READ_IN_PLACES:
            out[k] = PieceColumn([np.zeros(b - a, dtype=np.int64) if c is None else unpack(c)
                                  for c, (_p, _r, a, b) in zip(cols, segments)])
        else:
            out[k] = concat([np.zeros(b - a, dtype=np.int64) if c is None else c
                             for c, (_p, _r, a, b) in zip(cols, segments)])
    return StepTable(out, time_order(out["start_ns"]), segments)


def _zero(c: np.ndarray | Packed | None) -> bool:
    """Every value of a step column's piece is 0 (None: a figure the detector did not give)."""
    if c is None:
        return True
    if isinstance(c, Packed):
        return c.narrow is None and c.base == 0 and c.ref < 0
    return not c.any()


def _collectives(side: Side, colls: Acc) -> None:
    """Each collective's cost by (op, group, bytes): per instance (its ranks matched by sequence
    number), the time from the last rank's entry to the first rank's exit.  Waiting for a late rank
    is left out (that is the straggler's, seen in its own work per step), and so is the time a
    blocked rank takes to be scheduled again once the data is there (on a busy host that is the
    scheduler's, not the network's); a collective seen on one rank is its own duration."""
    for (op, group) in list(colls.parts):  # (the process column left out: the ids' high bits)
        pieces = colls.parts.pop((op, group))
        if len(pieces) == 1 and not any(isinstance(c, Packed) for c in pieces[0]):  # (``_align_numbers``')
            nbytes, seq, _rank, start, end, _proc, ids = pieces[0]
        else:
            nbytes, seq, _rank, start, end, ids = concat_pieces([p[:5] + p[6:] for p in pieces])
        del pieces
        if not len(seq):
            continue
        key = seq * 1_000_003 + nbytes if (seq >= 0).all() else np.arange(len(seq))
        # one stable sort by instance (the ranks' runs are each in sequence order: a merge), each
        # instance's latest entry and earliest exit reduced over its rows; the entry of the last rank
        # to enter stands for the instance (where a viewer jumps to): of equal entries, the one
        # latest in file order
        o = np.argsort(key, kind="stable")
        k = key[o]
        first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        s_o = start[o]
        last_start = np.maximum.reduceat(s_o, first)
        first_end = np.minimum.reduceat(end[o], first)
        latest = s_o == np.repeat(last_start, np.diff(np.r_[first, len(k)]))
        last_of = o[np.maximum.reduceat(np.where(latest, np.arange(len(k)), -1), first)]
        inst_bytes = nbytes[last_of]
        for b in np.unique(inst_bytes):
            m = inst_bytes == b
            # (the span's length is the transfer: max(first_end - last_start, 0))
            side.collectives[(op, group, int(b))] = Occurrences.spans(
                last_start[m], np.maximum(first_end[m], last_start[m]), None, ids[last_of][m])


def _floats(col: pa.ChunkedArray) -> np.ndarray:
    """A float64 column as numpy, nulls as 0, from its buffers (``to_numpy`` imports pandas)."""
    a = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    n, off = len(a), a.offset
    bufs = a.buffers()
    if bufs[1] is None:
        return np.zeros(n)
    v = np.frombuffer(bufs[1], dtype=np.float64, count=off + n)[off:]
    if not a.null_count:
        return v
    valid = np.unpackbits(np.frombuffer(bufs[0], dtype=np.uint8), bitorder="little", count=off + n)[off:]
    return np.where(valid.astype(bool), v, 0.0)


def _read_memory(side: Side) -> None:
    """Device memory per process (the sum of its ``device_mem.*`` counters at each sample time): its
    peak, the 90th percentile of the samples, the level it holds (a spike one sample caught is in the
    peak, not in the level), and how much that level differs between the run's two halves (where the
    samples fall within the steps moves it: its noise)."""
    root = os.path.join(side.path, dsc.COUNTERS)
    parts = []
    for path in table_files(root):
        try:
            pf = pq.ParquetFile(path)
            missing = {"counter", "instance_id", "process_id", "ts", "value"} - set(pf.schema_arrow.names)
            if missing:
                raise ValueError(f"no column {', '.join(sorted(missing))}")
            t = pf.read(columns=["counter", "instance_id", "process_id", "ts", "value"], use_threads=False)
            keep = pc.starts_with(t.column("counter").cast(pa.string()), dsc.DEVICE_MEMORY_PREFIX)
            t = t.filter(keep).drop_columns(["counter"])  # (a null ``keep`` drops the row)
        except (OSError, ValueError, pa.ArrowException) as e:
            side.warnings.append(f"{path}: unreadable ({one_line(e)}); its memory samples skipped")
            continue
        if t.num_rows:
            parts.append(t.cast(pa.schema([("instance_id", pa.string()), ("process_id", pa.int64()),
                                           ("ts", pa.int64()), ("value", pa.float64())])))
    if not parts:
        return
    t = pa.concat_tables(parts)
    by_proc = {(p.instance_id, p.process_id): ix for ix, p in side.processes.items()}
    # the samples summed per (instance, process, time), by one sort (Arrow's group_by would import
    # pyarrow.dataset and pandas); the values are byte counts, so the sums are exact in any order
    inst_u, inst_i = np.unique(np.asarray([str(x) for x in _strings(t.column("instance_id")).tolist()], dtype=object),
                               return_inverse=True)
    inst_i = inst_i.reshape(-1)
    pid, ts, val = int_column(t.column("process_id")), int_column(t.column("ts")), _floats(t.column("value"))
    order = np.lexsort((ts, pid, inst_i))
    k_inst, k_pid, k_ts = inst_i[order], pid[order], ts[order]
    brk = np.r_[True, (k_inst[1:] != k_inst[:-1]) | (k_pid[1:] != k_pid[:-1]) | (k_ts[1:] != k_ts[:-1])]
    first = np.flatnonzero(brk)
    total = np.add.reduceat(val[order], first)
    g_inst, g_pid = k_inst[first], k_pid[first]
    proc_brk = np.flatnonzero(np.r_[True, (g_inst[1:] != g_inst[:-1]) | (g_pid[1:] != g_pid[:-1]), True])
    for lo, hi in zip(proc_brk[:-1].tolist(), proc_brk[1:].tolist()):
        ix = by_proc.get((str(inst_u[g_inst[lo]]), int(g_pid[lo])))
        if ix is None:
            continue
        v = total[lo:hi]  # (by time)
        side.memory_peak[ix] = int(v.max())
        side.memory_level[ix] = int(np.percentile(v, 90))
        half = len(v) // 2
        side.memory_noise[ix] = int(abs(np.percentile(v[:half], 90) - np.percentile(v[half:], 90))) if half else 0
