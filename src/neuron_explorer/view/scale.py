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
independent; the reduce steps handle a few numbers per process.  See ``examples/scale_out_dask.py``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from neuron_explorer.analysis import align, jobs
from neuron_explorer.analysis.events import collective_flow_ids
from neuron_explorer.analysis.filters import ViewFilter
from neuron_explorer.analysis.pbfile import ProfileError
from neuron_explorer.analysis.reader import discover, load_session  # noqa: F401  (discover is part of the API)
from neuron_explorer.contracts.tracks import Grouping, group_pids
from neuron_explorer.view.devices import profile_ids

if TYPE_CHECKING:
    from neuron_explorer.view.pipeline import ProcessResult


def index_session(path: str) -> dict[str, Any]:
    """Map step 1: the facts about one session that clock alignment needs."""
    try:
        s = load_session(path)
    except ProfileError as e:
        return {"path": path, "error": str(e)}
    ci = align.CollectiveIndex()
    keys, start, end = ci.times(s)
    life = jobs.life_of(s.info, s.instance_id, int(end.max()) if len(end) else None)
    pairs = {i: g_o for g_o, i in ci.pairs.items()}
    if len(keys) > align.ALIGN_SAMPLES:  # sample by an id every session gives the same collective
        ids = np.zeros(len(keys), dtype=np.int64)
        for i, (g, o) in pairs.items():
            m = (keys >> 40) == i
            ids[m] = collective_flow_ids(g, o, keys[m] & ((1 << 40) - 1))
        keys, start, end = align.sample((keys, start, end), ids=ids)
    groups = {}
    for i, (g, o) in pairs.items():
        m = (keys >> 40) == i
        groups[(g, o)] = (keys[m] & ((1 << 40) - 1), start[m], end[m])
    return {"path": path, "instance_id": s.instance_id, "pid": int(s.pid), "life": life,
            "rank": int(s.info.rank) if s.info is not None else -1,
            "start_wall_ns": int(s.info.start_wall_ns) if s.info is not None else 0, "collectives": groups,
            "devices": (list(s.device_paths), [(int(m.id), m.neff_name) for m in s.models])}


def plan_offsets(indexes: list[dict[str, Any]]) -> dict[str, Any]:
    """Reduce step 1: per-instance clock offsets and the time origin, from every session's index."""
    ci = align.CollectiveIndex()
    by_instance: dict[str, list] = {}
    origin = None
    good = [ix for ix in indexes if "error" not in ix]
    job_of = dict(zip((ix["path"] for ix in good), jobs.assign([ix["life"] for ix in good])))
    for ix in good:
        ks, ss, es = [], [], []
        for (g, o), (seq, st, en) in ix["collectives"].items():
            ks.append((np.int64(ci.pair_id(g, o, job_of[ix["path"]])) << 40) | seq)
            ss.append(st)
            es.append(en)
        times = (np.concatenate(ks), np.concatenate(ss), np.concatenate(es)) if ks else \
            (np.empty(0, dtype=np.int64),) * 3
        by_instance.setdefault(ix["instance_id"], []).append(times)
        if ix["start_wall_ns"]:
            origin = ix["start_wall_ns"] if origin is None else min(origin, ix["start_wall_ns"])
    offsets = align.estimate_offsets(by_instance)
    min_off = min((o.offset_ns for o in offsets.values()), default=0)
    shown = group_pids([(ix["instance_id"], ix.get("pid", 0), ix["rank"], ix["path"]) for ix in good], Grouping())
    return {"offsets": offsets, "origin": (origin or 0) + min(min_off, 0) - 1_000_000_000,
            "instances": {ix["path"]: ix.get("instance_id", "") for ix in indexes},
            "group_pids": {ix["path"]: sh for ix, sh in zip(good, shown)},  # (pid shown, label)
            "jobs": job_of,
            "device_ids": profile_ids([(ix["instance_id"], ix.get("pid", 0), *ix["devices"])
                                       for ix in good if "devices" in ix])}


def convert_session(path: str, out_root: str, index: int, plan: dict[str, Any],
                    view_filter: ViewFilter | None = None, display_name: str = "") -> ProcessResult:
    """Map step 2: write one session's partition files (Parquet) under ``out_root``; returns its
    rows of the single-file tables and its warnings (picklable, for ``finalize``).

    ``index`` must be unique per session in one dataset (it keeps event ids and file names apart)."""
    from neuron_explorer.view.pipeline import Job, convert_process

    os.makedirs(out_root, exist_ok=True)
    inst = plan["instances"].get(path, "")
    shown, label = plan.get("group_pids", {}).get(path, (0, ""))
    dev = plan.get("device_ids", {})
    job = Job(index, path, "parquet", out_root, out_root, plan["origin"], plan["offsets"].get(inst),
              view_filter or ViewFilter(), False, False, display_name, group_pid=shown, group_label=label,
              device_ids={p: i for p, i in dev.items() if os.path.dirname(p) == path.rstrip(os.sep)},
              job=plan.get("jobs", {}).get(path, ""))
    return convert_process(job)


def finalize(out_root: str, results: list[ProcessResult], display_name: str = "") -> None:
    """Reduce step 2: write the single-file tables (metadata, models, device profiles, warnings).
    (``display_name`` is recorded by ``convert_session``; it is accepted here for callers that
    pass it to both.)"""
    from neuron_explorer.exporters.parquet import write_tables

    write_tables(out_root, [r.piece for r in results if r.piece is not None],
                 [w for r in results for w in r.warnings])
