"""The NDET log file: a small, versioned, self-describing binary format.

Why binary and not JSON lines: ``neuron-det`` must read dozens of logs of tens of megabytes in a few
seconds, and a fixed-width record array is one ``numpy.frombuffer`` away from vectorized analysis,
while JSON costs a parse and a Python object per event.  Self-description lives in a JSON header
(record layout, the meaning of every argument slot per record kind, the string table, the models,
the process identity), so a reader never depends on the writer's version of this module.

Layout (all integers little-endian)::

    b"NDETLOG1"                 8 bytes magic (the digit is the major format version)
    u32 header_len              length of the JSON header in bytes
    header                      UTF-8 JSON, padded with spaces to a multiple of 8 bytes
    records                     header["record_count"] records of RECORD_DTYPE (64 bytes each):
                                the retained ring (oldest first), then the in-flight begin records
    b"NDETEND1"                 8 bytes trailer magic
    u32 crc32                   zlib.crc32 of everything from the first magic to the end of records
    u32 reserved (0)

A truncated file fails the size check, a torn or bit-flipped one the CRC; both are reported by
``read_log`` as ``LogFormatError`` naming the file.  Files are always replaced atomically
(temporary name in the same directory, then ``os.replace``), so a reader never sees a partial
write even while the process is still running.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterable

import numpy as np

from neuron_explorer.util import files
from neuron_explorer.util.names import valid_texts

MAGIC = b"NDETLOG1"
TRAILER = b"NDETEND1"
FORMAT_NAME = "neuron-explorer-ndet"
# the header's version (the layout of the records and the magic's major digit are unchanged):
# 2 added ``process`` (role and parent, docs/decisions/0094-ndet-process-roles.md); readers take a
# version-1 header's missing fields as unknown
FORMAT_VERSION = 2

RECORD_DTYPE = np.dtype([
    ("kind", "u1"),    # KIND_* below
    ("state", "u1"),   # STATE_*
    ("nc", "<u2"),     # NeuronCore (logical core) index
    ("ret", "<i4"),    # runtime status code (0 = success)
    ("t0", "<i8"),     # start, host CLOCK_MONOTONIC ns
    ("t1", "<i8"),     # end, host CLOCK_MONOTONIC ns (0 while in flight)
    ("a", "<i8"),
    ("b", "<i8"),
    ("c", "<i8"),
    ("d", "<i8"),
    ("e", "<i8"),
])
assert RECORD_DTYPE.itemsize == 64

# Record kinds.  One ``exec`` record stands for a whole execution; readers expand it into the spec's
# nrt_execute (host request), sync_exec (the NEFF being run) and nc_exec (the core) events, which on
# this substrate share one span.
KIND_EXEC = 0
KIND_CC_OP = 1
KIND_NUMERICAL_ERROR = 2
KIND_CC_BARRIER = 3

STATE_COMPLETE = 0
STATE_IN_FLIGHT = 1

KINDS: dict[int, dict[str, Any]] = {
    KIND_EXEC: {"name": "nrt_execute", "expands_to": ["nrt_execute", "sync_exec", "nc_exec"],
                "args": {"a": "model_id", "b": "exec_id"}},
    KIND_CC_OP: {"name": "cc_op_exec",
                 "args": {"a": "op_str", "b": "seq", "c": "bytes", "d": "dtype_str", "e": "group_str"}},
    KIND_NUMERICAL_ERROR: {"name": "numerical_error",
                           "args": {"a": "model_id", "b": "exec_id", "c": "nan_count", "d": "inf_count"}},
    KIND_CC_BARRIER: {"name": "cc_exec_barrier",
                      "args": {"a": "op_str", "b": "seq", "c": "bytes", "d": "dtype_str", "e": "group_str"}},
}
CC_KINDS = (KIND_CC_OP, KIND_CC_BARRIER)

# ``process.role`` in the header (version 2): a rank of a distributed job, a child that
# ``multiprocessing`` started (a pool worker), or a process of its own
ROLE_RANK = "rank"
ROLE_CHILD = "multiprocessing-child"
ROLE_MAIN = "main"


class LogFormatError(ValueError):
    """A file that is not a readable NDET log; the message says which file and what is wrong."""


def dtype_description() -> list[list[str]]:
    return [[name, RECORD_DTYPE[name].str] for name in RECORD_DTYPE.names or ()]


def _pad8(b: bytes) -> bytes:
    rem = (len(MAGIC) + 4 + len(b)) % 8
    return b + b" " * ((8 - rem) % 8)


def _header_bytes(header: dict) -> bytes:
    """The header as UTF-8 JSON; an argument or a name that is not valid Unicode (a non-UTF-8
    command-line argument) is written with ``\\xNN`` escapes instead of failing the log."""
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(valid_texts(header), separators=(",", ":"), ensure_ascii=False).encode()


def encode_parts(header: dict, blocks: Iterable[np.ndarray]) -> list[bytes | memoryview]:
    """The file as a list of buffers (so large record blocks are written without a copy)."""
    blocks = [np.ascontiguousarray(b, dtype=RECORD_DTYPE) for b in blocks]
    header = dict(header)
    header["record_count"] = int(sum(len(b) for b in blocks))
    hb = _pad8(_header_bytes(header))
    parts: list[bytes | memoryview] = [MAGIC + struct.pack("<I", len(hb)), hb]
    crc = zlib.crc32(parts[0])
    crc = zlib.crc32(hb, crc)
    for b in blocks:
        if len(b):
            mv = b.data.cast("B")
            crc = zlib.crc32(mv, crc)
            parts.append(mv)
    parts.append(TRAILER + struct.pack("<II", crc & 0xFFFFFFFF, 0))
    return parts


def atomic_write(path: str, parts: list[bytes | memoryview], mode: int = 0o644) -> None:
    """Write ``parts`` to ``path`` through a hidden temporary file and a rename (logs are 0644)."""
    from neuron_explorer.util.atomic import atomic_write as _atomic_write

    _atomic_write(path, parts, mode)


@dataclass
class NdetLog:
    """One log as read back: the header and the record array (ring first, then in-flight)."""

    path: str
    header: dict
    records: np.ndarray
    strings: list[str] = field(default_factory=list)

    @property
    def ident(self) -> dict:
        return self.header.get("ident", {})


def sniff(path: str) -> bool:
    """True when the file starts with the NDET magic (cheap: reads 8 bytes)."""
    try:
        with open_regular(path) as f:
            return f.read(len(MAGIC)) == MAGIC
    except (OSError, LogFormatError):
        return False


def _int_field(path: str, header: dict, key: str) -> int:
    v = header.get(key)
    if type(v) is not int or v < 0:
        raise LogFormatError(f"{path}: corrupt header: {key} is {v!r}; expected a whole number >= 0")
    return v


def _parse_header(path: str, data: bytes, hstart: int, hlen: int) -> dict:
    try:
        header = json.loads(data[hstart:hstart + hlen].decode("utf-8"))
    except RecursionError:
        raise LogFormatError(f"{path}: corrupt header: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise LogFormatError(f"{path}: corrupt header: {e}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise LogFormatError(f"{path}: corrupt header (not a {FORMAT_NAME} header)")
    return header


def _check_magic(path: str, head: bytes) -> None:
    if len(head) == 0:
        raise LogFormatError(f"{path}: empty file")
    if not head.startswith(MAGIC):
        if head[:7] == MAGIC[:7] and len(head) >= len(MAGIC):
            raise LogFormatError(f"{path}: NDET log format version {head[7:8]!r} is not supported (this reader: 1)")
        raise LogFormatError(f"{path}: not an NDET log (bad magic)")
    if len(head) < len(MAGIC) + 4:
        raise LogFormatError(f"{path}: truncated in the header")


def open_regular(path: str) -> BinaryIO:
    """Open for reading, refusing what is not a regular file (util.files: a FIFO would hang the
    reader and ``/dev/zero`` never ends)."""
    try:
        fd, _ = files.open_regular(path)
    except files.NotRegularFile:
        raise LogFormatError(f"{path}: not a regular file") from None
    except OSError as e:
        raise LogFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    return os.fdopen(fd, "rb")


def read_header(path: str) -> dict:
    """The JSON header alone (the records and the checksum are not read): enough to sort logs into
    jobs before reading any of them in full.  ``read_log`` still validates the whole file."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(len(MAGIC) + 4)
        _check_magic(path, head)
        (hlen,) = struct.unpack_from("<I", head, len(MAGIC))
        hstart = len(MAGIC) + 4
        if hstart + hlen + len(TRAILER) + 8 > size:
            raise LogFormatError(f"{path}: truncated ({size} bytes; the header alone needs {hstart + hlen})")
        data = head + f.read(hlen)
    if len(data) < hstart + hlen:
        raise LogFormatError(f"{path}: truncated in the header")
    return _parse_header(path, data, hstart, hlen)


def read_log(path: str) -> NdetLog:
    """Read and validate one log; raises LogFormatError with a one-line reason."""
    try:
        with open_regular(path) as f:
            data = f.read()
    except OSError as e:
        raise LogFormatError(f"{path}: cannot read: {e.strerror or e}") from None
    _check_magic(path, data)
    (hlen,) = struct.unpack_from("<I", data, len(MAGIC))
    hstart = len(MAGIC) + 4
    if hstart + hlen + len(TRAILER) + 8 > len(data):
        raise LogFormatError(f"{path}: truncated ({len(data)} bytes; the header alone needs {hstart + hlen})")
    header = _parse_header(path, data, hstart, hlen)
    rsize = header.get("record_size")
    if rsize != RECORD_DTYPE.itemsize or type(rsize) is not int or \
            not isinstance(header.get("record_dtype"), list) or \
            [list(x) if isinstance(x, list) else x for x in header["record_dtype"]] != dtype_description():
        raise LogFormatError(f"{path}: unsupported record layout {str(header.get('record_dtype'))[:200]}")
    n = _int_field(path, header, "record_count")
    rstart = hstart + hlen
    rend = rstart + n * rsize
    expected = rend + len(TRAILER) + 8
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "has trailing bytes"
        raise LogFormatError(f"{path}: {what} ({len(data)} bytes, expected {expected} for {n} records)")
    if data[rend:rend + len(TRAILER)] != TRAILER:
        raise LogFormatError(f"{path}: corrupt (trailer missing)")
    (crc, _) = struct.unpack_from("<II", data, rend + len(TRAILER))
    if zlib.crc32(memoryview(data)[:rend]) & 0xFFFFFFFF != crc:
        raise LogFormatError(f"{path}: corrupt (checksum mismatch)")
    records = np.frombuffer(data, dtype=RECORD_DTYPE, count=n, offset=rstart)
    strings = header.get("strings", [""])
    if not isinstance(strings, list) or not all(isinstance(x, str) for x in strings):
        raise LogFormatError(f"{path}: corrupt header: strings is not a list of strings")
    return NdetLog(path=path, header=header, records=records, strings=list(strings))
