"""``view`` as a pipeline: discover → index (clock alignment) → per process: load, filter, build
events → exporter.  Only one process's data is in memory at a time; the index pass keeps just the
collective timings needed to align clocks and find stragglers.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from neuron_explorer.analysis import align, device as device_mod, jobs, summary as summary_mod
from neuron_explorer.analysis.events import build as build_events, region_links
from neuron_explorer.analysis.filters import ViewFilter
from neuron_explorer.analysis.framework import RegionLinks
from neuron_explorer.analysis.pbfile import ProfileError
from neuron_explorer.analysis.reader import Session, discover, load_session
from neuron_explorer.contracts import dataset
from neuron_explorer.contracts.tracks import Grouping, group_pids
from neuron_explorer.exporters.interface import Piece, ProcessTarget, RunInfo, exporter
from neuron_explorer.util.names import printable
from neuron_explorer.view import output as output_mod
from neuron_explorer.view.devices import profile_ids


class ViewError(Exception):
    """A problem with the view request as a whole (nothing usable to process)."""


class OutputError(Exception):
    """Writing the output failed (full disk, permissions, ...): nothing half-written was left
    looking complete and an earlier output of ours is intact."""

    def __init__(self, output: str | None, reason: str) -> None:  # (None: a summary, printed)
        super().__init__(f"cannot write {output}: {reason}")
        self.output = output
        self.reason = reason


def os_reason(e: OSError) -> str:
    """The system's words for an OSError ("No space left on device"), without Arrow's wrapping."""
    return os.strerror(e.errno) if e.errno else (e.strerror or str(e))


GOOD_LAYOUT = ("a capture directory looks like OUTPUT/<instance-id>_pid_<pid>/<timestamp>/ holding "
               "ntrace.pb and trace_info.pb (written by NEURON_RT_INSPECT_ENABLE=1 or 'neuron-explorer inspect')")

DEFAULT_OUTPUTS = {"parquet": "system_profile_parquet", "json": "system_profile.json",
                   "perfetto": "system_profile.pftrace"}


@dataclass
class ViewOptions:
    directory: str
    output_format: str = "parquet"
    output_file: str | None = None
    filter: ViewFilter = field(default_factory=ViewFilter)
    ignore_system_profile: bool = False
    ignore_device_profile: bool = False
    display_name: str = ""
    progress: bool | None = None  # None: when stderr is a terminal
    jobs: int | None = None  # worker processes; None = one per core (used when the input is large)
    grouping: Grouping = field(default_factory=Grouping)  # --system-trace-primary/secondary-group
    progress_delay: float = 1.0  # seconds before the progress bar shows (NEURON_EXPLORER_PROGRESS_DELAY_S)


@dataclass
class ViewResult:
    output: str | None
    warnings: list[tuple[str, str]]  # (message, path)
    offsets: dict[str, align.InstanceOffset]
    profiles: int
    events: int
    seconds: float
    text: str | None = None  # summary text/json
    device_files: list[str] = field(default_factory=list)  # device_profile_model_<id>.json/.pftrace

    @property
    def exit_code(self) -> int:
        return 1 if self.warnings else 0


class Progress:
    """A progress bar on stderr for runs long enough to wonder about: shown only when enabled
    (default: stderr is a terminal) and once ``delay`` seconds have passed, redrawn at most ten
    times a second, ended with a newline when it was shown.  ``step`` counts a process done;
    ``within`` the share done of the current one (single worker: chunk by chunk)."""

    def __init__(self, total: int, label: str, enabled: bool | None, delay: float = 1.0) -> None:
        self.total = total
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.delay = delay
        self.done = 0
        self.part = 0.0
        self.t0 = time.monotonic()
        self.last = -1.0
        self.shown = False

    def step(self) -> None:
        self.done += 1
        self.part = 0.0
        self._draw(final=self.done >= self.total)

    def within(self, fraction: float) -> None:
        self.part = min(max(fraction, 0.0), 1.0)
        self._draw()

    def _draw(self, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.t0 < self.delay or (not final and now - self.last < 0.1):
            if final and self.shown:
                sys.stderr.write("\n")
            return
        self.last = now
        frac = (self.done + self.part) / self.total if self.total else 1.0
        w = 30
        k = int(w * frac)
        sys.stderr.write(f"\rneuron-explorer: {self.label} [{'#' * k}{'.' * (w - k)}] {self.done}/{self.total} "
                         f"processes {100 * frac:3.0f}% {now - self.t0:.1f} s")
        self.shown = True
        if final:
            sys.stderr.write("\n")
        sys.stderr.flush()


# the single-worker conversion reports its progress inside a process here (chunk by chunk)
_within: list = [None]


def _failure(path: str, e: Exception) -> str:
    """The one-line message for a profile that failed after loading: a ProfileError says what is
    wrong with which file; anything else is a defect of ours, named as such."""
    if isinstance(e, ProfileError):
        return str(e)
    return printable(f"{path}: skipped after an internal error ({type(e).__name__}: {e}); please report it")


@dataclass
class RunIndex:
    """What the index pass learns: the usable profiles, the clock offsets and the time origin."""

    usable: list[str]
    instances: dict[str, str]  # path -> instance id
    checked: dict[str, tuple | None]  # ntrace.pb versions whose events were checked here
    offsets: dict[str, align.InstanceOffset]
    origin: int
    collectives: align.CollectiveIndex
    stragglers: list  # (rank, instance id, collective times) per profile
    procs: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # path -> (instance, pid, rank)
    all_instances: set[str] = field(default_factory=set)  # every instance read, before the filter
    devices: dict[str, list] = field(default_factory=dict)  # path -> its device profiles' facts
    jobs: dict[str, str] = field(default_factory=dict)  # path -> its job (analysis.jobs)
    # (path or None when not written, instance, jobs.ProcessLife, times, pairs, rank) per profile read,
    # until finish_index
    timings: list = field(default_factory=list)


SUMMARIES = ("summary-text", "summary-json")


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


def absorb(ix: RunIndex, rec: dict, warnings: list[tuple[str, str]]) -> None:
    """Add one profile's ``index_one`` record to the run's index, printing its warnings in the
    order a single pass would (the records are absorbed in path order).  Every profile read
    feeds the clock alignment; only those the filter keeps are converted."""
    p = rec["path"]
    if rec["instance"] is None:
        print(f"neuron-explorer: skipped: {rec['skipped']}", file=sys.stderr)
        warnings.append((rec["skipped"], printable(p)))
        return
    for w in rec["warnings"]:
        print(f"neuron-explorer: warning: {w}", file=sys.stderr)
        warnings.append((w, printable(p)))
    ix.all_instances.add(rec["instance"])
    if rec["skipped"] is not None:
        print(f"neuron-explorer: skipped: {rec['skipped']}", file=sys.stderr)
        warnings.append((rec["skipped"], printable(p)))
        return
    if "times" not in rec:
        return
    usable = rec["usable"]
    ix.timings.append((p if usable else None, rec["instance"], rec["life"], rec["times"], rec["pairs"],
                       rec["proc"][2] if usable else -1))
    if not usable:
        return
    ix.usable.append(p)
    ix.instances[p] = rec["instance"]
    ix.checked[p] = rec["checked"]
    ix.procs[p] = rec["proc"]
    ix.devices[p] = rec["devices"]
    if rec["start"] is not None:
        ix.origin = rec["start"] if not ix.origin else min(ix.origin, rec["start"])


def finish_index(ix: RunIndex) -> RunIndex:
    """The jobs, clock offsets and the time origin, once every profile is absorbed: the
    collectives are told apart by job (``analysis.jobs``), the offsets estimated from every
    instance read and reported for the instances the output holds."""
    job_of = jobs.assign([t[2] for t in ix.timings])
    times_by_instance: dict[str, list] = {}
    for (path, inst, _, (keys, start, end), pairs, rank), job in zip(ix.timings, job_of):
        if len(keys):  # the profile's pair numbers -> the run's (group, op, job)
            remap = np.zeros(max(i for _, i in pairs) + 1, dtype=np.int64)
            for (g, o), i in pairs:
                remap[i] = ix.collectives.pair_id(g, o, job)
            keys = (remap[keys >> 40] << 40) | (keys & ((1 << 40) - 1))
        times_by_instance.setdefault(inst, []).append((keys, start, end))
        if path is not None:
            ix.jobs[path] = job
            ix.stragglers.append((rank, inst, (keys, start, end)))
    ix.timings = []
    every = align.estimate_offsets(times_by_instance)
    written = set(ix.instances.values())
    ix.offsets = {i: o for i, o in every.items() if i in written}
    # keep relative timestamps short but never negative after a correction
    min_off = min((o.offset_ns for o in ix.offsets.values()), default=0)
    ix.origin = (ix.origin or 0) + min(min_off, 0) - 1_000_000_000
    return ix


def new_index() -> RunIndex:
    return RunIndex([], {}, {}, {}, 0, align.CollectiveIndex(), [])


def _index(paths: list[str], opts: ViewOptions, warnings: list[tuple[str, str]]) -> RunIndex:
    """Pass 1: instances, collective timings and the time origin; damaged profiles are reported
    here, and only the collective timings stay in memory."""
    ix = new_index()
    prog = Progress(len(paths), "indexing", opts.progress, opts.progress_delay)
    for p in paths:
        rec = index_one(p, opts, len(paths))
        prog.step()
        absorb(ix, rec, warnings)
    return finish_index(ix)


def run(opts: ViewOptions) -> ViewResult:
    """Convert every profile under ``opts.directory`` to the chosen output (or a summary text):
    the output is checked before any work, written beside itself and put in place only whole."""
    t_start = time.perf_counter()
    root = opts.directory
    if not os.path.isdir(root):
        raise ViewError(f"{root}: no such directory; {GOOD_LAYOUT}")
    warnings: list[tuple[str, str]] = []
    paths = discover(root, warnings)
    for msg, _ in warnings:
        print(f"neuron-explorer: warning: {msg}", file=sys.stderr)
    if not paths:
        raise ViewError(f"{root}: no profiles found; {GOOD_LAYOUT}")
    fmt = opts.output_format
    out = opts.output_file or DEFAULT_OUTPUTS.get(fmt)
    target = None
    if out is not None:  # before any work: nothing is written when the output cannot be used
        try:
            target = output_mod.check(out, "summary" if fmt.startswith("summary") else fmt, paths,
                                      default=opts.output_file is None)
        except output_mod.OutputRefused as e:
            raise ViewError(str(e)) from None
        if target not in ("-",) and output_mod.output_kind(target) not in ("descriptor", "special"):
            try:
                output_mod.make_parents(target)
            except OSError as e:
                raise OutputError(out, f"cannot create its directory: {os_reason(e)}") from None
    ix = _index(paths, opts, warnings)
    _warn(warnings, root, unmatched_instances(opts.filter, ix.all_instances))
    if fmt not in DEFAULT_OUTPUTS:  # summaries: the text is returned, the caller writes it
        out = target = None
    try:
        work = None if target is None else dataset.work_area(target)
    except OSError as e:
        raise OutputError(out, os_reason(e)) from None
    jobs = make_jobs(ix, opts, target, work)
    # pass 2: one process at a time per worker, then the pieces joined in process order
    try:
        results = _convert_all(jobs, _workers(opts.jobs, ix.usable),
                               Progress(len(jobs), f"writing {fmt}", opts.progress, opts.progress_delay))
        for r in results:
            for w in r.warnings:
                print(f"neuron-explorer: skipped: {w[0]}", file=sys.stderr)
            warnings.extend(r.warnings)
        if not opts.ignore_system_profile:
            _warn(warnings, root, unmatched_filters(opts.filter, results))
        if target is not None and work is not None:  # (work: None exactly when target is)
            exporter(fmt).assemble(target, [r.piece for r in results if r.piece is not None],
                                   RunInfo(ix.origin, ix.offsets, warnings, work, opts.display_name))
    except OSError as e:
        raise OutputError(out, os_reason(e)) from None
    finally:
        dataset.remove_work_area(work)  # (a Parquet dataset was renamed into place from it)
    text = None
    if out is None:
        summ = summary_mod.build([r.summary for r in results if r.summary is not None], [m for m, _ in warnings],
                                 ix.offsets, align.stragglers(ix.stragglers, ix.offsets, ix.collectives))
        text = summary_mod.render_text(summ) if fmt == "summary-text" else summary_mod.render_json(summ)
    return ViewResult(out, warnings, ix.offsets, len(ix.usable), sum(r.events for r in results),
                      time.perf_counter() - t_start, text,
                      [f for r in results if r.piece is not None for f in r.piece.device_files])


def make_jobs(ix: RunIndex, opts: ViewOptions, target: str | None, work: str | None) -> list["Job"]:
    """One Job per usable profile, in path order (for a summary ``target`` is None)."""
    fmt = opts.output_format
    shown = group_pids([ix.procs[p] + (p,) for p in ix.usable], opts.grouping)  # (a session: its path)
    ncs = opts.filter.ncs
    dev_ids = profile_ids([d for p in ix.usable for d in ix.devices.get(p, [])],
                          None if ncs is None else lambda nc: bool(ncs.mask(np.asarray([nc]))[0]))
    return [Job(i, p, fmt, target, work, ix.origin, ix.offsets.get(ix.instances.get(p, "")), opts.filter,
                opts.ignore_device_profile, opts.ignore_system_profile, opts.display_name,
                None if target is None else device_dir(target), checked=ix.checked.get(p),
                grouping=opts.grouping, group_pid=shown[i][0], group_label=shown[i][1],
                device_ids={d: dev_ids[d] for d in (ix.devices[p][0][2] if ix.devices.get(p) else []) if d in dev_ids},
                job=ix.jobs.get(p, ""))
            for i, p in enumerate(ix.usable)]


def _warn(warnings: list[tuple[str, str]], root: str, messages: list[str]) -> None:
    for m in messages:
        print(f"neuron-explorer: warning: {m}", file=sys.stderr)
        warnings.append((m, printable(root)))


def _listing(values, limit: int = 20) -> str:
    vals = [printable(str(v)) for v in values]
    more = f" (and {len(vals) - limit} more)" if len(vals) > limit else ""
    return ", ".join(vals[:limit]) + more if vals else "none"


def unmatched_instances(filt: ViewFilter, seen: set[str]) -> list[str]:
    """A warning for each --system-trace-filter-instance-id id that names no instance read, with
    the ids that exist (a typo must not pass for an empty workload)."""
    if filt.instances is None:
        return []
    return [f"--system-trace-filter-instance-id: {printable(i)} matches no instance; instances in the "
            f"capture: {_listing(sorted(seen))}" for i in sorted(filt.instances - seen)]


def unmatched_filters(filt: ViewFilter, results: list["ProcessResult"]) -> list[str]:
    """A warning when the core or event-type filter keeps no event of any process, naming the cores
    or types that the capture holds."""
    out = []
    if filt.ncs is not None:
        cores = sorted({c for r in results for c in r.present_cores})
        if not any(bool(filt.ncs.mask(np.asarray([c]))[0]) for c in cores):
            out.append(f"--system-trace-filter-neuron-core matches no event; cores in the capture: {_listing(cores)}")
    if filt.types is not None:
        types = sorted({t for r in results for t in r.present_types})
        if not set(types) & filt.types:
            out.append(f"--system-trace-filter-event-type matches no event; event types in the capture: "
                       f"{_listing(types)}")
    return out


def _convert_all(jobs: list["Job"], n_workers: int, prog: Progress) -> list["ProcessResult"]:
    """Every job's result, in job order: in this process, or on ``n_workers`` spawned workers."""
    results: list[ProcessResult] = []
    if n_workers > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=n_workers, mp_context=mp.get_context("spawn")) as ex:
            for r in ex.map(convert_process, jobs):
                results.append(r)
                prog.step()
    else:
        _within[0] = prog.within
        try:
            for j in jobs:
                results.append(convert_process(j))
                prog.step()
        finally:
            _within[0] = None
    return results


# Below this much ntrace.pb, starting workers (~0.5 s of imports each) costs more than it saves:
# measured on 2 cores, 2M events (140 MB) took 1.17 s with one worker and 2.02 s with two; 10M
# events (670 MB) 4.4 s and 3.0 s.
PARALLEL_MIN_BYTES = 256 << 20


def _workers(requested: int | None, paths: list[str]) -> int:
    if len(paths) < 2:
        return 1
    if requested is not None:
        return max(1, min(requested, len(paths)))
    size = 0
    for p in paths:
        try:
            size += os.path.getsize(os.path.join(p, "ntrace.pb"))
        except OSError:
            pass
    return min(os.cpu_count() or 1, len(paths)) if size >= PARALLEL_MIN_BYTES else 1


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
        report = _within[0]
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
