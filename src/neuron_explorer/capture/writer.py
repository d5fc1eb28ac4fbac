"""Writes a capture session directory: ntrace.pb, trace_info.pb, cpu_util.pb, host_mem.pb.

Every file is written to a temporary name in the same directory and renamed into place, so a
reader (or a process killed mid-write) never leaves a torn file behind.  ``AtomicFile`` and
``safe_component`` also serve ``view``'s and ``neuron-det``'s outputs (see their docstrings).
"""

from __future__ import annotations

import errno
import hashlib
import os
import platform
import re
import stat
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from .. import __version__
from ..proto import neuron_explorer_capture_pb2 as pb
from neuron_explorer.contracts import events as ev
from neuron_explorer.util.pbwire import encode_varint_scalar

if TYPE_CHECKING:
    from ..runtime.core import Runtime
    from .samplers import HostSampler
    from .store import CoreStore

FORMAT_VERSION = 1


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


_FILE_MODE = 0o666 & ~_umask()


class AtomicFile:
    """A file written under a hidden temporary name in its directory and renamed into place by
    ``commit()`` (``abort()`` removes it): readers see the old file or the whole new one.

    ``output=True`` is for a path the user named (``--output-file``, ``neuron-det -o``): the rename
    then happens only over a regular file or a missing name.  A symlink is followed and its target
    replaced (the link stays); a character device or FIFO (``/dev/null``, a named pipe) is written
    through, never replaced; ``-``, ``/dev/stdout`` and ``/proc/self/fd/N`` write to that inherited
    descriptor.  A directory, block device or socket is refused (``OSError``).  Files we name
    ourselves (a capture session, NDET logs in a shared /tmp) keep ``output=False``: a symlink
    planted at such a name is replaced, never followed.
    """

    def __init__(self, path: str, mode: int | None = None, *, output: bool = False) -> None:
        self.path = path
        self.tmp: str | None = None  # None: written through (stdout, a device, a FIFO), nothing to rename
        if output:
            kind = output_kind(path)
            if kind in ("directory", "block device", "socket"):
                raise OSError(errno.EISDIR if kind == "directory" else errno.EINVAL, f"is a {kind}", path)
            if kind == "descriptor":
                self._through(os.dup(fd_alias(path)))
                return
            if kind == "special":
                self._through(os.open(path, os.O_WRONLY | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)))
                return
            if kind == "regular" and mode is None:
                mode = stat.S_IMODE(os.stat(path).st_mode)  # the user's permissions on their file
            self.path = path = os.path.realpath(path)
        d = os.path.dirname(path) or "."
        fd, self.tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
        try:
            os.fchmod(fd, _FILE_MODE if mode is None else mode)  # mkstemp creates 0600
        except BaseException:
            os.close(fd)
            os.unlink(self.tmp)
            raise
        self.f = os.fdopen(fd, "wb")
        self.write = self.f.write

    def _through(self, fd: int) -> None:
        """Write straight to ``fd`` (stdout, a device, a FIFO): there is nothing to rename."""
        self.f = os.fdopen(fd, "wb")
        self.write = self.f.write

    def commit(self) -> None:
        self.f.close()  # (raises ENOSPC etc. from the last buffered write: abort() then cleans up)
        if self.tmp is not None:
            os.replace(self.tmp, self.path)
            self.tmp = None

    def abort(self) -> None:
        try:
            self.f.close()
        except OSError:
            pass  # a write already failed (full disk, closed pipe): the temporary file goes anyway
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None


_FD_ALIAS = re.compile(r"^/(?:proc/self|proc/thread-self|dev)/fd/(\d+)$")
_STD_ALIAS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def fd_alias(path: str) -> int | None:
    """The descriptor that ``path`` names (``-``, ``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/self/fd/N``, or a symlink to one of them), else None.  Writing through a copy of the
    descriptor shares its offset and append mode, as a shell redirection does."""
    if path == "-":
        return 1
    for _ in range(40):  # symlink hops, as the kernel allows
        p = os.path.normpath(path)
        if p in _STD_ALIAS:
            return _STD_ALIAS[p]
        m = _FD_ALIAS.match(p)
        if m:
            return int(m.group(1))
        if not os.path.islink(p):
            return None
        path = os.path.join(os.path.dirname(p), os.readlink(p))
    return None


def output_kind(path: str) -> str:
    """What a user-named output path is: ``descriptor`` (``-``, ``/dev/stdout``, ...: see
    ``fd_alias``), ``missing``, ``regular``, ``directory``, ``special`` (character device or FIFO:
    written through), ``block device`` or ``socket`` (refused).  Symlinks are followed."""
    if fd_alias(path) is not None:
        return "descriptor"
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "missing"  # (creating it then fails with the reason; other errors are raised)
    m = st.st_mode
    if stat.S_ISREG(m):
        return "regular"
    if stat.S_ISDIR(m):
        return "directory"
    if stat.S_ISCHR(m) or stat.S_ISFIFO(m):
        return "special"
    return "block device" if stat.S_ISBLK(m) else "socket"


def atomic_write(path: str, data: bytes | Iterable[bytes | memoryview], mode: int | None = None, *,
                 output: bool = False) -> None:
    """Write ``data`` to ``path`` through an ``AtomicFile`` (see there for ``output``)."""
    f = AtomicFile(path, mode, output=output)
    try:
        if isinstance(data, (bytes, bytearray, memoryview)):
            f.write(data)
        else:
            for part in data:
                f.write(part)
        f.commit()
    except BaseException:
        f.abort()
        raise


_SAFE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
# longest encoded name kept whole: with "device_profile_model_" + ".pftrace" around it, still under
# the 255-byte limit of a file name
_MAX_COMPONENT = 200


def safe_component(name: str) -> str:
    """A name read from a file (instance id, profile id, graph hash) as one safe path component.

    Letters, digits, ``.``, ``_`` and ``-`` stay; every other byte of the UTF-8 name becomes
    ``%XX`` (so ``/``, NUL, ``%`` and spaces cannot survive), and ``.``/``..`` become ``%2E``/``%2E%2E``.
    Percent-encoding is one-to-one, so two different names never share a directory, and it is what
    hive-partitioned readers (pyarrow, DuckDB, Spark) decode back.  A name whose encoding exceeds
    200 bytes keeps a prefix plus ``~`` and a 64-bit hash of the whole name (``~`` is always encoded
    otherwise, so this form cannot collide with a whole name); it no longer decodes to the name.
    """
    if not name:
        raise ValueError("a path component cannot be empty")
    if name in (".", ".."):
        return "%2E" * len(name)
    try:
        raw = name.encode("utf-8", "surrogateescape")  # non-UTF-8 directory names arrive as surrogates
    except UnicodeEncodeError:
        raw = name.encode("utf-8", "surrogatepass")
    out = "".join(chr(b) if chr(b) in _SAFE_CHARS else f"%{b:02X}" for b in raw)
    if len(out) <= _MAX_COMPONENT:
        return out
    cut = out[:_MAX_COMPONENT - 20]
    if "%" in cut[-2:]:  # do not split a %XX escape
        cut = cut[:cut.rindex("%")]
    return cut + "~" + hashlib.blake2b(raw, digest_size=8).hexdigest()


def atomic_write_all(files: list[tuple[str, Callable[[], bytes | Iterable[bytes | memoryview]]]]) -> None:
    """Write several files as one: each ``(path, encode)`` is encoded and written under a temporary
    name, one at a time; only when all are written and flushed are they renamed into place.  On
    any failure (a full disk) every temporary file is removed and the previous files stay."""
    pending: list[AtomicFile] = []
    try:
        for path, encode in files:
            f = AtomicFile(path)
            pending.append(f)
            data = encode()
            if isinstance(data, (bytes, bytearray, memoryview)):
                f.write(data)
            else:
                for part in data:
                    f.write(part)
            f.f.flush()  # a full disk fails here, before anything is renamed
        while pending:
            pending[0].commit()
            pending.pop(0)
    except BaseException:
        for f in pending:
            f.abort()
        raise


def session_dir_name(wall_ns: int) -> str:
    t = time.gmtime(wall_ns / 1e9)
    return time.strftime("%Y%m%dT%H%M%S", t) + f"{(wall_ns // 1_000_000) % 1000:03d}Z"


def make_session_dir(output_dir: str, instance_id: str, pid: int, wall_ns: int) -> str:
    """A new directory ``<out>/<instance>_pid_<pid>/<timestamp>[_<n>]`` that no other process got.

    Processes may race for the same name (pid reuse in containers, a shared volume, sessions in
    the same millisecond): ``mkdir`` is the arbiter, and the loser takes the next suffix."""
    parent = os.path.join(output_dir, f"{instance_id}_pid_{pid}")
    os.makedirs(parent, exist_ok=True)
    base = os.path.join(parent, session_dir_name(wall_ns))
    path, n = base, 1
    while True:
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            path = f"{base}_{n}"
            n += 1


def _col(a: np.ndarray, dtype: str) -> bytes:
    return np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()


def _len_prefix(field: int, nbytes: int) -> bytes:
    """Tag and length of a length-delimited protobuf field."""
    return encode_varint_scalar((field << 3) | 2) + encode_varint_scalar(nbytes)


def _stored_rows(cores: dict[int, "CoreStore"]) -> tuple[np.ndarray, np.ndarray]:
    parts, ncs = [], []
    for nc, store in sorted(cores.items()):
        arr = store.array()
        parts.append(arr)
        ncs.append(np.full(len(arr), nc, dtype="<i4"))
    if not parts:
        return np.empty((0, ev.RECORD_WIDTH), dtype=np.int64), np.empty(0, dtype="<i4")
    if len(parts) == 1:
        return parts[0], ncs[0]
    return np.concatenate(parts), np.concatenate(ncs)


# EventColumns' columns: (field number from the schema, row of the stored records or None for
# nc_idx, little-endian dtype on the wire)
_EC = pb.EventColumns.DESCRIPTOR.fields_by_name
_COLUMNS = [(_EC[name].number, row, dtype) for name, row, dtype in
            [("type", 0, "<u2"), ("start_ns", 1, "<i8"), ("end_ns", 2, "<i8"), ("nc_idx", None, "<i4"),
             ("thread_id", 3, "<i8")] + [(name, 4 + i, "<i8") for i, name in enumerate("abcde")]]
_COUNT_TAG = encode_varint_scalar(_EC["count"].number << 3)  # a varint field
_EVENTS_FIELD = pb.SystemTrace.DESCRIPTOR.fields_by_name["events"].number


_TRANSPOSE_ROWS = 4096


def encode_events(cores: dict[int, "CoreStore"]) -> list:
    """The serialized ``EventColumns`` message as a list of buffers (column arrays are not copied
    into a protobuf object: the tags and lengths are written around the raw column bytes)."""
    arr, nc = _stored_rows(cores)
    # rows -> contiguous columns, a cache-sized block of rows at a time (a plain transposed copy
    # streams through all rows once per column)
    cols = np.empty((arr.shape[1], len(arr)), dtype=np.int64)
    for lo in range(0, len(arr), _TRANSPOSE_ROWS):
        cols[:, lo:lo + _TRANSPOSE_ROWS] = arr[lo:lo + _TRANSPOSE_ROWS].T
    out = [_COUNT_TAG + encode_varint_scalar(len(arr))]
    for field, row, dtype in _COLUMNS:
        col = nc if row is None else cols[row]
        if col.dtype != np.dtype(dtype):
            col = col.astype(dtype)
        data = memoryview(col).cast("B")
        out += [_len_prefix(field, len(data)), data]
    return out


def encode_system_trace(rt: "Runtime", cores: dict[int, "CoreStore"]) -> list:
    """``ntrace.pb`` as a list of buffers to write in order (a ``SystemTrace`` message: the small
    tables through protobuf, then the ``events`` field built around the column bytes)."""
    msg = pb.SystemTrace(format_version=FORMAT_VERSION)
    for t in ev.EVENT_TYPES:
        msg.event_types.add(id=t.id, name=t.name, group=t.group, source=t.source, args=list(t.args))
    msg.strings.extend(list(rt.string_list))
    for m in list(rt.models):
        msg.models.add(
            id=m.id, name=m.name, neff_name=m.neff_name, graph_hash=m.graph_hash, backend=m.backend,
            kind=m.kind, compile_ns=m.compile_ns, nc_idx=m.nc_idx, source_location=m.source_location,
            module_path=m.module_path, num_nodes=m.num_nodes, flops=m.flops,
            constants_bytes=m.constants_bytes, signature=m.signature,
        )
    events = encode_events(cores)
    return [msg.SerializeToString(), _len_prefix(_EVENTS_FIELD, sum(len(b) for b in events))] + events


def platform_name() -> str:
    """Like ``platform.platform()`` (``Linux-6.1.0-x86_64``), from ``os.uname()`` alone:
    ``platform.platform()`` may spawn ``uname -p``, which must never happen from the flush thread
    (a fork from a thread, in the user's process, upsets multiprocessing's forkserver)."""
    u = os.uname()
    return f"{u.sysname}-{u.release}-{u.machine}"


_PLATFORM = platform_name()


def _versions() -> dict[str, str]:
    v = {"neuron_explorer": __version__, "python": platform.python_version(), "platform": _PLATFORM}
    for mod in ("torch", "jax"):
        m = sys.modules.get(mod)
        if m is not None and hasattr(m, "__version__"):
            v[mod] = str(m.__version__)
    return v


def encode_trace_info(rt: "Runtime", cores: dict[int, "CoreStore"], session_dir: str, note: str = "",
                      cfg=None, start_anchor=None, end_reason: str | None = None) -> bytes:
    ident = rt.ident
    cfg = cfg or rt.config
    start_anchor = start_anchor or rt.anchors[0]
    msg = pb.TraceInfo(
        format_version=FORMAT_VERSION, instance_id=ident.instance_id, hostname=ident.hostname, pid=ident.pid,
        process_tag=ident.process_tag, rank=ident.rank, local_rank=ident.local_rank,
        world_size=ident.world_size, node_rank=ident.node_rank, nd_idx=rt.nd_idx, device_kind=rt.device_kind,
        session_dir=session_dir, end_reason=end_reason or rt.end_reason, note=note, start_wall_ns=start_anchor[1],
    )
    msg.nc_indices.extend(sorted(cores))
    for mono, wall, label in rt.anchors:
        msg.anchors.add(monotonic_ns=mono, wall_ns=wall, label=label)
    msg.config.update(cfg.raw_env)
    for nc, st in sorted(cores.items()):
        msg.cores.add(nc_idx=nc, capacity=st.capacity, recorded=st.recorded, kept=st.rows, dropped=st.dropped)
    msg.versions.update(_versions())
    msg.argv.extend(sys.argv)
    msg.runtime_events_seen = any(st.recorded for st in cores.values()) or bool(rt.models)
    msg.enabled_event_types.extend(t.name for t in ev.EVENT_TYPES if rt.enabled[t.id])
    if cfg.nc_filter is not None:
        _record_nc_filter(msg, cfg.nc_filter)
    return msg.SerializeToString()


ENABLED_NCS_LISTED = 4096  # a core filter with more members is recorded as text, not expanded


def _record_nc_filter(msg: pb.TraceInfo, ncs) -> None:
    """List the filter's cores in ``enabled_ncs`` (int32) when that is small; a wide range such as
    ``0-99999999999`` goes into ``config["enabled_ncs"]`` as typed instead of being expanded."""
    if ncs.size <= ENABLED_NCS_LISTED and ncs.ranges[-1][1] < 2**31:
        msg.enabled_ncs.extend(ncs.members(ENABLED_NCS_LISTED))
    else:
        msg.config["enabled_ncs"] = str(ncs)


def encode_cpu_util(s: "HostSampler") -> bytes:
    ts, pct, proc, dropped = s.cpu_columns()
    msg = pb.CpuUtil(format_version=FORMAT_VERSION, num_cpus=s.ncpu, period_ns=int(s.period_s * 1e9),
                     monitored_pid=s.pid, dropped_samples=dropped)
    msg.ts_ns = _col(ts, "i8")
    msg.cpu_percent = _col(pct.ravel(), "f4")
    msg.process_percent = _col(proc, "f4")
    return msg.SerializeToString()


def encode_host_mem(s: "HostSampler") -> bytes:
    ts, rows, dropped = s.mem_columns()
    msg = pb.HostMem(format_version=FORMAT_VERSION, period_ns=int(s.period_s * 1e9), monitored_pid=s.pid,
                     dropped_samples=dropped)
    msg.ts_ns = _col(ts, "i8")
    for i, name in enumerate(("process_rss", "process_vms", "host_total", "host_used", "host_available")):
        setattr(msg, name, _col(rows[:, i], "i8"))
    return msg.SerializeToString()
