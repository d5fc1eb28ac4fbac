"""The Parquet dataset ``view`` writes and the UI reads: table names, their columns, the layout.

A dataset directory holds partitioned tables (``<Table>/instance=<id>/process=<pid>/part-N.parquet``,
hive-style, with ``<id>`` percent-encoded by ``util.names.safe_component``), single-file tables
(``<Table>.parquet``) and a marker file that says ``view`` wrote it (so a later run may replace it,
and nothing else is ever replaced).  ``SCHEMA_DOC`` is what ``--show-profile-schema`` prints.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat

from neuron_explorer import __version__
from neuron_explorer.util.atomic import DIR_MODE, output_kind, release_staging, staging_dir

EVENTS = "SystemProfileEvents"
COUNTERS = "SystemProfileCounters"
METADATA = "ProfileMetadata"
MODELS = "ProfileModels"
WARNINGS = "ViewWarnings"
DEVICE_EVENTS = "DeviceProfileEvents"
DEVICE_PROFILES = "DeviceProfiles"
# per events file, the events counted per track key and time bucket: what a viewer draws before it has
# read any event (docs/decisions/0054-ui-event-summary.md); written beside SystemProfileEvents
EVENT_SUMMARY = "SystemProfileEventSummary"
# one file for the whole profile: the events summaries merged at the bucket width a whole-profile view
# draws (``coarse_width``), tied to every events file; a viewer's cold open reads it instead of one
# summary per process (docs/decisions/0142-ui-event-overview.md). Written as <EVENT_OVERVIEW>.parquet
EVENT_OVERVIEW = "SystemProfileEventOverview"
# per events file, what ``neuron-explorer diff`` takes from it (``analysis.occurrences``: occurrences of
# graphs, collectives and regions, the steps' figures), so that a diff need not read the events
# (docs/decisions/0163-diff-items-written-by-view.md); written beside SystemProfileEvents
DIFF_ITEMS = "SystemProfileDiffItems"

# tables written one process at a time, hive-partitioned: <Table>/instance=<id>/process=<pid>/part-<n>.parquet
PARTITIONED = (EVENTS, COUNTERS, DEVICE_EVENTS, EVENT_SUMMARY, DIFF_ITEMS)
# tables written as one file each: <Table>.parquet
SINGLE_FILE = (METADATA, MODELS, WARNINGS, DEVICE_PROFILES, EVENT_OVERVIEW)


# Device memory over time (SystemProfileCounters, unit bytes): one counter per core and category
# (docs/decisions/0031-device-memory-by-category.md).  The categories are finer than neuron-monitor's
# memory_used breakdown; DEVICE_MEMORY_TO_MONITOR says which monitor category each one adds to, so
# both tools show the same bytes.  Together they are the core's memory: a viewer may stack them.
DEVICE_MEMORY_PREFIX = "device_mem."
# the shares of each CPU sample's period the process's main thread ran on a CPU and waited for one
# (percent; Linux's schedstat: docs/decisions/0203-main-thread-cpu-wait.md)
MAIN_THREAD = "cpu_util.main_thread"
MAIN_THREAD_WAIT = "cpu_util.main_thread_wait"
DEVICE_MEMORY_CATEGORIES: tuple[str, ...] = (
    "parameters",       # the weights (module parameters and buffers the runtime knows of)
    "gradients",        # .grad of those parameters
    "optimizer_state",  # tensors held in optimizers' state (moments, step counters)
    "tensors",          # activations and every other tensor the allocator holds
    "model_code",       # the compiled graphs' code
    "allocator_cache",  # memory the allocator reserved but holds no tensor (CUDA caching allocator)
)
DEVICE_MEMORY_TO_MONITOR: dict[str, str] = {
    "parameters": "constants", "gradients": "tensors", "optimizer_state": "tensors", "tensors": "tensors",
    "model_code": "model_code", "allocator_cache": "runtime_memory",
}
# the runtime consumer name under which an integration registers its memory source: a callable
# returning {(nc, category): bytes} (see integrations.torch.memory)
DEVICE_MEMORY_SOURCE = "device_memory"


def device_memory_counter(nc: int, category: str) -> str:
    return f"{DEVICE_MEMORY_PREFIX}nc{int(nc)}.{category}"


# the summary of one events file (same instance, process and file name) and how a reader checks it
# is that file's: its footer holds the events file's size and row count under these keys
SUMMARY_EVENTS_BYTES = "neuron_explorer.events_file_bytes"
SUMMARY_EVENTS_ROWS = "neuron_explorer.events_file_rows"
SUMMARY_MAX_BUCKETS = 1024  # per row group and key: a bucket width 2**shift >= 1 us giving at most this many


OVERVIEW_KEY = "neuron_explorer.overview"  # the overview's footer: its JSON header (event_overview)
OVERVIEW_FORMAT = 1
DIFF_ITEMS_KEY = "neuron_explorer.diff_items"  # the diff items' footer: their JSON header (diff_items)
DIFF_ITEMS_FORMAT = 1
COARSE_BUCKETS = 1024  # buckets over a whole profile: about one per pixel of a whole-profile view


def coarse_width(span_ns: int, max_shift: int = 0) -> int:
    """The bucket width of a whole-profile coarse picture: the smallest power of two (>= 1 us) giving
    at most ``COARSE_BUCKETS`` buckets over ``span_ns``, and no narrower than the widest summary
    bucket (``2**max_shift``), so that whole summary buckets merge into it exactly."""
    w = 1 << 10
    while span_ns / w > COARSE_BUCKETS:
        w <<= 1
    return max(w, 1 << int(max_shift))


def events_file_facts(path: str) -> tuple[int, int, int | None, int | None]:
    """(bytes, rows, earliest start_ts, latest end_ts) of an events file, from its footer alone: what
    ties the events overview to it (None, None: some row group has no statistics for those
    columns). Raises OSError or pyarrow's errors for a file that is not Parquet."""
    import pyarrow.parquet as pq

    size = os.stat(path).st_size
    md = pq.read_metadata(path)
    names = [md.schema.column(i).name for i in range(md.num_columns)]
    if "start_ts" not in names or "end_ts" not in names:
        return size, md.num_rows, None, None
    i_s, i_e = names.index("start_ts"), names.index("end_ts")
    lo: int | None = None
    hi: int | None = None
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        a, b = rg.column(i_s).statistics, rg.column(i_e).statistics
        if a is None or b is None or not a.has_min_max or not b.has_min_max:
            return size, md.num_rows, None, None
        lo = int(a.min) if lo is None else min(lo, int(a.min))
        hi = int(b.max) if hi is None else max(hi, int(b.max))
    return size, md.num_rows, lo, hi


def summary_shift(span_ns: int) -> int:
    """The shift of the summary's buckets over a row group spanning ``span_ns``: the smallest
    ``k >= 10`` with ``span_ns >> k`` below ``SUMMARY_MAX_BUCKETS``. A viewer wanting about 1024
    buckets over the whole profile merges whole summary buckets (a row group spanning the whole
    profile may have buckets twice as wide as it wants: it takes those)."""
    k = 10
    while (max(int(span_ns), 0) >> k) >= SUMMARY_MAX_BUCKETS:
        k += 1
    return k


def table_file(table: str) -> str:
    """The file name of a single-file table."""
    return table + ".parquet"


SCHEMA_DOC: dict[str, list[tuple[str, str]]] = {
    EVENTS: [
        ("id", "unique id of the event in this output: its process's ProfileMetadata.process_index << 32 + its "
               "index in the capture (the same with and without a filter)"),
        ("name", "event type, e.g. nc_exec_running, nrt_execute, cc_running"),
        ("start_ts", "start, Unix epoch ns, clock-aligned across instances"),
        ("end_ts", "end, Unix epoch ns"),
        ("duration_ns", "end_ts - start_ts"),
        ("trace_event_source", "neuron_rt, neuron_hw or framework"),
        ("instance_id", "host the process ran on (EC2 instance id or hostname)"),
        ("process_id", "OS pid of the profiled process"),
        ("thread_id", "OS thread id that recorded the event"),
        ("nc_idx", "logical core (NeuronCore) index: CUDA device or local rank"),
        ("pcore_idx", "physical core index (same as nc_idx here)"),
        ("worker_gid", "global rank of the process (-1 when not distributed)"),
        ("flow_id", "flows the event belongs to (host call <-> core execution; the ranks of one collective; "
                    "a framework region <-> the host calls it issued): unnest(flow_id) joins them"),
        ("framework_stream_id", "a framework region's event id, on the region and on the nrt_execute / "
                                "nc_exec_running it issued (null: none)"),
        ("extra_attributes_json", "type-specific attributes not in a column, as JSON"),
        ("event_group", "hardware or software"),
        ("model_name", "compiled graph executed or loaded"),
        ("exec_id", "execution number on the core"),
        ("op", "collective operation (all_reduce, broadcast, barrier, ...)"),
        ("seq", "per-process-group sequence number of a collective (same on every rank)"),
        ("bytes", "bytes moved by a collective or copy"),
        ("dtype", "element type of a collective"),
        ("group_ranks", "global ranks of the collective's process group"),
        ("ret", "runtime status code (0 success, 1003 NaN, 5 timeout, ...)"),
        ("device_profile_id", "nc_exec_running: the device profile holding this execution (DeviceProfiles)"),
    ],
    DEVICE_EVENTS: [
        ("profile_id", "DeviceProfiles.profile_id"), ("instance_id", "host"), ("process_id", "pid"),
        ("nc_idx", "core"), ("model_name", "graph the op belongs to"),
        ("exec_id", "execution (nc_exec_running.exec_id)"),
        ("name", "op or kernel (aten::mm, cpp_fused_..., XLA op)"), ("track", "engine or stream the op ran on"),
        ("start_ts", "start, Unix epoch ns"), ("end_ts", "end, Unix epoch ns"), ("duration_ns", "end - start"),
        ("flops", "floating-point operations (null: unknown)"), ("bytes", "bytes read and written (null: unknown)"),
        ("detail", "shapes / dtypes"), ("source_location", "user file:line when captured"),
        ("flow_id", "same flow as the execution's nrt_execute/nc_exec_running"),
    ],
    DEVICE_PROFILES: [
        ("profile_id", "the model id (ProfileModels.model_id) or session<k>, with _nc<n>, _pid<pid>, "
                        "_<instance> added only where two profiles would share it; files "
                        "device_profile_model_<profile_id>.*"),
        ("file", ".ntff path"), ("instance_id", "host"), ("process_id", "pid"), ("nc_idx", "core"),
        ("mode", "model or session"), ("device_kind", "cpu, cuda:<name>, ..."), ("source", "torch or jax"),
        ("model_name", "graph(s)"), ("executions", "executions in the profile"),
        ("exec_id_first", "first exec_id"), ("exec_id_last", "last exec_id"), ("ops", "op events"),
        ("total_time_ns", "sum of execution times"), ("flops", "sum of known op flops"),
        ("achieved_flops_per_s", "flops / total_time"),
        ("track_active_pct_json", "per track: % of execution time busy"),
        ("peak_flops_per_s", "device peak (null: unknown)"), ("mfu", "achieved / peak (null: peak unknown)"),
        ("session", "the process's capture session (ProfileMetadata.session)"),
    ],
    COUNTERS: [
        ("instance_id", "host"), ("process_id", "pid"), ("ts", "sample time, Unix epoch ns"),
        ("counter", "cpu_util.cpu<N>, cpu_util.process, cpu_util.main_thread, cpu_util.main_thread_wait, "
                    "cpu_util.host_mean, "
                    "host_mem.process_rss, ..., "
                    "device_mem.nc<N>.<category>"),
        ("value", "sample value"), ("unit", "percent or bytes"),
        ("session", "the process's capture session (ProfileMetadata.session)"),
    ],
    METADATA: [
        ("instance_id", "host"), ("process_id", "pid"), ("process_tag", "NEURON_PROCESS_TAG or pid"),
        ("rank", "global rank"), ("local_rank", "local rank"), ("world_size", "ranks in the job"),
        ("display_name", "--display-name of this ingestion"), ("device_kind", "cpu or cuda:<name>"),
        ("nd_idx", "device index"), ("start_wall_ns", "capture start"), ("end_reason", "how the capture ended"),
        ("events", "events in this output for the process"), ("dropped_events", "events overwritten at capture"),
        ("wall_offset_ns", "monotonic -> wall-clock offset of the process (median of anchors)"),
        ("clock_offset_ns", "instance clock correction applied (from collectives)"),
        ("clock_offset_uncertainty_ns", "spread (scaled MAD) of that correction"),
        ("clock_offset_samples", "collectives used"), ("clock_offset_method", "reference, collectives or none"),
        ("session_path", "capture directory"),
        ("session", "the capture directory's name (its start time): a process is its instance, pid and session "
                    "(two runs that reused a pid on one host, e.g. in containers, are two rows)"),
        ("process_index", "the process in this output: id >> 32 of its SystemProfileEvents rows (which of two "
                          "sessions of one pid an event belongs to: SystemProfileEvents.id >> 32 = process_index)"),
        ("versions_json", "tool and framework versions"),
        ("config_json", "capture configuration"),
        ("memory_limit_bytes", "the process's memory cgroup limit where the capture recorded one below the "
                               "host's memory, else 0 (decision 0182)"),
        ("memory_limit_source", "the file it came from (cgroup v1 memory.limit_in_bytes, cgroup v2 memory.max), "
                                "else ''"),
        ("memory_limit_cgroup", "the cgroup that set it, else ''"),
        ("system_trace_primary_group", "--system-trace-primary-group of this output (fields that make a "
                                       "process row, e.g. instance_id,process_id)"),
        ("system_trace_secondary_group", "--system-trace-secondary-group (fields that make a track; "
                                         "cpu_vs_device: host threads, core tracks)"),
        ("group_pid", "pid of the process's row in Perfetto/JSON: the real pid, + k*4194304 where "
                      "instances or sessions share it; the group number when not grouped by process"),
    ],
    MODELS: [
        ("instance_id", "host"), ("process_id", "pid"),
        ("session", "the process's capture session (ProfileMetadata.session)"), ("model_id", "id within the process"),
        ("model_name", "graph name"), ("neff_name", "neff_<hash>"), ("graph_hash", "hash of backend + graph code"),
        ("backend", "torch.compile backend"), ("kind", "forward or backward"), ("compile_ns", "compile time"),
        ("nc_idx", "core"), ("source_location", "user file:line"), ("module_path", "module path"),
        ("num_nodes", "FX nodes"), ("signature", "input shapes and dtypes"),
    ],
    WARNINGS: [("message", "one line naming the file and the problem"), ("path", "file or directory")],
    EVENT_SUMMARY: [
        ("thread_id", "as in SystemProfileEvents"), ("nc_idx", "as in SystemProfileEvents (-1: none)"),
        ("trace_event_source", "as in SystemProfileEvents ('': none)"), ("name", "event name"),
        ("event_group", "as in SystemProfileEvents ('': none)"),
        ("shift", "the bucket width is 2**shift ns (one width per row group of the events file)"),
        ("bucket", "start_ts >> shift"), ("events", "events of this key starting in the bucket"),
        ("first_start", "earliest start_ts"), ("last_end", "latest end_ts"),
        ("total_ns", "sum of durations"), ("max_ns", "longest duration"),
    ],
    EVENT_OVERVIEW: [
        ("part", "index of the process directory in the footer's JSON (neuron_explorer.overview)"),
        ("thread_id", "as in SystemProfileEvents"), ("nc_idx", "as in SystemProfileEvents (-1: none)"),
        ("trace_event_source", "as in SystemProfileEvents ('': none)"), ("name", "event name"),
        ("event_group", "as in SystemProfileEvents ('': none)"),
        ("bucket", "(start_ts - base) // width, base and width in the footer"),
        ("events", "events of this key starting in the bucket"), ("first_start", "earliest start_ts"),
        ("last_end", "latest end_ts"), ("total_ns", "sum of durations"),
    ],
    DIFF_ITEMS: [
        ("piece", "the run of rows this row belongs to, listed in the footer's JSON (neuron_explorer.diff_items): "
                  "a graph's executions, a model's loads, a region's or an (op, group) collective's occurrences, "
                  "or one process's steps; three row groups: graphs, loads and regions, then collectives, then steps"),
        ("start", "start_ts (a step: its start)"), ("end", "end_ts (a step: its end)"),
        ("id", "the event's id (a step: its number)"), ("bytes", "a collective's bytes (else null)"),
        ("seq", "a collective's sequence number (-1: none)"), ("rank", "a collective's worker_gid"),
        ("wall_ns", "a step's wall time (else null)"), ("compute_ns", "a step's part (docs/summary.md)"),
        ("exposed_collective_ns", "a step's part"), ("sync_wait_ns", "a step's part"), ("compile_ns", "a step's part"),
        ("data_loading_ns", "a step's part"), ("host_ns", "a step's part"), ("idle_ns", "a step's part"),
        ("own_ns", "a step's own compute"), ("collective_ns", "a step's collective time"),
    ],
}


MARKER = ".neuron-explorer-view.json"
# the summary-json document of the run (steps, utilisation, insights: docs/summary.md), which the
# UI's Summary page reads
SUMMARY_FILE = "summary.json"
# on object storage (no rename): written before anything else and removed after ``MARKER`` is
# written last, so an output being written, or left by a failed run, never looks complete
PENDING_MARKER = ".neuron-explorer-view.pending.json"


# what an output of an earlier version (before the marker) holds at its top level
LEGACY_ENTRIES = frozenset(PARTITIONED) | {table_file(t) for t in SINGLE_FILE}
_TOP_FILES = frozenset(table_file(t) for t in SINGLE_FILE) | {MARKER, PENDING_MARKER, SUMMARY_FILE}
_PARTITION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=[^/]+$")  # hive: instance=<id>, process=<pid>


def write_marker(directory: str, fmt: str = "parquet") -> None:
    """Mark ``directory`` as a ``view`` output, so that a later run may replace it."""
    with open(os.path.join(directory, MARKER), "w") as f:
        json.dump({"written_by": "neuron-explorer view", "format": fmt, "version": __version__}, f)
        f.write("\n")


def foreign_entry(rel: str, is_dir: bool = False) -> bool:
    """Whether ``rel`` (a path inside a dataset, '/'-separated) is something ``view`` never writes
    there: ours are the markers and single-file tables at the top, and below a partitioned table
    only ``key=value`` partition directories holding ``.parquet`` files."""
    parts = rel.split("/")
    top = parts[0]
    if len(parts) == 1:
        if top in PARTITIONED:
            return not is_dir
        return is_dir or top not in _TOP_FILES
    if top not in PARTITIONED or any(p == "" for p in parts):
        return True
    dirs, leaf = (parts[1:], None) if is_dir else (parts[1:-1], parts[-1])
    if len(dirs) > 2 or not all(_PARTITION.match(d) for d in dirs):
        return True
    return leaf is not None and (len(dirs) != 2 or not leaf.endswith(".parquet"))


FOREIGN_LIMIT = 1000


def foreign_entries(directory: str, limit: int = FOREIGN_LIMIT) -> list[str]:
    """What ``directory`` holds that ``view`` did not write, as sorted relative paths: files, and
    directories only when they hold nothing (a foreign directory is named by its files).  Symlinks
    and special files are never ours.  An unreadable subdirectory counts as foreign.  The walk
    stops once more than ``limit`` are found (a home directory named by mistake is not read whole)."""
    out: list[str] = []

    def walk(path: str, rel: str) -> None:
        if len(out) > limit:
            return
        try:
            entries = os.scandir(path)
        except OSError:
            out.append(rel + "/")
            return
        empty = True
        with entries:  # read as it goes: a huge directory is not listed whole
            try:
                for e in entries:
                    empty = False
                    if len(out) > limit:
                        return
                    r = f"{rel}/{e.name}" if rel else e.name
                    try:
                        is_dir = e.is_dir(follow_symlinks=False)
                        is_file = e.is_file(follow_symlinks=False)
                    except OSError:
                        is_dir = is_file = False
                    if is_dir:
                        walk(e.path, r)
                    elif not is_file or foreign_entry(r):
                        out.append(r)
            except OSError:  # the directory failed while read: as one that cannot be read
                out.append(rel + "/")
                return
        if empty and rel and foreign_entry(rel, is_dir=True):
            out.append(rel + "/")

    walk(directory, "")
    return sorted(out)


def describe_foreign(names: list[str], shown: int = 5, limit: int = FOREIGN_LIMIT) -> str:
    """How many foreign names there are and a few of them: ``2 files not written by neuron-explorer
    view (analysis/r.csv, notes.txt)``; ``7 files ... (a, b, c, d, e and 2 more)``; past ``limit``
    (where ``foreign_entries`` stopped looking) ``more than 1000 files``."""
    n = len(names)
    count = f"more than {limit} files" if n > limit else f"{n} file{'s' if n != 1 else ''}"
    head = ", ".join(names[:shown]) + (f" and {n - shown} more" if shown < n <= limit else
                                       " and more" if n > limit else "")
    return f"{count} not written by neuron-explorer view ({head})"


def is_ours(directory: str) -> bool:
    """True when ``directory`` is a Parquet output that ``view`` wrote and holds nothing else: it
    carries ``MARKER`` (or, written by an earlier version, ``ProfileMetadata.parquet``) and
    ``foreign_entries`` finds nothing."""
    try:
        names = set(os.listdir(directory))
    except OSError:
        return False
    if MARKER in names:
        m = os.path.join(directory, MARKER)
        if not os.path.isfile(m) or os.path.islink(m):
            return False
    elif table_file(METADATA) not in names:
        return False
    return not foreign_entries(directory)


def work_area(target: str) -> str:
    """A fresh private directory for the parts of ``target``, on the same file system (beside it)
    so that the finished Parquet dataset is renamed, not copied, into place.  For ``-``, a device
    or a FIFO it is in the temporary directory.  Work areas that killed runs left in either place
    are removed here (``util.atomic.staging_dir``)."""
    if target == "-" or output_kind(target) in ("special", "descriptor"):
        return staging_dir("neuron-explorer-view.", ".tmp")
    name = os.path.basename(target.rstrip(os.sep)) or "output"
    return staging_dir(f".{name}.", ".tmp", os.path.dirname(target.rstrip(os.sep)))


def replace_dir(work: str, target: str) -> None:
    """Move the finished dataset ``work`` to ``target``: a missing name or an empty directory is
    taken directly; an earlier output of ours is moved aside, the new one renamed in, and the old
    one deleted last (restored if the rename fails).  Anything else is refused, even if it
    appeared after ``check``.  The dataset gets the permissions of the directory it replaces (a
    new one: what ``mkdir`` gives under the umask), not the work area's 0700."""
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode) if os.path.isdir(target) else DIR_MODE
    except OSError:
        mode = DIR_MODE
    os.chmod(work, mode)
    release_staging(work)
    try:
        os.rename(work, target)  # missing, or an empty directory (rename(2) replaces those only)
        return
    except OSError:
        if not os.path.isdir(target) or os.path.islink(target) or not is_ours(target):
            raise
    aside = staging_dir(f".{os.path.basename(target)}.", ".old", os.path.dirname(target))
    old = os.path.join(aside, "previous")
    os.rename(target, old)
    try:
        os.rename(work, target)
    except BaseException:
        os.rename(old, target)
        shutil.rmtree(aside, ignore_errors=True)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def remove_work_area(work: str | None) -> None:
    """Remove a work area created by ``work_area`` (never anything else)."""
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)
