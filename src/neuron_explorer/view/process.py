"""One process's profile as a worker handles it, in this process, a spawned one or on a cluster:
pass 1, what the run must know of it (``index_one``: a plain record, picklable), and pass 2, its
conversion (``Job`` in, ``convert_process``, ``ProcessResult`` out).  Nothing here prints or
decides for the run as a whole: that is the flow's (``pipeline``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from neuron_explorer.analysis import (
    align,
    device as device_mod,
    insights as insights_mod,
    jobs,
    steps as steps_mod,
    summary as summary_mod,
)
from neuron_explorer.analysis.counters import counter_series, host_memory_bytes, recorded_memory_limit
from neuron_explorer.analysis.events import build as build_events, region_links
from neuron_explorer.analysis.filters import ViewFilter
from neuron_explorer.analysis.framework import RegionLinks
from neuron_explorer.analysis.pbfile import ProfileError
from neuron_explorer.analysis.reader import Session, load_session, wall_offset_ns
from neuron_explorer.contracts.dataset import DEVICE_MEMORY_PREFIX, MAIN_THREAD, MAIN_THREAD_WAIT
from neuron_explorer.contracts.tracks import Grouping
from neuron_explorer.exporters.interface import Piece, ProcessTarget, exporter
from neuron_explorer.util.names import printable

from .options import SUMMARIES, ViewOptions

# the single-worker conversion reports its progress inside a process here (chunk by chunk): the
# local engine sets it while it converts in this process
within: list[Callable[[float], None] | None] = [None]


def _failure(path: str, e: Exception) -> str:
    """The one-line message for a profile that failed after loading: a ProfileError says what is
    wrong with which file; anything else is a defect of ours, named as such."""
    if isinstance(e, ProfileError):
        return str(e)
    return printable(f"{path}: skipped after an internal error ({type(e).__name__}: {e}); please report it")


def index_one(path: str, opts: ViewOptions, n_paths: int) -> dict:
    """Pass 1 for one profile: what the run needs to know of it, as plain picklable data (a
    cluster run computes it on a worker).  ``collectives`` keys are numbered by this profile's own
    ``pairs`` (``absorb`` renumbers them for the run); nothing is printed here.

    Clock alignment is a fact of the whole capture, not of what a run writes: the collectives of
    every profile are read, those of instances the filter drops and those of a run that writes no
    system events (whose ntrace.pb is then mapped unchecked: ``CollectiveIndex.times`` checks the
    rows it reads), so a filter never moves the events it keeps."""
    rec: dict = {"path": path, "instance": None, "skipped": None, "warnings": [], "usable": False}
    writes_events = not opts.ignore_system_profile
    try:
        s = load_session(path, events="checked" if writes_events else "unchecked")
    except ProfileError as e:
        rec["skipped"] = str(e)
        return rec
    rec["warnings"] = list(s.warnings)
    rec["instance"] = s.instance_id
    kept = opts.filter.keeps_instance(s.instance_id)
    ci = align.CollectiveIndex()
    try:
        times = ci.times(s)
    except Exception as e:  # damage the unchecked read found, or a defect of ours on odd data: this profile only
        if kept and writes_events:
            rec["skipped"] = _failure(path, e)
            return rec
        rec["warnings"].append(f"{_failure(path, e)}; its collectives were left out of the clock alignment")
        times, ci = align.no_times(), align.CollectiveIndex()
    s.release(s.num_events)  # the index keeps only the collective timings
    last = int(times[2].max()) if len(times[2]) else None
    rec["life"] = jobs.life_of(s.info, s.instance_id, last)
    if opts.output_format not in SUMMARIES:  # stragglers need them all
        times = align.sample(times, align.sample_cap(n_paths))
    rec.update(times=times, pairs=list(ci.pairs.items()))
    if not kept:
        return rec
    rank = int(s.info.rank) if s.info is not None else -1
    rec.update(usable=True, checked=s.events_checked, proc=(s.instance_id, int(s.pid), rank),
               devices=[] if opts.ignore_device_profile else [(s.instance_id, int(s.pid), list(s.device_paths),
                                                               [(m.id, m.neff_name) for m in s.models])],
               start=int(s.info.start_wall_ns) if s.info is not None and s.info.start_wall_ns else None)
    return rec


@dataclass
class Job:
    """Everything a worker needs to convert one process (picklable)."""

    index: int
    path: str
    fmt: str
    out: str | None  # None: a summary
    work: str | None  # where parts/pieces go before they are assembled
    origin: int
    offset: align.InstanceOffset | None
    filter: ViewFilter
    ignore_device: bool
    ignore_system: bool
    display_name: str
    device_dir: str | None = None  # where device_profile_model_<id> files go (json, perfetto)
    checked: tuple | None = None  # the index pass checked this version of ntrace.pb
    grouping: Grouping = field(default_factory=Grouping)
    group_pid: int = 0  # the pid of the process's group in the track tree (0: index + 1)
    group_label: str = ""
    device_ids: dict[str, str] = field(default_factory=dict)  # .ntff path -> device profile id (view.devices)
    job: str = ""  # the process's job: part of its collectives' flow ids (analysis.jobs)

    def target(self) -> ProcessTarget:
        """Where the exporter writes this process."""
        assert self.out is not None and self.work is not None
        return ProcessTarget(self.index, self.origin, self.out, self.work, self.device_dir or device_dir(self.out),
                             self.display_name, self.offset, self.grouping, self.group_pid or self.index + 1,
                             self.group_label)


@dataclass
class ProcessResult:
    """What a worker hands back for one process (picklable)."""

    warnings: list[tuple[str, str]] = field(default_factory=list)  # (message, path)
    events: int = 0
    piece: Piece | None = None  # an output format's: what ``assemble`` joins
    summary: dict | None = None  # the summaries'
    present_cores: list[int] = field(default_factory=list)  # before the filters (when one is set)
    present_types: list[str] = field(default_factory=list)
    steps: dict | None = None  # the process's steps (``process_steps``), for the summaries and summary.json


def device_dir(out: str) -> str:
    """Device profiles go beside a file output; for '-', a device or a FIFO, into the current
    directory (never into /dev)."""
    from neuron_explorer.util.atomic import output_kind

    if output_kind(out) in ("descriptor", "special"):
        return os.getcwd()
    return os.path.dirname(os.path.abspath(out))


def convert_process(job: Job) -> ProcessResult:
    """Load, filter and convert one process; returns what the parent assembles.

    A process that fails here (its files changed since the index pass, or damage the checks at
    load did not catch) becomes one warning naming it, and what it had written so far is removed:
    the other processes are still converted.  An error writing the output (OSError: a full disk,
    a vanished directory) is not about this profile and stops the run."""
    from neuron_explorer.util.alloc import keep_freed_memory

    keep_freed_memory()  # every format: reuse freed chunk temporaries instead of faulting them in anew
    undo: list = []  # callables that remove what this process wrote
    try:
        return _convert(job, undo)
    except OSError:
        raise
    except Exception as e:
        for f in reversed(undo):
            f()
        return ProcessResult([(_failure(job.path, e), printable(job.path))])


def _convert(job: Job, undo: list) -> ProcessResult:
    """One process through its format's writer (or its summary): device profiles first, then the
    events in the pieces and order the writer asks for."""
    res = ProcessResult()
    try:
        s = load_session(job.path, events="none" if job.ignore_system else "checked", checked=job.checked)
    except ProfileError as e:  # changed since the index pass
        res.warnings.append((str(e), printable(job.path)))
        return res
    _present(job.filter, s, res)
    if not job.ignore_system:  # the whole process's steps, before the filters (docs/summary.md)
        res.steps = process_steps(s, job.offset.offset_ns if job.offset else 0)
    if job.out is not None:  # region links: found on the whole process, then filtered with it
        s.region_links = region_links(s, job.index)
    keep = job.filter.apply(s)
    links = s.region_links
    if keep is not None and isinstance(links, RegionLinks):
        s.region_links = links.restrict(keep)
    offset_ns = job.offset.offset_ns if job.offset else 0
    dviews = [] if job.ignore_device else device_mod.load(s, offset_ns, res.warnings)
    for v in dviews:  # the run's ids: device_profile_model_<model id>, unique across processes
        v.profile_id = v.summary["profile_id"] = job.device_ids.get(v.dp.path, v.profile_id)
    if job.filter.ncs is not None:
        dviews = [v for v in dviews if v.dp.trace.nc_idx in job.filter.ncs]
    if job.out is None:  # summaries
        res.summary = summary_mod.session_summary(s, job.offset)
        res.summary["device_profiles"] = [v.summary for v in dviews]
        res.events = s.num_events
        return res
    w = exporter(job.fmt).open_process(job.target())
    undo.append(w.discard)
    links = device_mod.exec_links(dviews)
    id_base = job.index << 32  # ids unique across processes without coordination
    try:
        w.add_devices(dviews)
        report = within[0]
        for lo, part in w.chunks(s):
            pe = build_events(part, job.index, offset_ns, id_base, links, with_extra=w.with_extra, first=lo,
                              job=job.job)
            w.add(pe)
            res.events += pe.n
            if report is not None:
                report(res.events / max(s.num_events, 1))
        res.piece = w.close()
    except BaseException:
        w.abort()
        raise
    return res


def process_steps(s: Session, offset_ns: int) -> dict:
    """One process's steps on the events' clock (``analysis.steps``) with its identity and the
    CPU use of each step: what ``analysis.insights`` reduces across ranks."""
    st = steps_mod.session_steps(s).shifted(wall_offset_ns(s) + offset_ns)
    info = s.info
    out = {"instance_id": s.instance_id, "pid": int(s.pid), "rank": int(info.rank) if info is not None else -1,
           "device_kind": info.device_kind if info is not None else "", **st.to_columns()}
    cpu = counter_series(s) if len(st) else {}
    off = wall_offset_ns(s) + offset_ns
    # (a series with no sample is absent: the main thread's in captures before decision 0203)
    named = {k: (cpu[name][0] + off, cpu[name][1]) for k, name in (
        ("cpu_process_pct", "cpu_util.process"), ("cpu_host_pct", "cpu_util.host_mean"),
        ("cpu_main_pct", MAIN_THREAD), ("cpu_wait_pct", MAIN_THREAD_WAIT)) if name in cpu}
    out.update(zip(named, insights_mod.cpu_per_step(st.start_ns, st.end_ns, *named.values())))
    dev = {k: (ts, v) for k, (ts, v, _) in cpu.items() if k.startswith(DEVICE_MEMORY_PREFIX)}
    if dev:
        out["device_mem_bytes"], out["device_mem_growth"] = insights_mod.memory_per_step(
            {k: (ts + off, v) for k, (ts, v) in dev.items()}, st.end_ns)
        host_bytes = host_memory_bytes(s) if out["device_kind"].split(":", 1)[0] == "cpu" else 0
        if host_bytes > 0:
            # the CPU substrate's device memory is the host's (decision 0159): used + available,
            # or the process's cgroup limit where the capture found a lower one (decision 0182)
            out.update(cpu_memory_limit(host_bytes, s.mem))
    return out


HOST_LIMIT_SOURCE = "host memory (CPU substrate)"


def cpu_memory_limit(host_bytes: int, mem) -> dict:
    """``memory_limit_bytes`` and ``memory_limit_source`` of a CPU-substrate process: its cgroup's
    limit from host_mem.pb (with ``memory_limit_cgroup``) when recorded, positive and below the
    host's memory ``host_bytes`` (``analysis.counters.recorded_memory_limit``), else the host's
    memory."""
    got = recorded_memory_limit(mem, host_bytes)
    if got is not None:
        return got
    return {"memory_limit_bytes": host_bytes, "memory_limit_source": HOST_LIMIT_SOURCE}


def _present(filt: ViewFilter, s: Session, res: ProcessResult) -> None:
    """The cores and event types of the process before filtering, when a filter may keep none."""
    n = s.num_events
    if not n:
        return
    if filt.ncs is not None:
        res.present_cores = np.unique(s.events["nc_idx"]).tolist()
    if filt.types is not None:
        ids = np.flatnonzero(np.bincount(np.clip(s.events["type"], 0, len(s.type_names)),
                                         minlength=len(s.type_names) + 1)[:len(s.type_names)])
        res.present_types = [s.type_names[i] for i in ids.tolist()]
