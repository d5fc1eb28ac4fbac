"""``view`` on a Dask distributed cluster (``--scheduler tcp://HOST:8786``) or with object storage
(``-d s3://...``, ``--output-file s3://...``): the same steps as ``pipeline.run``, each one a task.

Discovery, the output check, the index of each profile, the conversion of each profile and the
finalize step run on the cluster's workers (``DaskEngine``); this process only plans (clock
offsets, the jobs), draws the progress bar and prints the warnings, in the order a local run
prints them.  Without ``--scheduler`` the same tasks run here, one after another (``LocalEngine``):
that is how a local run reads or writes ``s3://``.  Plain local runs never come here, so they pay
for neither Dask nor the AWS SDK.

A worker that dies mid-task is replaced by the scheduler, which runs the task again elsewhere: a
conversion task writes only its own, deterministically named files, so the retry overwrites what
the dead attempt left.  The output appears whole or not at all: on a file system the dataset is
built in a private work area and renamed into place by the finalize task; on object storage the
completion marker is written last (``view.remote``).  See docs/scale-out.md and decisions 0046-0048.
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from typing import Any, Callable

from neuron_explorer.util.storage import StorageError, is_url

from . import tasks
from .pipeline import (
    DEFAULT_OUTPUTS,
    SUMMARIES,
    OutputError,
    ProcessResult,
    Progress,
    ViewError,
    ViewOptions,
    ViewResult,
    absorb,
    finish_index,
    make_jobs,
    new_index,
    unmatched_filters,
    unmatched_instances,
)


class ClusterError(Exception):
    """The cluster could not be used or lost the run (one line for the user; exit status 1)."""


class ClusterUsageError(ClusterError):
    """``--scheduler`` names no address a Dask client can use (a usage error: exit status 2)."""


SCHEMES = ("tcp://", "tls://", "ucx://", "inproc://")
_HOST = re.compile(r"^(?:\[[0-9A-Fa-f:.]+(?:%[\w.-]+)?\]|[A-Za-z0-9_.-]+)$")
EXAMPLE = "tcp://HOST:8786, e.g. tcp://10.0.0.5:8786 or tcp://[::1]:8786"


def check_scheduler(address: str) -> str:
    """``address`` when a Dask client can connect to it (``scheme://host:port``, an IPv6 host in
    brackets, port 1-65535), else ClusterUsageError naming what is wrong.  Checked before Dask is
    imported: a malformed address makes ``distributed.Client`` raise from its constructor and then
    block for a minute in its finalizer (distributed 2026.8)."""
    if address.startswith("ray://"):
        raise ClusterUsageError(f"--scheduler {address}: Ray is not supported; start a Dask scheduler "
                                "(dask scheduler) and pass tcp://HOST:8786 (docs/decisions/0047-dask-not-ray.md)")
    if not address.startswith(SCHEMES):
        raise ClusterUsageError(f"--scheduler {address!r}: expected a Dask scheduler address such as {EXAMPLE} "
                                "(or tls://...)")
    scheme, _, loc = address.partition("://")
    if scheme == "inproc":
        if not loc:
            raise ClusterUsageError(f"--scheduler {address}: an inproc:// address names a scheduler in this process")
        return address
    if loc.startswith("["):
        end = loc.find("]")
        if end < 0:
            raise ClusterUsageError(f"--scheduler {address}: unclosed '[' in the host; an IPv6 host goes in "
                                    f"brackets, {EXAMPLE}")
        host, sep, port = loc[:end + 1], loc[end + 1:end + 2], loc[end + 2:]
    elif loc.count(":") > 1:
        raise ClusterUsageError(f"--scheduler {address}: an IPv6 host goes in brackets, {EXAMPLE}")
    else:
        host, sep, port = loc.partition(":")
    if sep != ":":
        raise ClusterUsageError(f"--scheduler {address}: no port; expected {EXAMPLE}")
    if not host or not _HOST.match(host):
        raise ClusterUsageError(f"--scheduler {address}: {host!r} is not a host name or address; expected {EXAMPLE}")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ClusterUsageError(f"--scheduler {address}: port {port!r} is not a TCP port from 1 to 65535; "
                                f"expected {EXAMPLE}")
    return address


class LocalEngine:
    """The tasks on this machine (object storage without a cluster): in this process, or the
    per-profile ones on ``jobs`` spawned worker processes (``--jobs``, as a local run)."""

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = jobs or 1

    def call(self, fn: Callable, *args: Any) -> Any:
        return fn(*args)

    def map(self, fn: Callable, items: list, prog: Progress, *args: Any) -> list:
        out = []
        if self.jobs > 1 and len(items) > 1:
            import functools
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=min(self.jobs, len(items)), mp_context=mp.get_context("spawn")) as ex:
                for r in ex.map(functools.partial(_apply, fn, args), items):
                    out.append(r)
                    prog.step()
            return out
        for it in items:
            out.append(fn(it, *args))
            prog.step()
        return out

    def close(self) -> None:
        pass


def _apply(fn: Callable, args: tuple, item: Any) -> Any:
    return fn(item, *args)


class DaskEngine:
    """The tasks on a Dask distributed cluster.  Task keys carry the step and the item's number,
    so the scheduler's dashboard names what runs; ``pure=False``: every run computes anew."""

    def __init__(self, address: str) -> None:
        check_scheduler(address)
        try:
            from distributed import Client
        except ImportError as e:
            raise ClusterError(f"--scheduler needs dask's distributed scheduler "
                               f"(pip install 'dask[distributed]'): {e}") from None
        self.token = uuid.uuid4().hex[:8]
        try:
            # (the connect timeout is dask's: distributed.comm.timeouts.connect, 30 s by default)
            self.client = Client(address, set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise ClusterError(f"--scheduler {address}: cannot connect: {_line(e)}") from None

    def call(self, fn: Callable, *args: Any) -> Any:
        fut = self.client.submit(fn, *args, pure=False, key=f"neuron-explorer-{fn.__name__}-{self.token}")
        return _result(fut.result)

    def map(self, fn: Callable, items: list, prog: Progress, *args: Any) -> list:
        from distributed import as_completed

        futs = [self.client.submit(fn, it, *args, pure=False, key=f"neuron-explorer-{fn.__name__}-{i:07d}-{self.token}")
                for i, it in enumerate(items)]
        try:
            for f in as_completed(futs, loop=self.client.loop):
                if f.status == "error":
                    _result(f.result)
                prog.step()
            return _result(lambda: self.client.gather(futs))
        except BaseException:  # the run is over: free the cluster of the rest
            self.client.cancel(futs)
            raise

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # (closing a lost connection: nothing to do)
            pass


def _line(e: BaseException) -> str:
    return " ".join(str(e).split())[:400] or type(e).__name__


def _result(get: Callable[[], Any]) -> Any:
    """A task's result; a worker's failures become this run's errors (see ``tasks.TaskOSError``)."""
    try:
        return get()
    except tasks.TaskOSError as e:
        raise OutputError(e.output, e.reason) from None
    except (ViewError, StorageError, OutputError):
        raise
    except Exception as e:
        what = ("a worker died too many times running " if type(e).__name__ == "KilledWorker" else "") + _line(e)
        raise ClusterError(f"the cluster run failed: {what}") from None


def engine_for(scheduler: str | None, jobs: int | None = None) -> LocalEngine | DaskEngine:
    return DaskEngine(scheduler) if scheduler else LocalEngine(jobs)


def run(opts: ViewOptions, engine: LocalEngine | DaskEngine, endpoint: str | None = None) -> ViewResult:
    """``pipeline.run`` with every step that touches the captures or the output on ``engine``."""
    t_start = time.perf_counter()
    fmt = opts.output_format
    out = opts.output_file or DEFAULT_OUTPUTS.get(fmt)
    if out == "-" and isinstance(engine, DaskEngine):
        raise ViewError("--output-file -: a cluster's workers cannot write this terminal's standard output; "
                        "name a file on storage the workers share")
    if is_url(out) and fmt not in ("parquet",) + SUMMARIES:
        raise ViewError(f"--output-file {out}: object storage takes the parquet dataset; write {fmt} to a file")
    paths, found_warnings = engine.call(tasks.discover, opts.directory, endpoint)
    warnings: list[tuple[str, str]] = list(found_warnings)
    for msg, _ in warnings:
        print(f"neuron-explorer: warning: {msg}", file=sys.stderr)
    target = work = None
    if out is not None and fmt not in SUMMARIES:
        target, work = engine.call(tasks.prepare_output, out, fmt, paths, endpoint, opts.output_file is None)
    try:
        return _convert(opts, engine, endpoint, paths, warnings, target, work, t_start)
    finally:
        if work is not None:
            try:
                engine.call(tasks.cleanup, work)
            except Exception:  # (the cluster is gone: the work area is a hidden directory beside the output)
                pass


def _convert(opts: ViewOptions, engine: Any, endpoint: str | None, paths: list[str],
             warnings: list[tuple[str, str]], target: str | None, work: str | None, t_start: float) -> ViewResult:
    """Index, plan, convert and finalize (the part of ``run`` after the output is prepared)."""
    fmt = opts.output_format
    ix = new_index()
    recs = engine.map(tasks.index, paths, Progress(len(paths), "indexing", opts.progress, opts.progress_delay),
                      opts, len(paths), endpoint)
    for rec in recs:
        absorb(ix, rec, warnings)
    finish_index(ix)
    _warn(warnings, opts.directory, unmatched_instances(opts.filter, ix.all_instances))
    jobs = make_jobs(ix, opts, target, work)
    done = engine.map(tasks.convert, jobs, Progress(len(jobs), f"writing {fmt}", opts.progress, opts.progress_delay),
                      endpoint)
    results: list[ProcessResult] = [r for r, _ in done]
    for r in results:
        for w in r.warnings:
            print(f"neuron-explorer: skipped: {w[0]}", file=sys.stderr)
        warnings.extend(r.warnings)
    if not opts.ignore_system_profile:
        _warn(warnings, opts.directory, unmatched_filters(opts.filter, results))
    text = None
    if target is not None:
        engine.call(tasks.finalize, fmt, target, work, [r.piece for r in results if r.piece is not None],
                    (ix.origin, ix.offsets, warnings, opts.display_name), [k for _, ks in done for k in ks], endpoint)
    else:
        text = tasks.summary_text(fmt, results, warnings, ix)
    return ViewResult(target, warnings, ix.offsets, len(ix.usable), sum(r.events for r in results),
                      time.perf_counter() - t_start, text,
                      [f for r in results if r.piece is not None for f in r.piece.device_files])


def _warn(warnings: list[tuple[str, str]], root: str, messages: list[str]) -> None:
    from neuron_explorer.util.names import printable

    for m in messages:
        print(f"neuron-explorer: warning: {m}", file=sys.stderr)
        warnings.append((m, printable(root)))


def needed(opts: ViewOptions, scheduler: str | None) -> bool:
    """Whether a run goes through here: a cluster, or object storage on either side."""
    return bool(scheduler) or is_url(opts.directory) or is_url(opts.output_file)

