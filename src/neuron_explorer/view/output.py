"""Where ``view`` writes, and what it may replace there.

``view`` never deletes or replaces what it did not write:

- the work area (Parquet parts, per-process pieces) is a fresh private directory created with
  ``mkdtemp`` next to the output, and only that directory is ever removed on failure;
- an existing Parquet output directory is replaced only when it is empty, or carries ``MARKER``
  (every Parquet output written since has one; an output of an earlier version has
  ``ProfileMetadata.parquet`` instead) and holds nothing but what ``view`` writes
  (``dataset.foreign_entries``): a file a user added to it (notes, an analysis) makes it refused,
  naming a few of them, as on object storage;
- the new dataset takes the permissions of the directory it replaces;
- the previous output is moved aside, the new one renamed into place, and the old one removed
  only then (it is put back if the rename fails);
- an output that is, contains or lies inside one of the input's capture sessions is refused;
- single-file outputs go through ``AtomicFile(output=True)``: only a regular file is replaced,
  devices and FIFOs are written through, ``-`` is standard output.
"""

from __future__ import annotations

import os

from neuron_explorer.contracts.dataset import MARKER, describe_foreign, foreign_entries, is_ours
from neuron_explorer.util.atomic import output_kind, replaceable


class OutputRefused(Exception):
    """The output path cannot be used (a usage error: nothing was written)."""


def _is_empty_dir(path: str) -> bool:
    try:
        return not os.listdir(path)
    except OSError:
        return False


def _inside(child: str, parent: str) -> bool:
    """``child`` is ``parent`` or below it (both real, absolute paths)."""
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def check(out: str, fmt: str, sessions: list[str], default: bool = False) -> str:
    """Check ``--output-file`` before any work; returns the path to write (``-``, a device or FIFO
    as given, else the real path with symlinks resolved).  Raises ``OutputRefused``.

    ``default``: ``out`` is the format's default name, which no one chose (no ``--output-file``):
    a file there is replaced only when ``view`` wrote it (``default_refusal``), as ``neuron-det``
    treats its ``trace.json``.  A name the user gave is the user's choice."""
    try:
        kind = output_kind(out)
    except OSError as e:  # a name too long, a symlink loop, no permission to look
        raise OutputRefused(f"--output-file {out}: {os.strerror(e.errno) if e.errno else e}") from None
    if fmt == "parquet":
        if kind == "descriptor":
            raise OutputRefused(f"--output-file {out}: parquet output is a directory; '-' (standard output) "
                                "works for json, perfetto, summary-text and summary-json")
        if kind not in ("missing", "directory"):
            what = {"regular": "a file", "special": "a device or FIFO"}.get(kind, f"a {kind}")
            raise OutputRefused(f"--output-file {out}: exists and is {what}; parquet output is a "
                                "directory (remove it or choose another name)")
    elif kind == "directory":
        raise OutputRefused(f"--output-file {out}: is a directory; {fmt} output is a single file")
    elif kind in ("block device", "socket"):
        raise OutputRefused(f"--output-file {out}: is a {kind}; write to a regular file, a FIFO, a character "
                            "device or - (standard output)")
    if kind == "descriptor":
        return out
    real = os.path.realpath(out)
    parent = _existing_ancestor(os.path.dirname(real))
    if not os.path.isdir(parent):
        raise OutputRefused(f"--output-file {out}: {parent} is not a directory")
    for s in sessions:
        rs = os.path.realpath(s)
        if _inside(real, rs) or _inside(rs, real):
            what = "is" if real == rs else "lies inside" if _inside(real, rs) else "contains"
            raise OutputRefused(f"--output-file {out}: {what} the capture session {s}; write the output "
                                "outside the captured profiles")
    if fmt == "parquet" and not replaceable(real, lambda p: _is_empty_dir(p) or is_ours(p)):
        raise OutputRefused(not_ours(out, real))
    if default and kind == "regular":
        refusal = default_refusal(out, real, fmt)
        if refusal:
            raise OutputRefused(refusal)
    return out if kind == "special" else real


def default_refusal(out: str, real: str, fmt: str) -> str | None:
    """Why the regular file ``real`` at a single-file format's default name must not be replaced:
    another program may well have written ``system_profile.json`` in the current directory.  It is
    replaced only when it carries the mark of a trace ``view`` wrote (the JSON metadata's
    ``tool``, the Perfetto trace's first packet)."""
    if fmt == "json":
        from neuron_explorer.exporters.chrome_json import ours
    elif fmt == "perfetto":
        from neuron_explorer.exporters.perfetto import ours
    else:
        return None
    if replaceable(real, ours):
        return None
    return (f"{out} exists and was not written by neuron-explorer view (another tool's trace?); name the "
            f"output with --output-file FILE, or move {out} away")


def not_ours(out: str, real: str) -> str:
    """Why the existing directory ``real`` (``--output-file out``) is not replaced: the files in it
    that ``view`` did not write (a few, and how many), else its missing marker."""
    foreign = foreign_entries(real)
    if foreign:
        return f"--output-file {out}: holds {describe_foreign(foreign)}; move them out or choose another name"
    return (f"--output-file {out}: directory exists and was not written by neuron-explorer view "
            f"(no {MARKER}); remove it or choose another name")




def _existing_ancestor(path: str) -> str:
    """``path`` or its nearest ancestor that exists (missing directories are created later)."""
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def in_directory(out: str, default_name: str | None) -> str:
    """``--output-file DIR/`` (a trailing slash) for a single-file format means the format's default
    file name inside DIR; other names are kept as given."""
    if out.endswith(os.sep) and default_name is not None and out != os.sep:
        return os.path.join(out, default_name)
    return out


def make_parents(path: str) -> None:
    """Create the missing directories above an output (``mkdir -p``); raises OSError."""
    parent = os.path.dirname(os.path.abspath(path.rstrip(os.sep) or path))
    os.makedirs(parent, exist_ok=True)
