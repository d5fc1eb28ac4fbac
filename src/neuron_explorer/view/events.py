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

from .reader import Session, wall_offset_ns

# argument name in the vocabulary -> output column
ARG_COLUMNS = {"model_id": "model_id", "exec_id": "exec_id", "ret": "ret", "op_str": "op", "seq": "seq",
               "bytes": "bytes", "dtype_str": "dtype", "group_str": "group"}
INT_COLUMNS = ("model_id", "exec_id", "ret", "seq", "bytes")
STR_COLUMNS = ("op", "dtype", "group")
FLOW_EXEC_TYPES = ("nrt_execute", "nc_exec_running")
FLOW_CC_TYPES = ("cc_running", "cc_exec_barrier")


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
    extra_json: list[str | None] = field(default_factory=list)  # per event, None = no extra attributes
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

    def names(self) -> np.ndarray:
        return np.array(self.type_names, dtype=object)[self.cols["type"]] if self.n else np.empty(0, dtype=object)


def build(s: Session, index: int, clock_offset_ns: int, id_base: int,
          device_links: dict[int, str] | None = None) -> ProcessEvents:
    e = s.events
    n = s.num_events
    off = wall_offset_ns(s) + clock_offset_ns
    cols: dict[str, np.ndarray] = {
        "id": id_base + np.arange(n, dtype=np.int64),
        "type": e["type"].astype(np.int64) if n else np.empty(0, dtype=np.int64),
        "start_ts": e["start_ns"] + off if n else np.empty(0, dtype=np.int64),
        "end_ts": e["end_ns"] + off if n else np.empty(0, dtype=np.int64),
        "nc_idx": e["nc_idx"].astype(np.int64) if n else np.empty(0, dtype=np.int64),
        "thread_id": e["thread_id"] if n else np.empty(0, dtype=np.int64),
    }
    for c in INT_COLUMNS:
        cols[c] = np.full(n, -1, dtype=np.int64)
    for c in STR_COLUMNS:
        cols[c] = np.zeros(n, dtype=np.int64)  # string ids; 0 = ""
    cols["flow_id"] = np.zeros(n, dtype=np.int64)
    extra: list[str | None] = [None] * n
    groups, sources = [], []
    trace = s.trace
    tinfo = {et.id: et for et in trace.event_types} if trace is not None else {}
    for tid, name in enumerate(s.type_names):
        et = tinfo.get(tid)
        groups.append(et.group if et is not None else "")
        sources.append(et.source if et is not None else "")
    present = np.unique(cols["type"]) if n else []
    for tid in present:
        tid = int(tid)
        m = cols["type"] == tid
        args = s.type_args[tid]
        leftovers = []
        for slot, arg in zip("abcde", args):
            if not arg:
                continue
            target = ARG_COLUMNS.get(arg)
            if target is not None:
                cols[target][m] = e[slot][m]
            else:
                leftovers.append((slot, arg))
        if leftovers:  # attributes without a column (sync points, copies, loads, errors): per-event JSON
            idx = np.flatnonzero(m)
            parts = []
            for slot, arg in leftovers:
                v = e[slot][idx]
                if arg.endswith("_str"):
                    quoted = [json.dumps(x) for x in s.strings]
                    parts.append((json.dumps(arg[:-4]), [quoted[i] if 0 <= i < len(quoted) else "null"
                                                         for i in v.tolist()]))
                else:
                    parts.append((json.dumps(arg), v.astype(str).tolist()))
            head = "{" + ",".join(f"{k}:%s" for k, _ in parts) + "}"
            for j, text in zip(idx.tolist(), zip(*[vals for _, vals in parts])):
                extra[j] = head % text
    # flows: host call <-> core execution (same process, same exec id), and collectives across ranks
    exec_ids = [s.type_id(t) for t in FLOW_EXEC_TYPES if s.type_id(t) is not None]
    if exec_ids and n:
        m = np.isin(cols["type"], exec_ids) & (cols["exec_id"] >= 0)
        cols["flow_id"][m] = ((index + 1) << 40) | (cols["exec_id"][m] & ((1 << 40) - 1))
    cc_ids = [s.type_id(t) for t in FLOW_CC_TYPES if s.type_id(t) is not None]
    if cc_ids and n:
        m = np.isin(cols["type"], cc_ids)
        if m.any():
            pairs = cols["group"] * (1 << 20) + cols["op"]
            for pair in np.unique(pairs[m]).tolist():
                pm = m & (pairs == pair)
                cols["flow_id"][pm] = collective_flow_ids(s.strings[pair >> 20], s.strings[pair & ((1 << 20) - 1)],
                                                          cols["seq"][pm])
    # nc_exec_running -> the device profile that holds its execution
    cols["device_profile"] = np.full(n, -1, dtype=np.int64)
    profiles = sorted(set((device_links or {}).values()))
    tid_exec = s.type_id("nc_exec_running")
    if profiles and tid_exec is not None and n:
        pidx = {p: i for i, p in enumerate(profiles)}
        m = np.flatnonzero(cols["type"] == tid_exec)
        links = device_links or {}
        cols["device_profile"][m] = [pidx.get(links.get(e, ""), -1) for e in cols["exec_id"][m].tolist()]
    model_names = {int(m.id): m.name for m in s.models}
    return ProcessEvents(s, index, clock_offset_ns, n, cols, list(s.type_names), groups, sources,
                         s.strings, model_names, extra, profiles)
