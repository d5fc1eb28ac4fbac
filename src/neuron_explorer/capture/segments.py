"""Append-only system event segments: a flush writes only what was recorded since the last one.

Each core's events go to numbered files, ``ntrace_nc<nc>_<k>.pb`` (``contracts.layout``), each an
``EventSegment`` message that grows by one ``blocks`` entry (tag, length, ``EventColumns``) per
flush (docs/decisions/0111-append-only-capture-segments.md).  Appending keeps a flush's cost
proportional to its new events however many are stored, and a complete append leaves a valid
message, so a SIGKILL loses only what the next flush would have written (a kill during an append
leaves a torn last block, which the reader skips with a warning).

The bounded ring stays bounded on disk: a core's segment is closed once it holds a quarter of the
core's capacity, and its oldest segment is deleted once the newer ones hold at least the capacity,
so a core keeps at most about 1.25x its capacity on disk (the reader keeps the newest
``capacity``, as the in-memory store did).  Only files this writer created are ever deleted.
"""

from __future__ import annotations

import errno
import os

from neuron_explorer.contracts.columns import FORMAT_VERSION
from neuron_explorer.contracts.layout import segment_name
from neuron_explorer.util.pbwire import encode_varint_scalar

FORMAT_FIELD, NC_FIELD, BLOCKS_FIELD = 1, 2, 3  # EventSegment (proto/neuron_explorer_capture.proto)
SEGMENTS_PER_CAPACITY = 4  # a segment closes at capacity / 4 events: disk holds <= 1.25x capacity
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
_MODE = 0o666  # the umask applies, as to every capture file


def segment_header(nc: int) -> bytes:
    """The fields a segment starts with: the format version first (``analysis.pbfile.check_header``
    reads it from the first bytes), then the core."""
    return (encode_varint_scalar(FORMAT_FIELD << 3) + encode_varint_scalar(FORMAT_VERSION)
            + encode_varint_scalar(NC_FIELD << 3) + encode_varint_scalar(nc))


def block_prefix(nbytes: int) -> bytes:
    return encode_varint_scalar((BLOCKS_FIELD << 3) | 2) + encode_varint_scalar(nbytes)


def write_all(fd: int, bufs: list) -> None:
    """Write every buffer in order (``writev`` may write less than asked: the rest follows)."""
    views = [memoryview(b).cast("B") for b in bufs if len(b)]
    while views:
        n = os.writev(fd, views[:1024])
        while n and views:
            if n >= len(views[0]):
                n -= len(views.pop(0))
            else:
                views[0] = views[0][n:]
                n = 0


class CoreSegments:
    """One core's segment files: their names and event counts, oldest first, and the open one."""

    __slots__ = ("nc", "files", "total", "fd", "size", "next_k")

    def __init__(self, nc: int) -> None:
        self.nc = nc
        self.files: list[list] = []  # [name, events], oldest first; the last may be open
        self.total = 0  # events in self.files
        self.fd = -1  # the open segment (the last of self.files), -1 when none is open
        self.size = 0  # its bytes
        self.next_k = 0

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class SegmentWriter:
    """Appends each core's new events to its segment files in ``session_dir``."""

    def __init__(self, session_dir: str) -> None:
        self.dir = session_dir
        self.cores: dict[int, CoreSegments] = {}
        self.bytes_written = 0
        self.tables_key: object = None  # what ntrace.pb's tables were last written from (capture.writer)

    def append(self, nc: int, capacity: int, n: int, block: list) -> None:
        """Append one ``EventColumns`` message (``block``: its serialized parts) of ``n`` events to
        core ``nc``'s open segment.  On failure (a full disk) the segment is cut back to its last
        complete block, or closed when it cannot be, and the error raised: the caller keeps the
        events and offers them again at the next flush."""
        c = self.cores.get(nc)
        if c is None:
            c = self.cores[nc] = CoreSegments(nc)
        nbytes = sum(len(b) for b in block)
        parts = [block_prefix(nbytes)] + block
        if c.fd < 0:
            self._open(c)
            parts.insert(0, segment_header(nc))
        before = c.size
        try:
            write_all(c.fd, parts)
        except OSError:
            try:
                os.ftruncate(c.fd, before)
            except OSError:
                c.close()  # its torn tail stays; the reader skips it, the next block starts a new file
            if c.size == 0 and c.fd >= 0:  # nothing of this file is complete: leave no empty file behind
                self._discard_open(c)
            raise
        added = sum(len(p) for p in parts)
        c.size += added
        self.bytes_written += added
        c.files[-1][1] += n
        c.total += n
        if c.files[-1][1] >= max(1, capacity // SEGMENTS_PER_CAPACITY):
            c.close()
        while len(c.files) > 1 and c.total - c.files[0][1] >= capacity:
            name, k = c.files.pop(0)
            c.total -= k
            try:
                os.unlink(os.path.join(self.dir, name))
            except FileNotFoundError:
                pass

    def _open(self, c: CoreSegments) -> None:
        for _ in range(1000):  # (a name already taken, never expected in our own directory: the next)
            name = segment_name(c.nc, c.next_k)
            c.next_k += 1
            try:
                c.fd = os.open(os.path.join(self.dir, name), _FLAGS, _MODE)
            except FileExistsError:
                continue
            c.files.append([name, 0])
            c.size = 0
            return
        raise OSError(errno.EEXIST, "no free segment name", os.path.join(self.dir, segment_name(c.nc, c.next_k)))

    def _discard_open(self, c: CoreSegments) -> None:
        name = c.files.pop()[0]
        c.close()
        try:
            os.unlink(os.path.join(self.dir, name))
        except OSError:
            pass

    def close(self) -> None:
        for c in self.cores.values():
            c.close()

