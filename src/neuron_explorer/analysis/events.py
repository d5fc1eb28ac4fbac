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

from neuron_explorer.analysis.framework import RegionLinks, find_links, framework_flow_ids, label_types
from neuron_explorer.analysis.reader import EVENT_INDEX, Session, wall_offset_ns
from neuron_explorer.util.arrays import numeric, strings

# argument name in the vocabulary -> output column
ARG_COLUMNS = {"model_id": "model_id", "exec_id": "exec_id", "ret": "ret", "op_str": "op", "seq": "seq",
               "bytes": "bytes", "dtype_str": "dtype", "group_str": "group"}
INT_COLUMNS = ("model_id", "exec_id", "ret", "seq", "bytes")
STR_COLUMNS = ("op", "dtype", "group")
FLOW_EXEC_TYPES = ("nrt_execute", "nc_exec_running")
FLOW_CC_TYPES = ("cc_running", "cc_exec_barrier")
_LOW40 = (1 << 40) - 1


def exec_flow_ids(index: int, exec_id: np.ndarray) -> np.ndarray:
    """The flow joining a host call to its core execution: process index and execution id."""
    return (exec_id & _LOW40) | ((index + 1) << 40)


def _type_infos(s: Session) -> list:
    tinfo = {et.id: et for et in s.trace.event_types} if s.trace is not None else {}
    return [tinfo.get(tid) for tid in range(len(s.type_names))]


def type_groups(s: Session) -> list[str]:
    """Each type id's group ("" when the file does not declare it)."""
    return [et.group if et is not None else "" for et in _type_infos(s)]


def type_sources(s: Session) -> list[str]:
    """Each type id's source ("" when the file does not declare it)."""
    return [et.source if et is not None else "" for et in _type_infos(s)]


def event_indices(s: Session, first: int = 0) -> np.ndarray:
    """Each event's index in the capture: its ``EVENT_INDEX`` column when a filter dropped events,
    else ``first`` (the index of the session's first event: a chunk's start) plus its position."""
    idx = s.events.get(EVENT_INDEX)
    return idx if idx is not None else np.arange(first, first + s.num_events, dtype=np.int64)


def region_links(s: Session, index: int, first: int = 0, chunk: int = 1 << 20) -> RegionLinks:
    """The framework region links of ``s`` (``analysis.framework``), found on the events it holds:
    ``view`` calls it on the whole process before the filters.  Only regions, ``nrt_execute`` and
    ``nc_exec_running`` events are gathered (the type column read a chunk at a time), so a process
    without regions costs one pass over its types."""
    n = s.num_events
    call, core = s.type_id("nrt_execute"), s.type_id("nc_exec_running")
    fw_types = label_types(s.type_names, s.type_args, type_sources(s))
    if not n or not fw_types or call is None:
        return RegionLinks.none()
    nt = len(s.type_names)
    kind = np.zeros(nt + 1, dtype=np.int8)  # 1 region, 2 call, 3 core execution
    kind[fw_types] = 1
    kind[call] = 2
    if core is not None:
        kind[core] = 3
    e = s.events
    fw_set = np.zeros(nt + 1, dtype=bool)
    fw_set[fw_types] = True
    present = np.zeros(nt + 1, dtype=np.int64)
    for lo in range(0, n, chunk):  # which types the process holds: most hold no region at all
        hi = min(n, lo + chunk)
        present += np.bincount(e["type"][lo:hi], minlength=nt + 1)[:nt + 1]
        s.release(hi)
    if not present[fw_set].any():
        return RegionLinks.none()
    parts = []
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        parts.append(np.flatnonzero(kind[np.minimum(e["type"][lo:hi], nt)]) + lo)
        s.release(hi)
    idx = np.concatenate(parts)
    k = kind[np.minimum(e["type"][idx], nt)]
    exec_id = np.full(len(idx), -1, dtype=np.int64)
    for name, code in (("nrt_execute", 2), ("nc_exec_running", 3)):
        col = s.arg(name, "exec_id")
        if col is not None:
            sel = np.flatnonzero(k == code)
            exec_id[sel] = e[col][idx[sel]]
    flow = np.where(exec_id >= 0, exec_flow_ids(index, exec_id), 0)
    return find_links(e["start_ns"][idx], e["end_ns"][idx], e["thread_id"][idx], e["nc_idx"][idx].astype(np.int64),
                      exec_id, k == 1, k == 2, k == 3, flow, event_indices(s, first)[idx])


def _string(strings: list[str], i: int) -> str:
    return strings[i] if 0 <= i < len(strings) else ""


def collective_flow_ids(group: str, op: str, seq: np.ndarray, job: str = "") -> np.ndarray:
    """Flow ids for collectives of one (group, op) of one job (``analysis.jobs``): equal on every
    rank of the job for the same sequence number, different in another job."""
    h = int.from_bytes(hashlib.blake2b(f"{job}\x1d{group}|{op}".encode(), digest_size=8).digest(), "little")
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
          device_links: dict[int, str] | None = None, with_extra: bool = True, first: int = 0,
          job: str = "") -> ProcessEvents:
    """An event's id is ``id_base`` plus its index in the capture (``event_indices``; ``first``:
    the index of the first event of ``s``, a chunk of the process), so a filtered output's
    events keep the ids they have unfiltered.  ``with_extra=False`` leaves ``extra_json`` null
    (for writers that do not show it).  ``job``: the process's job (``analysis.jobs``), part of
    its collectives' flow ids."""
    e = s.events
    n = s.num_events
    off = wall_offset_ns(s) + clock_offset_ns
    empty = np.empty(0, dtype=np.int64)
    typ = e["type"].astype(np.int64) if n else empty
    kept = e.get(EVENT_INDEX)
    cols: dict[str, np.ndarray] = {
        "id": kept + id_base if kept is not None else np.arange(id_base + first, id_base + first + n, dtype=np.int64),
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
    groups, sources = type_groups(s), type_sources(s)
    present = np.flatnonzero(counts).tolist()
    extra = _extra_json(s, typ, present) if with_extra else pa.nulls(n, type=pa.string())
    # flows: host call <-> core execution (same process, same exec id), and collectives across ranks
    exec_ids = [i for i in map(s.type_id, FLOW_EXEC_TYPES) if i is not None]
    if exec_ids and n:
        is_exec = np.zeros(nt + 1, dtype=bool)
        is_exec[exec_ids] = True
        m = _type_mask(typ_c, is_exec, counts)
        m = cols["exec_id"] >= 0 if m is None else m & (cols["exec_id"] >= 0)
        cols["flow_id"] = np.where(m, exec_flow_ids(index, cols["exec_id"]), np.int64(0))
    cc_ids = [i for i in map(s.type_id, FLOW_CC_TYPES) if i is not None]
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
                                                           _string(s.strings, pair & 0xFFFF_FFFF), cols["seq"][sel],
                                                           job)
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
    _framework(s, cols, typ_c, counts, index, type_names, groups, sources, id_base, first)
    model_names = {int(m.id): m.name for m in s.models}
    return ProcessEvents(s, index, clock_offset_ns, n, cols, type_names, groups, sources,
                         s.strings, model_names, extra, profiles)


def _framework(s: Session, cols: dict[str, np.ndarray], typ_c: np.ndarray, counts: np.ndarray, index: int,
               type_names: list[str], groups: list[str], sources: list[str], id_base: int, first: int) -> None:
    """Framework events named by their label, and linked to the calls they issued
    (``analysis.framework``): extends the type lists in place (in every chunk, so the ids are the
    same), retypes the events, and fills ``framework_stream_id`` and ``flow_id2`` from the
    process's links (``s.region_links``, found before the filters; else found on ``s`` itself)."""
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
    fsid = cols["framework_stream_id"] = np.full(n, -1, dtype=np.int64)
    flow2 = cols["flow_id2"] = np.zeros(n, dtype=np.int64)
    links = s.region_links
    if not isinstance(links, RegionLinks):  # (None: not found before the filters)
        links = region_links(s, index, first) if fw_types and counts[fw_types].any() else RegionLinks.none()
    if len(links.events) and n:
        stream, with_region, flow = links.lookup(cols["id"] - id_base)  # (each event's index in the capture)
        has = stream >= 0
        fsid[has] = stream[has] + id_base
        has = with_region >= 0
        flow2[has] = framework_flow_ids(index, with_region[has] + id_base)
        has = flow != 0
        if has.any():
            cols["flow_id"][has] = flow[has]
    fsid[is_fw] = cols["id"][is_fw]
