"""``neuron-explorer view`` (alias ``neuron-profile view``): flags and the command."""

from __future__ import annotations

import argparse
import os
import sys

from ..runtime.config import ConfigError
from .pipeline import ViewError, ViewOptions, run

FORMATS = ("parquet", "json", "perfetto", "summary-text", "summary-json")

EPILOG = """\
examples:
  neuron-explorer view -d ./output --output-format summary-text
  neuron-profile view -d ./output --output-format perfetto            # system_profile.pftrace
  neuron-explorer view -d ./output --output-format json --output-file run1.json
  neuron-explorer view -d ./output --system-trace-filter-neuron-core "0,1" --system-trace-filter-event-type "nrt_execute,cc_running"
  neuron-explorer view -d ./output --system-trace-filter-instance-id "i-abc123,i-def456"
  neuron-explorer view --show-profile-schema
"""


def add_view_parser(sub) -> None:
    v = sub.add_parser(
        "view", help="process captured profiles (parquet, json, perfetto, summaries)",
        description="Read every profile under DIR (many instances, processes and sessions), align their clocks, "
                    "and write the chosen output.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument("-d", "--directory", dest="directory", help="directory holding captured profiles")
    v.add_argument("--output-format", choices=FORMATS, default=None,
                   help="parquet (default), json, perfetto, summary-text or summary-json")
    v.add_argument("--output-file", default=None,
                   help="file to write (directory for parquet); defaults: system_profile_parquet/, "
                        "system_profile.json, system_profile.pftrace; summaries go to stdout")
    v.add_argument("--system-trace-filter-neuron-core", metavar="CORES", help='cores to keep, e.g. "0" or "0,1,2-3"')
    v.add_argument("--system-trace-filter-event-type", metavar="TYPES",
                   help='event types to keep, e.g. "nrt_execute,nrt_load" (also hardware, software, ^name)')
    v.add_argument("--system-trace-filter-instance-id", metavar="IDS", help='instances to keep, e.g. "i-abc123,i-def456"')
    v.add_argument("--ignore-device-profile", action="store_true", help="skip device profiles (system-only view)")
    v.add_argument("--ignore-system-profile", action="store_true", help="skip system profiles (device-only view)")
    v.add_argument("--data-path", default=None, help="workspace directory for ingested profiles (used with --ingest-only)")
    v.add_argument("--ingest-only", action="store_true", help="ingest into the workspace as Parquet and exit")
    v.add_argument("--display-name", default="", help="name shown for this ingestion")
    v.add_argument("--show-profile-schema", action="store_true", help="print every output table and column, then exit")
    v.add_argument("--jobs", type=int, default=None,
                   help="worker processes for large inputs (default: one per core when the input is large)")
    v.add_argument("--host", default="127.0.0.1", help="UI: address to bind (default 127.0.0.1, loopback only)")
    v.add_argument("--port", type=int, default=3001, help="UI: port (default 3001)")
    v.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show progress")
    v.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")


def default_data_path() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "neuron-explorer", "workspace")


def show_schema() -> str:
    from .export_parquet import SCHEMA_DOC

    lines = []
    for table, cols in SCHEMA_DOC.items():
        lines.append(table)
        for name, meaning in cols:
            lines.append(f"  {name:<30} {meaning}")
        lines.append("")
    return "\n".join(lines)


def view_command(args: argparse.Namespace) -> int:
    from ..cli import UsageError
    from .filters import ViewFilter

    if args.show_profile_schema:
        sys.stdout.write(show_schema())
        return 0
    if not args.directory and (args.output_format or args.ingest_only or args.output_file):
        raise UsageError("view needs -d DIR, the directory holding captured profiles")
    try:
        filt = ViewFilter.parse(args.system_trace_filter_neuron_core, args.system_trace_filter_event_type,
                                args.system_trace_filter_instance_id)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    fmt = args.output_format
    out = args.output_file
    if out:
        parent = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(parent):
            raise UsageError(f"--output-file {out}: directory {parent} does not exist")
    if args.ingest_only:
        if fmt not in (None, "parquet"):
            raise UsageError("--ingest-only writes Parquet into the workspace; drop --output-format " + fmt)
        fmt = "parquet"
        name = args.display_name or os.path.basename(os.path.abspath(args.directory.rstrip("/")))
        ws = args.data_path or default_data_path()
        os.makedirs(ws, exist_ok=True)
        out = os.path.join(ws, name)
    elif fmt is None and out:
        fmt = "parquet"  # an output file with no format: the default format
    elif fmt is None:
        return _launch_ui(args, filt)
    if args.ignore_system_profile and args.ignore_device_profile:
        raise UsageError("--ignore-system-profile and --ignore-device-profile together leave nothing to view")
    opts = ViewOptions(directory=args.directory, output_format=fmt, output_file=out, filter=filt,
                       ignore_system_profile=args.ignore_system_profile,
                       ignore_device_profile=args.ignore_device_profile, display_name=args.display_name,
                       progress=args.progress, jobs=args.jobs)
    try:
        res = run(opts)
    except ViewError as e:
        raise UsageError(str(e)) from None
    if res.text is not None:
        if out:
            from ..capture.writer import atomic_write

            atomic_write(out, res.text.encode())
        else:
            sys.stdout.write(res.text)
    else:
        rate = res.events / res.seconds if res.seconds > 0 else 0.0
        print(f"neuron-explorer: wrote {res.output} ({res.events} events from {res.profiles} profile(s), "
              f"{res.seconds:.2f} s, {rate / 1e6:.2f}M events/s)", file=sys.stderr)
        if len(res.offsets) > 1:
            for inst, o in sorted(res.offsets.items()):
                print(f"neuron-explorer: clock offset {inst}: {o.offset_ns / 1e6:+.3f} ms "
                      f"± {o.uncertainty_ns / 1e6:.3f} ms ({o.method}, {o.samples} samples)", file=sys.stderr)
    return res.exit_code


def _launch_ui(args: argparse.Namespace, filt) -> int:
    """No output format: ingest -d DIR (if given) into the workspace, then serve the UI."""
    from ..cli import UsageError

    ws = args.data_path or default_data_path()
    os.makedirs(ws, exist_ok=True)
    if args.directory:
        name = args.display_name or os.path.basename(os.path.abspath(args.directory.rstrip("/")))
        opts = ViewOptions(directory=args.directory, output_format="parquet", output_file=os.path.join(ws, name),
                           filter=filt, ignore_system_profile=args.ignore_system_profile,
                           ignore_device_profile=args.ignore_device_profile, display_name=name,
                           progress=True if args.progress is None else args.progress)
        try:
            res = run(opts)
        except ViewError as e:
            raise UsageError(str(e)) from None
        print(f"neuron-explorer: ingested {res.events} events from {res.profiles} profile(s) into {opts.output_file}",
              file=sys.stderr)
    try:
        from ..ui.server import serve
    except ImportError as e:
        raise UsageError(f"the UI needs the 'ui' extra (pip install 'neuron-explorer[ui]'): {e}") from None
    return serve(ws, host=args.host, port=args.port)
