"""One process's system events as aligned, typed columns: the shape every exporter consumes.

Built from a loaded ``Session`` after filtering: wall-clock timestamps (with the instance's clock
offset applied), per-type argument slots spread into named columns, flow ids that link a host call
to its core execution and the ranks of one collective, and names resolved through the file's own
tables.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from neuron_explorer.analysis.framework import label_types, link_regions
from neuron_explorer.analysis.reader import Session, wall_offset_ns
from neuron_explorer.util.arrays import numeric, strings

# argument name in the vocabulary -> output column
ARG_COLUMNS = {"model_id": "model_id", "exec_id": "exec_id", "ret": "ret", "op_str": "op", "seq": "seq",
               "bytes": "bytes", "dtype_str": "dtype", "group_str": "group"}
INT_COLUMNS = ("model_id", "exec_id", "ret", "seq", "bytes")
STR_COLUMNS = ("op", "dtype", "group")
FLOW_EXEC_TYPES = ("nrt_execute", "nc_exec_running")
FLOW_CC_TYPES = ("cc_running", "cc_exec_barrier")


def _string(strings: list[str], i: int) -> str:
    return strings[i] if 0 <= i < len(strings) else ""


def collective_flow_ids(group: str, op: str, seq: np.ndarray) -> np.ndarray:
    """Flow ids for collectives of one (group, op): equal on every rank for the same sequence number."""
    h = int.from_bytes(hashlib.blake2b(f"{group}|{op}".encode(), digest_size=8).digest(), "little")
    mixed = (np.uint64(h) ^ (seq.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))) & np.uint64(0x3FFF_FFFF_FFFF_FFFF)
    return (mixed | np.uint64(1 << 62)).astype(np.int64)


@dataclass
class ProcessEvents:
    session: Session
    index: int  # position of the process in this view run (stable order)
    clock_offset_ns: int  # instance offset applied on top of the process's wall offset
    n: int
    cols: dict[str, np.ndarray]
    type_names: list[str]
    type_groups: list[str]
    type_sources: list[str]
    strings: list[str]
    model_names: dict[int, str]
    extra_json: pa.Array = field(default_factory=lambda: pa.nulls(0, type=pa.string()))  # per event JSON, null = none
    device_profiles: list[str] = field(default_factory=list)  # ids; cols["device_profile"] indexes it

    @property
    def instance_id(self) -> str:
        return self.session.instance_id

    @property
    def pid(self) -> int:
        return self.session.pid

    @property
    def rank(self) -> int:
        return int(self.session.info.rank) if self.session.info is not None else -1


def _slot_targets(s: Session) -> dict[tuple[str, str], np.ndarray]:
    """(argument slot, output column) -> boolean table over type ids: which types put that slot there."""
    out: dict[tuple[str, str], np.ndarray] = {}
    nt = len(s.type_args)
    for tid, args in enumerate(s.type_args):
        for slot, arg in zip("abcde", args):
            target = ARG_COLUMNS.get(arg) if arg else None
            if target is not None:
                out.setdefault((slot, target), np.zeros(nt + 1, dtype=bool))[tid] = True
    return out


def _type_mask(typ_c: np.ndarray, table: np.ndarray, counts: np.ndarray) -> np.ndarray | None:
    """Per event, whether its type is set in ``table`` (None: every event's is).  Up to four
    present types: one vectorized comparison each (a gather of the table costs ~5x the
    instructions per event); more: the gather."""
    hit = np.flatnonzero(table[:len(counts)] & (counts > 0)).tolist()
    if int(counts[hit].sum()) == len(typ_c):
        return None
    if len(hit) > 4:
        return table[typ_c]
    m = typ_c == hit[0] if hit else np.zeros(len(typ_c), dtype=bool)
    for t in hit[1:]:
        m |= typ_c == t
    return m


def _spread_args(s: Session, cols: dict[str, np.ndarray], typ_c: np.ndarray, counts: np.ndarray) -> None:
    """Argument slots -> named columns (-1 / string id 0 where the type has no such argument).

    Only the (slot, column) pairs of the types present in the chunk count; a column fed by one
    slot is one ``where`` over a per-type mask (a copy when every event feeds it), so a chunk
    costs about two passes per column (decision 0051)."""
    n = len(typ_c)
    pairs: dict[str, list[tuple[str, np.ndarray]]] = {}
    for (slot, target), table in _slot_targets(s).items():
        if (table[:len(counts)] & (counts > 0)).any():
            pairs.setdefault(target, []).append((slot, table))
    e = s.events
    for c in INT_COLUMNS + STR_COLUMNS:
        fill = -1 if c in INT_COLUMNS else 0  # string ids: 0 = ""
        feeds = pairs.get(c, [])
        if len(feeds) == 1:
            slot, table = feeds[0]
            m = _type_mask(typ_c, table, counts)
            cols[c] = e[slot].astype(np.int64) if m is None else np.where(m, e[slot], np.int64(fill))
            continue
        col = cols[c] = np.full(n, fill, dtype=np.int64)
        for slot, table in feeds:
            m = _type_mask(typ_c, table, counts)
            np.copyto(col, e[slot], where=True if m is None else m, casting="unsafe")


def _extra_json(s: Session, typ: np.ndarray, present: list[int]) -> pa.Array:
    """Per event, the attributes that have no column, as a JSON object (null when there are none).

    Built with Arrow's string kernels over the events of each type, then scattered by one ``take``.
    Every Arrow input is made from buffers (``util.arrays``; literals as scalars taken from such an
    array): ``pa.array``/``pa.scalar`` would import pandas (decision 0050).
    """
    n = len(typ)
    e = s.events
    pieces: list[pa.Array] = []
    rows: list[np.ndarray] = []
    quoted = None
    for tid in present:
        leftovers = [(slot, arg) for slot, arg in zip("abcde", s.type_args[tid]) if arg and arg not in ARG_COLUMNS]
        if not leftovers:
            continue
        idx = np.flatnonzero(typ == tid)
        parts: list = []
        for k, (slot, arg) in enumerate(leftovers):
            v = e[slot][idx]
            if arg.endswith("_str"):
                if quoted is None:
                    quoted = strings([json.dumps(x) for x in s.strings] + ["null"])
                val = quoted.take(numeric(np.where((v >= 0) & (v < len(s.strings)), v, len(s.strings)), pa.int64()))
                key = arg[:-4]
            else:
                val = pc.cast(numeric(v, pa.int64()), pa.string())
                key = arg
            parts += [("{" if k == 0 else ",") + json.dumps(key) + ":", val]
        parts.append("}")
        lits = strings([p for p in parts if isinstance(p, str)] + [""])
        it = iter(range(len(lits)))
        parts = [lits[next(it)] if isinstance(p, str) else p for p in parts]
        pieces.append(pc.binary_join_element_wise(*parts, lits[len(lits) - 1]))
        rows.append(idx)
    if not pieces:
        return pa.nulls(n, type=pa.string())
    if len(pieces) == 1:
        return _spread_strings(pieces[0].cast(pa.string()), rows[0], n)
    values = pa.concat_arrays([pa.nulls(1, type=pa.string())] + [p.cast(pa.string()) for p in pieces])
    take = np.zeros(n, dtype=np.int64)
    pos = 1
    for idx in rows:
        take[idx] = np.arange(pos, pos + len(idx))
        pos += len(idx)
    return values.take(numeric(take))


def _spread_strings(piece: pa.Array, rows: np.ndarray, n: int) -> pa.Array:
    """``n`` rows, null but for ``rows`` (ascending), which hold ``piece``'s strings in order: its
    data buffer as it is, offsets and validity built around it (no ``take`` over every row)."""
    k = len(piece)
    off = np.frombuffer(piece.buffers()[1], dtype=np.int32, count=piece.offset + k + 1)[piece.offset:]
    lengths = np.zeros(n + 1, dtype=np.int32)
    lengths[rows + 1] = np.diff(off)
    offsets = np.cumsum(lengths, dtype=np.int32)
    offsets += off[0]  # (a sliced piece starts inside its buffer)
    valid = np.zeros(n, dtype=bool)
    valid[rows] = True
    if piece.null_count:  # (a joined piece is null where one of its parts is; none here)
        bits = np.unpackbits(np.frombuffer(piece.buffers()[0], dtype=np.uint8), count=piece.offset + k,
                             bitorder="little")[piece.offset:]
        valid[rows] = bits.astype(bool)
    return pa.Array.from_buffers(pa.string(), n, [pa.py_buffer(np.packbits(valid, bitorder="little")),
                                                  pa.py_buffer(offsets), piece.buffers()[2] or pa.py_buffer(b"")],
                                 null_count=n - int(np.count_nonzero(valid)))


def build(s: Session, index: int, clock_offset_ns: int, id_base: int,
          device_links: dict[int, str] | None = None, with_extra: bool = True) -> ProcessEvents:
    """``with_extra=False`` leaves ``extra_json`` null (for writers that do not show it)."""
    e = s.events
    n = s.num_events
    off = wall_offset_ns(s) + clock_offset_ns
    empty = np.empty(0, dtype=np.int64)
    typ = e["type"].astype(np.int64) if n else empty
    cols: dict[str, np.ndarray] = {
        "id": np.arange(id_base, id_base + n, dtype=np.int64),
        "type": typ,
        "start_ts": e["start_ns"] + off if n else empty,
        "end_ts": e["end_ns"] + off if n else empty,
        "nc_idx": e["nc_idx"].astype(np.int64) if n else empty,
        "thread_id": e["thread_id"] if n else empty,
    }
    nt = len(s.type_args)
    typ_c = np.minimum(typ, nt) if n else typ  # unknown type ids index the all-False entry
    counts = np.bincount(typ_c, minlength=nt + 1)[:nt] if n else np.zeros(nt, dtype=np.int64)
    _spread_args(s, cols, typ_c, counts)
    cols["flow_id"] = np.zeros(n, dtype=np.int64)
    groups, sources = [], []
    trace = s.trace
    tinfo = {et.id: et for et in trace.event_types} if trace is not None else {}
    for tid, name in enumerate(s.type_names):
        et = tinfo.get(tid)
        groups.append(et.group if et is not None else "")
        sources.append(et.source if et is not None else "")
    present = np.flatnonzero(counts).tolist()
    extra = _extra_json(s, typ, present) if with_extra else pa.nulls(n, type=pa.string())
    # flows: host call <-> core execution (same process, same exec id), and collectives across ranks
    exec_ids = [s.type_id(t) for t in FLOW_EXEC_TYPES if s.type_id(t) is not None]
    if exec_ids and n:
        is_exec = np.zeros(nt + 1, dtype=bool)
        is_exec[exec_ids] = True
        m = _type_mask(typ_c, is_exec, counts)
        m = cols["exec_id"] >= 0 if m is None else m & (cols["exec_id"] >= 0)
        flow = cols["exec_id"] & ((1 << 40) - 1)
        flow |= (index + 1) << 40
        cols["flow_id"] = np.where(m, flow, np.int64(0))
    cc_ids = [s.type_id(t) for t in FLOW_CC_TYPES if s.type_id(t) is not None]
    if cc_ids and n:
        is_cc = np.zeros(nt + 1, dtype=bool)
        is_cc[cc_ids] = True
        m = _type_mask(typ_c, is_cc, counts)
        cc_idx = np.arange(n) if m is None else np.flatnonzero(m)
        if len(cc_idx):
            # string ids: inside the file's table (checked at load) or 0 when the type has no such argument
            pairs = (cols["group"][cc_idx] << 32) | cols["op"][cc_idx]
            for pair in np.unique(pairs).tolist():
                sel = cc_idx[pairs == pair]
                cols["flow_id"][sel] = collective_flow_ids(_string(s.strings, pair >> 32),
                                                           _string(s.strings, pair & 0xFFFF_FFFF), cols["seq"][sel])
    # nc_exec_running -> the device profile that holds its execution
    cols["device_profile"] = np.full(n, -1, dtype=np.int64)
    profiles = sorted(set((device_links or {}).values()))
    tid_exec = s.type_id("nc_exec_running")
    if profiles and tid_exec is not None and n:
        pidx = {p: i for i, p in enumerate(profiles)}
        m = np.flatnonzero(typ == tid_exec)
        links = device_links or {}
        cols["device_profile"][m] = [pidx.get(links.get(e, ""), -1) for e in cols["exec_id"][m].tolist()]
    type_names = list(s.type_names)
    _framework(s, cols, typ_c, counts, index, type_names, groups, sources)
    model_names = {int(m.id): m.name for m in s.models}
    return ProcessEvents(s, index, clock_offset_ns, n, cols, type_names, groups, sources,
                         s.strings, model_names, extra, profiles)


def _framework(s: Session, cols: dict[str, np.ndarray], typ_c: np.ndarray, counts: np.ndarray, index: int,
               type_names: list[str], groups: list[str], sources: list[str]) -> None:
    """Framework events named by their label, and linked to the calls they issued
    (``analysis.framework``): extends the type lists in place (in every chunk, so the ids are the
    same), retypes the events.  A chunk without framework events skips the per-event work."""
    fw_types = label_types(s.type_names, s.type_args, sources)
    n = len(typ_c)
    nt = len(counts)
    is_fw = np.zeros(n, dtype=bool)
    if fw_types:
        tab = np.zeros(nt + 1, dtype=bool)
        tab[fw_types] = True
        m = _type_mask(typ_c, tab, counts) if counts[fw_types].any() else is_fw
        is_fw = np.ones(n, dtype=bool) if m is None else m
        g, src = groups[fw_types[0]], sources[fw_types[0]]
        base = len(type_names)  # a type per string: the same ids in every chunk of the process
        type_names += [x or type_names[fw_types[0]] for x in s.strings]  # no label: the type's name
        groups += [g] * len(s.strings)
        sources += [src] * len(s.strings)
        labels = s.events["a"][is_fw] if n else np.empty(0, dtype=np.int64)
        cols["type"] = cols["type"].copy()
        cols["type"][is_fw] = base + np.clip(labels, 0, len(s.strings) - 1)

    def of(name: str) -> np.ndarray:
        t = s.type_id(name)
        return typ_c == t if t is not None else np.zeros(n, dtype=bool)

    if not is_fw.any():  # (link_regions reads the calls only when there are framework events)
        link_regions(cols, is_fw, is_fw, is_fw, index)
        return
    link_regions(cols, is_fw, of("nrt_execute"), of("nc_exec_running"), index)
