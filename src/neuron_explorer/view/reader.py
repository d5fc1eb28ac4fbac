"""Finding and loading capture sessions.

A session is a directory holding ``trace_info.pb`` and/or ``ntrace.pb`` (plus the optional
``cpu_util.pb``/``host_mem.pb``, device traces and NEFFs), at any depth under the directory given to
``view``: ``<out>/<instance>_pid_<pid>/<timestamp>/`` as the capture writes it, or the flat
``<out>/<instance>_pid_<pid>/`` layout.  Loading turns each column into a numpy array with one copy.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import DecodeError

from ..proto import neuron_explorer_capture_pb2 as pb

SESSION_MARKERS = ("trace_info.pb", "ntrace.pb")


class ProfileError(Exception):
    """A profile file that cannot be used; the message names the file and the problem."""


def discover(root: str) -> list[str]:
    """Every session directory under ``root``, sorted for a stable order."""
    found = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        if any(m in files for m in SESSION_MARKERS):
            found.append(d)
    return sorted(found)


def _parse(path: str, msg_type):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ProfileError(f"{path}: cannot read ({e.strerror})") from None
    if not data:
        raise ProfileError(f"{path}: empty file (0 bytes)")
    msg = msg_type()
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError) as e:
        raise ProfileError(f"{path}: not a valid {msg_type.__name__} protobuf (corrupt or truncated: {e})") from None
    if getattr(msg, "format_version", 1) == 0:
        raise ProfileError(f"{path}: not a neuron-explorer {msg_type.__name__} file (no format version)")
    return msg


def _varint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf, pos: int, end: int):
    """(field number, wire type, start, end, tag start) of each field in buf[pos:end]: start..end is
    the payload (the varint itself for wire type 0); the whole field is ``tag_start..end``."""
    while pos < end:
        tag_start = pos
        key, pos = _varint(buf, pos)
        field_no, wt = key >> 3, key & 7
        if wt == 0:
            value_start = pos
            _, pos = _varint(buf, pos)
            yield field_no, wt, value_start, pos, tag_start
        elif wt == 1:
            pos += 8
            yield field_no, wt, pos - 8, pos, tag_start
        elif wt == 5:
            pos += 4
            yield field_no, wt, pos - 4, pos, tag_start
        elif wt == 2:
            n, pos = _varint(buf, pos)
            yield field_no, wt, pos, pos + n, tag_start
            pos += n
        else:
            raise ValueError(f"unsupported wire type {wt}")
        if pos > end:
            raise ValueError("truncated field")


def _parse_columnar(path: str, msg_type, column_field: int) -> tuple[object, object, dict[int, tuple[int, int]], int]:
    """Parse a message whose ``column_field`` holds packed column bytes, without copying them.

    The file is memory-mapped; everything but the column message is parsed by protobuf (it is
    small), and the columns come back as (start, end) offsets into the map, ready for
    ``numpy.frombuffer``.  Returns (message, map, {column field number: (start, end)}, count)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise ProfileError(f"{path}: empty file (0 bytes)")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise ProfileError(f"{path}: cannot read ({e.strerror})") from None
    rest = bytearray()
    cols: dict[int, tuple[int, int]] = {}
    count = 0
    try:
        for fno, wt, a, b, tag_start in _fields(mm, 0, size):
            if fno == column_field and wt == 2:
                for cf, cwt, ca, cb, _ in _fields(mm, a, b):
                    if cf == 1 and cwt == 0:
                        count = _varint(mm, ca)[0]
                    elif cwt == 2:
                        cols[cf] = (ca, cb)
            else:
                rest += mm[tag_start:b]
    except (ValueError, IndexError) as e:
        raise ProfileError(f"{path}: not a valid {msg_type.__name__} protobuf (corrupt or truncated: {e})") from None
    msg = msg_type()
    try:
        msg.ParseFromString(bytes(rest))
    except (DecodeError, ValueError) as e:
        raise ProfileError(f"{path}: not a valid {msg_type.__name__} protobuf (corrupt or truncated: {e})") from None
    if getattr(msg, "format_version", 1) == 0:
        raise ProfileError(f"{path}: not a neuron-explorer {msg_type.__name__} file (no format version)")
    return msg, mm, cols, count


def _col_view(mm, cols: dict[int, tuple[int, int]], field_no: int, dtype: str, path: str, name: str,
              count: int) -> np.ndarray:
    a, b = cols.get(field_no, (0, 0))
    dt = np.dtype(dtype).newbyteorder("<")
    if (b - a) != count * dt.itemsize:
        raise ProfileError(f"{path}: column {name} has {(b - a)} bytes, expected {count} values of {dt.itemsize}")
    arr = np.frombuffer(mm, dtype=dt, count=count, offset=a) if count else np.empty(0, dtype=dt)
    return arr.astype(dt.newbyteorder("="), copy=False)


def _arr(b: bytes, dtype: str, path: str, field_name: str, count: int | None = None) -> np.ndarray:
    dt = np.dtype(dtype).newbyteorder("<")
    if len(b) % dt.itemsize:
        raise ProfileError(f"{path}: column {field_name} has {len(b)} bytes, not a multiple of {dt.itemsize}")
    a = np.frombuffer(b, dtype=dt)
    if count is not None and len(a) != count:
        raise ProfileError(f"{path}: column {field_name} has {len(a)} values, expected {count}")
    return a.astype(dt.newbyteorder("="), copy=False)


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
        for name in (base, parent):
            if "_pid_" in name:
                return name.split("_pid_")[0]
        return "unknown"

    @property
    def pid(self) -> int:
        if self.info is not None and self.info.pid:
            return int(self.info.pid)
        for name in (os.path.basename(self.path.rstrip("/")), os.path.basename(os.path.dirname(self.path))):
            if "_pid_" in name:
                try:
                    return int(name.split("_pid_")[1].split("_")[0])
                except ValueError:
                    pass
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


def load_session(path: str, load_events: bool = True) -> Session:
    """Load one session; raises ProfileError when nothing in it is usable.

    A damaged optional file (cpu_util.pb, host_mem.pb) becomes a warning on the session."""
    s = Session(path=path)
    info_p = os.path.join(path, "trace_info.pb")
    trace_p = os.path.join(path, "ntrace.pb")
    if os.path.exists(info_p):
        s.info = _parse(info_p, pb.TraceInfo)
    if os.path.exists(trace_p) and load_events:
        t, mm, cols, n = _parse_columnar(trace_p, pb.SystemTrace, 5)  # 5: SystemTrace.events
        s.trace = t
        s.type_names = [""] * (max((et.id for et in t.event_types), default=-1) + 1)
        s.type_args = [[] for _ in s.type_names]
        for et in t.event_types:
            s.type_names[et.id] = et.name
            s.type_args[et.id] = list(et.args)
        s.strings = list(t.strings)
        s.models = list(t.models)
        F = pb.EventColumns.DESCRIPTOR.fields_by_name
        layout = {}
        for name, dtype in (("type", "u2"), ("start_ns", "i8"), ("end_ns", "i8"), ("nc_idx", "i4"),
                            ("thread_id", "i8"), ("a", "i8"), ("b", "i8"), ("c", "i8"), ("d", "i8"), ("e", "i8")):
            s.events[name] = _col_view(mm, cols, F[name].number, dtype, trace_p, name, n)
            layout[name] = (cols.get(F[name].number, (0, 0))[0], np.dtype(dtype).itemsize)
        s.mapped = (mm, layout)
        if n and int(s.events["type"].max()) >= len(s.type_names):
            raise ProfileError(f"{trace_p}: event type id {int(s.events['type'].max())} is not declared in the file")
    if s.info is None and s.trace is None:
        raise ProfileError(f"{path}: no trace_info.pb or ntrace.pb")
    try:
        names = sorted(os.listdir(path))
    except OSError:
        names = []
    s.device_paths = [os.path.join(path, n) for n in names if n.endswith(".ntff")]
    s.neff_paths = [os.path.join(path, n) for n in names if n.endswith(".neff")]
    for name, typ, attr in (("cpu_util.pb", pb.CpuUtil, "cpu"), ("host_mem.pb", pb.HostMem, "mem")):
        p = os.path.join(path, name)
        if os.path.exists(p):
            try:
                setattr(s, attr, _parse(p, typ))
            except ProfileError as e:
                s.warnings.append(str(e))
    return s


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

    @property
    def strings(self) -> list[str]:
        return list(self.trace.strings)


def load_device_trace(path: str) -> DeviceProfile:
    """Load one .ntff; raises ProfileError for an empty, truncated or foreign file."""
    if os.path.exists(path) and os.path.getsize(path) == 0:
        raise ProfileError(f"{path}: empty file (0 bytes): device profiling was enabled but no execution was "
                           "captured (likely a warm-up issue)")
    t, mm, cols, n = _parse_columnar(path, pb.DeviceTrace, 9)  # 9: DeviceTrace.ops
    F = pb.DeviceOpColumns.DESCRIPTOR.fields_by_name
    ops = {name: _col_view(mm, cols, F[name].number, dtype, path, name, n)
           for name, dtype in (("start_ns", "i8"), ("end_ns", "i8"), ("name", "i4"), ("track", "i4"),
                               ("exec_idx", "i4"), ("flops", "f8"), ("nbytes", "i8"), ("detail", "i4"),
                               ("source", "i4"))}
    t.ops.count = n
    ns = len(t.strings)
    for col in ("name", "track", "detail", "source"):
        if n and (int(ops[col].max()) >= ns or int(ops[col].min()) < 0):
            raise ProfileError(f"{path}: column {col} refers to a string outside the file's table")
    if n and (int(ops["exec_idx"].max()) >= len(t.executions) or int(ops["exec_idx"].min()) < 0):
        raise ProfileError(f"{path}: an op refers to an execution the file does not declare")
    return DeviceProfile(path, t, ops)


def load_neff(path: str) -> pb.NeffFile:
    return _parse(path, pb.NeffFile)
