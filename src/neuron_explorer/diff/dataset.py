"""One side of a diff: the items of a ``view`` Parquet dataset, read with pyarrow only.

What is read (contracts.dataset names the tables and columns): from ``SystemProfileEvents`` the
graph executions (``nc_exec_running`` by ``model_name``), the collectives (``cc_running`` and
``cc_exec_barrier`` by op, group and bytes, their ranks matched by group, op and sequence number)
and the framework regions (``trace_event_source = framework``, by name); ``ProfileModels`` for each
graph's structure; ``ProfileMetadata`` for ranks; ``SystemProfileCounters`` for device memory.

The events table is read one file (one process) at a time, only the columns wanted (no
``pyarrow.dataset``: it would import pandas, a third of a second), so memory holds the compact
per-item arrays, never a whole table.  An unreadable file is a warning
naming it; the rest is still read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from neuron_explorer.analysis import steps as steps_mod
from neuron_explorer.contracts import dataset as dsc

EXEC = "nc_exec_running"
COLLECTIVES = ("cc_running", "cc_exec_barrier")
FRAMEWORK = "framework"
# what analysis.steps reads besides the items: its type names, in the order of their ids here
STEP_TYPES = ("nc_exec_running", "cc_running", "cc_exec_barrier", "kbl_exec_wait", "model_load", "framework_op",
              "nrt_execute", "numerical_err")
_TYPE_ID = {n: i for i, n in enumerate(STEP_TYPES)}
# the per-step figures a diff compares (``analysis.steps`` makes more: the rest are dropped where a
# file is read, which keeps a side's steps and what a worker sends back to a third of the size)
STEP_COLUMNS = ("wall_ns",) + steps_mod.BREAKDOWN + ("own_ns", "collective_ns")
_EVENT_COLUMNS = ["id", "name", "start_ts", "end_ts", "trace_event_source", "worker_gid", "model_name", "op",
                  "seq", "bytes", "group_ranks", "flow_id"]


class DatasetError(Exception):
    """The path is not a dataset ``view`` wrote, or nothing in it can be read."""


@dataclass
class Occurrences:
    """One item's occurrences on one side, sorted by start: the sample (``value``, ns) and where it
    is (process index, start and end on the aligned Unix-ns clock, event id) so that a viewer can jump
    to it."""

    value: np.ndarray
    start: np.ndarray
    end: np.ndarray
    proc: np.ndarray
    ids: np.ndarray

    @staticmethod
    def build(value, start, end, proc, ids) -> Occurrences:
        order = np.argsort(start, kind="stable")
        return Occurrences(*(np.asarray(a, dtype=np.int64)[order] for a in (value, start, end, proc, ids)))

    def __len__(self) -> int:
        return len(self.value)


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
    # every step of every process as columns (number, rank, proc, start_ns, end_ns, ``STEP_COLUMNS``),
    # sorted by start; the step detector's methods found
    step_table: dict[str, np.ndarray] = field(default_factory=dict)
    step_methods: set[str] = field(default_factory=set)
    events: int = 0
    warnings: list[str] = field(default_factory=list)

    def rank_of(self, proc: int) -> int:
        p = self.processes.get(int(proc))
        return p.rank if p is not None else -1


def _strings(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A (dictionary) string column as a numpy object array, None for nulls."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks else pa.array([], pa.string())
    if pa.types.is_dictionary(col.type):
        col = col.cast(pa.string())
    return np.asarray(col.to_pylist(), dtype=object) if len(col) < 1024 else col.to_numpy(zero_copy_only=False)


def _ints(col: pa.ChunkedArray, fill: int = -1) -> np.ndarray:
    if col.null_count:
        col = pc.fill_null(col, fill)
    return np.asarray(col.to_numpy(), dtype=np.int64)


class _Acc:
    """Per-item lists of column pieces, concatenated once at the end."""

    def __init__(self) -> None:
        self.parts: dict = {}

    def add(self, key, *cols: np.ndarray) -> None:
        self.parts.setdefault(key, []).append(cols)

    def items(self):
        """Each key's columns, concatenated; its pieces are let go as it goes (in insertion order),
        so that the pieces and the whole are held for one key at a time, not for all."""
        for key in list(self.parts):
            pieces = self.parts.pop(key)
            yield key, [np.concatenate([p[i] for p in pieces]) for i in range(len(pieces[0]))]


def read_side(path: str, engine=None) -> Side:
    """Read the dataset at ``path`` (a directory ``view`` wrote) into a ``Side``.  ``engine``: a
    ``view`` engine (``pipeline.LocalEngine`` with worker processes, ``cluster.DaskEngine``) whose
    ``map`` reads the events files (``read_file``); None: in this process, one after another."""
    if not os.path.isdir(path):
        raise DatasetError(f"{path}: not a directory")
    if not os.path.isdir(os.path.join(path, dsc.EVENTS)):
        raise DatasetError(f"{path}: no {dsc.EVENTS} table (not a Parquet dataset written by neuron-explorer view)")
    side = Side(path)
    _read_metadata(side)
    _read_models(side)
    _read_events(side, engine)
    _read_memory(side)
    return side


def _line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


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
        t = pq.read_table(f)
    except (OSError, pa.ArrowException) as e:
        side.warnings.append(f"{f}: unreadable ({_line(e)}); skipped")
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


@dataclass
class FilePart:
    """What one events file (one process) gives a side: the per-item column pieces, the regions'
    links to graphs, the steps of its processes, its row count, or the line saying why it could
    not be read.  A pure function of the file (``read_file``), so that a worker process or a Dask
    worker can make it and this process merges them in file order."""

    path: str
    events: int = 0
    error: str | None = None
    graphs: dict = field(default_factory=dict)
    loads: dict = field(default_factory=dict)
    regions: dict = field(default_factory=dict)
    colls: dict = field(default_factory=dict)
    region_links: dict[str, set] = field(default_factory=dict)
    steps: dict[int, steps_mod.Steps] = field(default_factory=dict)


def read_file(path: str, model_ids: dict[str, int], step_models: list) -> FilePart:
    """One events file read into a ``FilePart``.  The file's wanted columns are read whole, every
    row, and the rows kept by their name codes: that costs less than a filter expression over the
    dictionary strings (0.17 against 0.43 CPU-s for 2M events, docs/decisions/0147-diff-read-cost.md)."""
    part = FilePart(path)
    try:
        pf = pq.ParquetFile(path)
        present = set(pf.schema_arrow.names)
        columns = [c for c in _EVENT_COLUMNS if c in present]
        if not {"id", "name", "start_ts", "end_ts", "trace_event_source"} <= set(columns):
            raise ValueError("not a SystemProfileEvents file (columns missing)")
        t = pf.read(columns=columns, use_threads=False)
        f = _File(t)
    except (OSError, ValueError, pa.ArrowException) as e:
        part.error = f"{path}: unreadable ({_line(e)}); skipped"
        return part
    part.events = t.num_rows
    if len(f.typ):
        graphs, regions, colls, loads = _Acc(), _Acc(), _Acc(), _Acc()
        _take_fragment(f, graphs, regions, colls, loads, part.region_links)
        part.graphs, part.regions, part.colls, part.loads = graphs.parts, regions.parts, colls.parts, loads.parts
        part.steps = _find_steps(f, model_ids, step_models)
    return part


class _NoProgress:
    def step(self) -> None:
        pass

    def within(self, fraction: float) -> None:
        pass


def _read_events(side: Side, engine=None) -> None:
    root = os.path.join(side.path, dsc.EVENTS)
    files = table_files(root)
    model_ids = {n: i for i, n in enumerate(sorted(side.models))}
    step_models = [(i, n, str(side.models[n].get("kind") or ""), 0.0) for n, i in model_ids.items()]
    graphs, regions, colls, loads = _Acc(), _Acc(), _Acc(), _Acc()
    region_links: dict[str, set] = {}
    steps: dict[int, steps_mod.Steps] = {}
    read = 0
    parts = (read_file(p, model_ids, step_models) for p in files) if engine is None or len(files) < 2 else \
        engine.map(read_file, files, _NoProgress(), model_ids, step_models)
    for part in parts:  # (in file order: the same arrays whoever read them)
        if part.error is not None:
            side.warnings.append(part.error)
            continue
        side.events += part.events
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
    side.step_methods = {st.method for st in steps.values() if len(st)}
    side.step_table = _step_table(side, steps)
    del steps
    for name, (start, end, proc, ids) in graphs.items():
        side.graphs[name] = Occurrences.build(end - start, start, end, proc, ids)
    for name, (start, end, proc, ids) in loads.items():
        side.compiles[name] = Occurrences.build(end - start, start, end, proc, ids)
    for name, (start, end, proc, ids) in regions.items():
        side.regions[name] = Occurrences.build(end - start, start, end, proc, ids)
        links = region_links.get(name, set())
        side.region_graph[name] = next(iter(links)) if len(links) == 1 and None not in links else None
    _collectives(side, colls)


def _step_table(side: Side, steps: dict[int, steps_mod.Steps]) -> dict[str, np.ndarray]:
    """Every step of every process as columns: number, rank, process, start, end and the figures
    of ``analysis.steps`` (one row per step and process), sorted by start.  Built a column at a
    time, each process's column let go once it is in: the steps' figures are held once, not twice."""
    sts = [(proc, st) for proc, st in steps.items() if len(st)]
    names = ("number", "rank", "proc", "start_ns", "end_ns") + STEP_COLUMNS
    if not sts:
        return {k: np.zeros(0, dtype=np.int64) for k in names}
    start = np.concatenate([st.start_ns for _, st in sts])
    order = np.argsort(start, kind="stable")
    out = {"start_ns": start[order]}
    del start
    for k in names[:3] + names[4:]:
        cols = []
        for proc, st in sts:
            if k == "number":
                c = st.number
            elif k == "rank":
                c = np.full(len(st), side.rank_of(proc), dtype=np.int64)
            elif k == "proc":
                c = np.full(len(st), proc, dtype=np.int64)
            elif k == "end_ns":
                c = st.end_ns
            else:
                c = st.columns.pop(k) if k in st.columns else np.zeros(len(st))
            cols.append(np.asarray(c, dtype=np.int64))
        out[k] = np.concatenate(cols)[order]
    return out


def _codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string column as (codes, values): ``values[codes[i]]`` is row i, -1 a null.  Dictionary
    columns (what ``view`` writes) give their indices as they are: no string per row is made."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr.cast(pa.string()))
    ind = pc.fill_null(arr.indices, -1) if arr.null_count else arr.indices
    idx = np.asarray(ind.to_numpy(zero_copy_only=False), dtype=np.int64)
    values = np.asarray([str(v) for v in arr.dictionary.to_pylist()] + [""], dtype=object)  # [-1]: ""
    return idx, values


def _groups(codes: np.ndarray):
    """(code, row indices) per distinct code >= 0, by one sort."""
    order = np.argsort(codes, kind="stable")
    c = codes[order]
    bounds = np.flatnonzero(np.r_[True, c[1:] != c[:-1]]) if len(c) else np.zeros(0, dtype=np.int64)
    for b, e in zip(bounds.tolist(), np.r_[bounds[1:], len(c)].tolist()):
        if c[b] >= 0:
            yield int(c[b]), order[b:e]


def _lut(values: np.ndarray, mapping: dict[str, int]) -> np.ndarray:
    """Per dictionary value (and -1 last), its number in ``mapping`` or -1."""
    return np.array([mapping.get(v, -1) for v in values[:-1].tolist()] + [-1], dtype=np.int64)


class _File:
    """One events file's columns, decoded once (dictionary codes, not a string per row), and only
    its rows a diff reads: the types ``STEP_TYPES`` names outside the framework, and the framework's
    regions.  ``column`` gives any other column at those rows."""

    def __init__(self, t: pa.Table) -> None:
        self.t = t = t.unify_dictionaries()
        name_c, self.name_v = _codes(t.column("name"))
        src_c, src_v = _codes(t.column("trace_event_source"))
        fw = src_v[src_c] == FRAMEWORK
        typ = _lut(self.name_v, _TYPE_ID)[name_c]
        keep = fw | ((typ >= 0) & (typ != _TYPE_ID["framework_op"]))
        self.rows: np.ndarray | None = None if keep.all() else np.flatnonzero(keep)
        self.name_c, self.fw, self.typ = self._at(name_c), self._at(fw), self._at(typ)
        self.start, self.end, self.ids = (self._at(_ints(t.column(c))) for c in ("start_ts", "end_ts", "id"))
        self.proc = self.ids >> 32
        if "model_name" in t.column_names:
            model_c, self.model_v = _codes(t.column("model_name"))
            self.model_c = self._at(model_c)
        else:
            self.model_c, self.model_v = np.full(len(self.typ), -1, dtype=np.int64), np.asarray([""], dtype=object)

    def _at(self, a: np.ndarray) -> np.ndarray:
        return a if self.rows is None else a[self.rows]

    def has(self, name: str) -> bool:
        return name in self.t.column_names

    def column(self, name: str, sel: np.ndarray | None = None) -> pa.ChunkedArray:
        """Column ``name`` at the kept rows (``sel``: at those of them)."""
        rows = self._rows(sel)
        col = self.t.column(name)
        return col if rows is None else col.take(pa.array(rows, type=pa.int64()))

    def ints(self, name: str, sel: np.ndarray | None = None, fill: int = -1) -> np.ndarray:
        """An integer column at the kept rows (``sel``: at those of them), nulls as ``fill``: decoded
        whole, then indexed (cheaper than Arrow's ``take`` of the rows)."""
        rows = self._rows(sel)
        a = _ints(self.t.column(name), fill)
        return a if rows is None else a[rows]

    def codes(self, name: str, sel: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``_codes`` of a string column at the kept rows (``sel``: at those of them)."""
        rows = self._rows(sel)
        c, v = _codes(self.t.column(name))
        return (c if rows is None else c[rows]), v

    def _rows(self, sel: np.ndarray | None) -> np.ndarray | None:
        return self.rows if sel is None else sel if self.rows is None else self.rows[sel]


def _take_fragment(f: _File, graphs: _Acc, regions: _Acc, colls: _Acc, loads: _Acc,
                   region_links: dict[str, set]) -> None:
    typ, fw, name_c, name_v = f.typ, f.fw, f.name_c, f.name_v
    start, end, ids, proc, model_c, model_v = f.start, f.end, f.ids, f.proc, f.model_c, f.model_v
    ex = np.flatnonzero((typ == _TYPE_ID[EXEC]) & ~fw)
    exec_flow = np.zeros(0, dtype=np.int64)
    exec_name = np.zeros(0, dtype=object)
    for code, sel in _groups(model_c[ex]):
        rows = ex[sel]
        graphs.add(str(model_v[code]), start[rows], end[rows], proc[rows], ids[rows])
    if len(ex) and f.has("flow_id"):
        fl = f.column("flow_id", ex).combine_chunks()
        exec_flow = np.asarray(pc.fill_null(pc.list_element(fl, 0), -1).to_numpy(zero_copy_only=False),
                               dtype=np.int64)
        exec_name = model_v[model_c[ex]]
    ml = np.flatnonzero((typ == _TYPE_ID["model_load"]) & ~fw)
    for code, sel in _groups(model_c[ml]):
        rows = ml[sel]
        loads.add(str(model_v[code]), start[rows], end[rows], proc[rows], ids[rows])
    sel_fw = np.flatnonzero(fw)
    if len(sel_fw):
        for code, sel in _groups(name_c[sel_fw]):
            rows = sel_fw[sel]
            regions.add(str(name_v[code]), start[rows], end[rows], proc[rows], ids[rows])
        if f.has("flow_id"):
            _link_regions(f.column("flow_id", sel_fw), name_c[sel_fw], name_v, exec_flow, exec_name,
                          region_links)
    cc = np.flatnonzero(((typ == _TYPE_ID["cc_running"]) | (typ == _TYPE_ID["cc_exec_barrier"])) & ~fw)
    if len(cc):
        n = len(cc)
        # the op (its name where the op column is null) and the group as codes into their dictionaries,
        # made one number per distinct string through the (small) dictionaries: no string per row
        if f.has("op"):
            op_c, op_v = f.codes("op", cc)
            op_key, op_strs = np.where(op_c >= 0, op_c, len(op_v) + name_c[cc]), np.concatenate([op_v, name_v])
        else:
            op_key, op_strs = name_c[cc], name_v
        if f.has("group_ranks"):
            g_key, g_strs = f.codes("group_ranks", cc)
        else:
            g_key, g_strs = np.full(n, -1, dtype=np.int64), np.asarray([""], dtype=object)
        nbytes = f.ints("bytes", cc, 0) if f.has("bytes") else np.zeros(n, np.int64)
        seq = f.ints("seq", cc) if f.has("seq") else np.full(n, -1)
        rank = f.ints("worker_gid", cc) if f.has("worker_gid") else np.full(n, -1)
        op_u, op_map = np.unique(op_strs.astype(str), return_inverse=True)
        g_u, g_map = np.unique(g_strs.astype(str), return_inverse=True)
        op_i, g_i = op_map.reshape(-1)[op_key], g_map.reshape(-1)[g_key]
        start, end, proc, ids = start[cc], end[cc], proc[cc], ids[cc]
        for code, m in _groups(op_i * len(g_u) + g_i):
            key = (str(op_u[code // len(g_u)]), str(g_u[code % len(g_u)]))
            colls.add(key, nbytes[m], seq[m], rank[m], start[m], end[m], proc[m], ids[m])


def _find_steps(f: _File, model_ids: dict[str, int], models: list) -> dict[int, steps_mod.Steps]:
    """``analysis.steps.find_steps`` on each process of a file (the one step detector, on the
    aligned clock of the dataset); the labels of framework regions are the name dictionary."""
    out = {}
    typ = f.typ.copy()
    typ[f.fw] = _TYPE_ID["framework_op"]
    model_id = _lut(f.model_v, model_ids)[f.model_c]
    label = np.where(f.fw, f.name_c, -1)
    strings = [str(v) for v in f.name_v[:-1].tolist()]
    start, end = f.start, f.end
    nbytes = f.ints("bytes") if f.has("bytes") else np.full(len(typ), -1, dtype=np.int64)
    one = len(f.proc) and f.proc[0] >= 0 and bool((f.proc == f.proc[0]).all())  # (a file is one process)
    groups = [(int(f.proc[0]), None)] if one else list(_groups(f.proc))
    for p, rows in groups:
        cols = (typ, start, end, model_id, label, nbytes)
        if rows is not None:
            rows = np.sort(rows)
            cols = tuple(c[rows] for c in cols)
        st = steps_mod.find_steps(*cols, _TYPE_ID, strings, models)
        st.columns = {k: np.asarray(st.columns[k], dtype=np.int64) for k in STEP_COLUMNS if k in st.columns}
        out[p] = st
    return out


def _link_regions(flows: pa.ChunkedArray, label: np.ndarray, names: np.ndarray, exec_flow: np.ndarray,
                  exec_name: np.ndarray, links: dict[str, set]) -> None:
    """Which graph each region wraps: a region whose every occurrence issued exactly one execution,
    always of one graph, is that graph seen from the framework (``Optimizer.step#SGD.step`` around
    the ``SGD_*`` execution): the diff shows it beside the graph, not as a second change."""
    arr = flows.combine_chunks()
    n_links = np.zeros(len(label), dtype=np.int64)
    linked = np.full(len(label), None, dtype=object)
    if len(arr) and len(exec_flow):
        flat = np.asarray(pc.list_flatten(arr).to_numpy(zero_copy_only=False), dtype=np.int64)
        parent = np.asarray(pc.list_parent_indices(arr).to_numpy(), dtype=np.int64)
        order = np.argsort(exec_flow)
        pos = np.clip(np.searchsorted(exec_flow, flat, sorter=order), 0, len(order) - 1)
        hit = exec_flow[order][pos] == flat
        np.add.at(n_links, parent[hit], 1)
        linked[parent[hit]] = exec_name[order][pos[hit]]
    for code, m in _groups(label):  # ``label``: codes into ``names``
        ok = bool((n_links[m] == 1).all())
        links.setdefault(str(names[code]), set()).update(set(linked[m].tolist()) if ok else {None})


def _collectives(side: Side, colls: _Acc) -> None:
    """Each collective's cost by (op, group, bytes): per instance (its ranks matched by sequence
    number), the time from the last rank's entry to the first rank's exit.  Waiting for a late rank
    is left out (that is the straggler's, seen in its own work per step), and so is the time a
    blocked rank takes to be scheduled again once the data is there (on a busy host that is the
    scheduler's, not the network's); a collective seen on one rank is its own duration."""
    for (op, group), (nbytes, seq, _rank, start, end, proc, ids) in colls.items():
        key = seq * 1_000_003 + nbytes if (seq >= 0).all() else np.arange(len(seq))
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        n = len(first)
        last_start = np.full(n, np.iinfo(np.int64).min)
        first_end = np.full(n, np.iinfo(np.int64).max)
        np.maximum.at(last_start, inv, start)
        np.minimum.at(first_end, inv, end)
        # the entry of the last rank to enter stands for the instance (where a viewer jumps to)
        order = np.lexsort((start, inv))
        last_of = order[np.r_[np.flatnonzero(np.diff(inv[order])), len(order) - 1]]
        transfer = np.maximum(first_end - last_start, 0)
        inst_bytes = nbytes[last_of]
        for b in np.unique(inst_bytes):
            m = inst_bytes == b
            side.collectives[(op, group, int(b))] = Occurrences.build(
                transfer[m], last_start[m], np.maximum(first_end[m], last_start[m]), proc[last_of][m], ids[last_of][m])


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
            keep = pc.fill_null(pc.starts_with(t.column("counter").cast(pa.string()), dsc.DEVICE_MEMORY_PREFIX), False)
            t = t.filter(keep).drop_columns(["counter"])
        except (OSError, ValueError, pa.ArrowException) as e:
            side.warnings.append(f"{path}: unreadable ({_line(e)}); its memory samples skipped")
            continue
        if t.num_rows:
            parts.append(t.cast(pa.schema([("instance_id", pa.string()), ("process_id", pa.int64()),
                                           ("ts", pa.int64()), ("value", pa.float64())])))
    if not parts:
        return
    t = pa.concat_tables(parts)
    by_proc = {(p.instance_id, p.process_id): ix for ix, p in side.processes.items()}
    g = t.group_by(["instance_id", "process_id", "ts"]).aggregate([("value", "sum")])
    inst = _strings(g.column("instance_id"))
    pid = _ints(g.column("process_id"))
    total = np.asarray(pc.fill_null(g.column("value_sum"), 0).to_numpy(), dtype=np.float64)
    ts = _ints(g.column("ts"))
    for i, p in {(str(a), int(b)) for a, b in zip(inst.tolist(), pid.tolist())}:
        ix = by_proc.get((i, p))
        if ix is None:
            continue
        sel = (inst == i) & (pid == p)
        v = total[sel][np.argsort(ts[sel], kind="stable")]
        side.memory_peak[ix] = int(v.max())
        side.memory_level[ix] = int(np.percentile(v, 90))
        half = len(v) // 2
        side.memory_noise[ix] = int(abs(np.percentile(v[:half], 90) - np.percentile(v[half:], 90))) if half else 0
