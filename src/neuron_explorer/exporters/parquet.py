"""Parquet output: one dataset per table, partitioned by instance and process.

``SystemProfileEvents`` keeps the real table's columns (id, name, start_ts, end_ts, duration_ns,
trace_event_source, instance_id, process_id, thread_id, nc_idx, pcore_idx, worker_gid, flow_id,
framework_stream_id, extra_attributes_json) and adds typed columns for what the events carry.
Event and counter tables are written one process at a time under
``<Table>/instance=<id>/process=<pid>/part-0.parquet`` (hive-style, so DuckDB, pandas or Spark read a
whole fleet as one dataset without loading it); the small per-profile tables are single files.
Names read from the capture become path components only through ``safe_component``
(percent-encoded: a crafted instance id cannot leave the output directory); the data columns keep
the real values.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from neuron_explorer.analysis.counters import process_counters, session_memory_limit
from neuron_explorer.analysis.device import DeviceProfileView, events_table as device_table
from neuron_explorer.analysis.events import ProcessEvents
from neuron_explorer.analysis.reader import wall_offset_ns
from neuron_explorer.contracts import dataset
from neuron_explorer.contracts.dataset import (
    COUNTERS,
    DEVICE_EVENTS,
    DEVICE_PROFILES,
    DIFF_ITEMS,
    EVENT_SUMMARY,
    EVENTS,
    METADATA,
    MODELS,
    SCHEMA_DOC,
    WARNINGS,
)
from neuron_explorer.contracts.env import diff_items as diff_items_wanted, parquet_writer
from neuron_explorer.contracts.tracks import session_name
from neuron_explorer.exporters import diff_items, event_overview, event_summary
from neuron_explorer.exporters.interface import Piece, ProcessTarget, ProcessWriter, RunInfo
from neuron_explorer.util.arrays import numeric, repeated, rows_table, strings
from neuron_explorer.util.log import get_logger
from neuron_explorer.util.names import safe_component

if TYPE_CHECKING:
    from neuron_explorer.exporters.parquet_file import ParquetFileWriter

# Encodings chosen per column by measuring write time and size (docs/decisions/0004-parquet-write-path.md):
# strings as dictionaries, ids/timestamps/counters as DELTA_BINARY_PACKED (sorted or slowly varying:
# faster to write than plain and smaller), small integers plain; Snappy pages (every Parquet reader has
# it; 20-25% less CPU than zstd for +30% size once the integers are delta-coded); min/max statistics
# only where range queries need them.
DICT_COLUMNS = ["name", "trace_event_source", "instance_id", "event_group", "model_name", "op", "dtype",
                "group_ranks", "device_profile_id"]
DELTA_COLUMNS = ["id", "start_ts", "end_ts", "duration_ns", "process_id", "exec_id", "seq", "bytes",
                 "flow_id.list.element"]
STATS_COLUMNS = ["id", "name", "start_ts", "end_ts", "nc_idx", "worker_gid", "process_id"]
WRITE_OPTIONS = dict(compression="snappy", use_dictionary=DICT_COLUMNS, write_batch_size=65536,
                     write_statistics=STATS_COLUMNS,
                     column_encoding={c: "DELTA_BINARY_PACKED" for c in DELTA_COLUMNS})

CREATED_BY = "neuron-explorer (own Parquet writer)"


def _with_nulls(a: np.ndarray, typ: pa.DataType, null: np.ndarray | None) -> pa.Array:
    """An Arrow array over ``a``'s buffer with the validity bitmap built directly from ``null``
    (``pa.array(..., mask=)`` costs 3-4x more for the same result)."""
    a = np.ascontiguousarray(a)
    nulls = 0 if null is None else int(np.count_nonzero(null))
    if null is None or not nulls:
        return pa.Array.from_buffers(typ, len(a), [None, pa.py_buffer(a)])
    valid = np.packbits(~null, bitorder="little")
    return pa.Array.from_buffers(typ, len(a), [pa.py_buffer(valid), pa.py_buffer(a)], null_count=nulls)


@dataclass
class DictIds:
    """A dictionary-string column as per-row ids and a lookup table, not yet gathered: our writer
    encodes it from the ids in one C pass (``_pqenc.dict_page``), Arrow's writer takes ``arrays()``.

    ``lut[id + offset]`` is the row's position in ``values`` (distinct strings); rows whose
    position is ``null_pos`` are null (a sentinel past ``values``; -1: no nulls), and so are ids
    outside ``lut`` when the column has nulls.  ``null_value``: the position Arrow's indices hold
    under a null slot (in range, hidden by the validity bitmap)."""

    ids: np.ndarray
    lut: np.ndarray
    values: list[str]
    offset: int = 0
    null_pos: int = -1
    null_value: int = 0

    def arrays(self) -> tuple[np.ndarray, list[str], np.ndarray | None]:
        """(int32 positions, values, null mask or None), as Arrow's writer takes them."""
        k = self.ids + self.offset if self.offset else self.ids
        inside = (k >= 0) & (k < len(self.lut))
        if inside.all():
            idx = self.lut[k]
        elif self.null_pos >= 0:
            idx = np.where(inside, self.lut[np.where(inside, k, 0)], self.null_pos)
        else:
            raise ValueError(f"dictionary id outside its table of {len(self.lut)}")
        if self.null_pos < 0:
            return idx.astype(np.int32, copy=False), self.values, None
        null = idx == self.null_pos
        return np.where(null, self.null_value, idx).astype(np.int32), self.values, null


def _dict_ids(ids: np.ndarray, values: list[str], null_index: int | None = None, lut: np.ndarray | None = None,
              offset: int = 0, used: np.ndarray | None = None) -> DictIds:
    """The ``DictIds`` of rows holding ``ids`` (+ ``offset``) into ``values`` (through ``lut`` when
    given, else directly); rows at ``null_index`` of ``values`` are null.

    ``used`` (direct case): per entry of ``values``, non-zero when some row holds it.  Only those
    values enter the dictionary: readers take a column's dictionary for its set of values (pandas
    makes each a category, ``value_counts`` lists them all), so a ``name`` column over the whole
    vocabulary and string table showed dozens of names no event had.  None: every entry is held.

    Repeated values (e.g. the source or group of each event type) are merged first: Arrow's
    Parquet writer cannot keep a dictionary with duplicates and falls back to plain strings,
    for the whole column chunk (docs/decisions/0004-parquet-write-path.md), and a dictionary
    page must not repeat a value either.  Only rows at ``null_index`` itself are null, not
    other rows with the same string; the null entry's own value is in the dictionary only when
    another held entry has it.  Entries no row holds map to -1 (an error if a row held one).
    """
    keys = range(len(values)) if used is None else np.flatnonzero(used[:len(values)]).tolist()
    first: dict[str, int] = {}
    table = np.full(len(values) + 1, -1, dtype=np.int32)  # (the last entry: a spare no row holds)
    for i in keys:
        if i != null_index:
            table[i] = first.setdefault(values[i], len(first))
    merged = list(first)
    null_pos = -1
    if null_index is not None:
        null_pos = len(merged)
        table[null_index] = null_pos
    table = table[:len(values)] if lut is None else table[lut]
    return DictIds(ids, table, merged, offset, null_pos, 0)


def _presence(ids: np.ndarray, k: int) -> np.ndarray | None:
    """Non-zero where some id equals the index (0..k-1); None when an id is outside: the C
    presence pass when the encoders are built, else ``np.bincount``."""
    if OWN_WRITER and ids.dtype == np.int64:
        flags = own.presence(ids, k)
        return None if flags is None else np.frombuffer(flags, dtype=np.uint8)
    try:
        counts = np.bincount(ids, minlength=k)  # (raises on negative ids)
    except ValueError:
        return None
    return None if len(counts) > k else counts


def _remap_strings(ids: np.ndarray, strings: list[str]) -> DictIds:
    """String ids of the capture's table -> a dictionary of the strings present (id 0 / "" -> null).

    A presence count and a lookup table instead of ``np.unique``: linear, no sort.
    """
    k = len(strings) + 1
    counts = _presence(ids, k)
    if counts is None:  # out-of-range ids (damaged input) -> the "" slot
        ids = np.clip(ids, 0, len(strings))
        counts = np.bincount(ids, minlength=k)
    present = np.flatnonzero(counts)
    lut = np.full(k, len(present), dtype=np.int32)  # (ids never present: the -1 entry)
    lut[present] = np.arange(len(present), dtype=np.int32)
    vals = [strings[i] if i < len(strings) else "" for i in present.tolist()]
    empty = vals.index("") if "" in vals else None
    return _dict_ids(ids, vals, empty, lut)


def _dict_array(d: DictIds) -> pa.DictionaryArray:
    """Dictionary column from ``DictIds`` (indices in range by construction, so not re-checked)."""
    idx, values, null = d.arrays()
    indices = _with_nulls(idx, pa.int32(), null)
    return pa.DictionaryArray.from_arrays(indices, strings(values, null_is_none=False), safe=False)


def _flow_offsets(flow: np.ndarray, flow2: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``flow_id`` as (int32 offsets, values) of a list per event: its flow, then its framework
    flow (0 = none; left out)."""
    n = len(flow)
    has = flow != 0
    if flow2 is not None and flow2.any():
        both = np.stack([flow, flow2], axis=1).ravel()
        keep = both != 0
        counts = keep.reshape(n, 2).sum(axis=1)
        values = both[keep]
    else:
        counts, values = has, flow[has]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return offsets, values.astype(np.int64, copy=False)


_DICT = pa.dictionary(pa.int32(), pa.string())
_I64, _I32 = pa.int64(), pa.int32()
EVENTS_SCHEMA = pa.schema([
    ("id", _I64), ("name", _DICT), ("start_ts", _I64), ("end_ts", _I64), ("duration_ns", _I64),
    ("trace_event_source", _DICT), ("instance_id", _DICT), ("process_id", _I64), ("thread_id", _I64),
    ("nc_idx", _I32), ("pcore_idx", _I32), ("worker_gid", _I32), ("flow_id", pa.list_(_I64)),
    ("framework_stream_id", _I64), ("extra_attributes_json", pa.string()), ("event_group", _DICT),
    ("model_name", _DICT), ("exec_id", _I64), ("op", _DICT), ("seq", _I64), ("bytes", _I64), ("dtype", _DICT),
    ("group_ranks", _DICT), ("ret", _I32), ("device_profile_id", _DICT)])


def _ids(ids: np.ndarray) -> tuple:
    """The ``id`` column: consecutive by construction (``events.build``), so our writer encodes it
    from its first value (``encode_const`` with step 1) unless the ends say otherwise."""
    n = len(ids)
    if n and int(ids[-1]) - int(ids[0]) == n - 1:
        return ("range", ids, int(ids[0]))
    return ("int", ids, None)


def event_columns(pe: ProcessEvents) -> dict[str, tuple]:
    """Each column of ``SystemProfileEvents`` for one chunk, in schema order, as numpy parts both
    writers take: ("int", values, null mask | None), ("opt", values: null where negative),
    ("range", consecutive values, first), ("flows", flow, second flow | None: a list of the non-zero
    ones a row), ("dict", DictIds),
    ("str", Arrow string array), ("list", (int32 offsets, int64 values)), ("const", value, rows)."""
    c = pe.cols
    n = pe.n
    typ = c["type"]
    mids = c["model_id"]
    n_models = int(mids.max()) + 1 if n and mids.max() >= 0 else 0
    model_dict = [""] + [pe.model_names.get(i, f"model_{i}") for i in range(n_models)]
    nc = c["nc_idx"].astype(np.int32)
    fsid = c.get("framework_stream_id")
    # the types, models and device profiles the chunk's rows hold: their columns' dictionaries
    types = _presence(typ, len(pe.type_names))
    models = _presence(np.maximum(mids, -1) + 1, len(model_dict))
    dprof = c["device_profile"]
    profiles = _presence(np.maximum(dprof, -1) + 1, len(pe.device_profiles) + 1)

    def opt(a: np.ndarray) -> tuple:  # negative = none (the mask is made by the writer that needs it)
        return ("opt", a)

    return {
        "id": _ids(c["id"]),
        "name": ("dict", _dict_ids(typ, pe.type_names, used=types)),
        "start_ts": ("int", c["start_ts"], None),
        "end_ts": ("int", c["end_ts"], None),
        "duration_ns": ("int", c["end_ts"] - c["start_ts"], None),
        "trace_event_source": ("dict", _dict_ids(typ, pe.type_sources, used=types)),
        "instance_id": ("dict", _dict_ids(np.zeros(n, dtype=np.int32), [pe.instance_id])),
        "process_id": ("const", pe.pid, n),
        "thread_id": ("int", c["thread_id"], None),
        "nc_idx": ("int", nc, None),
        "pcore_idx": ("int", nc, None),
        "worker_gid": ("const", pe.rank, n),
        "flow_id": ("flows", c["flow_id"], c.get("flow_id2")),
        "framework_stream_id": opt(fsid if fsid is not None else np.full(n, -1, dtype=np.int64)),
        "extra_attributes_json": ("str", pe.extra_json),
        "event_group": ("dict", _dict_ids(typ, pe.type_groups, used=types)),
        "model_name": ("dict", _dict_ids(mids, model_dict, 0, offset=1, used=models)),
        "exec_id": opt(c["exec_id"]),
        "op": ("dict", _remap_strings(c["op"], pe.strings)),
        "seq": opt(c["seq"]),
        "bytes": opt(c["bytes"]),
        "dtype": ("dict", _remap_strings(c["dtype"], pe.strings)),
        "group_ranks": ("dict", _remap_strings(c["group"], pe.strings)),
        "ret": opt(c["ret"]),
        "device_profile_id": ("dict", _dict_ids(dprof, [""] + list(pe.device_profiles), 0, offset=1,
                                                used=profiles)),
    }


def events_table(pe: ProcessEvents) -> pa.Table:
    """The chunk as an Arrow table (Arrow's writer: the fallback without the C encoders)."""
    arrays = []
    for f, (kind, *parts) in zip(EVENTS_SCHEMA, event_columns(pe).values()):
        if kind == "opt":
            kind, parts = "int", [parts[0], parts[0] < 0]
        elif kind == "range":
            kind, parts = "int", [parts[0], None]
        elif kind == "flows":
            kind, parts = "list", [_flow_offsets(*parts)]
        if kind == "int":
            a, null = parts
            arrays.append(_with_nulls(a.astype(f.type.to_pandas_dtype(), copy=False), f.type, null))
        elif kind == "const":
            value, rows = parts
            arrays.append(_with_nulls(np.full(rows, value, dtype=f.type.to_pandas_dtype()), f.type, None))
        elif kind == "dict":
            arrays.append(_dict_array(parts[0]))
        elif kind == "list":
            offsets, values = parts[0]
            arrays.append(pa.ListArray.from_arrays(numeric(offsets), numeric(values, pa.int64())))
        else:
            arrays.append(parts[0])
    return pa.Table.from_arrays(arrays, schema=EVENTS_SCHEMA)


try:
    from neuron_explorer.exporters import parquet_file as own
    OWN_WRITER = True
except ImportError:  # the C encoders are not built: Arrow's writer (``own`` is then never used)
    OWN_WRITER = False


def _leaves() -> list:
    """The columns of ``EVENTS_SCHEMA`` for our writer, with the encodings of WRITE_OPTIONS
    (docs/decisions/0040-own-parquet-encoder.md: the small integer columns are delta-coded too)."""
    out = []
    for f in EVENTS_SCHEMA:
        if pa.types.is_dictionary(f.type):
            kind, ptype = "dict", own.BYTE_ARRAY
        elif pa.types.is_list(f.type):
            kind, ptype = "list", own.INT64
        elif pa.types.is_string(f.type):
            kind, ptype = "str", own.BYTE_ARRAY
        else:
            kind, ptype = "int", own.INT64 if f.type == pa.int64() else own.INT32
        out.append(own.Leaf(f.name, kind, ptype, delta=True, stats=f.name in STATS_COLUMNS,
                            snappy=f.name not in SNAPPY_OFF))
    return out


# delta-coded timestamps: Snappy shrinks their pages by <6% (measured), for ~40% of its time
SNAPPY_OFF = {"start_ts", "end_ts", "duration_ns"}


def encode_chunk(leaves: list, pe: ProcessEvents) -> list:
    """The chunk's column chunks, encoded by our writer.  A column that is the same array as an
    earlier one (``pcore_idx`` is ``nc_idx``) reuses its pages; only the statistics differ."""
    out = []
    done: dict[tuple, tuple] = {}  # (id of the array, physical type, Snappy) -> (array, its column chunk)
    for leaf, (kind, *parts) in zip(leaves, event_columns(pe).values()):
        if kind == "int":
            key = (id(parts[0]), leaf.ptype, leaf.snappy)
            if key in done and parts[1] is None:
                first, prev = done[key]
                out.append(own.Encoded(prev.pages, prev.dict_pages, prev.num_values, prev.uncompressed,
                                       prev.encodings, own.int_stats(leaf, first, 0) if leaf.stats else None))
                continue
            out.append(own.encode_int(leaf, *parts))
            if parts[1] is None:
                done[key] = (parts[0], out[-1])
        elif kind == "opt":
            out.append(own.encode_int_nonneg(leaf, parts[0]))
        elif kind == "range":
            out.append(own.encode_const(leaf, parts[1], len(parts[0]), step=1))
        elif kind == "flows":
            out.append(own.encode_flows(leaf, *parts))
        elif kind == "const":
            out.append(own.encode_const(leaf, *parts))
        elif kind == "dict":
            d = parts[0]
            out.append(own.encode_dict_ids(leaf, d.ids, d.lut, d.values, d.offset, d.null_pos))
        elif kind == "list":
            out.append(own.encode_list(leaf, *parts[0]))
        else:
            out.append(own.encode_strings(leaf, parts[0]))
    return out


def open_process(target: ProcessTarget) -> "ParquetProcess":
    return ParquetProcess(target)


class ParquetProcess(ProcessWriter):
    """One process's partition files (events, counters, device events) under the run's work area,
    and its rows of the single-file tables, which ``assemble`` writes once for the run."""

    def __init__(self, target: ProcessTarget) -> None:
        super().__init__(target)
        self.tables: dict[str, list[dict]] = {METADATA: [], MODELS: [], DEVICE_PROFILES: []}
        self.events = 0
        self.last: ProcessEvents | None = None
        self._ev_writer: pq.ParquetWriter | None = None
        self._own: ParquetFileWriter | None = None  # our writer, when the encoders are built
        self._leaves = _leaves() if OWN_WRITER and parquet_writer() == "own" else None
        self._ev_path: str | None = None
        self._summary: list[pa.Table] = []  # per row group: the viewer's summary of it (event_summary)
        self._summary_scratch: dict[str, np.ndarray] = {}  # its work arrays, reused from chunk to chunk

    def _part(self, table: str, instance_id: str, pid: int, name: str) -> str:
        d = os.path.join(self.target.work, table, f"instance={safe_component(instance_id)}", f"process={pid}")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, name)
        self.written.append(path)
        return path

    def add_devices(self, views: list[DeviceProfileView]) -> None:
        """The device profiles of the process (DeviceProfileEvents + DeviceProfiles rows)."""
        for v in views:
            self.tables[DEVICE_PROFILES].append(dict(v.summary, session=session_name(v.session.path)))
            if v.n:
                path = self._part(DEVICE_EVENTS, v.session.instance_id, v.session.pid,
                                  f"{safe_component(v.profile_id)}.parquet")
                pq.write_table(device_table(v, (self.target.index + 1) << 40), path, compression="zstd")

    def add(self, pe: ProcessEvents) -> None:
        """A chunk of the process's events (one file per process and table, a row group a chunk)."""
        if pe.n:
            if self._ev_path is None:
                self._ev_path = self._part(EVENTS, pe.instance_id, pe.pid, f"part-{pe.index}.parquet")
            if self._leaves is not None:
                if self._own is None:
                    self._own = own.ParquetFileWriter(self._ev_path, self._leaves, EVENTS_SCHEMA, CREATED_BY)
                self._own.write_row_group(pe.n, encode_chunk(self._leaves, pe))
            else:
                t = events_table(pe)
                if self._ev_writer is None:
                    self._ev_writer = pq.ParquetWriter(self._ev_path, t.schema, **WRITE_OPTIONS)
                self._ev_writer.write_table(t, row_group_size=1 << 20)
            c = pe.cols
            self._summary.append(event_summary.chunk(c["thread_id"], c["nc_idx"], c["type"], c["start_ts"], c["end_ts"],
                                                     pe.type_names, pe.type_sources, pe.type_groups,
                                                     self._summary_scratch))
        self.events += pe.n
        self.last = pe

    def close(self) -> Piece:
        """The process's counters, models and metadata row."""
        self._close_events()
        pe = self.last
        if self._ev_path is not None and pe is not None:
            event_summary.write(self._part(EVENT_SUMMARY, pe.instance_id, pe.pid, os.path.basename(self._ev_path)),
                                self._summary, os.path.getsize(self._ev_path), self.events)
            self._summary_scratch.clear()
            if diff_items_wanted():
                self._write_diff_items(pe)
        if pe is not None:
            ct = counters_table(pe)
            if ct.num_rows:
                pq.write_table(ct, self._part(COUNTERS, pe.instance_id, pe.pid, f"part-{pe.index}.parquet"),
                               compression="zstd")
            g = self.target.grouping
            self.tables[METADATA].append(dict(meta_row(pe, self.target.offset),
                                              display_name=self.target.display_name, events=self.events,
                                              system_trace_primary_group=g.primary_text,
                                              system_trace_secondary_group=g.secondary_text,
                                              group_pid=self.target.shown_pid, process_index=pe.index))
            self.tables[MODELS] += model_rows(pe)
        return Piece(tables=self.tables)

    def _write_diff_items(self, pe: ProcessEvents) -> None:
        """What ``neuron-explorer diff`` takes from the events file, kept beside it (``diff_items``):
        an optional speed-up of a diff, so one that cannot be made is left out (the diff reads the
        events instead) and never fails the run."""
        assert self._ev_path is not None
        kinds: dict[str, str] = {}
        for m in pe.session.models:  # (as ProfileModels gives them: the first of a name)
            kinds.setdefault(m.name, m.kind)
        path = self._part(DIFF_ITEMS, pe.instance_id, pe.pid, os.path.basename(self._ev_path))
        try:
            if diff_items.write(self._ev_path, path, kinds):
                return
        except (ValueError, pa.ArrowException) as e:
            get_logger(__name__).debug(f"no diff items for {self._ev_path}: {str(e).splitlines()[:1]}")
        with contextlib.suppress(OSError):
            os.unlink(path)

    def _close_events(self) -> None:
        w, self._ev_writer = self._ev_writer, None
        if w is not None:
            w.close()
        o, self._own = self._own, None
        if o is not None:
            o.close()

    def abort(self) -> None:
        try:
            self._close_events()
        except Exception:  # (the error that stopped the process is the one reported)
            pass


def model_rows(pe: ProcessEvents) -> list[dict]:
    """ProfileModels rows: the graphs a process compiled and loaded."""
    session = session_name(pe.session.path)
    return [{"instance_id": pe.instance_id, "process_id": pe.pid, "session": session, "model_id": int(m.id),
             "model_name": m.name,
             "neff_name": m.neff_name, "graph_hash": m.graph_hash, "backend": m.backend, "kind": m.kind,
             "compile_ns": int(m.compile_ns), "nc_idx": int(m.nc_idx), "source_location": m.source_location,
             "module_path": m.module_path, "num_nodes": int(m.num_nodes), "signature": m.signature}
            for m in pe.session.models]


def write_tables(root: str, pieces: list[Piece], warnings: list[tuple[str, str]]) -> None:
    """The single-file tables under ``root``, from the rows of every process (in order), and the
    marker that lets a later run replace this output (and nothing else)."""

    def write_rows(name: str, rows: list[dict]) -> None:
        cols = [c for c, _ in SCHEMA_DOC[name]]
        t = rows_table(rows, cols) if rows else pa.Table.from_arrays([strings([]) for _ in cols], names=cols)
        pq.write_table(t, os.path.join(root, dataset.table_file(name)))

    for name in (METADATA, MODELS):
        write_rows(name, [r for p in pieces for r in p.tables.get(name, [])])
    write_rows(WARNINGS, [{"message": m, "path": p} for m, p in warnings])
    write_rows(DEVICE_PROFILES, [r for p in pieces for r in p.tables.get(DEVICE_PROFILES, [])])
    _write_overview(root)
    dataset.write_marker(root)


def _write_overview(root: str) -> None:
    """The viewer's events overview (``event_overview``): an optional speed-up of its first paint, so
    one that cannot be made is left out (the viewer reads the per-process summaries instead) and
    never fails the run."""
    try:
        event_overview.write(root)
    except (OSError, ValueError, pa.ArrowException) as e:
        get_logger(__name__).debug(f"no events overview for {root}: {str(e).splitlines()[:1]}")
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(root, dataset.table_file(dataset.EVENT_OVERVIEW)))


def assemble(path: str, pieces: list[Piece], run: RunInfo) -> None:
    """Finish the dataset in the work area and move it into place (replacing only an earlier
    output of ours, see ``view.output``)."""
    write_tables(run.work, pieces, run.warnings)
    if run.summary is not None:  # the Summary page's document (docs/summary.md)
        with open(os.path.join(run.work, dataset.SUMMARY_FILE), "w") as f:
            f.write(json.dumps(run.summary, separators=(",", ":")))
    dataset.replace_dir(run.work, path)


def counters_table(pe: ProcessEvents) -> pa.Table:
    parts = []
    session = session_name(pe.session.path)
    for name, (ts, vals, unit) in process_counters(pe).items():
        k = len(ts)
        parts.append(pa.Table.from_arrays([  # from buffers: pa.array would import pandas (decision 0050)
            repeated(pe.instance_id, k), numeric(np.full(k, pe.pid, dtype=np.int64)), numeric(ts, pa.int64()),
            repeated(name, k), numeric(np.asarray(vals, dtype=np.float64)), repeated(unit, k), repeated(session, k)],
            names=["instance_id", "process_id", "ts", "counter", "value", "unit", "session"]))
    if not parts:
        return pa.Table.from_arrays([numeric(np.zeros(0, dtype=np.int64))], names=["ts"])
    return pa.concat_tables(parts)


def meta_row(pe: ProcessEvents, offset) -> dict:
    s = pe.session
    info = s.info
    return {
        "instance_id": pe.instance_id, "process_id": pe.pid,
        "process_tag": info.process_tag if info else "", "rank": int(info.rank) if info else -1,
        "local_rank": int(info.local_rank) if info else 0, "world_size": int(info.world_size) if info else 1,
        "device_kind": info.device_kind if info else "", "nd_idx": int(info.nd_idx) if info else 0,
        "start_wall_ns": int(info.start_wall_ns) if info else 0, "end_reason": info.end_reason if info else "",
        "dropped_events": int(sum(c.dropped for c in info.cores)) if info else 0,
        "wall_offset_ns": wall_offset_ns(s), "clock_offset_ns": offset.offset_ns if offset else 0,
        "clock_offset_uncertainty_ns": offset.uncertainty_ns if offset else 0,
        "clock_offset_samples": offset.samples if offset else 0,
        "clock_offset_method": offset.method if offset else "none",
        "session_path": s.path, "session": session_name(s.path),
        "versions_json": json.dumps(dict(info.versions)) if info else "{}",
        "config_json": json.dumps(dict(info.config)) if info else "{}",
        # the process's cgroup memory limit where the capture recorded one below the host's memory
        # (decision 0182); 0 and "" without: the viewer draws it on the process's memory tracks (0186)
        **(session_memory_limit(s) or {"memory_limit_bytes": 0, "memory_limit_source": "", "memory_limit_cgroup": ""}),
    }
