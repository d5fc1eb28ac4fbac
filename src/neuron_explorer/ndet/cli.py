"""``neuron-det``: read the NDET logs (or Flight Recorder dumps) of a job, say what went wrong and who
caused it, and write a Chrome trace of the events leading up to it.

Exit status: 0 when no errors were detected; 1 when errors were found; 2 for usage errors or when no
log could be read; 3 when the logs read were clean but some files were skipped as corrupt.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..runtime.config import IndexRanges
from . import analysis
from . import format as fmt
from . import sources
from .trace import TraceWriter

EXAMPLES = """\
examples:
  NEURON_RT_DBG_NDET_FLUSH_USEC=1000000 NEURON_RT_DBG_NDET_LOG_LOCATION=/shared/ndet torchrun ... train.py
  neuron-det --log-prefix /shared/ndet -o trace.json
  neuron-det --log-prefix /shared/ndet/ndet_20260102 --ranks 0-3,7 --show-dependencies
  neuron-det --log-prefix /tmp/fr_dumps/fr_     # PyTorch Flight Recorder dumps fr_0 ... fr_N
"""


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
    p.add_argument("--log-prefix", required=True,
                   help="the directory or file-name prefix of the NDET logs (e.g. $NEURON_RT_DBG_NDET_LOG_LOCATION "
                        "or $NEURON_RT_DBG_NDET_LOG_LOCATION/ndet), or of Flight Recorder dumps")
    p.add_argument("-o", "--output-file", default="trace.json", help="Chrome trace JSON to write (default trace.json)")
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    t_start = time.perf_counter()
    prefix = args.log_prefix
    from_dir = os.path.isdir(prefix)
    paths = [p for p in sources.discover(prefix) if sources.is_candidate(p, from_dir)]
    out_abs = os.path.abspath(args.output_file)
    paths = [p for p in paths if os.path.abspath(p) != out_abs]
    if not paths:
        print(f"neuron-det: error: no NDET logs or Flight Recorder dumps match --log-prefix {prefix!r}", file=sys.stderr)
        return 2

    index = analysis.CollectiveIndex()
    summaries: list[analysis.LogSummary] = []
    skipped: list[str] = []
    ok_paths: list[str] = []
    for path in paths:
        try:
            log = sources.load(path)
        except fmt.LogFormatError as e:
            skipped.append(str(e))
            print(f"neuron-det: warning: skipping {e}", file=sys.stderr)
            continue
        if args.ranks is not None and log.rank not in args.ranks:
            continue
        summaries.append(analysis.scan(log, index, max_findings=args.max_findings))
        log.drop_records()
        ok_paths.append(path)
    if not summaries:
        what = "no log could be read" if skipped else "no log matches --ranks"
        print(f"neuron-det: error: {what}", file=sys.stderr)
        return 2
    order = sorted(range(len(summaries)), key=lambda i: (summaries[i].log.rank, summaries[i].log.start_wall_ns))
    summaries = [summaries[i] for i in order]
    ok_paths = [ok_paths[i] for i in order]
    base = min(s.log.start_wall_ns for s in summaries)
    culprits, notes = analysis.verdict(summaries, index)
    clean = analysis.is_clean(summaries, culprits)

    # -- the trace: a second pass, one log at a time ------------------------------------------
    out_dir = os.path.dirname(out_abs)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    tmp = out_abs + ".tmp"
    with open(tmp, "wb") as f:
        tw = TraceWriter(f, base, args.show_dependencies, index, max_events=max(0, args.max_trace_events))
        tw.ranks_present = {(s.log.source, s.log.rank) for s in summaries}
        for pid, (s, path) in enumerate(zip(summaries, ok_paths), start=1):
            try:
                log = sources.load(path)
            except fmt.LogFormatError as e:  # rewritten or removed since the first pass
                print(f"neuron-det: warning: {e} (left out of the trace)", file=sys.stderr)
                continue
            tw.add_log(pid, log)
            log.drop_records()
        tw.close({"tool": "neuron-det", "log_prefix": prefix, "base_wall_ns": base,
                  "logs": [s.log.name for s in summaries], "skipped": skipped,
                  "verdict": [c.text for c in culprits], "clean": clean})
    os.replace(tmp, out_abs)

    # -- the console -----------------------------------------------------------------------------
    out = sys.stdout
    for s in summaries:
        if not s.findings:
            continue
        lg = s.log
        more = s.num_errors - len(s.findings)
        print(f"{lg.label} ({lg.name}): {s.num_errors} finding{'s' if s.num_errors != 1 else ''}", file=out)
        for fd in s.findings:
            print(fd.line(base), file=out)
        if more > 0:
            print(f"... and {more} more (see {args.output_file})", file=out)
    if culprits:
        print("root cause (earliest first):", file=out)
        for c in culprits:
            print(f"  {c.text}", file=out)
    if notes and not clean:
        print("how each process ended:", file=out)
        for n in notes:
            print(f"  {n}", file=out)
    if clean:
        print("no errors detected ✓", file=out)
    took = time.perf_counter() - t_start
    print(f"neuron-det: {len(summaries)} log{'s' if len(summaries) != 1 else ''} analysed"
          f"{f', {len(skipped)} skipped' if skipped else ''} in {took:.2f} s; trace written to {args.output_file} "
          f"({tw.events} events)", file=sys.stderr)
    if not clean:
        return 1
    return 3 if skipped else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
