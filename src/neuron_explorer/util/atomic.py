"""Files that appear whole or not at all.

``AtomicFile`` writes under a hidden temporary name beside the target and renames it into place,
so a reader (or a process killed mid-write) never sees half a file.  With ``output=True`` it is
also safe for paths a user names: it renames only over regular files and writes through devices,
FIFOs and inherited descriptors (see docs/reliability.md).

``staging_dir`` makes the private directories that outputs are built in; each carries an owner
file (host, boot, pid and its start time), so that the next run removes those a killed run left
behind, and nothing else (docs/decisions/0079-view-output-ownership.md).  ``replaceable`` is the
one rule for replacing an existing output: only when it is missing or carries our mark.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import stat
import tempfile
from typing import Callable, Iterable

from . import procfs


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


_FILE_MODE = 0o666 & ~_umask()
# the mode a new directory gets from mkdir(2) under this process's umask (mkdtemp makes 0700)
DIR_MODE = 0o777 & ~_umask()


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
            alias = fd_alias(path) if kind == "descriptor" else None
            if alias is not None:
                self._through(os.dup(alias))
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


def atomic_write_all(files: list[tuple[str, Callable[[], bytes | Iterable[bytes | memoryview]]]]) -> None:
    """Write several files as one: each ``(path, encode)`` is encoded and written under a temporary
    name, one at a time; only when all are written and flushed are they renamed into place.  On
    any failure (a full disk) every temporary file is removed and the previous files stay."""
    pending: list[AtomicFile] = []
    try:
        for path, encode in files:
            data = encode()  # before the temporary file exists: a kill while encoding leaves none
            f = AtomicFile(path)
            pending.append(f)
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


def replaceable(path: str, ours: Callable[[str], bool]) -> bool:
    """Whether an output at ``path`` may be replaced: it does not exist, or ``ours(path)`` finds the
    mark we leave in what we write (``view``'s dataset marker, ``neuron-det``'s trace header).  A
    dangling symlink exists: it is not ours."""
    return not os.path.lexists(path) or ours(path)


# ---------------------------------------------------------------- staging directories

OWNER_FILE = ".neuron-explorer-owner.json"
_OWNER_MAX = 4096


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22): with
    the boot id it tells a live process from a later one that reuses the pid; '' where unknown."""
    fields = procfs.stat_fields(pid)
    return fields[19].decode() if fields is not None and len(fields) > 19 else ""


def _pid_namespace() -> str:
    """This process's pid namespace (``pid:[4026531836]``): pids mean something only inside it
    (containers sharing a /tmp and a host name have their own); '' where unknown."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _owner() -> dict:
    pid = os.getpid()
    return {"written_by": "neuron-explorer", "host": socket.gethostname(), "boot": _boot_id(),
            "pidns": _pid_namespace(), "pid": pid, "start": _start_time(pid)}


def staging_dir(prefix: str, suffix: str = ".tmp", dir: str | None = None) -> str:
    """A fresh private directory (``mkdtemp``: mode 0700) named ``<prefix><random><suffix>`` in
    ``dir`` (default: the temporary directory), holding ``OWNER_FILE``.  Stale ones that a killed
    run left there under the same prefix and suffix are removed first (``sweep_stale``)."""
    parent = dir if dir is not None else tempfile.gettempdir()
    sweep_stale(parent, prefix, suffix)
    path = tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=parent)
    try:
        fd = os.open(os.path.join(path, OWNER_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(_owner(), f)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


def release_staging(path: str) -> None:
    """Remove the owner file before a staging directory becomes an output itself (renamed into
    place): from then on it is the output, not a leftover."""
    try:
        os.unlink(os.path.join(path, OWNER_FILE))
    except FileNotFoundError:
        pass


def _read_owner(path: str) -> dict | None:
    """The owner file of the staging directory ``path``, or None when it has none we wrote (a
    symlink, not a regular file, too large, not our JSON)."""
    try:
        fd = os.open(os.path.join(path, OWNER_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, _OWNER_MAX + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        doc = json.loads(data) if len(data) <= _OWNER_MAX else None
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("written_by") != "neuron-explorer" or not isinstance(doc.get("pid"), int):
        return None
    return doc


def _dead(owner: dict) -> bool:
    """Whether the run that wrote ``owner`` is certainly over: it ran on this machine since its last
    boot, in this pid namespace, and its pid is gone or now belongs to a process started at another
    time.  A run elsewhere is never judged from here: another host, or another boot id (a machine
    sharing the file system under the same host name, or a run before a reboot: left alone, as
    /tmp is usually emptied at boot), or another pid namespace (a container sharing this /tmp)."""
    if (owner.get("host") != socket.gethostname() or owner.get("boot", "") != _boot_id()
            or owner.get("pidns", "") != _pid_namespace()):
        return False
    pid = owner["pid"]
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # a process of another user has the pid: ours may have ended since (the start time tells)
    start = _start_time(pid)
    return bool(start and owner.get("start") and start != owner["start"])


def sweep_stale(parent: str, prefix: str, suffix: str) -> list[str]:
    """Remove the staging directories in ``parent`` named ``<prefix>...<suffix>`` whose owner file
    says a run on this host wrote them and that run is over; returns what was removed.  Anything
    else (no owner file, a symlink, another user's directory, a live run's) is left alone."""
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    uid = os.getuid()
    for name in names:
        if not (name.startswith(prefix) and name.endswith(suffix)) or len(name) <= len(prefix) + len(suffix):
            continue
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue
        owner = _read_owner(path)
        if owner is not None and _dead(owner):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
