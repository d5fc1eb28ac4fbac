"""The one Chrome trace-event writer: ``{"displayTimeUnit":"ns","traceEvents":[...],"metadata":{...}}``
streamed a batch of events at a time.

``view``'s JSON output, its device-profile files and ``neuron-det``'s trace all write this
document; they differ only in the events they put in it.  Events are encoded as they come, so
memory holds one batch, never the trace.  ``lines`` puts each event on its own line (``neuron-det``
keeps its trace greppable); ``fragment`` writes only the comma-separated events, a piece that
another writer's ``copy`` joins into a whole trace later.
"""

from __future__ import annotations

import os
import shutil
import stat
from typing import IO

from neuron_explorer.util.jsonfast import dumps_bytes

HEADER = b'{"displayTimeUnit":"ns","traceEvents":['
TAIL_LIMIT = 16 << 20  # how far from the end ``written_by`` looks for the metadata


def written_by(path: str, tool: str, legacy_key: str | None = None) -> bool:
    """Whether ``path`` is a trace this writer wrote for ``tool``: it opens with ``HEADER`` and its
    metadata, near the end, opens with ``{"tool": tool`` (or, for a trace written before the tool
    was named, with ``legacy_key``).  Both are compact JSON a trace of another program does not
    write (a PyTorch trace opens with ``{\n  "schemaVersion"``).  This is the file's mark, as
    ``.neuron-explorer-view.json`` is a dataset's: ``neuron-det`` and ``view`` replace a trace at
    their default name only when it carries it.  Reads at most ``TAIL_LIMIT`` bytes."""
    closings = [b'],"metadata":' + dumps_bytes({"tool": tool})[:-1] + b","]
    if legacy_key is not None:
        closings.append(b'],"metadata":' + dumps_bytes({legacy_key: 0})[:-2])
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode) or os.pread(fd, len(HEADER), 0) != HEADER:
            return False
        start = max(0, size - TAIL_LIMIT)
        tail = os.pread(fd, size - start, start)
        return any(c in tail for c in closings)
    except OSError:
        return False
    finally:
        os.close(fd)


def _kernel_copy(src: IO[bytes], dst: IO[bytes]) -> bool:
    """Copy ``src`` from its position to its end onto the end of ``dst`` with
    ``os.copy_file_range``; False, nothing copied, where that cannot be done: not two regular
    files, or the kernel refuses the first call (no such call, another file system)."""
    try:
        fi, fo = src.fileno(), dst.fileno()
        regular = stat.S_ISREG(os.fstat(fi).st_mode) and stat.S_ISREG(os.fstat(fo).st_mode)
    except (AttributeError, OSError, ValueError):
        return False
    if not regular or not hasattr(os, "copy_file_range"):
        return False
    dst.flush()
    pos = done = src.tell()
    while True:
        try:
            k = os.copy_file_range(fi, fo, 1 << 30, offset_src=done)
        except OSError:
            if done == pos:
                return False
            raise
        if k == 0:
            break
        done += k
    src.seek(done)
    dst.seek(0, os.SEEK_END)  # (the buffered writer's idea of its position)
    return True


class ChromeTraceWriter:
    """Writes a Chrome trace to the binary file ``f`` (the caller opens, commits or aborts it)."""

    def __init__(self, f: IO[bytes], lines: bool = False, fragment: bool = False) -> None:
        self.f = f
        self.lines = lines
        self.fragment = fragment
        self.sep = b",\n" if lines else b","
        self.empty = True  # no event written yet (the next one needs no separator)
        if not fragment:
            f.write(HEADER + b"\n" if lines else HEADER)

    def add(self, events: list[dict]) -> None:
        """Encode and write a batch of events."""
        if events:
            self.add_encoded([dumps_bytes(e) for e in events])

    def add_encoded(self, events: list[bytes]) -> None:
        """Write events already encoded as JSON objects (a caller's pre-rendered templates)."""
        if not events:
            return
        if not self.empty:
            self.f.write(self.sep)
        self.f.write(self.sep.join(events))
        self.empty = False

    def add_block(self, parts: list[bytes]) -> None:
        """Write events already encoded and joined by ``sep``, in parts written one after the
        other (``_pqenc.chrome_events``'s: no join copies them)."""
        if not any(parts):
            return
        if not self.empty:
            self.f.write(self.sep)
        for p in parts:
            self.f.write(p)
        self.empty = False

    def copy(self, src: IO[bytes], size: int) -> None:
        """Append a fragment of ``size`` bytes (the events another writer wrote with ``fragment``):
        inside the kernel between two regular files (``copy_file_range``: a quarter of the CPU of
        a copy through user space), through a buffer otherwise."""
        if size == 0:
            return
        if not self.empty:
            self.f.write(self.sep)
        self.empty = False
        if _kernel_copy(src, self.f):
            return
        shutil.copyfileobj(src, self.f, 1 << 20)

    def close(self, metadata: dict) -> None:
        """End the event list and write ``metadata`` (a fragment has neither: nothing is written)."""
        if self.fragment:
            return
        nl = b"\n" if self.lines else b""
        self.f.write(nl + b'],"metadata":' + dumps_bytes(metadata) + b"}" + nl)
