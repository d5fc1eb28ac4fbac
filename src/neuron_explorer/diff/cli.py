"""``neuron-explorer diff BASELINE CANDIDATE``: the flags, the run and the exit status.

Exit status (docs/diff.md): 0 compared (and the gate, if asked, passed); 1 ``--fail-if-slower``: the
step time got slower by more than PCT with confidence; 2 a usage error or an input that cannot be
read at all; 3 compared and the gate did not fail, but something was skipped or the gate could not
be evaluated (the warnings say what).
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack

from neuron_explorer.analysis import compare as cmp
from neuron_explorer.util import alloc
from neuron_explorer.util.atomic import atomic_write
from neuron_explorer.util.cliargs import UsageError, prog_name

EXIT_OK, EXIT_SLOWER, EXIT_USAGE, EXIT_SKIPPED = 0, 1, 2, 3

EXAMPLES = """\
examples:
  neuron-explorer diff before_parquet after_parquet            # two view outputs
  neuron-explorer diff ./capture-before ./capture-after         # two capture directories (converted first)
  neuron-explorer diff before after --format markdown > comment.md
  neuron-explorer diff before after --format json --output-file diff.json
  neuron-explorer diff before after --fail-if-slower 5          # CI: exit 1 if >5% slower with confidence
  neuron-explorer diff s3://bucket/run1 s3://bucket/run2 --scheduler tcp://head:8786 --work-dir /shared/tmp

exit status: 0 compared (gate passed); 1 slower than --fail-if-slower with confidence;
             2 usage error or unreadable input; 3 compared but something was skipped or the gate
             could not be evaluated (see the warnings)
"""


def _pct(value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number (a percentage, e.g. 5)") from None
    if not (0 <= v < 1e6):
        raise argparse.ArgumentTypeError(f"{value!r} is out of range (0 or more)")
    return v


def _ns(value: str) -> int:
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer number of nanoseconds") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is negative")
    return v


def add_diff_parser(sub) -> None:
    d = sub.add_parser("diff", help="compare two profiles: what got faster or slower, and is it real",
                       description="Compare BASELINE and CANDIDATE (capture directories or view Parquet outputs, "
                                   "local or s3://): steps, graphs, collectives, regions, stragglers and memory, each "
                                   "with a bootstrap 95%% interval and a verdict only where the change is real.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("baseline", help="the profile before the change")
    d.add_argument("candidate", help="the profile after the change")
    d.add_argument("--format", choices=("table", "json", "markdown"), default="table",
                   help="table (terminal, default), json (docs/diff.md schema) or markdown (a PR comment)")
    d.add_argument("--output-file", default=None, help="write there instead of standard output")
    d.add_argument("--all", action="store_true", help="table/markdown: show every aligned row, not only changes")
    d.add_argument("--fail-if-slower", type=_pct, default=None, metavar="PCT",
                   help="exit 1 when the step time got slower by more than PCT percent with 95%% confidence")
    d.add_argument("--min-change", type=_pct, default=cmp.Thresholds.min_change_pct, metavar="PCT",
                   help="smallest change given a verdict, in percent of the baseline median "
                        f"(default {cmp.Thresholds.min_change_pct:g})")
    d.add_argument("--min-change-ns", type=_ns, default=cmp.Thresholds.min_change_ns, metavar="NS",
                   help=f"smallest change given a verdict, in ns (default {cmp.Thresholds.min_change_ns})")
    d.add_argument("--seed", type=_ns, default=0, help="bootstrap seed (default 0: the same numbers every run)")
    d.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="convert capture inputs on a Dask cluster (as view --scheduler); give --work-dir on "
                        "storage the workers share")
    d.add_argument("--work-dir", default=None,
                   help="where converted captures are kept during the run (default: the system temporary directory)")
    d.add_argument("--endpoint-url", default=None, help="S3 endpoint for s3:// inputs (as view)")
    d.add_argument("-j", "--jobs", type=int, default=None,
                   help="worker processes converting captures and reading the profiles' files (default: one)")


def _reader(stack: ExitStack, args: argparse.Namespace):
    """The engine that reads the events files of both sides (docs/decisions/0148-diff-on-workers.md):
    the Dask cluster's workers with ``--scheduler`` (the datasets must be on storage they share:
    ``--work-dir`` for converted captures and ``s3://`` ones), worker processes with ``-j N`` (N > 1),
    else None (this process).  Closed with ``stack``."""
    if args.scheduler is None and not (args.jobs and args.jobs > 1):
        return None
    from neuron_explorer.view import cluster

    engine = cluster.engine_for(args.scheduler, args.jobs)
    stack.callback(engine.close)
    return engine


def _lost_read(role: str, path: str, e: BaseException) -> int:
    """The cluster (or a worker process) lost a side's read: one line, the usage exit status."""
    print(f"{prog_name()}: error: {role} {path}: cannot read: {' '.join(str(e).split())[:300]}", file=sys.stderr)
    return EXIT_USAGE


def diff_command(args: argparse.Namespace) -> int:
    from neuron_explorer.contracts.env import ConfigError, s3_endpoint

    from . import dataset, inputs, render, report

    th = cmp.Thresholds(min_change_pct=args.min_change, min_change_ns=args.min_change_ns, seed=args.seed)
    try:
        endpoint = s3_endpoint(args.endpoint_url)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    if args.scheduler is not None:
        from neuron_explorer.view.cluster import ClusterUsageError, check_scheduler

        try:
            check_scheduler(args.scheduler)
        except ClusterUsageError as e:
            raise UsageError(str(e)) from None
    with ExitStack() as stack:
        alloc.keep_freed_memory()  # (a file's temporaries reused, not faulted in anew: decision 0192)
        stack.enter_context(alloc.small_pages())  # (GBs of arrays at scale: decision 0168)
        sides = []
        notes: list[str] = []
        lost: tuple[type[BaseException], ...] = ()
        if args.scheduler is not None or (args.jobs and args.jobs > 1):
            from concurrent.futures.process import BrokenProcessPool

            from neuron_explorer.view.cluster import ClusterError

            lost = (ClusterError, BrokenProcessPool)
        try:
            reader = _reader(stack, args)
        except lost as e:  # a cluster that cannot be reached: one line
            print(f"{prog_name()}: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        # both sides' files asked for before either is merged: on a cluster the workers read the
        # candidate while this process merges the baseline (decision 0179)
        opened = []
        for role, path in (("baseline", args.baseline), ("candidate", args.candidate)):
            try:
                r = inputs.resolve(path, stack, args.scheduler, endpoint, args.jobs, args.work_dir)
                opened.append((role, path, r, dataset.open_side(r.dataset, reader)))
            except (inputs.InputError, dataset.DatasetError) as e:
                print(f"{prog_name()}: error: {role} {e}", file=sys.stderr)
                return EXIT_USAGE
            except lost as e:
                return _lost_read(role, path, e)
        for role, path, r, reading in opened:
            try:
                side = reading.read()
            except dataset.DatasetError as e:
                print(f"{prog_name()}: error: {role} {e}", file=sys.stderr)
                return EXIT_USAGE
            except lost as e:
                return _lost_read(role, path, e)
            side.path = path
            notes += [f"{role}: {w}" for w in r.warnings]
            for n in side.notes:  # (a slower read, the same document: not one of its warnings)
                print(f"{prog_name()}: warning: {role}: {n}", file=sys.stderr)
            sides.append(side)
        doc = report.build(sides[0], sides[1], th, gate_pct=args.fail_if_slower)
    doc["warnings"] = notes + doc["warnings"]
    gate = doc.get("gate")
    if gate and gate["failed"] is None:
        doc["warnings"].append(f"--fail-if-slower could not be evaluated: {gate['reason']}")
    if args.format == "json":
        text = json.dumps(doc, indent=1) + "\n"
    elif args.format == "markdown":
        text = render.markdown(doc, args.all)
    else:
        text = render.table(doc, args.all)
    if args.output_file and args.output_file != "-":
        try:
            atomic_write(args.output_file, text.encode())
        except OSError as e:
            print(f"{prog_name()}: error: cannot write {args.output_file}: {e.strerror or e}", file=sys.stderr)
            return EXIT_USAGE
    else:
        sys.stdout.write(text)
    for w in doc["warnings"]:
        print(f"{prog_name()}: warning: {w}", file=sys.stderr)
    if gate and gate["failed"]:
        return EXIT_SLOWER
    return EXIT_SKIPPED if doc["warnings"] else EXIT_OK
