"""The steps of a ``view`` run that touch the captures or the output, as tasks any engine can run
(``pipeline``: in this process, a spawned worker process or on a Dask worker): plain functions of
picklable arguments, importable by name on every worker.  On a file system they are the local
steps themselves; object storage adds the staging below.

Object storage is read by staging one session directory at a time into a private local
directory (the readers memory-map local files) and written by uploading one process's partition
files as soon as they are written; the local paths are replaced by the URLs in everything a task
returns, so warnings and ``ProfileMetadata.session_path`` name what the user passed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from typing import Any, Iterator

from neuron_explorer.util.atomic import staging_dir
from neuron_explorer.util.storage import is_url

from .options import GOOD_LAYOUT, ViewError, ViewOptions, os_reason
from .process import Job, ProcessResult, convert_process, index_one


class TaskOSError(Exception):
    """Writing the output failed on a worker (an OSError there; picklable, unlike some)."""

    def __init__(self, output: str, reason: str) -> None:
        super().__init__(output, reason)
        self.output = output
        self.reason = reason


def discover(root: str, endpoint: str | None) -> tuple[list[str], list[tuple[str, str]]]:
    """Every session under ``root`` (a directory the worker sees, or an s3:// prefix) and the
    problems met listing it; raises ViewError when there is nothing to view."""
    from neuron_explorer.analysis.reader import discover as discover_dir

    problems: list[tuple[str, str]] = []
    if is_url(root):
        from . import remote

        paths = remote.discover(root, endpoint)
    elif not os.path.isdir(root):
        raise ViewError(f"{root}: no such directory; {GOOD_LAYOUT}")
    else:
        paths = discover_dir(root, problems)
    if not paths:
        raise ViewError(f"{root}: no profiles found; {GOOD_LAYOUT}")
    return paths, problems


def prepare_output(out: str, fmt: str, paths: list[str], endpoint: str | None,
                   default: bool = False) -> tuple[str, str | None]:
    """Check the output before any work (``view.output`` rules, or ``view.remote`` on object
    storage) and make its work area; returns (target, work area).  ``default``: ``out`` is the
    format's default name (``output.check``)."""
    if is_url(out):
        from . import remote

        return remote.prepare_output(out, endpoint, paths), None
    from neuron_explorer.contracts import dataset

    target = check_output(out, fmt, paths, default)
    try:
        return target, dataset.work_area(target)
    except OSError as e:
        raise TaskOSError(out, os_reason(e)) from None


def check_output(out: str, fmt: str, paths: list[str], default: bool = False) -> str:
    """A local output checked (``output.check``: ViewError when refused) and the directories
    missing above it made; returns the path to write."""
    from . import output as output_mod

    try:
        target = output_mod.check(out, fmt, paths, default=default)
    except output_mod.OutputRefused as e:
        raise ViewError(str(e)) from None
    if output_mod.output_kind(target) not in ("descriptor", "special"):
        try:
            output_mod.make_parents(target)
        except OSError as e:
            raise TaskOSError(out, f"cannot create its directory: {os_reason(e)}") from None
    return target


@contextlib.contextmanager
def staged(path: str, endpoint: str | None) -> Iterator[str]:
    """``path`` itself, or for an s3:// session a private local copy removed afterwards."""
    if not is_url(path):
        yield path
        return
    from . import remote

    tmp = staging_dir("neuron-explorer-stage.")  # (a killed worker's copy goes at the next task)
    try:
        yield remote.stage_session(path, endpoint, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unstage(value: Any, local: str, url: str) -> Any:
    """``value`` with the staged directory's name replaced by the URL (strings, lists, tuples, dicts)."""
    if local == url:
        return value
    if isinstance(value, str):
        return value.replace(local, url)
    if isinstance(value, (list, tuple)):
        return type(value)(_unstage(v, local, url) for v in value)
    if isinstance(value, dict):
        return {k: _unstage(v, local, url) for k, v in value.items()}
    return value


def index(path: str, opts: ViewOptions, n_paths: int, endpoint: str | None) -> dict:
    """Pass 1 for one profile (``process.index_one``) on a worker."""
    with staged(path, endpoint) as local:
        rec = index_one(local, opts, n_paths)
    if local != path:
        times = rec.pop("times", None)
        rec = _unstage(rec, local, path)
        rec["checked"] = None  # the conversion reads another copy: it checks the events again
        if times is not None:
            rec["times"] = times
    rec["path"] = path
    return rec


def convert(job: Job, endpoint: str | None) -> tuple[ProcessResult, list[str]]:
    """Pass 2 for one profile on a worker; for object storage, the partition files are uploaded
    as this task's last act.  Returns the result and the keys it wrote (object storage only)."""
    with staged(job.path, endpoint) as local, _out_area(job) as (local_job_out, url):
        j = dataclasses.replace(job, path=local)
        if url is not None:
            j = dataclasses.replace(j, out=local_job_out, work=local_job_out, device_dir=local_job_out)
        try:
            res = convert_process(j)
            keys = [] if url is None else _upload(local_job_out, url, endpoint)
        except OSError as e:
            raise TaskOSError(url or job.out or "-", os_reason(e)) from None
        if local != job.path:
            res.warnings = _unstage(res.warnings, local, job.path)
            res.summary = _unstage(res.summary, local, job.path)
            if res.piece is not None:
                res.piece.tables = _unstage(res.piece.tables, local, job.path)
        return res, keys


@contextlib.contextmanager
def _out_area(job: Job) -> Iterator[tuple[str, str | None]]:
    if job.out is None or not is_url(job.out):
        yield "", None
        return
    tmp = staging_dir("neuron-explorer-out.")
    out = os.path.join(tmp, "out")  # (everything in it is uploaded: the owner file stays outside)
    try:
        os.mkdir(out)
        yield out, job.out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _upload(local: str, url: str, endpoint: str | None) -> list[str]:
    from . import remote

    return remote.upload_part(local, url, endpoint)


def finalize(fmt: str, target: str, work: str | None, pieces: list, run: tuple, keys: list[str],
             endpoint: str | None) -> None:
    """Reduce: the single-file tables and the marker, then the output is complete (renamed into
    place on a file system; marked complete last on object storage)."""
    from neuron_explorer.exporters.interface import RunInfo, exporter

    origin, offsets, warnings, display_name, summary = run
    if is_url(target):
        from . import remote

        remote.finalize(target, pieces, warnings, keys, endpoint, summary)
        return
    try:
        exporter(fmt).assemble(target, pieces, RunInfo(origin, offsets, warnings, work or "", display_name, summary))
    except OSError as e:
        raise TaskOSError(target, os_reason(e)) from None


def cleanup(work: str) -> None:
    from neuron_explorer.contracts import dataset

    dataset.remove_work_area(work)

