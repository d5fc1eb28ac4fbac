# PYTHON_ARGCOMPLETE_OK (shell completion: docs/commands.md)
"""``neuron-det``: read the NDET logs (or Flight Recorder dumps) of a job, say what went wrong and who
caused it, and write a Chrome trace of the events leading up to it.

Exit status: 0 when no errors were detected; 1 when errors were found or a file was skipped (named on
stderr); 2 for usage errors or when no log could be read.  Logs of different jobs in one place (the
default location is /tmp) are grouped by job and each job is analysed on its own.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from dataclasses import dataclass

from neuron_explorer import __version__
from neuron_explorer.contracts import ndet_log as fmt
from neuron_explorer.util.atomic import AtomicFile, replaceable
from neuron_explorer.util.cliargs import add_version, complete
from neuron_explorer.util.log import get_logger
from neuron_explorer.util.ranges import IndexRanges

from . import analysis, sources, verdict as rules
from .trace import TraceWriter

EXAMPLES = """\
examples:
  NEURON_RT_DBG_NDET_FLUSH_USEC=1000000 NEURON_RT_DBG_NDET_LOG_LOCATION=/shared/ndet torchrun ... train.py
  neuron-det --log-prefix /shared/ndet -o trace.json
  neuron-det --log-prefix /shared/ndet/ndet_20260102 --ranks 0-3,7 --show-dependencies
  neuron-det --log-prefix /tmp/fr_dumps/fr_     # PyTorch Flight Recorder dumps fr_0 ... fr_N
"""


DEFAULT_OUTPUT = "trace.json"


def default_output_refusal(path: str) -> str | None:
    """Why the default trace file ``path`` (no ``-o``) must not be replaced: a ``trace.json`` in
    the current directory may well be another tool's (``torch.profiler`` writes that name). It is
    replaced only when it is missing, not a regular file (a FIFO is written through), or carries
    the mark of a trace neuron-det wrote: the rule ``view`` applies to an existing output
    (``util.atomic.replaceable``).  A name given with ``-o`` is the user's choice."""
    from neuron_explorer.exporters.chrome_trace import written_by

    def ours(p: str) -> bool:
        try:
            regular = stat.S_ISREG(os.stat(p).st_mode)
        except OSError:
            return False  # a dangling symlink: not ours to write through
        return not regular or written_by(p, "neuron-det")

    if replaceable(path, ours):
        return None
    return (f"{path} exists and was not written by neuron-det (another tool's trace?); name the trace with "
            f"-o FILE, or move {path} away")


def parse_ranks(value: str) -> IndexRanges:
    """``0``, ``0,2,4``, ``0-3`` or mixes, kept as ranges (``0-9999999`` costs two numbers, not a set
    of ten million); raises ArgumentTypeError naming the accepted forms."""
    try:
        return IndexRanges.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"--ranks {value!r}: bad part {str(e)!r}; accepted: a rank (0), a list (0,2,4), a range (0-3) or a mix"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="neuron-det",
        description="Aggregate NDET execution logs (ndet_*) or PyTorch Flight Recorder dumps, report errors "
                    "and the rank that caused them, and write a Chrome trace (chrome://tracing).",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_version(p, "neuron-det", __version__)
    p.add_argument("--log-prefix", required=True,
                   help="the directory or file-name prefix of the NDET logs (e.g. $NEURON_RT_DBG_NDET_LOG_LOCATION "
                        "or $NEURON_RT_DBG_NDET_LOG_LOCATION/ndet), or of Flight Recorder dumps")
    p.add_argument("-o", "--output-file", default=None,
                   help=f"Chrome trace JSON to write (default {DEFAULT_OUTPUT}: replaced only if neuron-det wrote it)")
    p.add_argument("--ranks", type=parse_ranks, default=None,
                   help="keep only these collective ranks, e.g. 0,1 or 0-3,8")
    p.add_argument("--show-dependencies", action="store_true",
                   help="draw arrows: execution -> the collectives it issued, and across ranks from the rank "
                        "every other rank waited for")
    p.add_argument("--max-trace-events", type=int, default=20000, metavar="N",
                   help="records per log in the trace (the last N, plus every error and in-flight record; "
                        "default 20000)")
    p.add_argument("--max-findings", type=int, default=20, metavar="N",
                   help="finding lines printed per log (default 20)")
    return p


def _warn(msg: str) -> None:
    if _SHOWN:
        msg = msg.replace(_SHOWN[0], _SHOWN[1])
    get_logger(__name__).warning(f"neuron-det: warning: {msg}")


def _peek_all(paths: list[str], ranks: set[int] | None, skipped: list[str]) -> list[sources.RankLog]:
    """Every readable log's identity (headers only), filtered by --ranks; the rest named and skipped."""
    logs = []
    for path in paths:
        try:
            lg = sources.peek(path)
        except fmt.LogFormatError as e:
            skipped.append(str(e))
            _warn(f"skipping {e}")
            continue
        if ranks is None or lg.rank in ranks:
            logs.append(lg)
    return logs


@dataclass
class JobResult:
    job: analysis.Job
    summaries: list[analysis.LogSummary]
    index: analysis.CollectiveIndex
    culprits: list[rules.Culprit]
    notes: list[str]
    clean: bool


def _analyse(job: analysis.Job, max_findings: int, skipped: list[str]) -> JobResult | None:
    """Scan one job's logs (one at a time in memory) and give its verdict; None if none was readable."""
    index = analysis.CollectiveIndex()
    summaries: list[analysis.LogSummary] = []
    for lg in job.logs:
        try:
            log = sources.load(lg.path)
        except fmt.LogFormatError as e:
            skipped.append(str(e))
            _warn(f"skipping {e}")
            continue
        summaries.append(analysis.scan(log, index, max_findings=max_findings))
        log.drop_records()
    if not summaries:
        return None
    summaries.sort(key=lambda s: (s.log.rank, s.log.start_wall_ns))
    culprits, notes = rules.verdict(summaries, index)
    return JobResult(job, summaries, index, culprits, notes, rules.is_clean(summaries, culprits))


def _write_trace(out_abs: str, results: list[JobResult], base: int, args: argparse.Namespace,
                 skipped: list[str]) -> int:
    """The Chrome trace: a second pass, one log at a time; returns the number of events."""
    out_dir = os.path.dirname(out_abs)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    many = len(results) > 1
    # the user names the trace file: replace only a regular file; /dev/null or a FIFO is written through
    af = AtomicFile(out_abs, output=True)
    try:
        tw = TraceWriter(af.f, base, args.show_dependencies, results[0].index, max_events=max(0, args.max_trace_events))
        pid = 0
        for n, res in enumerate(results, start=1):
            tw.index = res.index
            tw.ranks_present = {(s.log.source, s.log.rank) for s in res.summaries}
            tw.flow_prefix = f"j{n}" if many else ""
            tw.process_prefix = f"job {n}: " if many else ""
            for s in res.summaries:
                pid += 1
                try:
                    log = sources.load(s.log.path)
                except fmt.LogFormatError as e:  # rewritten or removed since the first pass
                    _warn(f"{e} (left out of the trace)")
                    continue
                tw.add_log(pid, log)
                log.drop_records()
        tw.close({"tool": "neuron-det", "log_prefix": args.log_prefix, "base_wall_ns": base,
                  "logs": [s.log.name for r in results for s in r.summaries], "skipped": skipped,
                  "jobs": [{"job": n, "describe": r.job.describe(), "logs": [s.log.name for s in r.summaries],
                            "verdict": [c.text for c in r.culprits], "clean": r.clean}
                           for n, r in enumerate(results, start=1)],
                  "verdict": [c.text for r in results for c in r.culprits], "clean": all(r.clean for r in results)})
        af.commit()
    except BaseException:
        af.abort()
        raise
    return tw.events


def _print_job(res: JobResult, base: int, output_file: str, out) -> None:
    for s in res.summaries:
        if not s.findings:
            continue
        lg = s.log
        more = s.num_errors - len(s.findings)
        print(f"{lg.label} ({lg.name}): {s.num_errors} finding{'s' if s.num_errors != 1 else ''}", file=out)
        for fd in s.findings:
            print(fd.line(base), file=out)
        if more > 0:
            print(f"... and {more} more (see {output_file})", file=out)
    if res.culprits:
        print("root cause (earliest first):", file=out)
        for c in res.culprits:
            print(f"  {c.text}", file=out)
    if res.notes and not res.clean:
        print("how each process ended:", file=out)
        for n in res.notes:
            print(f"  {n}", file=out)
    if res.clean:
        print("no errors detected ✓", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    complete(parser)
    args = parser.parse_args(argv)
    args.default_output = args.output_file is None
    if args.default_output:
        args.output_file = DEFAULT_OUTPUT
    if not args.log_prefix.startswith("s3://"):
        return _run(args, args.log_prefix, os.path.isdir(args.log_prefix), time.perf_counter())
    return _run_url(args)


def _run_url(args: argparse.Namespace) -> int:
    """``--log-prefix s3://bucket/prefix``: the matching objects copied to a private directory
    (endpoint: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL), analysed there, named by their URLs."""
    import shutil

    from neuron_explorer.contracts.env import ConfigError, s3_endpoint
    from neuron_explorer.util.atomic import staging_dir
    from neuron_explorer.util.storage import StorageError

    t_start = time.perf_counter()
    root = staging_dir("neuron-det-s3.")  # (removed by the next run if this one is killed)
    tmp = os.path.join(root, "logs")  # (only the logs: the owner file stays outside)
    try:
        os.mkdir(tmp)
        try:
            local, from_dir = sources.stage_url(args.log_prefix, tmp, s3_endpoint())
        except (StorageError, ConfigError) as e:
            get_logger(__name__).error(f"neuron-det: error: {e}")
            return 2
        _SHOWN[:] = [tmp, args.log_prefix.rstrip("/") if from_dir else args.log_prefix.rpartition("/")[0]]
        return _run(args, local, from_dir, t_start)
    finally:
        _SHOWN[:] = []
        shutil.rmtree(root, ignore_errors=True)


# while reading object storage: (staging directory, the URL it stands for) in what is printed
_SHOWN: list[str] = []


def _run(args: argparse.Namespace, prefix: str, from_dir: bool, t_start: float) -> int:
    paths = [p for p in sources.discover(prefix) if sources.is_candidate(p, from_dir)]
    out_abs = os.path.abspath(args.output_file)
    paths = [p for p in paths if os.path.abspath(p) != out_abs]
    if not paths:
        get_logger(__name__).error("neuron-det: error: no NDET logs or Flight Recorder dumps match --log-prefix "
                                   f"{args.log_prefix!r}")
        return 2
    refusal = default_output_refusal(args.output_file) if getattr(args, "default_output", False) else None
    if refusal is not None:  # (before any log is read: nothing is written)
        get_logger(__name__).error(f"neuron-det: error: {refusal}")
        return 2

    skipped: list[str] = []
    jobs = analysis.group_jobs(_peek_all(paths, args.ranks, skipped))
    results = [r for r in (_analyse(job, args.max_findings, skipped) for job in jobs) if r is not None]
    if not results:
        what = "no log could be read" if skipped else "no log matches --ranks"
        get_logger(__name__).error(f"neuron-det: error: {what}")
        return 2
    base = min(s.log.start_wall_ns for r in results for s in r.summaries)
    events = _write_trace(out_abs, results, base, args, skipped)

    out = sys.stdout
    if len(results) > 1:
        print(f"{len(results)} jobs found in {args.log_prefix} (logs grouped by the job id each process records, then "
              "by time); each is analysed on its own:", file=out)
        for n, r in enumerate(results, start=1):
            print(f"  job {n}: {r.job.describe()}", file=out)
    for n, r in enumerate(results, start=1):
        dup = r.job.duplicate_ranks()
        if dup:
            _warn(f"job {n} has more than one log for rank{'s' if len(dup) > 1 else ''} "
                  f"{', '.join(map(str, dup))}: logs of jobs started without MASTER_ADDR/MASTER_PORT at the same "
                  "time cannot be told apart; give each job its own --log-prefix")
        if len(results) > 1:
            print(f"== job {n}: {r.job.describe()}", file=out)
        _print_job(r, base, args.output_file, out)
    nlogs = sum(len(r.summaries) for r in results)
    took = time.perf_counter() - t_start
    get_logger(__name__).info(f"neuron-det: {nlogs} log{'s' if nlogs != 1 else ''} analysed"
                              f"{f' in {len(results)} jobs' if len(results) > 1 else ''}"
                              f"{f', {len(skipped)} skipped' if skipped else ''} in {took:.2f} s; "
                              f"trace written to {args.output_file} ({events} events)")
    return 0 if all(r.clean for r in results) and not skipped else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
