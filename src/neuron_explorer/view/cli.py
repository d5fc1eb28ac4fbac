"""``neuron-explorer view``: process captures into summaries and (later) other formats."""

from __future__ import annotations

import argparse
import os
import sys

from . import summary as summary_mod
from .reader import ProfileError, discover, load_session

FORMATS = ("parquet", "json", "perfetto", "summary-text", "summary-json")
IMPLEMENTED = ("summary-text", "summary-json")

GOOD_LAYOUT = ("a capture directory looks like OUTPUT/<instance-id>_pid_<pid>/<timestamp>/ holding "
               "ntrace.pb and trace_info.pb (written by NEURON_RT_INSPECT_ENABLE=1 or 'neuron-explorer inspect')")


def add_view_parser(sub) -> None:
    v = sub.add_parser(
        "view", help="process captured profiles (summary, parquet, json, perfetto)",
        description="Read every profile under DIR (many instances and processes) and write the chosen output.",
        epilog="examples:\n  neuron-explorer view -d ./output --output-format summary-text\n"
               "  neuron-explorer view -d ./output --output-format summary-json --output-file summary.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument("-d", "--directory", dest="directory", help="directory holding captured profiles")
    v.add_argument("--output-format", choices=FORMATS, default=None, help="output format (default: parquet)")
    v.add_argument("--output-file", default=None, help="file (or directory, for parquet) to write; default stdout for summaries")


def view_command(args: argparse.Namespace) -> int:
    from ..cli import UsageError

    fmt = args.output_format or "parquet"
    if fmt not in IMPLEMENTED:
        raise UsageError(f"--output-format {fmt} is not implemented yet; available now: {', '.join(IMPLEMENTED)}")
    if not args.directory:
        raise UsageError("view needs -d DIR, the directory holding captured profiles")
    root = args.directory
    if not os.path.isdir(root):
        raise UsageError(f"{root}: no such directory; {GOOD_LAYOUT}")
    paths = discover(root)
    if not paths:
        raise UsageError(f"{root}: no profiles found; {GOOD_LAYOUT}")
    sessions, warnings = [], []
    for p in paths:
        try:
            s = load_session(p)
        except ProfileError as e:
            print(f"neuron-explorer: skipped: {e}", file=sys.stderr)
            warnings.append(str(e))
            continue
        for w in s.warnings:
            print(f"neuron-explorer: warning: {w}", file=sys.stderr)
        warnings.extend(s.warnings)
        sessions.append(s)
    summ = summary_mod.build(sessions, warnings)
    text = summary_mod.render_text(summ) if fmt == "summary-text" else summary_mod.render_json(summ)
    if args.output_file:
        from ..capture.writer import atomic_write

        atomic_write(args.output_file, text.encode())
    else:
        sys.stdout.write(text)
    return 1 if warnings else 0
