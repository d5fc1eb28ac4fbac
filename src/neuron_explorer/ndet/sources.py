"""Finding and loading the logs behind a ``--log-prefix``: NDET logs and PyTorch Flight Recorder dumps.

Both become a ``RankLog``: identity, lifecycle (did the process write a final record, and why), the
string and model tables, and a record array in the NDET record layout.  Analysis and the Chrome trace
therefore never care where a log came from.  NDET times are host monotonic and are mapped to wall
time with the pair the writer stored at its last flush; Flight Recorder times are already wall time.

Flight Recorder (``torch._C._distributed_c10d._dump_fr_trace_json()``, or the pickle NCCL writes to
``TORCH_FR_DUMP_TEMP_FILE<rank>``) does not say which rank wrote a dump, so the rank is taken from a
``rank`` field when present, else from the digits that end the file name (``fr_3.json`` -> 3).
"""

from __future__ import annotations

import builtins
import glob
import io
import json
import os
import pickle
import re
from dataclasses import dataclass, field

import numpy as np

from neuron_explorer.contracts import ndet_log as fmt


@dataclass
class RankLog:
    path: str
    source: str  # "ndet" or "flight_recorder"
    rank: int
    pid: int
    instance_id: str
    world_size: int
    nd: int
    start_wall_ns: int
    last_wall_ns: int
    final: bool
    reason: str
    flush_period_ns: int
    offset_ns: int  # wall = mono + offset
    strings: list[str]
    models: dict[int, dict]
    records: np.ndarray | None = None
    num_entries: int = 0
    events_recorded: int = 0
    extra: dict = field(default_factory=dict)
    job: tuple[str, str, int] | None = None  # (rendezvous address, run id, restart); None: not recorded
    # the process's role ("rank", "multiprocessing-child", "main"; "" when not recorded: logs of header
    # version 1 and Flight Recorder dumps), its multiprocessing name, its parent's pid and whether that
    # parent was alive at the last write (recorder.process_facts)
    role: str = ""
    process_name: str = ""
    ppid: int = 0
    parent_alive: bool = False

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank >= 0 else f"pid {self.pid}"

    def drop_records(self) -> None:
        """Forget the records once analysed, so memory holds one log at a time."""
        self.records = None


def discover(prefix: str) -> list[str]:
    """Candidate files for a prefix: a directory means every file in it, else ``prefix*``.

    Hidden files (the writer's temporary files start with '.') are never candidates.
    """
    if os.path.isdir(prefix):
        paths = [os.path.join(prefix, n) for n in os.listdir(prefix)]
    else:
        paths = glob.glob(glob.escape(prefix) + "*")
    out = [p for p in paths if os.path.isfile(p) and not os.path.basename(p).startswith(".")]
    return sorted(out)


def is_candidate(path: str, from_directory: bool) -> bool:
    """In a directory only files named like logs/dumps are considered; with a file prefix, all are."""
    if not from_directory:
        return True
    n = os.path.basename(path)
    return n.startswith("ndet_") or fmt.sniff(path) or _looks_like_fr_name(n)


def _looks_like_fr_name(n: str) -> bool:
    return bool(re.search(r"(fr|flight|nccl_trace|trace_rank|dump)", n, re.I))


def _head(path: str) -> bytes:
    with fmt.open_regular(path) as f:
        return f.read(16)


def _is_ndet(path: str, head: bytes) -> bool:
    return head[:7] == fmt.MAGIC[:7] or os.path.basename(path).startswith("ndet_")


def load(path: str) -> RankLog:
    """Load one file (NDET log or Flight Recorder dump); raises fmt.LogFormatError naming the file."""
    head = _head(path)
    if _is_ndet(path, head):
        log = fmt.read_log(path)
        return _from_header(path, log.header, log.strings, log.records)
    if head.lstrip()[:1] == b"{" or head[:1] == b"\x80":
        return load_flight_recorder(path)
    if not head:
        raise fmt.LogFormatError(f"{path}: empty file")
    raise fmt.LogFormatError(f"{path}: neither an NDET log nor a Flight Recorder dump")


def peek(path: str) -> RankLog:
    """What ``load`` returns, without the records: for an NDET log only its header is read (the
    checksum is checked by ``load``).  Enough to sort logs into jobs before analysing any."""
    head = _head(path)
    if _is_ndet(path, head) and head[:len(fmt.MAGIC)] == fmt.MAGIC:
        h = fmt.read_header(path)
        strings = h.get("strings", [""])
        if not isinstance(strings, list) or not all(isinstance(x, str) for x in strings):
            raise fmt.LogFormatError(f"{path}: corrupt header: strings is not a list of strings")
        return _from_header(path, h, strings, None)
    log = load(path)
    log.drop_records()
    return log


MAX_NS = 1 << 62  # header times (ns since boot, ns since 1970) beyond year 2116 are corrupt
MAX_RANK = (1 << 31) - 1
_MISSING = object()


class _Fields:
    """Typed, range-checked access to a header: a bad field is a one-line LogFormatError naming the
    file, the field, its value and what is accepted (a crafted header with a valid checksum must not
    become a traceback further down)."""

    def __init__(self, path: str, header: dict) -> None:
        self.path, self.h = path, header

    def _bad(self, key: str, value: object, accepted: str) -> fmt.LogFormatError:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return fmt.LogFormatError(f"{self.path}: bad header field {key}={shown}; accepted: {accepted}")

    def get(self, key: str, default: object = _MISSING) -> object:
        cur: object = self.h
        for part in key.split("."):
            if not isinstance(cur, dict):
                raise self._bad(key.rsplit(".", 1)[0], cur, "an object")
            if part not in cur:
                if default is _MISSING:
                    raise fmt.LogFormatError(f"{self.path}: bad header: field {key} is missing")
                return default
            cur = cur[part]
        return cur

    def int(self, key: str, lo: int, hi: int, default: object = _MISSING) -> int:
        v = self.get(key, default)
        if type(v) is not int or not lo <= v <= hi:
            raise self._bad(key, v, f"a whole number from {lo} to {hi}")
        return v

    def str(self, key: str, default: object = _MISSING) -> str:
        v = self.get(key, default)
        if not isinstance(v, str):
            raise self._bad(key, v, "a string")
        return v

    def bool(self, key: builtins.str, default: object = _MISSING) -> builtins.bool:
        v = self.get(key, default)
        if not isinstance(v, bool):
            raise self._bad(key, v, "true or false")
        return v

    def models(self) -> dict[builtins.int, dict]:
        v = self.get("models", [])
        if not isinstance(v, list):
            raise self._bad("models", v, "a list of models")
        out: dict[int, dict] = {}
        for i, m in enumerate(v):
            if not isinstance(m, dict) or type(m.get("id")) is not int or not 0 <= m["id"] < 1 << 63 or \
                    not all(isinstance(m.get(k, ""), str) for k in ("name", "neff_name")):
                raise self._bad(f"models[{i}]", m, 'an object with an integer "id" and string "name"/"neff_name"')
            load = m.get("load", [])
            if not (isinstance(load, list) and len(load) in (0, 3) and all(type(t) is int and 0 <= t <= MAX_NS
                                                                           for t in load) and load == sorted(load)):
                raise self._bad(f"models[{i}].load", load, "[] or three ascending monotonic times in ns")
            if type(m.get("nc", 0)) is not int or not 0 <= m.get("nc", 0) < 1 << 16:
                raise self._bad(f"models[{i}].nc", m.get("nc"), "a core index from 0 to 65535")
            out[m["id"]] = m
        return out


def _from_header(path: str, h: dict, strings: list[str], records: np.ndarray | None) -> RankLog:
    f = _Fields(path, h)
    mono = f.int("flush.mono_ns", 0, MAX_NS)
    wall = f.int("flush.wall_ns", 0, MAX_NS)
    job = None
    if f.get("job", None) is not None:
        job = (f.str("job.master", ""), f.str("job.run_id", ""), f.int("job.restart", 0, MAX_RANK, 0))
    role, pname, ppid, parent_alive = "", "", 0, False
    if f.get("process", None) is not None:  # header version 2 on
        role, pname = f.str("process.role", ""), f.str("process.name", "")
        ppid, parent_alive = f.int("process.ppid", 0, MAX_RANK, 0), f.bool("process.parent_alive", False)
    return RankLog(
        path=path, source="ndet", rank=f.int("ident.rank", -1, MAX_RANK, -1), pid=f.int("ident.pid", 0, MAX_RANK, 0),
        instance_id=f.str("ident.instance_id", ""), world_size=f.int("ident.world_size", 0, MAX_RANK, 1),
        nd=f.int("device.nd", 0, 1 << 16, 0), start_wall_ns=f.int("start.wall_ns", 0, MAX_NS),
        last_wall_ns=wall, final=f.bool("flush.final", False), reason=f.str("flush.reason", ""),
        flush_period_ns=f.int("flush_period_us", 0, MAX_NS // 1000, 0) * 1000, offset_ns=wall - mono,
        strings=strings, models=f.models(), records=records, num_entries=f.int("num_entries", 0, MAX_NS, 0),
        events_recorded=f.int("events_recorded", 0, MAX_NS, 0), job=job,
        role=role[:64], process_name=pname[:128], ppid=ppid, parent_alive=parent_alive,
    )


# ---------------------------------------------------------------------------------------------
# PyTorch Flight Recorder

_DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
                "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16,
                "Float8_e4m3fn": 1, "Float8_e5m2": 1}
_DTYPE_NAMES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
                "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool"}
_OP_NAMES = {"allreduce": "all_reduce", "allgather": "all_gather", "_allgather_base": "all_gather_into_tensor",
             "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter_tensor",
             "alltoall": "all_to_all", "alltoall_base": "all_to_all_single"}


class _SafeUnpickler(pickle.Unpickler):
    """Flight Recorder pickles hold only plain containers; refuse anything that could run code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _fr_op(profiling_name: str) -> str:
    op = profiling_name.split(":", 1)[-1] if profiling_name else "unknown"
    return _OP_NAMES.get(op, op)


def _numel(shape) -> int:
    """Elements of a shape, saturating at MAX_NS: a crafted shape must not grow a huge integer."""
    n = 1
    for s in shape:
        n = min(n * max(int(s), 0), MAX_NS)
    return n


def _ns(v) -> int:
    """A time, count or sequence number from a dump: an integer that fits a record field."""
    n = int(v or 0)
    if not -MAX_NS <= n <= MAX_NS:
        raise ValueError(f"{v!r} is out of range")
    return n


def _fr_ranks(value) -> list[int]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = [int(x) for x in re.findall(r"-?\d+", value)]
    return [int(x) for x in value or []]


def load_flight_recorder(path: str) -> RankLog:
    with fmt.open_regular(path) as f:
        raw = f.read()
    try:
        if raw[:1] == b"\x80":
            d = _SafeUnpickler(io.BytesIO(raw)).load()
        else:
            d = json.loads(raw.decode("utf-8"))
    except Exception as err:
        raise fmt.LogFormatError(f"{path}: corrupt or truncated Flight Recorder dump "
                                 f"({type(err).__name__}: {err})") from None
    if not isinstance(d, dict) or "entries" not in d or not isinstance(d["entries"], list):
        raise fmt.LogFormatError(f"{path}: not a Flight Recorder dump (no 'entries' list)")
    rank = d.get("rank")
    if rank is None:
        m = re.search(r"(\d+)(?:\.[A-Za-z]+)?$", os.path.basename(path))
        rank = int(m.group(1)) if m and len(m.group(1)) < 10 else -1
    pid = d.get("pid", 0) or 0
    for key, v in (("rank", rank), ("pid", pid)):
        if type(v) is not int or not -1 <= v <= MAX_RANK:
            raise fmt.LogFormatError(f"{path}: bad Flight Recorder field {key}={str(v)[:40]!r}; "
                                     f"accepted: a whole number from -1 to {MAX_RANK}")
    pg_config = d.get("pg_config") or {}
    if not isinstance(pg_config, dict):
        pg_config = {}
    strings = [""]
    sid: dict[str, int] = {"": 0}

    def intern(s: str) -> int:
        i = sid.get(s)
        if i is None:
            i = sid[s] = len(strings)
            strings.append(s)
        return i

    def group_of(pg) -> str:
        name = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(pg)
        desc = str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 else ""
        cfg = pg_config.get(name) or next((c for c in pg_config.values() if c.get("desc") == desc and desc), None)
        if cfg is None and len(pg_config) == 1:
            cfg = next(iter(pg_config.values()))
        ranks = _fr_ranks(cfg.get("ranks")) if cfg else []
        return ",".join(map(str, ranks)) if ranks else f"pg:{name}"

    rows = []
    t_min = t_max = 0
    try:
        for e in d["entries"]:
            op = _fr_op(str(e.get("profiling_name", "")))
            sizes = e.get("input_sizes") or []
            dtypes = e.get("input_dtypes") or []
            nbytes = sum(_numel(s) * _DTYPE_BYTES.get(str(dt), 4) for s, dt in zip(sizes, dtypes))
            dtype = _DTYPE_NAMES.get(str(dtypes[0]), str(dtypes[0]).lower()) if dtypes else ""
            t0 = _ns(e.get("time_created_ns"))
            started = _ns(e.get("time_discovered_started_ns"))
            done = _ns(e.get("time_discovered_completed_ns"))
            state = str(e.get("state", ""))
            t0 = started or t0
            if state == "completed":
                st, t1 = fmt.STATE_COMPLETE, done or t0
            elif state in ("started", "scheduled") and not done and (state == "started" or not e.get("retired", False)):
                st, t1 = fmt.STATE_IN_FLIGHT, 0
            else:
                # gloo never moves entries past "scheduled"; the entry is only known to have been issued
                st, t1 = fmt.STATE_COMPLETE, done or t0
            kind = fmt.KIND_CC_BARRIER if "barrier" in op else fmt.KIND_CC_OP
            seq = _ns(e.get("p2p_seq_id") if e.get("is_p2p") else e.get("collective_seq_id", 0))
            op_id, dtype_id = intern(op), intern(dtype)  # (string ids in this order: op, dtype, group)
            group_id = intern(group_of(e.get("process_group")))
            rows.append((kind, st, 0, 0, t0, t1, op_id, seq, nbytes, dtype_id, group_id))
            t_min = t0 if not t_min else min(t_min, t0)
            t_max = max(t_max, t0, t1)
    except (TypeError, ValueError, AttributeError, OverflowError, IndexError) as e:
        raise fmt.LogFormatError(f"{path}: corrupt Flight Recorder entry ({str(e)[:200]})") from None
    records = np.array(rows, dtype=fmt.RECORD_DTYPE) if rows else np.zeros(0, dtype=fmt.RECORD_DTYPE)
    mtime = int(os.stat(path).st_mtime_ns)
    return RankLog(
        path=path, source="flight_recorder", rank=rank, pid=pid,
        instance_id=str(d.get("hostname", "")), world_size=0, nd=0, start_wall_ns=t_min or mtime,
        last_wall_ns=max(t_max, mtime), final=True, reason="dump", flush_period_ns=0, offset_ns=0,
        strings=strings, models={}, records=records, num_entries=len(rows), events_recorded=len(rows),
        extra={"version": d.get("version"), "pg_status": d.get("pg_status")},
    )


def stage_url(url: str, dest: str, endpoint: str | None) -> tuple[str, bool]:
    """``--log-prefix s3://bucket/prefix``: copy the matching objects into the local directory
    ``dest`` and return the local prefix that matches the same files, and whether the URL named a
    directory.  As for a local prefix: a "directory" (the URL ends with '/', or objects lie below
    it) means the objects directly in it, else the objects of its parent whose name starts with its
    last component; hidden names never.  Raises ``util.storage.StorageError``."""
    from neuron_explorer.util import storage

    fs = storage.filesystem(endpoint)
    loc = storage.parse(url)
    if not storage.bucket_exists(fs, loc.bucket):
        raise storage.StorageError(f"{url}: no such bucket, or no permission to read it")
    inside = [r for r, _ in storage.list_files(fs, loc)] if loc.prefix or url.endswith("/") else []
    if url.endswith("/") or inside or not loc.prefix:
        if not inside and not loc.prefix:
            inside = [r for r, _ in storage.list_files(fs, loc)]
        names = [r for r in inside if "/" not in r and not r.startswith(".")]
        storage.download(fs, loc, names, dest)
        return dest, True
    parent = storage.Location(loc.bucket, loc.prefix.rpartition("/")[0])
    base = loc.prefix.rpartition("/")[2]
    names = [r for r, _ in storage.list_files(fs, parent)
             if "/" not in r and r.startswith(base) and not r.startswith(".")]
    storage.download(fs, parent, names, dest)
    return os.path.join(dest, base), False
