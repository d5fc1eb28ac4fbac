"""``view``'s one flow, whatever runs it: discover → check the output → index (clock alignment) →
plan → convert each process → assemble.  The steps that touch the captures or the output are tasks
(``view.tasks``) and an *engine* runs them where it will: this process, or spawned worker
processes (``LocalEngine``: every run on one machine, also one reading or writing ``s3://``), or a
Dask cluster's workers (``cluster.DaskEngine``).  This process plans (clock offsets, the jobs),
draws the progress bar and prints the warnings, in one order for every engine.

Only one process's data is in memory at a time per worker; the index pass keeps just the
collective timings needed to align clocks and find stragglers.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol

import numpy as np

from neuron_explorer.analysis import align, insights as insights_mod, jobs, summary as summary_mod
from neuron_explorer.analysis.filters import ViewFilter
from neuron_explorer.contracts.layout import parse_segment_name
from neuron_explorer.contracts.tracks import group_pids
from neuron_explorer.util.log import get_logger
from neuron_explorer.util.names import printable
from neuron_explorer.util.storage import is_url

from . import process, tasks
from .devices import profile_ids
from .options import DEFAULT_OUTPUTS, SUMMARIES, OutputError, ViewError, ViewOptions, ViewResult, os_reason
from .process import Job, ProcessResult, device_dir


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


def run(opts: ViewOptions, engine: Engine | None = None, endpoint: str | None = None) -> ViewResult:
    """Convert every profile under ``opts.directory`` (a directory, or an ``s3://`` prefix read
    through ``endpoint``) to the chosen output, or a summary text, with the steps on ``engine``
    (default: this machine, ``LocalEngine(opts.jobs)``).  The output is checked before any work,
    written beside itself and put in place only whole."""
    if engine is None:
        local = LocalEngine(opts.jobs)
        try:
            return run(opts, local, endpoint)
        finally:
            local.close()
    t_start = time.perf_counter()
    fmt = opts.output_format
    out = opts.output_file or DEFAULT_OUTPUTS.get(fmt)
    refuse_output(out, fmt, engine)
    warnings: list[tuple[str, str]] = []
    paths, found = engine.call(tasks.discover, opts.directory, endpoint)
    for msg, where in found:
        say(warnings, "warning", msg, where)
    with _writing(None):
        target, work = _prepare(engine, out, fmt, paths, endpoint, opts.output_file is None)
    # what the user is told was written: the name given, unless it was resolved elsewhere
    shown = out if engine.local and not is_url(out) else target
    try:
        ix = index(engine, paths, opts, endpoint, warnings)
        with _writing(shown):
            results = convert(engine, ix, opts, target, work, endpoint, warnings)
    finally:
        if work is not None:
            try:
                engine.call(tasks.cleanup, work)
            except Exception:  # (a lost cluster: the work area is a hidden directory beside the output)
                pass
    text = None if target is not None else summary_text(fmt, results, warnings, ix, opts)
    return ViewResult(shown if target is not None else None, warnings, ix.offsets, len(ix.usable),
                      sum(r.events for r in results), time.perf_counter() - t_start, text,
                      [f for r in results if r.piece is not None for f in r.piece.device_files])


def refuse_output(out: str | None, fmt: str, engine: Engine) -> None:
    """The outputs no engine or storage can write, refused before any work (ViewError)."""
    if out == "-" and not engine.local:
        raise ViewError("--output-file -: a cluster's workers cannot write this terminal's standard output; "
                        "name a file on storage the workers share")
    if is_url(out) and fmt not in ("parquet",) + SUMMARIES:
        raise ViewError(f"--output-file {out}: object storage takes the parquet dataset; write {fmt} to a file")


def _prepare(engine: Engine, out: str | None, fmt: str, paths: list[str], endpoint: str | None,
             default: bool) -> tuple[str | None, str | None]:
    """(target, work area) of a file output, checked and made by the engine that writes it; a
    summary's file (the caller writes the text) is only checked here, and has neither."""
    if out is None or (fmt in SUMMARIES and is_url(out)):
        return None, None
    if fmt in SUMMARIES:
        tasks.check_output(out, "summary", paths, default)
        return None, None
    return engine.call(tasks.prepare_output, out, fmt, paths, endpoint, default)


@contextlib.contextmanager
def _writing(output: str | None) -> Iterator[None]:
    """A failed write, in this process or a task's, as the run's OutputError naming ``output``
    (None: the name the task gave)."""
    try:
        yield
    except tasks.TaskOSError as e:
        raise OutputError(output or e.output, e.reason) from None
    except OSError as e:
        if output is None:
            raise
        raise OutputError(output, os_reason(e)) from None


def say(warnings: list[tuple[str, str]], kind: str, message: str, where: str) -> None:
    """The one place a run reports a problem: a line on stderr (``neuron-explorer: warning: ...``,
    or ``skipped: ...`` for a profile left out) and a (message, path) entry of its result
    (``where`` is already printable)."""
    get_logger(__name__).warning(f"neuron-explorer: {kind}: {message}")
    warnings.append((message, where))


def summary_text(fmt: str, results: list[ProcessResult], warnings: list[tuple[str, str]], ix: RunIndex,
                 opts: ViewOptions | None = None) -> str:
    """The summary of a run (built here: it is small)."""
    summ = summary_doc(results, warnings, ix, opts)
    return summary_mod.render_text(summ) if fmt == "summary-text" else summary_mod.render_json(summ)


def summary_doc(results: list[ProcessResult], warnings: list[tuple[str, str]], ix: RunIndex,
                opts: ViewOptions | None = None) -> dict[str, Any]:
    """The summary-json document (docs/summary.md): the per-process summaries (summary formats
    only), the stragglers, and the steps, utilisation and insights reduced across ranks
    (``analysis.insights``) from the step tables each conversion made."""
    summ = summary_mod.build([r.summary for r in results if r.summary is not None], [m for m, _ in warnings],
                             ix.offsets, align.stragglers(ix.stragglers, ix.offsets, ix.collectives))
    peak, note = _peak(opts)
    summ.update(insights_mod.analyse([r.steps for r in results if r.steps is not None], peak, note))
    return summ


def _peak(opts: ViewOptions | None) -> tuple[float | None, str]:
    """``--peak-flops``: a number, or ``measure`` (this machine's matrix multiply, measured now)."""
    v = opts.peak_flops if opts is not None else None
    if v is None:
        return None, ""
    if v == "measure":
        return insights_mod.measure_peak_flops(), "measured here (float32 matmul, --peak-flops measure)"
    return float(v), "--peak-flops"


def index(engine: Engine, paths: list[str], opts: ViewOptions, endpoint: str | None,
          warnings: list[tuple[str, str]]) -> RunIndex:
    """Pass 1: instances, collective timings and the time origin; damaged profiles and filters that
    name no instance are reported here, in path order, and only the collective timings stay in
    memory."""
    ix = new_index()
    prog = Progress(len(paths), "indexing", opts.progress, opts.progress_delay)
    for rec in engine.map(tasks.index, paths, prog, opts, len(paths), endpoint):
        for kind, msg, where in absorb(ix, rec):
            say(warnings, kind, msg, where)
    finish_index(ix)
    for m in unmatched_instances(opts.filter, ix.all_instances):
        say(warnings, "warning", m, printable(opts.directory))
    return ix


def convert(engine: Engine, ix: RunIndex, opts: ViewOptions, target: str | None, work: str | None,
            endpoint: str | None, warnings: list[tuple[str, str]]) -> list[ProcessResult]:
    """Pass 2: one process at a time per worker, then the pieces joined in process order into
    ``target`` (a summary has none: its results are returned for the text)."""
    fmt = opts.output_format
    todo = make_jobs(ix, opts, target, work)
    prog = Progress(len(todo), f"writing {fmt}", opts.progress, opts.progress_delay)
    done = list(engine.map(tasks.convert, todo, prog, endpoint))
    results = [r for r, _ in done]
    for r in results:
        for msg, where in r.warnings:
            say(warnings, "skipped", msg, where)
    if not opts.ignore_system_profile:
        for m in unmatched_filters(opts.filter, results):
            say(warnings, "warning", m, printable(opts.directory))
    if target is not None:
        doc = summary_doc(results, warnings, ix, opts) if fmt == "parquet" else None
        engine.call(tasks.finalize, fmt, target, work, [r.piece for r in results if r.piece is not None],
                    (ix.origin, ix.offsets, warnings, opts.display_name, doc), [k for _, ks in done for k in ks],
                    endpoint)
    return results


def absorb(ix: RunIndex, rec: dict) -> list[tuple[str, str, str]]:
    """Add one profile's ``process.index_one`` record to the run's index; returns its problems,
    (kind, message, printable path), in the order a single pass meets them (the records are
    absorbed in path order).  Every profile read feeds the clock alignment; only those the filter
    keeps are converted."""
    p = rec["path"]
    where = printable(p)
    if rec["instance"] is None:
        return [("skipped", rec["skipped"], where)]
    problems = [("warning", w, where) for w in rec["warnings"]]
    ix.all_instances.add(rec["instance"])
    if rec["skipped"] is not None:
        return problems + [("skipped", rec["skipped"], where)]
    if "times" not in rec:
        return problems
    usable = rec["usable"]
    ix.timings.append((p if usable else None, rec["instance"], rec["life"], rec["times"], rec["pairs"],
                       rec["proc"][2] if usable else -1))
    if not usable:
        return problems
    ix.usable.append(p)
    ix.instances[p] = rec["instance"]
    ix.checked[p] = rec["checked"]
    ix.procs[p] = rec["proc"]
    ix.devices[p] = rec["devices"]
    if rec["start"] is not None:
        ix.origin = rec["start"] if not ix.origin else min(ix.origin, rec["start"])
    return problems


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


def make_jobs(ix: RunIndex, opts: ViewOptions, target: str | None, work: str | None) -> list[Job]:
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


def unmatched_filters(filt: ViewFilter, results: list[ProcessResult]) -> list[str]:
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


class Engine(Protocol):
    """Where a run's tasks execute.  ``call`` runs one task and returns its result; ``map`` runs
    one task per item and yields the results in item order, stepping ``prog`` as tasks finish.
    ``local``: the tasks run on this machine, where an output name means what the user typed."""

    local: bool

    def call(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def map(self, fn: Callable[..., Any], items: list, prog: Progress, *args: Any) -> Iterable[Any]: ...

    def close(self) -> None: ...


# Below this much ntrace.pb, starting workers (~0.5 s of imports each) costs more than it saves:
# measured on 2 cores, 2M events (140 MB) took 1.17 s with one worker and 2.02 s with two; 10M
# events (670 MB) 4.4 s and 3.0 s.
PARALLEL_MIN_BYTES = 256 << 20


def workers(requested: int | None, paths: list[str]) -> int:
    """How many worker processes a map over ``paths`` wants: ``--jobs`` (at most one a profile),
    else one per core when the captures are large enough to pay for starting them."""
    if len(paths) < 2:
        return 1
    if requested is not None:
        return max(1, min(requested, len(paths)))
    size = 0
    for p in paths:
        try:  # the system trace: ntrace.pb and its event segments (decision 0111)
            size += sum(os.path.getsize(os.path.join(p, n)) for n in os.listdir(p)
                        if n == "ntrace.pb" or parse_segment_name(n) is not None)
        except OSError:  # (also an s3:// session: its tasks stage it, one at a time unless --jobs says)
            pass
    return min(os.cpu_count() or 1, len(paths)) if size >= PARALLEL_MIN_BYTES else 1


class LocalEngine:
    """The tasks on this machine: in this process one after another (a conversion then reports its
    progress chunk by chunk), or a map's tasks on spawned worker processes when ``workers`` says
    so for ``jobs`` (``--jobs``; None: by the captures' size).  The pool is started by the first
    map that wants one and serves the rest of the run."""

    local = True

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = jobs
        self.pool: Any = None

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def map(self, fn: Callable[..., Any], items: list, prog: Progress, *args: Any) -> Iterator[Any]:
        n = workers(self.jobs, [it if isinstance(it, str) else it.path for it in items])
        if n > 1:
            if self.pool is None:
                import multiprocessing as mp
                from concurrent.futures import ProcessPoolExecutor

                self.pool = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"))
            from concurrent.futures import wait

            futures = [self.pool.submit(fn, it, *args) for it in items]
            try:
                for f in futures:
                    r = f.result()
                    prog.step()
                    yield r
            finally:
                # a failed (or abandoned) map ends only once none of its tasks runs any more: the
                # caller then removes the work area, which a task still writing would make again
                for f in futures:
                    f.cancel()
                wait(futures)
            return
        process.within[0] = prog.within
        try:
            for it in items:
                r = fn(it, *args)
                prog.step()
                yield r
        finally:
            process.within[0] = None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None


