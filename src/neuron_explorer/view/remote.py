"""``view`` and ``check`` on object storage (``s3://bucket/prefix``), one session at a time.

Reading: a session is every object below a "directory" holding ``trace_info.pb`` or ``ntrace.pb``
(the same rule as ``analysis.reader.discover``); a task copies one session into a private local
directory, named like the original (``<instance>_pid_<pid>/<timestamp>``, which the reader parses),
reads it and removes the copy.

Writing a Parquet dataset, with no rename to make it appear whole (decision 0048):

1. the prefix is checked like a local output: empty, or holding one of our markers and only what
   ``view`` writes (``dataset.foreign_entry``, the local rule); anything else is refused, naming
   a few of the foreign keys, and nothing is written;
2. ``PENDING_MARKER`` is written and the old ``MARKER`` deleted: from here on the prefix says
   "being written", and a failed run leaves it so (the next run may replace it);
3. each conversion task uploads its process's partition files (a retried task overwrites them);
4. finalize uploads the single-file tables, deletes the previous run's objects that this run did
   not write (only below our table names), writes ``MARKER`` last and then removes
   ``PENDING_MARKER``.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from collections.abc import Sequence

from neuron_explorer.contracts.dataset import LEGACY_ENTRIES, MARKER, PENDING_MARKER, describe_foreign, foreign_entry
from neuron_explorer.contracts.layout import SESSION_MARKERS
from neuron_explorer.util import storage
from neuron_explorer.util.atomic import staging_dir
from neuron_explorer.util.storage import Location, StorageError

from .options import ViewError


def _open(url: str, endpoint: str | None) -> tuple[object, Location]:
    return storage.filesystem(endpoint), storage.parse(url)


def _listing(fs, loc: Location) -> list[tuple[str, int]]:
    """The objects under ``loc``; a missing bucket is an error, not an empty capture."""
    files = storage.list_files(fs, loc)
    if not files and not storage.bucket_exists(fs, loc.bucket):
        raise StorageError(f"{loc.url}: no such bucket, or no permission to list it")
    return files


def discover(url: str, endpoint: str | None) -> list[str]:
    """The URL of every session directory under ``url``, sorted (the local order)."""
    fs, loc = _open(url, endpoint)
    dirs = {posixpath.dirname(rel) for rel, _ in _listing(fs, loc) if posixpath.basename(rel) in SESSION_MARKERS}
    return sorted(loc.child(d).url if d else loc.url for d in dirs)


def stage_session(url: str, endpoint: str | None, tmp: str) -> str:
    """Copy the session at ``url`` below ``tmp`` (its last two path components kept); returns the
    local session directory."""
    fs, loc = _open(url, endpoint)
    parts = loc.prefix.split("/") if loc.prefix else [loc.bucket]
    local = os.path.join(tmp, *[_safe(p) for p in parts[-2:]])
    os.makedirs(local, exist_ok=True)
    storage.download(fs, loc, [rel for rel, _ in storage.list_files(fs, loc)], local)
    return local


def _safe(name: str) -> str:
    """A key component as a local directory name (keys may hold anything but '/')."""
    from neuron_explorer.util.names import safe_component

    return safe_component(name) or "_"


def prepare_output(url: str, endpoint: str | None, sessions: Sequence[str] = ()) -> str:
    """Steps 1 and 2 of the module docstring; returns the output URL.  Raises ViewError when the
    prefix holds what we did not write or overlaps the captures."""
    fs, loc = _open(url, endpoint)
    for s in sessions:
        if storage.is_url(s) and _overlaps(storage.parse(s), loc):
            raise ViewError(f"--output-file {url}: overlaps the capture session {s}; write the output "
                            "outside the captured profiles")
    keys = [rel for rel, _ in _listing(fs, loc)]
    foreign = sorted(rel for rel in keys if foreign_entry(rel))
    if foreign:
        raise ViewError(f"--output-file {url}: holds {describe_foreign(foreign)}; remove them or choose another prefix")
    if keys and not {MARKER, PENDING_MARKER} & set(keys):
        raise ViewError(f"--output-file {url}: holds objects not written by neuron-explorer view (no {MARKER}); "
                        "remove them or choose another prefix")
    storage.put_bytes(fs, loc.child(PENDING_MARKER), b'{"written_by": "neuron-explorer view", "state": "pending"}\n')
    storage.delete(fs, loc.child(MARKER))
    return loc.url


def _overlaps(a: Location, b: Location) -> bool:
    if a.bucket != b.bucket:
        return False
    pa_, pb_ = a.prefix + "/", b.prefix + "/"
    return not a.prefix or not b.prefix or pa_.startswith(pb_) or pb_.startswith(pa_)


def upload_part(local: str, url: str, endpoint: str | None) -> list[str]:
    """Step 3: one process's files (written under ``local``) to the output; their keys."""
    fs, loc = _open(url, endpoint)
    return storage.upload_tree(fs, local, loc)


def finalize(url: str, pieces: list, warnings: list[tuple[str, str]], keys: list[str], endpoint: str | None,
             summary: dict | None = None) -> None:
    """Step 4: the single-file tables, the stale objects of an earlier run removed, the marker last."""
    from neuron_explorer.exporters.interface import RunInfo, exporter

    fs, loc = _open(url, endpoint)
    tmp = staging_dir("neuron-explorer-final.")
    try:
        work = os.path.join(tmp, "work")
        os.mkdir(work)
        done = os.path.join(tmp, "dataset")
        exporter("parquet").assemble(done, pieces, RunInfo(0, {}, warnings, work, summary=summary))
        written = set(keys) | {PENDING_MARKER}
        for rel in storage.upload_tree(fs, done, loc, skip=(MARKER,)):
            written.add(rel)
        for rel, _ in storage.list_files(fs, loc):
            if rel not in written and rel != MARKER and rel.split("/", 1)[0] in LEGACY_ENTRIES:
                storage.delete(fs, loc.child(rel))
        storage.upload(fs, os.path.join(done, MARKER), loc.child(MARKER))
        storage.delete(fs, loc.child(PENDING_MARKER))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_sessions(url: str, endpoint: str | None, check_one) -> list:
    """``check_one(local_dir)`` for every session under ``url``, each staged in turn, with the
    local names in its findings replaced by the URL."""
    sessions = discover(url, endpoint)
    out = []
    for s in sessions:
        tmp = staging_dir("neuron-explorer-check.")
        try:
            local = stage_session(s, endpoint, tmp)
            for f in check_one(local):
                f.message = f.message.replace(local, s)
                out.append(f)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out
