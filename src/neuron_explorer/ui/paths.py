"""Confine every path a request names to the workspace.

The server answers requests from a browser; the only names it accepts from them are profile names
(one directory level under the workspace). A name is rejected before it touches the file system when
it could address anything else (``..``, separators, absolute or hidden names), and after resolution
when a symlink leads out of the workspace. Files inside a profile are enumerated by the server itself,
and each one is checked the same way, so a symlinked ``part-0.parquet`` pointing at ``/etc`` is
skipped rather than read.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from urllib.parse import unquote

from neuron_explorer.contracts.dataset import METADATA, table_file

METADATA_FILE = table_file(METADATA)
_NAME_RE = re.compile(r"^[^/\\\x00]{1,255}$")


class PathRejected(ValueError):
    """A request named a path outside the workspace (or something that is not a profile)."""


def inside(root: Path, candidate: Path) -> bool:
    """True when ``candidate`` (already resolved) is ``root`` or lies below it."""
    try:
        return os.path.commonpath([str(root), str(candidate)]) == str(root)
    except ValueError:
        return False


def check_profile_name(name: str) -> str:
    """Reject names that could address anything but a direct child of the workspace."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise PathRejected("profile names are one path component")
    if name in (".", "..") or name.startswith(".") or os.path.isabs(name) or "/" in name or "\\" in name:
        raise PathRejected("profile names may not be absolute, hidden or contain '..' or separators")
    return name


def resolve_profile(workspace: Path, name: str) -> Path:
    """The profile directory for ``name``: inside the workspace after symlinks, holding metadata."""
    check_profile_name(name)
    root = workspace.resolve()
    p = (root / name).resolve()
    if p == root or not inside(root, p):
        raise PathRejected("profile resolves outside the workspace")
    meta = p / METADATA_FILE
    if not meta.is_file() or not inside(root, meta.resolve()):
        raise FileNotFoundError(name)
    return p


def list_profile_dirs(workspace: Path) -> list[str]:
    """Names of the workspace's children that are profiles (hold ProfileMetadata.parquet)."""
    out: list[str] = []
    try:
        entries = sorted(os.listdir(workspace))
    except OSError:
        return out
    for n in entries:
        try:
            resolve_profile(workspace, n)
        except (PathRejected, FileNotFoundError, OSError):
            continue
        out.append(n)
    return out


def table_files(workspace: Path, profile_dir: Path, table: str) -> list[tuple[str, int, str]]:
    """(instance, process, path) of each Parquet part of a partitioned table, confined to the workspace.

    Partition values come from the hive-style directory names. Anything whose real path is outside
    the workspace is left out, so a planted symlink cannot make a query read it.
    """
    root = workspace.resolve()
    base = (profile_dir / table).resolve()
    out: list[tuple[str, int, str]] = []
    if not base.is_dir() or not inside(root, base):
        return out
    # the walk follows no link, so the directories under ``base`` (resolved, inside) are real and
    # inside too: only a file that is a link needs resolving (every file resolved cost ~0.3 ms each,
    # 0.45 s of a 512-process cold open)
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames.sort()
        rel = Path(dirpath).relative_to(base)
        # values are percent-encoded by the Parquet writer (util.names.safe_component, see contracts.dataset)
        parts = {k: unquote(v) for k, v in (p.split("=", 1) for p in rel.parts if "=" in p)}
        for f in sorted(filenames):
            if not f.endswith(".parquet"):
                continue
            full = os.path.join(dirpath, f)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                real = Path(full)
            elif stat.S_ISLNK(st.st_mode):
                real = Path(full).resolve()
                if not inside(root, real) or not real.is_file():
                    continue
            else:
                continue
            try:
                pid = int(parts.get("process", "-1"))
            except ValueError:
                pid = -1
            out.append((parts.get("instance", ""), pid, str(real)))
    return out


def single_file(workspace: Path, profile_dir: Path, name: str) -> str | None:
    """Path of a profile-level Parquet file when it exists inside the workspace."""
    p = profile_dir / name
    if not p.is_file():
        return None
    real = p.resolve()
    return str(real) if inside(workspace.resolve(), real) else None
