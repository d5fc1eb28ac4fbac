"""`view` as map and reduce steps, for profiles that outgrow one machine.

``neuron-explorer view`` runs these same steps in one process (or a local process pool).  A fleet's
captures can instead be converted by any engine that maps a Python function over a list -- Ray,
Dask, Spark's ``mapPartitions``, a batch scheduler -- and queried with DuckDB, Spark or Trino,
because the output is the same hive-partitioned Parquet dataset::

    paths = discover("/shared/output")                    # every process's session directory
    idx = [index_session(p) for p in paths]               # map: collective timings (small)
    offsets = plan_offsets(idx)                           # reduce: clock offsets per instance
    parts = [convert_session(p, "/shared/pq", i, offsets) for i, p in enumerate(paths)]  # map
    finalize("/shared/pq", parts)                         # reduce: the single-file tables

Each map step touches one process's files and writes only its own partition files, so tasks are
independent; the reduce steps handle a few numbers per process.  They are the steps of
``neuron-explorer view`` itself (``process.index_one``, ``pipeline.absorb``, ``finish_index`` and
``make_jobs``, ``process.convert_process``, the Parquet exporter's tables), so the dataset is
view's.  See ``examples/scale_out_dask.py``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from neuron_explorer.analysis.filters import ViewFilter
from neuron_explorer.analysis.reader import discover  # noqa: F401  (part of the API)

from .options import ViewOptions
from .pipeline import absorb, finish_index, make_jobs, new_index
from .process import Job, ProcessResult, convert_process, index_one

# what the steps are asked: a Parquet dataset of every process (the filter applies at conversion)
_REQUEST = ViewOptions(directory="", output_format="parquet")


def index_session(path: str) -> dict[str, Any]:
    """Map step 1: the facts about one session that clock alignment needs (view's index record;
    plain data, a few KB)."""
    return index_one(path, _REQUEST, 1)


def plan_offsets(indexes: list[dict[str, Any]]) -> dict[str, Any]:
    """Reduce step 1: per-instance clock offsets and the time origin, from every session's index
    (in the order the sessions were listed), and each session's conversion as view plans it."""
    ix = new_index()
    for rec in indexes:
        absorb(ix, rec)  # (a damaged session is left out here; its conversion says why)
    finish_index(ix)
    return {"offsets": ix.offsets, "origin": ix.origin,
            "processes": {j.path: j for j in make_jobs(ix, _REQUEST, None, None)}}


def convert_session(path: str, out_root: str, index: int, plan: dict[str, Any],
                    view_filter: ViewFilter | None = None, display_name: str = "") -> ProcessResult:
    """Map step 2: write one session's partition files (Parquet) under ``out_root``; returns its
    rows of the single-file tables and its warnings (picklable, for ``finalize``).

    ``index`` must be unique per session in one dataset (it keeps event ids and file names apart)."""
    os.makedirs(out_root, exist_ok=True)
    planned = plan["processes"].get(path) or Job(index, path, "parquet", None, None, plan["origin"], None,
                                                 ViewFilter(), False, False, "")
    return convert_process(dataclasses.replace(planned, index=index, out=out_root, work=out_root,
                                                filter=view_filter or ViewFilter(), display_name=display_name))


def finalize(out_root: str, results: list[ProcessResult], display_name: str = "") -> None:
    """Reduce step 2: write the single-file tables (metadata, models, device profiles, warnings):
    what the Parquet exporter's ``assemble`` writes before it renames a dataset into place (these
    steps write in place).  (``display_name`` is recorded by ``convert_session``; it is accepted
    here for callers that pass it to both.)"""
    from neuron_explorer.exporters.parquet import write_tables

    write_tables(out_root, [r.piece for r in results if r.piece is not None],
                 [w for r in results for w in r.warnings])
