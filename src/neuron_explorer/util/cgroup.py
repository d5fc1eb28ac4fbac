"""The memory limit of a process's own cgroup (v2 ``memory.max``, v1 ``memory.limit_in_bytes``).

In a container the memory a process may use is its cgroup's limit, not the host's memory. The
limit that binds is the lowest one on the way from the process's cgroup up to the hierarchy's
root, so every level is read. Nothing here trusts what it reads: each file is a bounded read of
a regular file (``util.files``), a missing, unreadable or garbage file (or ``max``, no limit)
counts as no limit at that level, and every failure ends in ``None``, never an exception. The
number is only reported: nothing is sized by it (docs/decisions/0182-cgroup-memory-limit.md).

``CgroupMemory.find(pid)`` locates the cgroup directories once (``/proc/<pid>/cgroup`` against
this process's ``/proc/self/mountinfo``); ``read()`` reads their limits again each time it is
called, so a limit changed during a run is seen.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from .files import read_regular

V1_FILE = "memory.limit_in_bytes"
V2_FILE = "memory.max"
SOURCES = {V1_FILE: "cgroup v1 memory.limit_in_bytes", V2_FILE: "cgroup v2 memory.max"}
LIMIT_FILE_BYTES = 64  # a limit is at most 20 digits and a newline
PROC_CGROUP_BYTES = 64 << 10
MOUNTINFO_BYTES = 4 << 20
MAX_DEPTH = 64  # levels read between a cgroup and its hierarchy's root
INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class Limit:
    """A cgroup's memory limit: ``bytes``, the file it came from (``source``, a ``SOURCES`` value)
    and the cgroup that set it, as ``/proc/<pid>/cgroup`` names it (``cgroup``)."""
    bytes: int
    source: str
    cgroup: str


Level = tuple[str, str, "int | None"]  # (limit file name, cgroup path, limit bytes or None)


def parse_limit(text: bytes | str | None) -> int | None:
    """Bytes from a limit file's content: a positive decimal integer that fits in int64; ``max``
    (v2's "no limit"), empty, signed, fractional or any other text is ``None``."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    s = text.strip()
    if not s or len(s) > 20 or not (s.isascii() and s.isdigit()):
        return None
    v = int(s)
    return v if 0 < v <= INT64_MAX else None


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``{"v1": path, "v2": path}`` from ``/proc/<pid>/cgroup``: the v1 hierarchy whose
    controllers include ``memory`` and the v2 one (``0::path``); either may be missing.  Lines
    that are not ``id:controllers:/path`` are skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            out.setdefault("v2", path)
        elif "memory" in controllers.split(","):
            out.setdefault("v1", path)
    return out


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are written as octal escapes."""
    for esc, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(esc, ch)
    return field


def parse_mountinfo(text: str) -> list[tuple[str, str, str]]:
    """``(kind, root, mount point)`` of each cgroup mount in ``/proc/self/mountinfo`` that can
    hold a memory limit: ``"v1"`` for a ``cgroup`` mount with the ``memory`` controller, ``"v2"``
    for a ``cgroup2`` mount.  Malformed lines are skipped."""
    out: list[tuple[str, str, str]] = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 4:
            continue
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if not (root.startswith("/") and point.startswith("/")):
            continue
        if fstype == "cgroup2":
            out.append(("v2", root, point))
        elif fstype == "cgroup" and "memory" in options:
            out.append(("v1", root, point))
    return out


def cgroup_dirs(path: str, root: str, point: str) -> list[tuple[str, str]]:
    """``(directory, cgroup path)`` from cgroup ``path`` up to the mount's top, the mount showing
    the hierarchy from ``root`` at ``point``; empty when ``path`` is not below ``root`` (another
    namespace's view) or leaves it through ``..``."""
    if ".." in path.split("/") or ".." in root.split("/"):
        return []
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    if root != "/" and path != root and not path.startswith(root + "/"):
        return []
    rel = path[len(root):].strip("/") if root != "/" else path.strip("/")
    parts = [p for p in rel.split("/") if p] if rel else []
    out = []
    for n in range(min(len(parts), MAX_DEPTH), -1, -1):
        sub = "/".join(parts[:n])
        out.append((posixpath.join(point, sub) if sub else point, posixpath.join(root, sub) if sub else root))
    return out


class CgroupMemory:
    """The limit files that bind one process: found once, read on each ``read()``."""

    def __init__(self, files: list[tuple[str, str, str]]) -> None:
        """``files``: ``(limit file, its kind's name, cgroup path)``, the process's own first."""
        self.files = files

    @classmethod
    def find(cls, pid: int | str = "self", prefix: str = "") -> CgroupMemory:
        """The limit files of process ``pid``'s cgroups (none when they cannot be found).
        ``prefix`` is prepended to every path read (a test's fake tree)."""
        try:
            cg = parse_proc_cgroup(_text(f"{prefix}/proc/{pid}/cgroup", PROC_CGROUP_BYTES))
            mounts = parse_mountinfo(_text(f"{prefix}/proc/self/mountinfo", MOUNTINFO_BYTES))
        except (OSError, ValueError):
            return cls([])
        files: list[tuple[str, str, str]] = []
        for kind, root, point in mounts:
            path = cg.get(kind)
            if path is None:
                continue
            name = V2_FILE if kind == "v2" else V1_FILE
            for d, cgpath in cgroup_dirs(path, root, point):
                files.append((prefix + posixpath.join(d, name), name, cgpath))
        return cls(files)

    def read(self) -> Limit | None:
        """The lowest limit over the files, or None when none holds one."""
        best: Limit | None = None
        for name, cgpath, v in self.levels():
            if v is not None and (best is None or v < best.bytes):
                best = Limit(v, SOURCES[name], cgpath)
        return best

    def levels(self, seen: dict[str, int | None] | None = None) -> list[Level]:
        """Each level's ``(limit file name, cgroup path, limit or None)``, the process's own first
        in each hierarchy.  ``seen`` (file path -> limit) shares the reads of one round between
        processes that have cgroups in common."""
        out: list[Level] = []
        for path, name, cgpath in self.files:
            if seen is not None and path in seen:
                v = seen[path]
            else:
                try:
                    v = parse_limit(read_regular(path, LIMIT_FILE_BYTES))
                except (OSError, ValueError):
                    v = None
                if seen is not None:
                    seen[path] = v
            out.append((name, cgpath, v))
        return out


def shared_limit(chains: list[list[Level]]) -> Limit | None:
    """The memory a set of processes can hold together under their cgroups' limits, from each
    process's ``CgroupMemory.levels()``; None when some process is under no limit at all.

    In one hierarchy the cgroups form a tree and a limit binds everything below it, so what the
    processes can hold is, from the root down: a cgroup's limit, or the sum of what its children
    holding processes can hold when that is lower (a process directly in a cgroup is bound by that
    cgroup's limit alone).  Two processes in one cgroup count it once; siblings add up.  With two
    hierarchies (v1 and v2 both mounted) each gives such a figure and the lower one is taken: exact
    where only one of them holds limits, as on a host where the memory controller is in one.  The
    ``cgroup`` of the answer names the cgroups whose limits make it (comma separated), its
    ``source`` the kind of file."""
    if not chains:
        return None
    best: Limit | None = None
    for name in SOURCES:
        limits: dict[str, int | None] = {}
        children: dict[str, set[str]] = {}
        holds: set[str] = set()  # cgroups with a process directly in them
        parent: dict[str, str] = {}
        root = None
        for chain in chains:
            levels = [(cg, v) for n, cg, v in chain if n == name]
            top = levels[-1][0] if levels else None
            if top is None or (root is not None and top != root) or len({cg for cg, _ in levels}) < len(levels):
                # a process outside this hierarchy (it binds none of them), or what no tree gives:
                # two roots, a cgroup twice in one chain.  No answer from this hierarchy.
                root = None
                break
            root = top
            holds.add(levels[0][0])
            for i, (cg, v) in enumerate(levels):
                limits[cg] = v
                if i + 1 < len(levels):
                    up = levels[i + 1][0]
                    if parent.setdefault(cg, up) != up:
                        root = None  # a cgroup with two parents
                    children.setdefault(up, set()).add(cg)
            if root is None:
                break
        if root is None:
            continue
        got = _capacity(root, limits, children, holds, 0, {})
        if got is not None and (best is None or got[0] < best.bytes):
            best = Limit(got[0], SOURCES[name], ",".join(sorted(got[1])))
    return best


def _capacity(cg: str, limits: dict[str, int | None], children: dict[str, set[str]], holds: set[str],
              depth: int, memo: dict[str, tuple[int, set[str]] | None]) -> tuple[int, set[str]] | None:
    """(bytes, binding cgroups) that the processes at or below ``cg`` can hold; None: unbounded.
    ``memo`` keeps each cgroup's answer (a damaged chain may give a cgroup two parents)."""
    if cg in memo:
        return memo[cg]
    memo[cg] = None  # (a cycle, which only damaged input makes, reads as unbounded)
    below: tuple[int, set[str]] | None = None
    if cg not in holds and depth <= MAX_DEPTH:
        total, names = 0, set()
        for child in children.get(cg, ()):
            if child == cg:
                continue
            got = _capacity(child, limits, children, holds, depth + 1, memo)
            if got is None:
                total = -1
                break
            total += got[0]
            names |= got[1]
        if total >= 0 and names:
            below = (total, names)
    own = limits.get(cg)
    memo[cg] = (own, {cg}) if own is not None and (below is None or own <= below[0]) else below
    return memo[cg]


def _text(path: str, limit: int) -> str:
    return read_regular(path, limit).decode("utf-8", "replace")


def memory_limit(pid: int | str = "self", host_total: int = 0, prefix: str = "") -> Limit | None:
    """Process ``pid``'s cgroup memory limit when it is below ``host_total`` (the host's memory;
    0: unknown, then any limit found), else None: the host's memory is the limit."""
    lim = CgroupMemory.find(pid, prefix).read()
    if lim is None or (host_total > 0 and lim.bytes >= host_total):
        return None
    return lim

