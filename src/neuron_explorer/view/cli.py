"""``neuron-explorer view`` (alias ``neuron-profile view``): flags and the command."""

from __future__ import annotations

import argparse
import os
import sys

from neuron_explorer.contracts.env import ConfigError, diff_items, parquet_writer, progress_delay, s3_endpoint
from neuron_explorer.contracts.tracks import Grouping, GroupingError
from neuron_explorer.util.cliargs import UsageError, missing_extra, port_number, prog_name
from neuron_explorer.util.log import get_logger

from .options import OutputError, ViewError, ViewOptions, os_reason

FORMATS = ("parquet", "json", "perfetto", "summary-text", "summary-json")

EPILOG = """\
examples:
  neuron-explorer view -d ./output                                    # Parquet: system_profile_parquet/
  neuron-explorer view -d ./output --output-format summary-text
  neuron-explorer view --ui -d ./output                               # the System Trace Viewer UI
  neuron-explorer view --ui --data-path ~/ws --port 8080              # the UI over a workspace
  neuron-profile view -d ./output --output-format perfetto            # system_profile.pftrace
  neuron-explorer view -d ./output --output-format json --output-file run1.json
  neuron-explorer view -d ./output --output-format json --output-file - | gzip > run1.json.gz
  neuron-explorer view -d ./output --system-trace-filter-neuron-core "0,1" \
      --system-trace-filter-event-type "nrt_execute,cc_running"
  neuron-explorer view -d ./output --system-trace-filter-instance-id "i-abc123,i-def456"
  neuron-explorer view -d ./output --output-format perfetto --system-trace-primary-group instance_id \
      --system-trace-secondary-group nc_idx                           # one row per instance, a track per core
  neuron-explorer view -d /shared/output --output-file /shared/fleet_parquet --scheduler tcp://head:8786
  neuron-explorer view -d s3://bucket/captures --output-file s3://bucket/fleet_parquet
  neuron-explorer view --show-profile-schema
"""


def add_view_parser(sub) -> None:
    v = sub.add_parser(
        "view", help="process captured profiles (parquet, json, perfetto, summaries) or start the UI (--ui)",
        description="Read every profile under DIR (many instances, processes and sessions), align their clocks, "
                    "and write the chosen output (Parquet unless --output-format says otherwise). --ui starts "
                    "the System Trace Viewer instead, after ingesting DIR (if given) into its workspace.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument("-d", "--directory", dest="directory", help="directory holding captured profiles")
    v.add_argument("--output-format", choices=FORMATS, default=None,
                   help="parquet (default), json, perfetto, summary-text or summary-json")
    v.add_argument("--output-file", default=None,
                   help="file to write (directory for parquet); defaults: system_profile_parquet/, "
                        "system_profile.json, system_profile.pftrace; summaries go to stdout; '-' is stdout "
                        "for the single-file formats. An existing directory is replaced only if view wrote it")
    v.add_argument("--system-trace-filter-neuron-core", metavar="CORES", help='cores to keep, e.g. "0" or "0,1,2-3"')
    v.add_argument("--system-trace-filter-event-type", metavar="TYPES",
                   help='event types to keep, e.g. "nrt_execute,nrt_load" (also hardware, software, ^name)')
    v.add_argument("--system-trace-filter-instance-id", metavar="IDS",
                   help='instances to keep, e.g. "i-abc123,i-def456"')
    v.add_argument("--system-trace-primary-group", metavar="FIELDS", default=None,
                   help="fields whose values make a process row in the track tree (Perfetto, JSON, UI): "
                        "instance_id, process_id (default instance_id,process_id)")
    v.add_argument("--system-trace-secondary-group", metavar="FIELDS", default=None,
                   help="fields whose values make a track inside a row: instance_id, process_id, thread_id, "
                        "nc_idx, trace_event_source (default: host events by thread, device events by core)")
    v.add_argument("--ignore-device-profile", action="store_true", help="skip device profiles (system-only view)")
    v.add_argument("--ignore-system-profile", action="store_true", help="skip system profiles (device-only view)")
    v.add_argument("--ui", action="store_true",
                   help="start the System Trace Viewer (web UI) over the workspace, ingesting -d DIR into it first "
                        "when given; prints the URL (http://127.0.0.1:3001/)")
    v.add_argument("--data-path", default=None,
                   help="workspace directory for ingested profiles (with --ui or --ingest-only; default "
                        "~/.local/share/neuron-explorer/workspace)")
    v.add_argument("--ingest-only", action="store_true", help="ingest into the workspace as Parquet and exit")
    v.add_argument("--display-name", default=None,
                   help="name of this ingestion: one directory name inside the workspace (not empty, no '/', "
                        "not '.' or '..')")
    v.add_argument("--show-profile-schema", action="store_true", help="print every output table and column, then exit")
    v.add_argument("--jobs", type=int, default=None,
                   help="worker processes for large inputs (default: one per core when the input is large)")
    v.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="run on a Dask distributed cluster, e.g. tcp://HOST:8786: its workers read the captures "
                        "and write the output, so both must be on storage they all see (a shared mount or s3://)")
    v.add_argument("--endpoint-url", default=None,
                   help="S3 endpoint for s3:// paths (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS)")
    v.add_argument("--host", default=None, help="with --ui: address to bind (default 127.0.0.1, loopback only)")
    v.add_argument("--port", type=port_number, default=None, help="with --ui: port 1-65535 (default 3001)")
    v.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show progress")
    v.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")
    v.add_argument("--peak-flops", type=peak_flops, default=None, metavar="FLOPS|measure",
                   help="peak FLOP/s of one device for the summary's MFU (e.g. 312e12), or 'measure' to measure "
                        "this machine's float32 matrix multiply (docs/summary.md)")



def peak_flops(text: str) -> float | str:
    """``--peak-flops``: a positive finite number of FLOP/s, or ``measure``."""
    if text == "measure":
        return text
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of FLOP/s such as 312e12, or 'measure'") from None
    if not (0 < v < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r}: the peak must be a positive finite number")
    return v


def check_display_name(display_name: str) -> str:
    """``--display-name`` as given, refused (UsageError) unless it is one plain, visible path
    component: the UI's rule for profile names.  An empty name is refused like the others."""
    bad = ("is empty" if not display_name.strip() else
           "contains '/'" if "/" in display_name else
           "contains '\\'" if "\\" in display_name else
           "contains a NUL byte" if "\0" in display_name else
           "is '.' or '..'" if display_name in (".", "..") else
           "starts with '.' (hidden: the UI does not list it)" if display_name.startswith(".") else
           "is longer than 200 bytes" if len(os.fsencode(display_name)) > 200 else None)
    if bad:
        raise UsageError(f"--display-name {display_name!r} {bad}; it names one directory inside the "
                         "workspace, e.g. --display-name run-a")
    return display_name


def workspace_entry(display_name: str | None, directory: str) -> str:
    """The directory name of an ingestion inside the workspace: ``--display-name`` when given
    (``check_display_name``), else derived from the capture directory's name (made safe with
    ``safe_component``: ``-d /`` has no name, a hidden directory's name would not be listed)."""
    from neuron_explorer.util.names import safe_component
    if display_name is not None:
        return check_display_name(display_name)
    base = os.path.basename(os.path.abspath(directory).rstrip("/"))
    name = safe_component(base) if base else "capture"
    return "%2E" + name[1:] if name.startswith(".") else name  # the UI lists no hidden names


def default_data_path() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "neuron-explorer", "workspace")


def show_schema() -> str:
    from neuron_explorer.contracts.dataset import SCHEMA_DOC

    lines = []
    for table, cols in SCHEMA_DOC.items():
        lines.append(table)
        for name, meaning in cols:
            lines.append(f"  {name:<30} {meaning}")
        lines.append("")
    return "\n".join(lines)


def view_command(args: argparse.Namespace) -> int:
    from neuron_explorer.analysis.filters import ViewFilter

    if args.show_profile_schema:
        sys.stdout.write(show_schema())
        return 0
    _check_modes(args)
    if args.display_name is not None:
        check_display_name(args.display_name)
    if args.scheduler is not None:
        from .cluster import ClusterUsageError, check_scheduler

        try:
            check_scheduler(args.scheduler)
        except ClusterUsageError as e:
            raise UsageError(str(e)) from None
        _need_extra("cluster", ("distributed",), "view --scheduler")
    try:
        filt = ViewFilter.parse(args.system_trace_filter_neuron_core, args.system_trace_filter_event_type,
                                args.system_trace_filter_instance_id)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    try:
        grouping = Grouping.parse(args.system_trace_primary_group, args.system_trace_secondary_group)
        delay = progress_delay()
        parquet_writer()  # (checked here: a bad value is one line, not an error in every worker)
        diff_items()
    except (GroupingError, ConfigError) as e:
        raise UsageError(str(e)) from None
    for w in filt.warnings:
        get_logger(__name__).warning(f"neuron-explorer: warning: {w}")
    fmt = args.output_format
    out = args.output_file
    if out and out.endswith(os.sep) and fmt in ("summary-text", "summary-json"):
        raise UsageError(f"--output-file {out}: {fmt} writes one file; name it, e.g. {out}summary.txt")
    if out and fmt:
        from .options import DEFAULT_OUTPUTS
        from .output import in_directory

        out = in_directory(out, DEFAULT_OUTPUTS.get(fmt) if fmt != "parquet" else None)
    if args.ingest_only:
        if fmt not in (None, "parquet"):
            raise UsageError("--ingest-only writes Parquet into the workspace; drop --output-format " + fmt)
        fmt = "parquet"
        name = workspace_entry(args.display_name, args.directory)
        ws = _workspace(args)
        out = os.path.join(ws, name)
    elif args.ui:
        return _launch_ui(args, filt, grouping)
    elif fmt is None:
        fmt = "parquet"  # the spec's default format (decision 0081)
    if args.ignore_system_profile and args.ignore_device_profile:
        raise UsageError("--ignore-system-profile and --ignore-device-profile together leave nothing to view")
    opts = ViewOptions(directory=args.directory, output_format=fmt, output_file=out, filter=filt,
                       ignore_system_profile=args.ignore_system_profile,
                       ignore_device_profile=args.ignore_device_profile, display_name=args.display_name or "",
                       progress=args.progress, jobs=args.jobs, grouping=grouping,
                       progress_delay=delay, peak_flops=args.peak_flops)
    res = _run(opts, args)
    if isinstance(res, int):
        return res
    if res.text is not None:
        if out:
            from neuron_explorer.util.atomic import atomic_write

            try:
                atomic_write(out, res.text.encode(), output=True)
            except OSError as e:
                return _cannot_write(OutputError(out, os_reason(e)))
        else:
            sys.stdout.write(res.text)
    else:
        rate = res.events / res.seconds if res.seconds > 0 else 0.0
        get_logger(__name__).info(f"neuron-explorer: wrote {res.output} ({res.events} events from {res.profiles} "
                                  f"profile(s), {res.seconds:.2f} s, {rate / 1e6:.2f}M events/s)")
        if len(res.offsets) > 1:
            from neuron_explorer.analysis.align import clock_groups
            from neuron_explorer.analysis.summary import groups_note

            for inst, o in sorted(res.offsets.items()):
                vs = f" vs {o.reference}" if o.method == "collectives" else ""
                get_logger(__name__).info(f"neuron-explorer: clock offset {inst}: {o.offset_ns / 1e6:+.3f} ms "
                                          f"± {o.uncertainty_ns / 1e6:.3f} ms ({o.method}{vs}, {o.samples} samples)")
            groups = clock_groups(res.offsets)
            if groups:
                get_logger(__name__).info(f"neuron-explorer: clock offsets: {groups_note(groups)}")
    return res.exit_code


_UI_ONLY = (("host", "--host"), ("port", "--port"))


def _check_modes(args: argparse.Namespace) -> None:
    """The flags that choose what ``view`` does agree: ``--ui`` serves the workspace (so no output
    format or file), the UI's own flags need ``--ui``, and anything but ``--ui`` needs ``-d``."""
    if args.ui:
        for flag, given in (("--output-format", args.output_format), ("--output-file", args.output_file),
                            ("--ingest-only", args.ingest_only)):
            if given:
                raise UsageError(f"--ui serves the workspace and writes no other output; drop {flag} "
                                 "(or drop --ui to write the output)")
        return
    for attr, flag in _UI_ONLY:
        if getattr(args, attr) is not None:
            raise UsageError(f"{flag} is for the System Trace Viewer: add --ui "
                             f"(neuron-explorer view --ui -d DIR {flag} ...)")
    if args.data_path is not None and not args.ingest_only:
        raise UsageError("--data-path names the UI's workspace: add --ui to serve it or --ingest-only to ingest "
                         "into it")
    if not args.directory:
        raise UsageError("view needs -d DIR, the directory holding captured profiles (or --ui to start the "
                         "System Trace Viewer)")


def _run(opts: ViewOptions, args: argparse.Namespace | None = None):
    """The run's result, or the exit status when the output cannot be written or the cluster or
    object storage fails (a bad option is a usage error)."""
    from .pipeline import run  # (here: the other commands parse their arguments without it)

    scheduler = getattr(args, "scheduler", None)
    try:
        if scheduler or _is_url(opts.directory) or _is_url(opts.output_file):
            return _run_elsewhere(opts, scheduler, getattr(args, "endpoint_url", None))
        return run(opts)
    except ViewError as e:
        raise UsageError(str(e)) from None
    except OutputError as e:
        return _cannot_write(e)


def _is_url(path: str | None) -> bool:
    from neuron_explorer.util.storage import is_url

    return is_url(path)


def _run_elsewhere(opts: ViewOptions, scheduler: str | None, endpoint_flag: str | None):
    """A cluster run or one reading or writing object storage: the same run on the engine
    ``view.cluster`` picks (imported only here: a plain run loads neither Dask nor the AWS SDK)."""
    from neuron_explorer.util.storage import StorageError

    from . import cluster
    from .pipeline import run

    try:
        endpoint = s3_endpoint(endpoint_flag)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    try:
        engine = cluster.engine_for(scheduler, opts.jobs)
    except cluster.ClusterError as e:
        get_logger(__name__).error(f"{prog_name()}: error: {e}")
        return 1
    try:
        return run(opts, engine, endpoint)
    except (cluster.ClusterError, StorageError) as e:
        get_logger(__name__).error(f"{prog_name()}: error: {e}")
        return 1
    finally:
        engine.close()


def _cannot_write(e: OutputError) -> int:
    """One line for a failed write (full disk, permissions), exit status 1."""
    get_logger(__name__).error(f"{prog_name()}: error: {e}")
    return 1


def _workspace(args: argparse.Namespace) -> str:
    ws = args.data_path or default_data_path()
    try:
        os.makedirs(ws, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--data-path {ws}: cannot create the workspace: {os_reason(e)}") from None
    return ws


# what the UI imports beyond the core dependencies: the 'ui' extra
UI_MODULES = ("starlette", "uvicorn", "duckdb", "orjson")


def _need_extra(extra: str, modules: tuple[str, ...], what: str) -> None:
    why = missing_extra(extra, modules, what)
    if why is not None:
        raise UsageError(why)


def _launch_ui(args: argparse.Namespace, filt, grouping: Grouping) -> int:
    """``--ui``: ingest -d DIR (if given) into the workspace, then serve the UI."""
    _need_extra("ui", UI_MODULES, "view --ui")  # (before the ingest: a missing extra wastes no work)
    ws = _workspace(args)
    if args.directory:
        name = workspace_entry(args.display_name, args.directory)
        opts = ViewOptions(directory=args.directory, output_format="parquet", output_file=os.path.join(ws, name),
                           filter=filt, ignore_system_profile=args.ignore_system_profile,
                           ignore_device_profile=args.ignore_device_profile, display_name=name,
                           progress=True if args.progress is None else args.progress, grouping=grouping)
        res = _run(opts, args)
        if isinstance(res, int):
            return res
        get_logger(__name__).info(f"neuron-explorer: ingested {res.events} events from {res.profiles} profile(s) "
                                  f"into {opts.output_file}")
    try:
        from ..ui.server import serve
    except ImportError as e:
        raise UsageError(f"the UI needs the 'ui' extra (pip install 'neuron-explorer[ui]'): {e}") from None
    return serve(ws, host=args.host or "127.0.0.1", port=args.port or 3001)
