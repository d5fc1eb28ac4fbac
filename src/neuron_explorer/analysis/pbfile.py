"""Reading capture files without trusting them: regular files only, protobuf messages parsed with
their sizes checked against the bytes present, packed columns mapped rather than copied.

A file is judged by its first bytes before anything else is read or mapped: every capture message
starts with its format version (``contracts.columns.FORMAT_VERSION``), so a file of zeros, a sparse
file, or anything that is not a capture is refused in microseconds whatever its size, and a file of
a newer format is refused by name instead of being misread as this one.  Nothing is ever sized by
a number read from a file: a count must be backed by the bytes present before it is used.

Every error is a ``ProfileError`` whose message names the file and what is wrong with it.
"""

from __future__ import annotations

import mmap
import os
from typing import TypeVar

import numpy as np
from google.protobuf.message import DecodeError, Message

from neuron_explorer.contracts.columns import FORMAT_VERSION
from neuron_explorer.util import files
from neuron_explorer.util.names import printable
from neuron_explorer.util.pbwire import decode_varint, iter_fields

M = TypeVar("M", bound=Message)  # the capture message a file holds (proto/neuron_explorer_capture.proto)


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
HEADER_BYTES = 16  # the format version field: a one-byte tag and a varint (at most 10 bytes)
_VERSION_TAG = 0x08  # field 1 (format_version), wire type 0 (varint)


def check_header(path: str, msg_type, head: bytes) -> int:
    """The format version ``head`` (a file's first bytes) starts with; ProfileError when the file
    does not start like a capture file of ``msg_type`` or holds a newer format than this reader's.

    Every writer of capture files serializes ``format_version`` (field 1) first, so this needs a
    few bytes however large the file is."""
    name = msg_type.__name__
    shown = head[:8].hex(" ")
    if not head or head[0] != _VERSION_TAG:
        raise ProfileError(f"{path}: not a valid capture file (no {name} header: it starts with bytes {shown})")
    try:
        version = decode_varint(head, 1)[0]
    except (ValueError, IndexError):
        raise ProfileError(f"{path}: not a valid capture file (the {name} format version is cut or malformed: "
                           f"{shown})") from None
    check_version(path, msg_type, version)
    return version


def check_version(path: str, msg_type, version: int) -> None:
    if version == 0:
        raise ProfileError(f"{path}: not a neuron-explorer {msg_type.__name__} file (no format version)")
    if version > FORMAT_VERSION:
        raise ProfileError(f"{path}: {msg_type.__name__} format version {version} is newer than this neuron-explorer "
                           f"reads (version {FORMAT_VERSION}): convert it with the neuron-explorer that wrote it")


def _read_head(fd: int, path: str) -> bytes:
    try:
        return os.pread(fd, HEADER_BYTES, 0)
    except OSError as e:
        raise ProfileError(f"{path}: cannot read ({e.strerror})") from None


def parse_message(path: str, msg_type: type[M]) -> M:
    """A whole-message capture file (trace_info.pb, cpu_util.pb, host_mem.pb, a .neff), read only
    if it is a regular file, starts with a format version this reader knows (``check_header``),
    and never past the size it had when opened."""
    fd, st = open_regular(path)
    try:
        if st.st_size == 0:
            raise ProfileError(f"{path}: empty file (0 bytes)")
        check_header(path, msg_type, _read_head(fd, path))
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


def _decode(path: str, msg_type: type[M], data) -> M:
    """``data``: bytes, or a memoryview of the file's map (upb parses either without a copy)."""
    msg = msg_type()
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError) as e:
        raise ProfileError(f"{path}: not a valid {msg_type.__name__} protobuf (corrupt or truncated: {e})") from None
    check_version(path, msg_type, getattr(msg, "format_version", 1))  # (a repeated field 1: the last counts)
    return msg


# The tables of a columnar file (everything but its columns: strings, models, event types, the
# device trace's executions) are parsed into Python objects, so they are bounded: far beyond what a
# capture holds (a million 100-byte strings is 100 MB), far below what would exhaust memory.
TABLES_LIMIT_BYTES = 256 << 20
COLUMN_FIELDS_LIMIT = 64  # fields of the column message: a count and a dozen columns are written


def _map_checked(path: str, msg_type) -> tuple[mmap.mmap, os.stat_result]:
    """The regular file at ``path`` mapped read-only, once its header was checked against
    ``msg_type`` (``check_header``); an empty or unreadable file is a ``ProfileError``."""
    fd, st = open_regular(path)
    try:
        if st.st_size == 0:
            raise ProfileError(f"{path}: empty file (0 bytes)")
        check_header(path, msg_type, _read_head(fd, path))
        return mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ), st
    except OSError as e:
        raise ProfileError(f"{path}: cannot read ({e.strerror})") from None
    finally:
        os.close(fd)


def parse_columnar(path: str, msg_type: type[M], column_field: int, row_bytes: int = 0) -> tuple[
        M, mmap.mmap, dict[int, tuple[int, int]], int, tuple[int, ...]]:
    """Parse a message whose ``column_field`` holds packed column bytes, without copying them.

    The file is checked before it is mapped (``check_header``); then the fields are walked once:
    everything but the column message (the tables, bounded by ``TABLES_LIMIT_BYTES``) is parsed by
    protobuf, and the columns come back as (start, end) offsets into the map, ready for
    ``numpy.frombuffer``.  ``row_bytes``: the bytes one row takes in all columns together; a
    declared count that the column message cannot hold is refused before any column is looked at.
    Returns (message, map, {column field number: (start, end)}, count, the file's identity)."""
    name = msg_type.__name__
    mm, st = _map_checked(path, msg_type)
    size = st.st_size
    spans: list[tuple[int, int]] = []  # the tables' fields, as runs of the file
    tables = 0
    cols: dict[int, tuple[int, int]] = {}
    count = 0
    block = 0  # bytes of the column message
    try:
        for fno, wt, a, b, tag_start in iter_fields(mm, 0, size):
            if fno == column_field and wt == 2:
                block = b - a
                for k, (cf, cwt, ca, cb, _) in enumerate(iter_fields(mm, a, b)):
                    if k >= COLUMN_FIELDS_LIMIT:
                        raise ProfileError(f"{path}: not a valid capture file (its {name} column message has more "
                                           f"than {COLUMN_FIELDS_LIMIT} fields)")
                    if cf == 1 and cwt == 0:  # the count field of EventColumns and DeviceOpColumns
                        count = decode_varint(mm, ca)[0]
                    elif cwt == 2:
                        cols[cf] = (ca, cb)
                continue
            tables += b - tag_start
            if tables > TABLES_LIMIT_BYTES:
                raise ProfileError(f"{path}: not a valid capture file (its {name} tables take more than "
                                   f"{TABLES_LIMIT_BYTES >> 20} MB, beyond what a capture writes)")
            if spans and spans[-1][1] == tag_start:
                spans[-1] = (spans[-1][0], b)
            else:
                spans.append((tag_start, b))
    except (ValueError, IndexError) as e:
        raise ProfileError(f"{path}: not a valid {name} protobuf (corrupt or truncated: {e})") from None
    if row_bytes and count * row_bytes > block:
        raise ProfileError(f"{path}: not a valid capture file (it declares {count} rows, {count * row_bytes} bytes "
                           f"of columns, but holds {block} bytes of columns in a file of {size})")
    msg = msg_type()
    try:
        msg.ParseFromString(b"".join(mm[a:b] for a, b in spans))
    except (DecodeError, ValueError) as e:
        raise ProfileError(f"{path}: not a valid {name} protobuf (corrupt or truncated: {e})") from None
    check_version(path, msg_type, getattr(msg, "format_version", 1))  # (a repeated field 1: the last counts)
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


class AppendedFile:
    """An append-only capture file (an event segment, decision 0111) as parsed by
    ``parse_appended``: its map, its header fields, its blocks and the bytes of a torn tail."""

    __slots__ = ("path", "mm", "header", "blocks", "torn", "identity")

    def __init__(self, path: str, mm: mmap.mmap, identity: tuple[int, ...]) -> None:
        self.path = path
        self.mm = mm
        self.header: dict[int, int] = {}  # varint fields before or between the blocks
        self.blocks: list[tuple[int, dict[int, tuple[int, int]]]] = []  # (count, {column field: (start, end)})
        self.torn = 0  # bytes at the end that hold a block cut short (a kill during an append)
        self.identity = identity


def parse_appended(path: str, msg_type, block_field: int, row_bytes: int) -> AppendedFile:
    """Walk a message grown by appending ``block_field`` entries (column messages like
    ``EventColumns``): varint header fields, then blocks whose columns come back as (start, end)
    offsets into the map.  A field cut by the end of the file is a torn last block (the writer was
    killed during an append): it is left out and its size reported in ``torn``, for a warning.
    Anything else that is not well formed raises ``ProfileError``."""
    name = msg_type.__name__
    mm, st = _map_checked(path, msg_type)
    size = st.st_size
    out = AppendedFile(path, mm, file_identity(st))
    pos = 0
    while pos < size:
        start = pos
        try:
            key, pos = decode_varint(mm, pos)
            fno, wt = key >> 3, key & 7
            if wt == 2:
                n, pos = decode_varint(mm, pos)
                a, pos = pos, pos + n
            elif wt == 0:
                value, pos = decode_varint(mm, pos)
        except IndexError:  # a tag or length cut by the end of the file
            out.torn = size - start
            break
        except ValueError as e:
            raise ProfileError(f"{path}: not a valid {name} protobuf (corrupt at byte {start}: {e})") from None
        if fno == 0:  # zeros: what a file system leaves of an append it did not complete
            out.torn = size - start
            break
        if wt not in (0, 2) or (wt == 2) != (fno == block_field):
            raise ProfileError(f"{path}: not a valid {name} protobuf (unexpected field {fno}, wire type {wt} "
                               f"at byte {start})")
        if pos > size:
            out.torn = size - start
            break
        if wt == 0:
            out.header[fno] = value
            continue
        out.blocks.append(_block(path, name, mm, a, pos, row_bytes, len(out.blocks)))
    check_version(path, msg_type, out.header.get(1, 0))
    return out


def _block(path: str, name: str, mm, a: int, b: int, row_bytes: int, k: int) -> tuple[int, dict[int, tuple[int, int]]]:
    cols: dict[int, tuple[int, int]] = {}
    count = 0
    try:
        for j, (cf, cwt, ca, cb, _) in enumerate(iter_fields(mm, a, b)):
            if j >= COLUMN_FIELDS_LIMIT:
                raise ProfileError(f"{path}: block {k} has more than {COLUMN_FIELDS_LIMIT} fields")
            if cf == 1 and cwt == 0:
                count = decode_varint(mm, ca)[0]
            elif cwt == 2:
                cols[cf] = (ca, cb)
    except (ValueError, IndexError) as e:
        raise ProfileError(f"{path}: block {k} is not a valid {name} block (corrupt: {e})") from None
    if count * row_bytes > b - a:
        raise ProfileError(f"{path}: block {k} declares {count} rows, {count * row_bytes} bytes of columns, "
                           f"but holds {b - a} bytes")
    return count, cols
