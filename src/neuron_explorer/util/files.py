"""Reading files that anything may have put there: regular files only, bounded in size.

A FIFO would block a reader forever and ``/dev/zero`` never ends, so every reader of a capture,
an NDET log, a stats snapshot or a configuration file opens through here: the type is checked
before opening (a device is never opened) and again on the open descriptor (the file checked is
the file read), and O_NONBLOCK keeps the open itself from waiting on a FIFO that appears between.
"""

from __future__ import annotations

import errno
import os
import stat

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class NotRegularFile(OSError):
    """The path names a directory, FIFO, device or socket; ``kind`` says which ("a FIFO")."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", str(path))
        self.kind = kind


class FileTooLarge(OSError):
    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{size} bytes, more than {limit}", str(path))
        self.size, self.limit = size, limit


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def open_regular(path: str | os.PathLike) -> tuple[int, os.stat_result]:
    """(descriptor, status) of ``path`` opened for reading; NotRegularFile unless it is a regular
    file, OSError when it cannot be opened."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFile(str(path), file_kind(mode))
    fd = os.open(path, _OPEN_FLAGS)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFile(str(path), file_kind(st.st_mode))
    return fd, st


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes (FileTooLarge beyond it: also when
    it grows while being read)."""
    fd, st = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > limit:
            raise FileTooLarge(str(path), st.st_size, limit)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(str(path), len(data), limit)
    return data
