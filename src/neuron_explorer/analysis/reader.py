"""Finding and loading capture sessions.

A session is a directory holding ``trace_info.pb`` and/or ``ntrace.pb`` (plus the optional
``cpu_util.pb``/``host_mem.pb``, device traces and NEFFs), at any depth under the directory given to
``view``: ``<out>/<instance>_pid_<pid>/<timestamp>/`` as the capture writes it, or the flat
``<out>/<instance>_pid_<pid>/`` layout.  Loading maps the files and views each column in place (no copy).
"""

from __future__ import annotations

import mmap
import os
import re
from dataclasses import dataclass, field

import numpy as np

from neuron_explorer.analysis import native
from neuron_explorer.analysis.pbfile import (
    ProfileError,
    column_view,
    packed_array,
    parse_appended,
    parse_columnar,
    parse_message,
)
from neuron_explorer.contracts.columns import (
    DEVICE_TRACE_OPS_FIELD,
    EVENT_COLUMNS,
    EVENT_SEGMENT_BLOCKS_FIELD,
    OP_COLUMNS,
    SYSTEM_TRACE_EVENTS_FIELD,
)
from neuron_explorer.contracts.layout import SESSION_MARKERS, parse_segment_name
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb
from neuron_explorer.util.names import printable

# The time domain every profile must fit, checked at load so that no int64 arithmetic in view can
# wrap (numpy wraps silently): raw timestamps (monotonic or device clock) and wall-clock times lie in
# [0, 2**62] ns (1970 to 2116); a process's wall-clock offset (wall - monotonic) in [-2**61, 2**62];
# the clock offsets estimated between instances within +-2**60 (align.py).  Then a time plus its
# offsets, minus the output's time origin, stays below 2**63 in magnitude.
TIME_LIMIT_NS = 1 << 62
WALL_OFFSET_MIN_NS = -(1 << 61)
CLOCK_OFFSET_LIMIT_NS = 1 << 60


def discover(root: str, problems: list[tuple[str, str]] | None = None) -> list[str]:
    """Every session directory under ``root``, sorted for a stable order.

    A directory that cannot be listed hides whatever profiles it holds, so it is reported in
    ``problems`` as (message, path) instead of being passed over in silence."""

    def unlisted(e: OSError) -> None:
        if problems is not None:
            where = e.filename if e.filename is not None else root
            problems.append((printable(f"{where}: cannot list directory ({e.strerror}); profiles below it "
                                       "were skipped"), printable(str(where))))

    found = []
    for d, dirs, files in os.walk(root, onerror=unlisted):
        dirs.sort()
        if any(m in files for m in SESSION_MARKERS):
            found.append(d)
    return sorted(found)


# a filtered session's column of each kept event's index in the capture (analysis.filters)
EVENT_INDEX = "event_index"


@dataclass
class Session:
    path: str
    info: pb.TraceInfo | None = None
    trace: pb.SystemTrace | None = None
    events: dict[str, np.ndarray] = field(default_factory=dict)
    type_names: list[str] = field(default_factory=list)
    type_args: list[list[str]] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)
    models: list = field(default_factory=list)
    cpu: pb.CpuUtil | None = None
    mem: pb.HostMem | None = None
    warnings: list[str] = field(default_factory=list)
    device_paths: list[str] = field(default_factory=list)  # .ntff files of this session
    neff_paths: list[str] = field(default_factory=list)
    mapped: tuple | None = None  # (mmap, {column: (file offset, item size)}) behind ``events``
    events_checked: tuple | None = None  # (ntrace.pb identity, wall offset) the events were checked with
    region_links: object | None = None  # analysis.framework.RegionLinks, found before the filters

    def release(self, upto: int) -> None:
        """Drop the pages of events ``[0, upto)`` from this process's resident memory (they stay in
        the page cache): converting a process chunk by chunk then keeps only the current chunk's
        pages resident, instead of the whole memory-mapped file."""
        if self.mapped is None or upto <= 0:
            return
        mm, layout = self.mapped
        page = mmap.PAGESIZE
        for off, size in layout.values():
            start = -(-off // page) * page  # first whole page of the column
            end = (off + upto * size) // page * page
            if end > start:
                try:
                    mm.madvise(mmap.MADV_DONTNEED, start, end - start)
                except (OSError, ValueError, AttributeError):  # not supported here: keep the pages
                    return

    @property
    def instance_id(self) -> str:
        if self.info is not None and self.info.instance_id:
            return self.info.instance_id
        base = os.path.basename(self.path.rstrip("/"))
        parent = os.path.basename(os.path.dirname(self.path.rstrip("/")))
        for name in (base, parent):  # <instance>_pid_<pid>: the instance id may hold "_pid_" itself
            if "_pid_" in name:
                return name.rpartition("_pid_")[0]
        return "unknown"

    @property
    def pid(self) -> int:
        if self.info is not None and self.info.pid:
            return int(self.info.pid)
        for name in (os.path.basename(self.path.rstrip("/")), os.path.basename(os.path.dirname(self.path))):
            if "_pid_" in name:
                try:
                    pid = int(name.rpartition("_pid_")[2].split("_")[0])
                except ValueError:
                    continue
                if 0 <= pid < 1 << 62:  # a directory name is not trusted to fit an int64 column
                    return pid
        return 0

    @property
    def num_events(self) -> int:
        return len(self.events.get("type", ()))

    def type_id(self, name: str) -> int | None:
        try:
            return self.type_names.index(name)
        except ValueError:
            return None

    def arg(self, type_name: str, arg_name: str) -> str | None:
        """The column ('a'..'e') that holds ``arg_name`` for events of ``type_name``."""
        tid = self.type_id(type_name)
        if tid is None:
            return None
        args = self.type_args[tid]
        return "abcde"[args.index(arg_name)] if arg_name in args else None


EVENT_MODES = ("checked", "unchecked", "none")


def load_session(path: str, events: str = "checked", checked: tuple | None = None) -> Session:
    """Load and validate one session; raises ProfileError when it cannot be used.

    ``events``: "checked" maps ntrace.pb's event columns and checks them (below); "unchecked" maps
    them unchecked, for a reader that checks the few rows it reads (``align.CollectiveIndex``:
    the clock alignment of a run that writes no system events); "none" reads only ntrace.pb's
    tables (event types, strings, the models a run that writes no system events still names its
    graphs and device profiles by).  Unless "checked", a damaged ntrace.pb is a warning on the
    session, and the rest of it (device profiles, samples) is still used.

    Everything the exporters rely on is checked here, once, and ``check`` calls the same code, so
    a file that ``view`` skips is one that ``check`` reports: type ids inside the file's type
    table, string ids inside its string table, column lengths backed by the bytes present, and
    timestamps that stay on the wall clock (``TIME_LIMIT_NS``) once the clock anchors are applied.
    A damaged optional file (cpu_util.pb, host_mem.pb, a .neff) becomes a warning on the session
    and is left out.

    ``checked``: the ``events_checked`` of an earlier load of this session in the same run; the
    event columns (the one check whose cost grows with the events) are not checked again when
    ntrace.pb is still that file."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ProfileError(f"{path}: the directory name is not valid UTF-8 "
                           "(rename it to convert this profile)") from None
    s = Session(path=path)
    info_p = os.path.join(path, "trace_info.pb")
    trace_p = os.path.join(path, "ntrace.pb")
    if os.path.lexists(info_p):  # (lexists: a dangling link is reported, not taken for "no file")
        s.info = parse_message(info_p, pb.TraceInfo)
        _check_info(s.info, info_p)
    if events not in EVENT_MODES:
        raise ValueError(f"events={events!r}: one of {EVENT_MODES}")
    if os.path.lexists(trace_p):
        try:
            _load_trace(s, trace_p, checked, events)
        except ProfileError as e:
            if events == "checked" or s.info is None:
                raise
            s.trace, s.events, s.type_names, s.type_args, s.strings, s.models = None, {}, [], [], [], []
            s.mapped = None
            s.warnings.append(f"{e}; its system events and graph names were left out")
    if s.info is None and s.trace is None:
        raise ProfileError(f"{path}: no trace_info.pb or ntrace.pb")
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        s.warnings.append(printable(f"{path}: cannot list the directory ({e.strerror}); its device traces "
                                    "and NEFFs were skipped"))
        names = []
    for n in names:
        if n.endswith((".ntff", ".neff")) and not _utf8(n):
            s.warnings.append(printable(f"{os.path.join(path, n)}: the file name is not valid UTF-8; skipped"))
    s.device_paths = [os.path.join(path, n) for n in names if n.endswith(".ntff") and _utf8(n)]
    for n in names:
        if n.endswith(".neff") and _utf8(n):
            try:
                load_neff(os.path.join(path, n))
            except ProfileError as e:
                s.warnings.append(str(e))
                continue
            s.neff_paths.append(os.path.join(path, n))
    off = wall_offset_ns(s)
    for name, typ, attr in (("cpu_util.pb", pb.CpuUtil, "cpu"), ("host_mem.pb", pb.HostMem, "mem")):
        p = os.path.join(path, name)
        if os.path.lexists(p):
            try:
                setattr(s, attr, _load_samples(p, typ, off))
            except ProfileError as e:
                s.warnings.append(str(e))
    return s


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# An EC2 instance id or a host name (at most 253 bytes); it names output directories
# (``instance=<id>``), whose names may not exceed 255 bytes.
INSTANCE_ID_MAX_BYTES = 240
COUNT_LIMIT = 1 << 48  # per-core event counts: far beyond any ring, small enough to sum without wrapping


def _check_info(info: pb.TraceInfo, path: str) -> None:
    """Fields of trace_info.pb that become paths, offsets or summed counters."""
    if not info.instance_id.isprintable():
        raise ProfileError(f"{path}: instance_id {info.instance_id!r} holds control characters (e.g. a NUL)")
    if len(info.instance_id.encode()) > INSTANCE_ID_MAX_BYTES:
        raise ProfileError(f"{path}: instance_id is {len(info.instance_id.encode())} bytes long, more than a host "
                           f"name or instance id can be ({INSTANCE_ID_MAX_BYTES})")
    for a in info.anchors:
        if not (WALL_OFFSET_MIN_NS <= a.wall_ns - a.monotonic_ns <= TIME_LIMIT_NS):
            raise ProfileError(f"{path}: clock anchor {a.label!r} (monotonic {a.monotonic_ns} ns, wall {a.wall_ns} ns) "
                               "is not a plausible clock reading")
    if not (0 <= info.start_wall_ns <= TIME_LIMIT_NS):
        raise ProfileError(f"{path}: start_wall_ns {info.start_wall_ns} is not a plausible wall-clock time")
    for c in info.cores:
        for name in ("capacity", "recorded", "kept", "dropped"):
            v = getattr(c, name)
            if not (0 <= v <= COUNT_LIMIT):
                raise ProfileError(f"{path}: core {c.nc_idx} has {name} = {v}, not a plausible event count")


_EVENT_ROW_BYTES = sum(np.dtype(c.dtype).itemsize for c in EVENT_COLUMNS)
_OP_ROW_BYTES = sum(np.dtype(c.dtype).itemsize for c in OP_COLUMNS)


def _load_trace(s: Session, trace_p: str, checked: tuple | None, events: str = "checked") -> None:
    t, mm, cols, n, ident = parse_columnar(trace_p, pb.SystemTrace, SYSTEM_TRACE_EVENTS_FIELD, _EVENT_ROW_BYTES)
    s.trace = t
    # The type table is sized by the types the file declares, never by an id read from it.
    ntypes = len(t.event_types)
    for et in t.event_types:
        if et.id >= ntypes:
            raise ProfileError(f"{trace_p}: event type {et.name!r} has id {et.id}, outside the file's table of "
                               f"{ntypes} types")
    s.type_names = [""] * ntypes
    s.type_args = [[] for _ in s.type_names]
    for et in t.event_types:
        s.type_names[et.id] = et.name
        s.type_args[et.id] = list(et.args)[:5]
    s.strings = list(t.strings)
    s.models = list(t.models)
    if events == "none":
        return
    pieces = [_Piece(mm, cols, n, trace_p)] if n else []
    segs = _segment_pieces(s, os.path.dirname(trace_p))
    pieces += [p for p, _ in segs]
    version_of = (ident, tuple(i for _, i in segs))  # ntrace.pb and every segment
    if len(pieces) <= 1:  # one block (a whole-session write, a short capture): mapped in place
        p = pieces[0] if pieces else _Piece(mm, cols, 0, trace_p)
        layout = {}
        for c in EVENT_COLUMNS:
            s.events[c.name] = p.column(c)
            layout[c.name] = (p.cols.get(c.field, (0, 0))[0] + p.start * np.dtype(c.dtype).itemsize,
                              np.dtype(c.dtype).itemsize)
        s.mapped = (p.mm, layout)
    else:  # the blocks of every segment, one column at a time into one array (a copy)
        for c in EVENT_COLUMNS:
            s.events[c.name] = np.concatenate([p.column(c) for p in pieces])
    if events == "unchecked":
        return
    version = (version_of, wall_offset_ns(s))  # the times are checked against the anchors of trace_info.pb
    if version != checked:  # (checked earlier in this run against the same files: not again)
        _check_events(s, trace_p, version[1])
    s.events_checked = version


@dataclass
class _Piece:
    """A block of event columns in a mapped file, from its ``start``-th event on."""
    mm: object
    cols: dict[int, tuple[int, int]]
    count: int
    path: str
    start: int = 0

    def column(self, c) -> np.ndarray:
        return column_view(self.mm, self.cols, c.field, c.dtype, self.path, c.name, self.count)[self.start:]


def _segment_pieces(s: Session, d: str) -> list[tuple[_Piece, tuple]]:
    """The event blocks of the session's segment files (decision 0111), core by core (ascending),
    each core's in recording order, and each file's identity.  Each core keeps its newest
    ``capacity`` events (trace_info.pb's, as the capture's bounded store did: the writer deletes
    whole segments only, so the oldest may hold more).  A torn last block, what a kill during an
    append leaves, is skipped with a warning."""
    try:
        names = os.listdir(d)
    except OSError:
        return []
    found: dict[int, list[tuple[int, str]]] = {}
    for name in names:
        nk = parse_segment_name(name)
        if nk is not None:
            found.setdefault(nk[0], []).append((nk[1], name))
    if not found:
        return []
    capacity = {int(c.nc_idx): int(c.capacity) for c in s.info.cores} if s.info is not None else {}
    out: list[tuple[_Piece, tuple]] = []
    for nc in sorted(found):
        core: list[tuple[_Piece, tuple]] = []
        for _, name in sorted(found[nc]):
            path = os.path.join(d, name)
            f = parse_appended(path, pb.EventSegment, EVENT_SEGMENT_BLOCKS_FIELD, _EVENT_ROW_BYTES)
            if f.header.get(2, 0) != nc:
                raise ProfileError(f"{path}: holds events of core {f.header.get(2, 0)}, not of core {nc} as named")
            if f.torn:
                s.warnings.append(printable(f"{path}: its last {f.torn} bytes are a block cut short (the process was "
                                            "killed while writing it); those events were skipped"))
            core += [(_Piece(f.mm, cols, k, path), f.identity) for k, cols in f.blocks if k]
        extra = sum(p.count for p, _ in core) - capacity.get(nc, 1 << 62)
        while extra > 0 and core:  # the oldest events beyond the core's capacity
            p = core[0][0]
            if p.count - p.start <= extra:
                extra -= p.count - p.start
                core.pop(0)
            else:
                p.start += extra
                extra = 0
        out += core
    return out


VALIDATE_CHUNK = 1 << 20  # events checked at a time (their mapped pages are dropped afterwards)


def _check_events(s: Session, path: str, wall_off: int) -> None:
    """Every event's type id, its string and model ids, and its timestamps, a chunk at a time.

    An argument slot holds ids for some types and plain numbers (bytes, timestamps) for others,
    so the limit depends on the event's type: per slot, each type's [lowest, past-highest] value
    (no limit: the whole int64 range).  Each chunk is checked in one pass in C
    (``analysis._sweep.check_events``, decision 0215) or by its numpy twin ``_check_chunk_numpy``."""
    n = s.num_events
    if not n:
        return
    e = s.events
    nt, sizes = len(s.type_names), {"string": len(s.strings), "model": len(s.models)}
    i64 = np.iinfo(np.int64)
    limits: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # slot -> per type id: (lowest, past-highest) value
    for tid, args in enumerate(s.type_args):
        for slot, arg in zip("abcde", args):
            # a string id names a string; a model id (it indexes the output's model names) a model,
            # or is negative (none); other arguments, prev_model_id included, are shown as they are
            kind = "string" if arg.endswith("_str") else "model" if arg == "model_id" else None
            if kind is not None:
                low, high = limits.setdefault(slot, (np.full(nt, i64.min), np.full(nt, i64.max)))
                low[tid], high[tid] = (0 if kind == "string" else i64.min), sizes[kind]
    check = native.sweep.check_events if native.sweep is not None else _check_chunk_numpy
    t_lo, t_hi = int(i64.max), int(i64.min)  # (n > 0: the first chunk sets both)
    for lo in range(0, n, VALIDATE_CHUNK):
        hi = min(n, lo + VALIDATE_CHUNK)
        typ = e["type"][lo:hi]
        tmax, k, i, cmin, cmax = check(typ, nt, tuple((e[slot][lo:hi], low, high) for slot, (low, high) in
                                                      limits.items()), e["start_ns"][lo:hi], e["end_ns"][lo:hi])
        if tmax >= nt:
            raise ProfileError(f"{path}: event type id {tmax} is not declared in the file ({nt} types)")
        if k >= 0:
            slot = list(limits)[k]
            tid, w = int(typ[i]), int(e[slot][lo + i])
            arg = s.type_args[tid]["abcde".index(slot)]
            kind = "string" if arg.endswith("_str") else "model"
            raise ProfileError(f"{path}: argument {arg} of a {s.type_names[tid]} event refers to {kind} "
                               f"{w}, outside the file's table of {sizes[kind]} {kind}s")
        t_lo, t_hi = min(t_lo, cmin), max(t_hi, cmax)
        s.release(hi)
    check_times(path, "event timestamps", t_lo, t_hi, wall_off)


def _check_chunk_numpy(typ: np.ndarray, nt: int, slots: tuple, start: np.ndarray,
                       end: np.ndarray) -> tuple[int, int, int, int, int]:
    """``analysis._sweep.check_events`` with numpy: (the largest type id, the first slot holding a
    value outside its type's limits and its first such event, or -1, -1; the smallest and largest
    start or end).  One comparison per slot picks the values that could break the slot's smallest
    limit (negatives included, seen as unsigned), and only those are checked against their own
    type's limits: gathering a limit for every event cost more than the rest of the load."""
    if not len(typ):
        return -1, -1, -1, 0, 0
    tmax = int(typ.max())
    if tmax < nt:
        for k, (v, low, high) in enumerate(slots):
            maybe = np.flatnonzero(v.view(np.uint64) >= np.uint64(high.min()))
            if not len(maybe):
                continue
            t, w = typ[maybe], v[maybe]
            bad = (w >= high[t]) | (w < low[t])
            if bad.any():
                return tmax, k, int(maybe[int(np.argmax(bad))]), 0, 0
    return (tmax, -1, -1, min(int(start.min()), int(end.min())), max(int(start.max()), int(end.max())))


def check_times(path: str, what: str, lo: int, hi: int, offset: int) -> None:
    """ProfileError unless the raw times ``[lo, hi]`` and the same times plus ``offset`` (their
    wall-clock offset) lie in the time domain above (exact Python ints: nothing can wrap here)."""
    if not (0 <= lo and hi <= TIME_LIMIT_NS and WALL_OFFSET_MIN_NS <= offset <= TIME_LIMIT_NS
            and 0 <= lo + offset and hi + offset <= TIME_LIMIT_NS):
        raise ProfileError(f"{path}: {what} {lo}..{hi} ns with a wall-clock offset of {offset} ns fall outside "
                           "1970-2116 (corrupt timestamps or clock anchors)")


_SAMPLE_COLUMNS = {  # per file: (column, dtype, values per sample or the field that says how many)
    "CpuUtil": (("ts_ns", "i8", 1), ("cpu_percent", "f4", "num_cpus"), ("process_percent", "f4", 1)),
    "HostMem": (("ts_ns", "i8", 1),) + tuple((c, "i8", 1) for c in ("process_rss", "process_vms", "host_total",
                                                                      "host_used", "host_available")),
}
# columns of one value per sample that older captures do not have (decision 0203)
_OPTIONAL_SAMPLE_COLUMNS = {"CpuUtil": (("main_thread_percent", "f4"), ("main_thread_wait_percent", "f4"))}


def _load_samples(path: str, typ, wall_off: int):
    """cpu_util.pb / host_mem.pb with every column holding one value (or one per CPU) per sample."""
    msg = parse_message(path, typ)
    cols = _SAMPLE_COLUMNS[typ.__name__]
    ts = packed_array(msg.ts_ns, "i8", path, "ts_ns")
    for name, dtype, per in cols[1:]:
        k = getattr(msg, per) if isinstance(per, str) else per
        packed_array(getattr(msg, name), dtype, path, name, len(ts) * k)
    for name, dtype in _OPTIONAL_SAMPLE_COLUMNS.get(typ.__name__, ()):
        if getattr(msg, name):  # (absent in captures written before it)
            packed_array(getattr(msg, name), dtype, path, name, len(ts))
    if len(ts):
        check_times(path, "sample timestamps", int(ts.min()), int(ts.max()), wall_off)
    if typ.__name__ == "HostMem" and (msg.device_mem_names or msg.device_mem_ts_ns or msg.device_mem_values):
        _check_device_memory(path, msg, wall_off)
    return msg


# device memory series names: nc<N>.<category> (docs/decisions/0031-device-memory-by-category.md)
_DEVICE_MEM_NAME = re.compile(r"nc\d{1,9}\.[a-z_]{1,32}")
DEVICE_MEM_MAX_SERIES = 4096


def _check_device_memory(path: str, msg, wall_off: int) -> None:
    """The device memory block of host_mem.pb: names well formed, values [samples x names]."""
    names = list(msg.device_mem_names)
    if len(names) > DEVICE_MEM_MAX_SERIES:
        raise ProfileError(f"{path}: {len(names)} device memory series, more than {DEVICE_MEM_MAX_SERIES}")
    for n in names:
        if not _DEVICE_MEM_NAME.fullmatch(n):
            raise ProfileError(f"{path}: device memory series name {n[:80]!r} is not nc<N>.<category>")
    ts = packed_array(msg.device_mem_ts_ns, "i8", path, "device_mem_ts_ns")
    packed_array(msg.device_mem_values, "i8", path, "device_mem_values", len(ts) * len(names))
    if len(ts):
        check_times(path, "device memory timestamps", int(ts.min()), int(ts.max()), wall_off)


def wall_offset_ns(s: Session) -> int:
    """Add this to a monotonic timestamp of the session to get Unix-epoch ns (median of anchors)."""
    if s.info is None or not s.info.anchors:
        return 0
    offs = sorted(a.wall_ns - a.monotonic_ns for a in s.info.anchors)
    return offs[len(offs) // 2]


@dataclass
class DeviceProfile:
    path: str
    trace: pb.DeviceTrace
    ops: dict[str, np.ndarray]
    host_offset_ns: int = 0  # device clock -> host monotonic clock (through the sync points)

    @property
    def strings(self) -> list[str]:
        return list(self.trace.strings)


NO_EXECUTION_HINT = ("device profiling was enabled but no execution was captured (likely a warm-up issue: run 3+ "
                     "warm-up iterations before the profiled region)")


def load_device_trace(path: str, wall_offset: int = 0) -> DeviceProfile:
    """Load and validate one .ntff; raises ProfileError for an empty, truncated, foreign or damaged
    file. ``wall_offset``: the session's (``wall_offset_ns(session)``), to check that the ops'
    times stay on the wall clock."""
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise ProfileError(f"{path} is 0 bytes: {NO_EXECUTION_HINT}")
    t, mm, cols, n, _ = parse_columnar(path, pb.DeviceTrace, DEVICE_TRACE_OPS_FIELD, _OP_ROW_BYTES)
    ops = {c.name: column_view(mm, cols, c.field, c.dtype, path, c.name, n) for c in OP_COLUMNS}
    if n == 0:  # (also what a file cut at a field boundary looks like: protobuf cannot tell)
        raise ProfileError(f"{path} holds no ops: {NO_EXECUTION_HINT}")
    if n >= 1 << 32:
        raise ProfileError(f"{path}: {n} ops is more than a device trace can declare")
    t.ops.count = n
    ns = len(t.strings)
    for col in ("name", "track", "detail", "source"):
        if n and (int(ops[col].max()) >= ns or int(ops[col].min()) < 0):
            raise ProfileError(f"{path}: column {col} refers to a string outside the file's table")
    if n and (int(ops["exec_idx"].max()) >= len(t.executions) or int(ops["exec_idx"].min()) < 0):
        raise ProfileError(f"{path}: an op refers to an execution the file does not declare")
    host = _device_to_host(t, path)
    off = wall_offset + host
    if n:
        check_times(path, "op timestamps", min(int(ops["start_ns"].min()), int(ops["end_ns"].min())),
                    max(int(ops["start_ns"].max()), int(ops["end_ns"].max())), off)
    if t.executions:
        check_times(path, "execution timestamps", min(min(e.start_ns, e.end_ns) for e in t.executions),
                    max(max(e.start_ns, e.end_ns) for e in t.executions), off)
        if sum(max(e.end_ns - e.start_ns, 0) for e in t.executions) > TIME_LIMIT_NS:
            raise ProfileError(f"{path}: the executions add up to more time than a clock can hold")
    return DeviceProfile(path, t, ops, host)


def _device_to_host(t: pb.DeviceTrace, path: str) -> int:
    """Device clock -> host monotonic clock: the median over the sync points (0 when there are none)."""
    if not t.sync:
        return 0
    diffs = [p.cpu_timestamp_ns - p.nc_timestamp_ns for p in t.sync]
    if min(diffs) < -TIME_LIMIT_NS or max(diffs) > TIME_LIMIT_NS:  # (np.median needs int64s)
        raise ProfileError(f"{path}: a clock sync point pairs times {max(map(abs, diffs))} ns apart, not a "
                           "plausible clock offset")
    return int(np.median(diffs))


def load_neff(path: str) -> pb.NeffFile:
    return parse_message(path, pb.NeffFile)
