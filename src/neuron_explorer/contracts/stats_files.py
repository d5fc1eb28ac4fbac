"""Where applications publish their stats, what a snapshot holds, and how that place is kept private.

Each monitored process owns one snapshot file, ``<pid>.json``, in a directory
that only its user can enter (mode 0700).  A file rather than a socket keeps
the application passive: the monitor never has to talk to it, an application
that hangs cannot stall the monitor, and a crashed one leaves a file the
monitor recognises as stale (its pid is gone or belongs to a newer process)
and cleans up.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
import time
from pathlib import Path

#: Environment variable that overrides the stats directory (shared host path in containers).
STATS_DIR_ENV = "NEURON_EXPLORER_STATS_DIR"
#: Suffix of snapshot files.
SNAPSHOT_SUFFIX = ".json"


class EndpointError(RuntimeError):
    """The stats directory cannot be used safely (wrong owner, a symlink, too-open permissions)."""


def default_stats_dir() -> Path:
    """The stats directory for the current user, honouring ``NEURON_EXPLORER_STATS_DIR``.

    ``$XDG_RUNTIME_DIR`` is preferred because it is per-user, private and
    cleared at logout; ``/tmp/neuron-explorer-<uid>`` is the fallback for
    containers and batch nodes that have no session manager.
    """
    override = os.environ.get(STATS_DIR_ENV)
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "neuron-explorer" / "stats"
    return Path(tempfile.gettempdir()) / f"neuron-explorer-{os.getuid()}" / "stats"


def _check_private_dir(path: Path) -> None:
    """Refuse a directory that another user could have planted or could write into."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise EndpointError(f"{path} is a symbolic link; refusing to use it for stats")
    if not stat.S_ISDIR(st.st_mode):
        raise EndpointError(f"{path} exists and is not a directory")
    if st.st_uid != os.getuid():
        raise EndpointError(
            f"{path} belongs to uid {st.st_uid}, not to this user ({os.getuid()}); "
            f"set {STATS_DIR_ENV} to a directory you own"
        )


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and a private parent we create) with mode 0700 and verify ownership."""
    path = Path(path)
    created: list[Path] = []
    p = path
    while not p.exists():
        created.append(p)
        p = p.parent
    for d in reversed(created):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
    _check_private_dir(path)
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    if mode != 0o700:
        os.chmod(path, 0o700)
    # A fallback parent under /tmp must also be ours: otherwise someone else could swap the child.
    parent = path.parent
    if parent.name.startswith("neuron-explorer"):
        _check_private_dir(parent)
    return path


def snapshot_path(stats_dir: Path, pid: int) -> Path:
    """The snapshot file for a process."""
    return Path(stats_dir) / f"{pid}{SNAPSHOT_SUFFIX}"


def list_snapshots(stats_dir: Path) -> list[tuple[int, str]]:
    """All ``(pid, path)`` snapshot files currently in the directory (no parsing, no Path objects)."""
    out: list[tuple[int, str]] = []
    try:
        entries = os.scandir(stats_dir)
    except FileNotFoundError:
        return out
    with entries:
        for e in entries:
            name = e.name
            if not name.endswith(SNAPSHOT_SUFFIX):
                continue
            stem = name[: -len(SNAPSHOT_SUFFIX)]
            # a pid: anything longer cannot be one (and would overflow the process calls made with it)
            if stem.isdigit() and len(stem) <= 10 and 0 < int(stem) < (1 << 31):
                out.append((int(stem), e.path))
    out.sort()
    return out


#: The file a running neuron-monitor keeps fresh in the stats directory, so that applications know
#: someone is reading (docs/decisions/0030-monitor-discovery.md).  Not a snapshot name (not ``<pid>.json``).
MONITOR_FILE = "monitor.alive"
#: How often a monitor touches :data:`MONITOR_FILE`, and how old it may be before applications
#: take the monitor for gone (a monitor killed by SIGKILL cannot remove it).
MONITOR_HEARTBEAT_S = 5.0
MONITOR_FRESH_S = 30.0


def monitor_file(stats_dir: Path | None = None) -> Path:
    """Where monitors announce themselves: beside the snapshots they read."""
    return Path(stats_dir if stats_dir is not None else default_stats_dir()) / MONITOR_FILE


def announce_monitor(stats_dir: Path) -> Path:
    """Create or refresh the announcement (the directory made private first); returns its path.

    The file holds the pid of the monitor that wrote it last, so a monitor that exits removes it
    only when no other monitor refreshed it since (:func:`withdraw_monitor`)."""
    ensure_private_dir(stats_dir)
    path = monitor_file(stats_dir)
    tmp = path.with_name(f".{MONITOR_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, str(os.getpid()).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def withdraw_monitor(stats_dir: Path) -> None:
    """Remove the announcement if this monitor wrote it last (another live monitor keeps it)."""
    path = monitor_file(stats_dir)
    try:
        with open(path, "rb") as f:
            owner = f.read(16)
        if owner == str(os.getpid()).encode():
            os.unlink(path)
    except OSError:
        pass


def monitor_present(stats_dir: Path | None = None, now: float | None = None) -> bool:
    """True when a monitor of this user announced itself recently: one ``stat`` call.

    The file must be a regular file owned by this user and refreshed within
    :data:`MONITOR_FRESH_S`; anything else (missing, planted by someone else, left by a killed
    monitor) means no monitor, and the application stays silent."""
    try:
        st = os.stat(monitor_file(stats_dir), follow_symlinks=False)
    except (OSError, ValueError):
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        return False
    return (time.time() if now is None else now) - st.st_mtime <= MONITOR_FRESH_S


#: Format marker written into every snapshot; the monitor ignores files with another one.
SNAPSHOT_FORMAT = "neuron-explorer-stats/2"


# -- final snapshots (docs/decisions/0075-final-snapshots.md) -------------------------------------
#
# A process that exits while a monitor is announced leaves its last counters behind, in its own
# ``<pid>.json`` marked ``"final": true`` (the key written right after ``format``), instead of
# removing the file: the executions of its last moments reach every monitor.  Each monitor reports
# a final snapshot once and then forgets the process; none removes it at once, since other monitors
# may not have read it yet.  Monitors read them within one heartbeat, so they are kept
# ``FINAL_KEEP_S`` and at most ``MAX_FINAL_SNAPSHOTS`` of them; older ones are removed by any
# monitor and by every process that leaves a final snapshot, so they never pile up, watched or not.

#: How long a final snapshot is kept for the monitors that have not read it yet (seconds).
FINAL_KEEP_S = 300.0
#: At most this many final snapshots are kept (the oldest go first).
MAX_FINAL_SNAPSHOTS = 256
#: Bytes read from the start of a snapshot file to tell a final one (the marker is its second key).
FINAL_HEAD_BYTES = 128
_FINAL_MARK = re.compile(rb'^\{\s*"format"\s*:\s*"' + re.escape(SNAPSHOT_FORMAT.encode())
                         + rb'"\s*,\s*"final"\s*:\s*true\b')


def is_final_head(head: bytes) -> bool:
    """Whether the first bytes of a snapshot file are those of a final snapshot."""
    return _FINAL_MARK.match(head) is not None


def read_head(path: str | os.PathLike[str], size: int = FINAL_HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of a regular file of this user (b"" for anything else: a FIFO is
    never opened for reading, another user's file never trusted)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return b""
        return os.read(fd, size)
    except OSError:
        return b""
    finally:
        os.close(fd)


def prune_final_snapshots(stats_dir: Path, now: float | None = None, keep_s: float = FINAL_KEEP_S,
                          max_files: int = MAX_FINAL_SNAPSHOTS) -> list[int]:
    """Remove the final snapshots older than ``keep_s`` and the oldest beyond ``max_files``;
    returns their pids.  Only ``<pid>.json`` files of this user that start as a final snapshot are
    ever removed: a live process's snapshot, or a file we did not write, is never touched."""
    now = time.time() if now is None else now
    finals: list[tuple[float, int, str]] = []
    for pid, path in list_snapshots(stats_dir):
        try:
            mtime = os.stat(path, follow_symlinks=False).st_mtime
        except OSError:
            continue
        if is_final_head(read_head(path)):
            finals.append((mtime, pid, path))
    finals.sort()
    excess = len(finals) - max_files
    removed = []
    for i, (mtime, pid, path) in enumerate(finals):
        if i < excess or now - mtime > keep_s:
            try:
                if is_final_head(read_head(path)):  # (still that final: not a new process's file)
                    os.unlink(path)
                    removed.append(pid)
            except OSError:
                pass
    return removed


#: Execution outcomes, as named by the report's ``execution_summary``.
EXECUTION_STATUSES: tuple[str, ...] = (
    "completed",
    "completed_with_err",
    "completed_with_num_err",
    "timed_out",
    "incorrect_input",
    "failed_to_queue",
)


#: Error classes, as named by the report's ``error_summary``.
ERROR_CLASSES: tuple[str, ...] = ("generic", "numerical", "transient", "model", "runtime", "hardware")


#: Host memory categories (``usage_breakdown.host``).
HOST_MEMORY_CATEGORIES: tuple[str, ...] = ("application_memory", "constants", "dma_buffers", "tensors")


#: Per-core device memory categories (``neuroncore_memory_usage``).
CORE_MEMORY_CATEGORIES: tuple[str, ...] = (
    "constants",
    "model_code",
    "model_shared_scratchpad",
    "runtime_memory",
    "tensors",
)
