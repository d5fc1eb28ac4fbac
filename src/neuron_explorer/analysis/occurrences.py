"""One events file's items as ``neuron-explorer diff`` compares them (``read_file`` -> ``FilePart``).

Why here and not in ``diff``: ``view`` runs the same function on each events file it has just
written and keeps the answer beside it (``exporters.diff_items``), so that a diff of two ``view``
outputs reads that small table instead of the events and their steps
(docs/decisions/0163-diff-items-written-by-view.md). One function for both is what makes the two
paths give the same numbers.

What is kept of a file (``contracts.dataset`` names the columns): the graph executions
(``nc_exec_running`` by ``model_name``), the model loads, the collectives (``cc_running`` and
``cc_exec_barrier`` by op and group, with bytes, sequence number and rank), the framework regions
(by name) and which graph each region wraps, and the steps of its processes
(``analysis.steps.find_steps``, only the figures a diff compares).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from neuron_explorer.analysis import steps as steps_mod
from neuron_explorer.analysis.packed import concat_pieces, pack, unpack
from neuron_explorer.util.arrays import numeric

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

def int_column(col: pa.ChunkedArray | pa.Array, fill: int = -1, rows: np.ndarray | None = None) -> np.ndarray:
    """An integer column as int64, nulls as ``fill``; with ``rows``, only at those rows (the whole
    column's answer indexed by ``rows``, the rows taken before they are widened: a diff reads the
    collectives' columns, a sixth of a file's rows, of 32-bit columns).  Nulls are filled here,
    from the validity bitmap, not by ``pyarrow.compute.fill_null``: its fill scalar's conversion
    imports pandas, 0.2 CPU-s of a small ``view`` that writes diff items (and of every diff)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    t = col.type
    if not pa.types.is_integer(t):
        whole = np.asarray((pc.fill_null(col, fill) if col.null_count else col).to_numpy(), dtype=np.int64)
        return whole if rows is None else whole[rows]
    n, off = len(col), col.offset
    bufs = col.buffers()
    if bufs[1] is None:
        return np.full(n if rows is None else len(rows), fill, dtype=np.int64)
    dt = np.dtype(f"{'u' if pa.types.is_unsigned_integer(t) else 'i'}{t.bit_width // 8}")
    data = np.frombuffer(bufs[1], dtype=dt, count=off + n)[off:]  # (to_numpy: pandas)
    data = (data if rows is None else data[rows]).astype(np.int64, copy=False)
    if not col.null_count:
        return data
    valid = np.unpackbits(np.frombuffer(bufs[0], dtype=np.uint8), bitorder="little", count=off + n)[off:]
    return np.where((valid if rows is None else valid[rows]).astype(bool), data, fill)


class Acc:
    """Per-item lists of column pieces, concatenated once at the end."""

    def __init__(self) -> None:
        self.parts: dict = {}

    def add(self, key, *cols: np.ndarray) -> None:
        self.parts.setdefault(key, []).append(cols)

    def items(self):
        """Each key's columns, concatenated (pieces packed by ``pack_part`` widened on the way:
        ``analysis.packed.concat_pieces``); its pieces are let go as it goes (in insertion order), so
        that the pieces and the whole are held for one key at a time, not for all."""
        for key in list(self.parts):
            yield key, concat_pieces(self.parts.pop(key))


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


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
    model_names: list[str] = field(default_factory=list)  # the file's ``model_name`` values (step ids' names)
    note: str | None = None  # why the file's diff items were not used (``diff.dataset``), or None
    from_items: bool = False  # made from the file's diff items (``exporters.diff_items``), not its events


# where a piece's start and end are (``Acc`` pieces: graphs, loads and regions; the collectives')
_SPAN_AT = {"graphs": (0, 1), "loads": (0, 1), "regions": (0, 1), "colls": (3, 4)}


def pack_part(part: FilePart) -> FilePart:
    """``part`` with its columns packed without loss (``analysis.packed``) for the trip from a worker
    to the process that merges the parts: starts as differences, ends against their starts, the
    rest as offsets from their minimum (a process index: its value alone).  What a diff's worker
    sent was 840 MB a side at 20M events, 248 MB once packed
    (docs/decisions/0179-dask-diff-client.md).  ``unpack_steps`` and ``Acc`` take it back."""
    for kind, (s_at, e_at) in _SPAN_AT.items():
        for pieces in getattr(part, kind).values():
            for j, cols in enumerate(pieces):
                packed = [pack(c, delta=True) if i == s_at else pack(c, cols[s_at], s_at) if i == e_at else pack(c)
                          for i, c in enumerate(cols)]
                pieces[j] = tuple(packed)
    for st in part.steps.values():  # (packed in transit only: ``unpack_steps``, the step table's ``concat``)
        st.end_ns = pack(st.end_ns, st.start_ns, 0)  # type: ignore[assignment]
        st.start_ns = pack(st.start_ns, delta=True)  # type: ignore[assignment]
        st.number = pack(st.number, delta=True)  # type: ignore[assignment]
        st.columns = {k: pack(np.asarray(v, dtype=np.int64)) for k, v in st.columns.items()}  # type: ignore[misc]
    return part


def unpack_steps(part: FilePart) -> None:
    """The steps' numbers and spans of a part ``pack_part`` packed, as arrays again (the step
    numbers' alignment reads them); their figures stay packed until the step table is made."""
    for st in part.steps.values():
        st.start_ns = unpack(st.start_ns)
        st.end_ns = unpack(st.end_ns, st.start_ns)
        st.number = unpack(st.number)


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
        t = pf.read(columns=[c for c in columns if c != "flow_id"], use_threads=False)
        f = _File(t)
        if "flow_id" in columns and f.fw.any():  # (the flows link regions to graphs: read where there are any)
            f.t = f.t.append_column("flow_id", pf.read(columns=["flow_id"], use_threads=False).column(0))
    except (OSError, ValueError, pa.ArrowException) as e:
        part.error = f"{path}: unreadable ({one_line(e)}); skipped"
        return part
    part.events = t.num_rows
    part.model_names = [str(v) for v in f.model_v[:-1].tolist()]
    if len(f.typ):
        graphs, regions, colls, loads = Acc(), Acc(), Acc(), Acc()
        _take_fragment(f, graphs, regions, colls, loads, part.region_links)
        part.graphs, part.regions, part.colls, part.loads = graphs.parts, regions.parts, colls.parts, loads.parts
        part.steps = _find_steps(f, model_ids, step_models)
    return part


def _codes(col: pa.ChunkedArray | pa.Array, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A string column as (codes, values): ``values[codes[i]]`` is row i, -1 a null (with ``rows``:
    the codes at those rows only).  Dictionary columns (what ``view`` writes) give their indices as
    they are: no string per row is made."""
    indices, values = _dictionary(col)
    return int_column(indices, -1, rows), values


def _dictionary(col: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A string column as its dictionary's (indices, values), ``values[-1]`` "" (a null's)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr.cast(pa.string()))
    return arr.indices, np.asarray([str(v) for v in arr.dictionary.to_pylist()] + [""], dtype=object)


def _ints(col: pa.Array | pa.ChunkedArray, dtype: type, nulls: bool = False) -> np.ndarray | None:
    """An integer column of ``dtype`` (np.int32 or np.int64) as a numpy view of its buffer (of its
    chunks combined when there are several), or None when its type differs or it has nulls
    (``nulls``: allowed, their values are any)."""
    if col.type != pa.from_numpy_dtype(dtype) or (col.null_count and not nulls):
        return None
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    buf = col.buffers()[1]
    if buf is None:
        return None
    return np.frombuffer(buf, dtype=dtype, count=col.offset + len(col))[col.offset:]


def _first_of_lists(arr: pa.ListArray) -> np.ndarray:
    """Each list's first value, -1 for a null or empty list (or a null first value): what
    ``pc.list_element(arr, 0)`` gives where it does not fail, without its index scalar's conversion
    (which imports pandas) and without failing on an empty list."""
    offsets = int_column(arr.offsets)
    values = int_column(arr.values, -1)
    has = offsets[1:] > offsets[:-1]
    if arr.null_count:
        has &= int_column(arr.is_valid().cast(pa.int8())) == 1
    out = np.full(len(arr), -1, dtype=np.int64)
    out[has] = values[offsets[:-1][has]]
    return out


FEW_CODES = 16  # codes in a range this narrow are grouped by one compare each, not by a sort


def _groups(codes: np.ndarray):
    """(code, row indices) per distinct code >= 0, ascending: by one compare per code where the
    codes span at most ``FEW_CODES`` values (a file's graphs, its collectives' op and group: a
    tenth of the sort's CPU, decision 0209), else by one sort (of 16-bit keys where the codes fit
    them: a radix sort)."""
    key = codes
    if len(codes):
        lo, hi = int(codes.min()), int(codes.max())
        if hi - lo < FEW_CODES:
            for code in range(max(lo, 0), hi + 1):
                rows = np.flatnonzero(codes == code)
                if len(rows):
                    yield code, rows
            return
        if hi - lo < (1 << 15):
            key = (codes - lo).astype(np.int16)
    order = np.argsort(key, kind="stable")
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

    rows: np.ndarray | None  # the kept rows (None: every row)
    _name: np.ndarray  # every row's name code (read at the rows asked for, ``name_at``)
    typ: np.ndarray
    fw: np.ndarray
    start: np.ndarray
    end: np.ndarray
    ids: np.ndarray
    # per kept row, the ``model_name`` code (into ``model_v``) of an execution or a model load
    # outside the framework, -1 elsewhere (and for a null): the graphs a diff and the detector read
    model: np.ndarray
    # the kept rows grouped by the type the step detector sees (a framework region: ``framework_op``),
    # each group in row order: group t is ``order[bounds[t]:bounds[t + 1]]`` (``steps.find_steps``)
    order: np.ndarray
    bounds: np.ndarray

    def __init__(self, t: pa.Table) -> None:
        self.t = t = t.unify_dictionaries()
        name_i, self.name_v = _dictionary(t.column("name"))
        src_i, src_v = _dictionary(t.column("trace_event_source"))
        type_of = _lut(self.name_v, _TYPE_ID)  # (per dictionary value, then per row: no string per row)
        fw_of = src_v == FRAMEWORK
        # the graph names' codes are read at executions and model loads only (not the runtime's rows, a
        # third of a file)
        model_i: pa.Array | None = None
        self.model_v = np.asarray([""], dtype=object)
        if "model_name" in t.column_names:
            model_i, self.model_v = _dictionary(t.column("model_name"))
        self._name_kept: np.ndarray | None = None
        if not self._keep_c(name_i, src_i, model_i, type_of, fw_of):
            self._keep_numpy(name_i, src_i, model_i, type_of, fw_of)
        # the file's one process index (its ids' high bits: monotone in the id, so the smallest
        # and largest id tell), else None; ``proc``: each row's, made only for a file of several
        ends = (int(self.ids.min()) >> 32, int(self.ids.max()) >> 32) if len(self.ids) else (-1, -2)
        self.one: int | None = ends[0] if ends[0] == ends[1] and ends[0] >= 0 else None
        self._proc: np.ndarray | None = None
        self._sel: np.ndarray | None = None  # the last ``sel`` given to ``_rows``, and its rows
        self._sel_rows: np.ndarray | None = None

    def _keep_numpy(self, name_i: pa.Array, src_i: pa.Array, model_i: pa.Array | None, type_of: np.ndarray,
                    fw_of: np.ndarray) -> None:
        """The rows a diff reads (``rows``, None: every row), and their ``typ``, ``fw``, ``start``,
        ``end``, ``ids`` and ``model``, and their groups by type (``order``, ``bounds``): a row is
        kept when it is a framework region or of a type ``STEP_TYPES`` names other than
        ``framework_op``.  The twin of ``_keep_c``."""
        t = self.t
        name_c, src_c = int_column(name_i, -1), int_column(src_i, -1)
        fw, typ = fw_of[src_c], type_of[name_c]
        keep = fw | ((typ >= 0) & (typ != _TYPE_ID["framework_op"]))
        self.rows = None if keep.all() else np.flatnonzero(keep)
        self._name = name_c
        self.fw, self.typ = self._at(fw), self._at(typ)
        self.start, self.end, self.ids = (int_column(t.column(c), -1, self.rows) for c in ("start_ts", "end_ts", "id"))
        self.model = np.full(len(self.typ), -1, dtype=np.int64)
        at = np.flatnonzero(((self.typ == _TYPE_ID[EXEC]) | (self.typ == _TYPE_ID["model_load"])) & ~self.fw)
        if model_i is not None:
            self.model[at] = int_column(model_i, -1, at if self.rows is None else self.rows[at])
        seen = np.where(self.fw, _TYPE_ID["framework_op"], self.typ)
        self.order = np.argsort(seen, kind="stable")
        self.bounds = np.searchsorted(seen[self.order], np.arange(len(STEP_TYPES) + 1), side="left")

    def _keep_c(self, name_i: pa.Array, src_i: pa.Array, model_i: pa.Array | None, type_of: np.ndarray,
                fw_of: np.ndarray) -> bool:
        """``_keep_numpy`` in one pass (``analysis._sweep.keep``, decision 0209), where the extension is
        built and the columns allow it (32-bit dictionary indices, the name's and source's not null,
        and 64-bit times and ids, none null); False otherwise, having done nothing."""
        if steps_mod._sweep is None:
            return False
        name_c, src_c = _ints(name_i, np.int32), _ints(src_i, np.int32)
        start_c, end_c, ids_c = (_ints(self.t.column(c), np.int64) for c in ("start_ts", "end_ts", "id"))
        if name_c is None or src_c is None or start_c is None or end_c is None or ids_c is None:
            return False
        model_c, valid, offset = None, None, 0
        if model_i is not None:
            model_c = _ints(model_i, np.int32, nulls=True)
            if model_c is None:
                return False
            bitmap = model_i.buffers()[0]
            if model_i.null_count and bitmap is not None:
                valid, offset = np.frombuffer(bitmap, dtype=np.uint8), model_i.offset
        n = len(name_c)
        typ, rows, start, end, ids, model, order = (np.empty(n, dtype=np.int64) for _ in range(7))
        fw = np.empty(n, dtype=np.bool_)
        bounds = np.empty(len(STEP_TYPES) + 1, dtype=np.int64)
        k = steps_mod._sweep.keep(name_c, src_c, model_c, valid, offset, type_of, fw_of.astype(np.uint8),
                                  (_TYPE_ID["framework_op"], _TYPE_ID[EXEC], _TYPE_ID["model_load"]),
                                  (start_c, end_c, ids_c), (typ, fw, rows, start, end, ids, model, order, bounds))
        self.rows = None if k == n else rows[:k]
        self._name = name_c  # (int32: ``name_at`` widens what it reads)
        self.typ, self.fw, self.start, self.end, self.ids = typ[:k], fw[:k], start[:k], end[:k], ids[:k]
        self.model, self.order, self.bounds = model[:k], order[:k], bounds
        return True

    def of_type(self, t: int) -> np.ndarray:
        """The kept rows the step detector sees as of type ``t`` (a framework region's is
        ``framework_op``), ascending."""
        return self.order[self.bounds[t]:self.bounds[t + 1]]

    def _at(self, a: np.ndarray) -> np.ndarray:
        return a if self.rows is None else a[self.rows]

    @property
    def name_c(self) -> np.ndarray:
        """Each kept row's name code (into ``name_v``)."""
        if self._name_kept is None:
            self._name_kept = self._at(self._name).astype(np.int64, copy=False)
        return self._name_kept

    def name_at(self, sel: np.ndarray) -> np.ndarray:
        """``name_c[sel]``, without the whole kept column (a diff reads the names of the framework's
        regions and the collectives only)."""
        got = self._name[sel] if self.rows is None else self._name[self.rows[sel]]
        return got.astype(np.int64, copy=False)

    @property
    def proc(self) -> np.ndarray:
        """Each kept row's process index (its id's high 32 bits)."""
        if self._proc is None:
            self._proc = self.ids >> 32
        return self._proc

    def procs_at(self, rows: np.ndarray) -> np.ndarray:
        """``proc[rows]``; for a file of one process a read-only view of that one value, written
        nowhere (a diff reads a piece's process indices only for their distinct values)."""
        if self.one is not None:
            return np.broadcast_to(np.int64(self.one), (len(rows),))
        return self.proc[rows]

    def has(self, name: str) -> bool:
        return name in self.t.column_names

    def column(self, name: str, sel: np.ndarray | None = None) -> pa.ChunkedArray:
        """Column ``name`` at the kept rows (``sel``: at those of them)."""
        rows = self._rows(sel)
        col = self.t.column(name)
        return col if rows is None else col.take(numeric(np.asarray(rows, dtype=np.int64)))  # (pa.array: pandas)

    def ints(self, name: str, sel: np.ndarray | None = None, fill: int = -1) -> np.ndarray:
        """An integer column at the kept rows (``sel``: at those of them), nulls as ``fill``: its
        buffer indexed, then widened (cheaper than Arrow's ``take`` of the rows)."""
        return int_column(self.t.column(name), fill, self._rows(sel))

    def codes(self, name: str, sel: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``_codes`` of a string column at the kept rows (``sel``: at those of them)."""
        return _codes(self.t.column(name), self._rows(sel))

    def _rows(self, sel: np.ndarray | None) -> np.ndarray | None:
        if sel is None or self.rows is None:
            return self.rows if sel is None else sel
        if self._sel is not sel:  # (the collectives' five columns are read at the same rows)
            self._sel, self._sel_rows = sel, self.rows[sel]
        return self._sel_rows


def _take_fragment(f: _File, graphs: Acc, regions: Acc, colls: Acc, loads: Acc,
                   region_links: dict[str, set]) -> None:
    name_v = f.name_v
    start, end, ids, proc, model_v = f.start, f.end, f.ids, f.procs_at, f.model_v
    ex = f.of_type(_TYPE_ID[EXEC])  # (outside the framework: a region is of type framework_op here)
    ex_model = f.model[ex]
    for code, sel in _groups(ex_model):
        rows = ex[sel]
        graphs.add(str(model_v[code]), start[rows], end[rows], proc(rows), ids[rows])
    ml = f.of_type(_TYPE_ID["model_load"])
    for code, sel in _groups(f.model[ml]):
        rows = ml[sel]
        loads.add(str(model_v[code]), start[rows], end[rows], proc(rows), ids[rows])
    sel_fw = f.of_type(_TYPE_ID["framework_op"])  # (every framework region, and only they: the rows kept)
    if len(sel_fw):
        fw_name = f.name_at(sel_fw)
        for code, sel in _groups(fw_name):
            rows = sel_fw[sel]
            regions.add(str(name_v[code]), start[rows], end[rows], proc(rows), ids[rows])
        if f.has("flow_id"):  # (the executions' first flows: only where there are regions to link)
            exec_flow = np.zeros(0, dtype=np.int64)
            exec_name = np.zeros(0, dtype=object)
            if len(ex):  # (each row's first flow, then the executions': no list gathered)
                whole = f.t.column("flow_id")
                exec_flow = _first_of_lists(whole.combine_chunks() if whole.num_chunks != 1
                                            else whole.chunk(0))[f._rows(ex)]
                exec_name = model_v[ex_model]
            _link_regions(f.column("flow_id", sel_fw), fw_name, name_v, exec_flow, exec_name,
                          region_links)
    cc = _ascending(f.of_type(_TYPE_ID["cc_running"]), f.of_type(_TYPE_ID["cc_exec_barrier"]))
    if len(cc):
        n = len(cc)
        # the op (its name where the op column is null) and the group as codes into their dictionaries,
        # made one number per distinct string through the (small) dictionaries: no string per row
        if f.has("op"):
            op_c, op_v = f.codes("op", cc)
            op_key, op_strs = np.where(op_c >= 0, op_c, len(op_v) + f.name_at(cc)), np.concatenate([op_v, name_v])
        else:
            op_key, op_strs = f.name_at(cc), name_v
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
        start, end, ids = start[cc], end[cc], ids[cc]
        for code, m in _groups(op_i * len(g_u) + g_i):
            key = (str(op_u[code // len(g_u)]), str(g_u[code % len(g_u)]))
            colls.add(key, nbytes[m], seq[m], rank[m], start[m], end[m], proc(cc[m]), ids[m])


def _ascending(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The rows of two ascending groups together, ascending."""
    return a if not len(b) else b if not len(a) else np.sort(np.concatenate((a, b)))


def _find_steps(f: _File, model_ids: dict[str, int], models: list) -> dict[int, steps_mod.Steps]:
    """``analysis.steps.find_steps`` on each process of a file (the one step detector, on the
    aligned clock of the dataset); the labels of framework regions are the name dictionary."""
    out = {}
    n = len(f.typ)
    minus = np.broadcast_to(np.int64(-1), (n,))  # (-1 on every row, written nowhere: read at rows only)
    if f.fw.any():
        typ = f.typ.copy()
        typ[f.fw] = _TYPE_ID["framework_op"]
        label = np.where(f.fw, f.name_c, -1)
    else:  # (no framework region: the types as they are, no label)
        typ, label = f.typ, minus
    # a graph's id where the detector reads one (executions and model loads), -1 elsewhere (the
    # lookup's last entry: ``f.model`` is -1 there)
    model_id = _lut(f.model_v, model_ids)[f.model]
    strings = [str(v) for v in f.name_v[:-1].tolist()]
    start, end = f.start, f.end
    nbytes = minus  # (only the counts read bytes: not figured here)
    groups = [(f.one, None)] if f.one is not None else list(_groups(f.proc))  # (a file is one process)
    for p, rows in groups:
        cols = (typ, start, end, model_id, label, nbytes)
        # (the rows of each type: found once, for the items and the detector)
        by_type: tuple[np.ndarray, np.ndarray] | None = (f.order, f.bounds)
        if rows is not None:
            rows = np.sort(rows)
            cols = tuple(c[rows] for c in cols)
            by_type = None
        st = steps_mod.find_steps(*cols, _TYPE_ID, strings, models, counts=False, by_type=by_type)
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
        flat = int_column(pc.list_flatten(arr))
        parent = int_column(pc.list_parent_indices(arr))
        order = np.argsort(exec_flow)
        pos = np.clip(np.searchsorted(exec_flow, flat, sorter=order), 0, len(order) - 1)
        hit = exec_flow[order][pos] == flat
        np.add.at(n_links, parent[hit], 1)
        linked[parent[hit]] = exec_name[order][pos[hit]]
    for code, m in _groups(label):  # ``label``: codes into ``names``
        ok = bool((n_links[m] == 1).all())
        links.setdefault(str(names[code]), set()).update(set(linked[m].tolist()) if ok else {None})

