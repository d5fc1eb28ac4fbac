"""Reading capture files without trusting them: regular files only, protobuf messages parsed with
their sizes checked against the bytes present, packed columns mapped rather than copied.

Every error is a ``ProfileError`` whose message names the file and what is wrong with it.
"""

from __future__ import annotations

import mmap
import os

import numpy as np
from google.protobuf.message import DecodeError

from neuron_explorer.util import files
from neuron_explorer.util.names import printable
from neuron_explorer.util.pbwire import decode_varint, iter_fields


class ProfileError(Exception):
    """A profile file that cannot be used; the message names the file and the problem (on one
    printable line, whatever bytes the file's name or contents hold)."""

    def __init__(self, message: str) -> None:
        super().__init__(printable(message))


def open_regular(path: str) -> tuple[int, os.stat_result]:
    """(descriptor, status) of ``path`` opened for reading; ProfileError unless it is a regular
    file (util.files: a FIFO or a device is never read)."""
    try:
        return files.open_regular(path)
    except files.NotRegularFile as e:
        raise ProfileError(f"{path}: not a regular file ({e.kind})") from None
    except OSError as e:
        raise ProfileError(f"{path}: cannot read ({e.strerror})") from None


def file_identity(st: os.stat_result) -> tuple[int, ...]:
    """What tells one version of a file from another: a replaced file has another inode, a
    rewritten one another size or times (ctime cannot be set back by the writer)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


READ_WHOLE_BYTES = 16 << 20  # larger files are mapped instead: garbage costs only the pages parsed until the error


def parse_message(path: str, msg_type):
    """A whole-message capture file (trace_info.pb, cpu_util.pb, host_mem.pb, a .neff), read only
    if it is a regular file and never past the size it had when opened."""
    fd, st = open_regular(path)
    try:
        if st.st_size == 0:
            raise ProfileError(f"{path}: empty file (0 bytes)")
        try:
            if st.st_size <= READ_WHOLE_BYTES:
                with os.fdopen(fd, "rb", closefd=False) as f:
                    return _decode(path, msg_type, f.read(st.st_size))
            mm = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ)
        except OSError as e:
            raise ProfileError(f"{path}: cannot read ({e.strerror})") from None
    finally:
        os.close(fd)
    with mm, memoryview(mm) as view:
        return _decode(path, msg_type, view)


def _decode(path: str, msg_type, data):
    msg = msg_type()
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError) as e:
        raise ProfileError(f"{path}: not a valid {msg_type.__name__} protobuf (corrupt or truncated: {e})") from None
    if getattr(msg, "format_version", 1) == 0:
        raise ProfileError(f"{path}: not a neuron-explorer {msg_type.__name__} file (no format version)")
    return msg


def parse_columnar(path: str, msg_type, column_field: int) -> tuple[object, object, dict[int, tuple[int, int]], int,
                                                                   tuple[int, ...]]:
    """Parse a message whose ``column_field`` holds packed column bytes, without copying them.

    The file is memory-mapped; everything but the column message is parsed by protobuf (it is
    small), and the columns come back as (start, end) offsets into the map, ready for
    ``numpy.frombuffer``.  Returns (message, map, {column field number: (start, end)}, count,
    the file's identity)."""
    fd, st = open_regular(path)
    size = st.st_size
    try:
        if size == 0:
            raise ProfileError(f"{path}: empty file (0 bytes)")
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except OSError as e:
        raise ProfileError(f"{path}: cannot read ({e.strerror})") from None
    finally:
        os.close(fd)
    rest = bytearray()
    cols: dict[int, tuple[int, int]] = {}
    count = 0
    try:
        for fno, wt, a, b, tag_start in iter_fields(mm, 0, size):
            if fno == column_field and wt == 2:
                for cf, cwt, ca, cb, _ in iter_fields(mm, a, b):
                    if cf == 1 and cwt == 0:  # the count field of EventColumns and DeviceOpColumns
                        count = decode_varint(mm, ca)[0]
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
    return msg, mm, cols, count, file_identity(st)


def column_view(mm, cols: dict[int, tuple[int, int]], field_no: int, dtype: str, path: str, name: str,
              count: int) -> np.ndarray:
    a, b = cols.get(field_no, (0, 0))
    dt = np.dtype(dtype).newbyteorder("<")
    if (b - a) != count * dt.itemsize:
        raise ProfileError(f"{path}: column {name} has {(b - a)} bytes, expected {count} values of {dt.itemsize}")
    arr = np.frombuffer(mm, dtype=dt, count=count, offset=a) if count else np.empty(0, dtype=dt)
    return arr.astype(dt.newbyteorder("="), copy=False)


def packed_array(b: bytes, dtype: str, path: str, field_name: str, count: int | None = None) -> np.ndarray:
    dt = np.dtype(dtype).newbyteorder("<")
    if len(b) % dt.itemsize:
        raise ProfileError(f"{path}: column {field_name} has {len(b)} bytes, not a multiple of {dt.itemsize}")
    a = np.frombuffer(b, dtype=dt)
    if count is not None and len(a) != count:
        raise ProfileError(f"{path}: column {field_name} has {len(a)} values, expected {count}")
    return a.astype(dt.newbyteorder("="), copy=False)
