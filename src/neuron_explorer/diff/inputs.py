"""What ``diff`` is given, as a Parquet dataset it can read: a ``view`` output is read where it is
(an ``s3://`` one is copied down first); a capture directory (local or ``s3://``) is converted through
``view``'s one flow (``view.pipeline.run``, on this machine or on a Dask cluster's workers) into a
private temporary directory that is removed afterwards.  Nothing the user wrote is changed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass

from neuron_explorer.contracts import dataset as dsc
from neuron_explorer.util import storage


class InputError(Exception):
    """An input that is neither a ``view`` Parquet output nor a capture directory."""


@dataclass
class Resolved:
    given: str
    dataset: str  # a local Parquet dataset directory
    converted: bool  # True when it was made here from captures
    warnings: list[str]


def is_dataset(path: str) -> bool:
    """A local directory holding a ``view`` Parquet dataset."""
    return os.path.isdir(os.path.join(path, dsc.EVENTS)) or os.path.isfile(os.path.join(path, dsc.MARKER))


def resolve(path: str, stack: ExitStack, scheduler: str | None = None, endpoint: str | None = None,
            jobs: int | None = None, work: str | None = None) -> Resolved:
    """``path`` as a local dataset; temporary directories (under ``work``: a directory a cluster's
    workers share, else the system's) are removed when ``stack`` closes."""
    if storage.is_url(path):
        return _remote(path, stack, scheduler, endpoint, jobs, work)
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file or directory")
    if not os.path.isdir(path):
        raise InputError(f"{path}: not a directory (give a capture directory or a view Parquet output)")
    if is_dataset(path):
        return Resolved(path, path, False, [])
    return _convert(path, stack, scheduler, endpoint, jobs, work)


def _tmp(stack: ExitStack, work: str | None) -> str:
    d = tempfile.mkdtemp(prefix=".neuron-explorer-diff.", dir=work)
    stack.callback(shutil.rmtree, d, True)
    return d


def _convert(path: str, stack: ExitStack, scheduler: str | None, endpoint: str | None,
             jobs: int | None, work: str | None) -> Resolved:
    from neuron_explorer.view import pipeline
    from neuron_explorer.view.options import OutputError, ViewError, ViewOptions

    out = os.path.join(_tmp(stack, work), "dataset")
    opts = ViewOptions(directory=path, output_format="parquet", output_file=out, progress=False, jobs=jobs)
    try:
        if scheduler is None:
            res = pipeline.run(opts, endpoint=endpoint)
        else:
            from neuron_explorer.view import cluster

            engine = cluster.engine_for(scheduler, jobs)
            try:
                res = pipeline.run(opts, engine, endpoint)
            finally:
                engine.close()
    except (ViewError, OutputError) as e:
        raise InputError(f"{path}: {e}") from None
    except Exception as e:  # a cluster or storage failure: one line
        raise InputError(f"{path}: cannot convert: {' '.join(str(e).split())[:300]}") from None
    return Resolved(path, out, True, [f"{m} ({w})" if w else m for m, w in res.warnings])


def _remote(url: str, stack: ExitStack, scheduler: str | None, endpoint: str | None, jobs: int | None,
            work: str | None) -> Resolved:
    try:
        loc = storage.parse(url)
        fs = storage.filesystem(endpoint)
        files = storage.list_files(fs, loc)
    except storage.StorageError as e:
        raise InputError(str(e)) from None
    if not files:
        raise InputError(f"{url}: no objects under this prefix")
    names = {rel.split("/")[0] for rel, _ in files}
    if dsc.EVENTS in names or dsc.MARKER in names:
        dest = os.path.join(_tmp(stack, work), "dataset")
        wanted = [rel for rel, _ in files if not dsc.foreign_entry(rel)]
        try:
            storage.download(fs, loc, wanted, dest)
        except (storage.StorageError, OSError) as e:
            raise InputError(f"{url}: {e}") from None
        return Resolved(url, dest, False, [])
    return _convert(url, stack, scheduler, endpoint, jobs, work)
