"""``view`` as a pipeline: discover → index (clock alignment) → per process: load, filter, build
events → exporter.  Only one process's data is in memory at a time; the index pass keeps just the
collective timings needed to align clocks and find stragglers.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field, replace

from . import align, device as device_mod, summary as summary_mod
from .events import build as build_events
from .filters import ViewFilter
from .reader import ProfileError, Session, discover, load_session


class ViewError(Exception):
    """A problem with the view request as a whole (nothing usable to process)."""


GOOD_LAYOUT = ("a capture directory looks like OUTPUT/<instance-id>_pid_<pid>/<timestamp>/ holding "
               "ntrace.pb and trace_info.pb (written by NEURON_RT_INSPECT_ENABLE=1 or 'neuron-explorer inspect')")

CHUNK = 262_144  # events converted at a time: bounds memory beyond the loaded process itself

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
    def __init__(self, total: int, label: str, enabled: bool | None) -> None:
        self.total = total
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.done = 0

    def step(self) -> None:
        self.done += 1
        if self.enabled and self.total > 1:
            w = 30
            k = int(w * self.done / self.total)
            sys.stderr.write(f"\r{self.label} [{'#' * k}{' ' * (w - k)}] {self.done}/{self.total} processes")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def _load(path: str, warnings: list[tuple[str, str]], opts: ViewOptions) -> Session | None:
    try:
        s = load_session(path, load_events=not opts.ignore_system_profile)
    except ProfileError as e:
        msg = str(e)
        print(f"neuron-explorer: skipped: {msg}", file=sys.stderr)
        warnings.append((msg, path))
        return None
    return s


def run(opts: ViewOptions) -> ViewResult:
    t_start = time.perf_counter()
    root = opts.directory
    if not os.path.isdir(root):
        raise ViewError(f"{root}: no such directory; {GOOD_LAYOUT}")
    paths = discover(root)
    if not paths:
        raise ViewError(f"{root}: no profiles found; {GOOD_LAYOUT}")
    warnings: list[tuple[str, str]] = []

    # pass 1: index (instances, collective timings, time origin); damaged profiles are reported here
    usable: list[str] = []
    cindex = align.CollectiveIndex()
    times_by_instance: dict[str, list] = {}
    strag_entries = []
    origin = None
    prog = Progress(len(paths), "indexing", opts.progress)
    for p in paths:
        s = _load(p, warnings, opts)
        prog.step()
        if s is None:
            continue
        for w in s.warnings:
            print(f"neuron-explorer: warning: {w}", file=sys.stderr)
            warnings.append((w, p))
        if not opts.filter.keeps_instance(s.instance_id):
            continue
        usable.append(p)
        times = cindex.times(s)
        times_by_instance.setdefault(s.instance_id, []).append(times)
        rank = int(s.info.rank) if s.info is not None else -1
        strag_entries.append((rank, s.instance_id, times))
        start = int(s.info.start_wall_ns) if s.info is not None and s.info.start_wall_ns else None
        if start is not None:
            origin = start if origin is None else min(origin, start)
    offsets = align.estimate_offsets(times_by_instance)
    # keep relative timestamps short but never negative after a correction
    min_off = min((o.offset_ns for o in offsets.values()), default=0)
    origin = (origin or 0) + min(min_off, 0) - 1_000_000_000

    fmt = opts.output_format
    out = None
    writer = None
    summaries = []
    device_files: list[str] = []
    from .export_perfetto import PerfettoWriter

    if fmt in DEFAULT_OUTPUTS:
        out = opts.output_file or DEFAULT_OUTPUTS[fmt]
        parent = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(parent):
            raise ViewError(f"--output-file {out}: directory {parent} does not exist")
        if fmt == "parquet":
            from .export_parquet import ParquetWriter

            writer = ParquetWriter(out, opts.display_name)
        elif fmt == "json":
            from .export_json import JsonWriter

            writer = JsonWriter(out, origin)
        else:
            writer = PerfettoWriter(out, origin)

    # pass 2: one process at a time
    events = 0
    id_base = 0
    prog = Progress(len(usable), f"writing {fmt}", opts.progress)
    try:
        for index, p in enumerate(usable):
            s = _load(p, [], opts)
            prog.step()
            if s is None:
                continue
            opts.filter.apply(s)
            off = offsets.get(s.instance_id)
            offset_ns = off.offset_ns if off else 0
            dviews = [] if opts.ignore_device_profile else device_mod.load(s, offset_ns, warnings)
            if opts.filter.ncs is not None:
                dviews = [v for v in dviews if v.dp.trace.nc_idx in opts.filter.ncs]
            links = device_mod.exec_links(dviews)
            if writer is None:
                ps = summary_mod.session_summary(s, off)
                ps["device_profiles"] = [v.summary for v in dviews]
                summaries.append(ps)
                events += s.num_events
                continue
            if fmt == "parquet":
                writer.add_device(dviews, index)
            else:
                out_dir = os.path.dirname(os.path.abspath(out))
                for v in dviews:
                    base = os.path.join(out_dir, f"device_profile_model_{v.profile_id}")
                    if fmt == "json":
                        from ..capture.writer import atomic_write
                        from .export_json import _dumps

                        atomic_write(base + ".json", _dumps(device_mod.chrome_json(v, origin)))
                    else:
                        dw = PerfettoWriter(base + ".pftrace", origin)
                        try:
                            dw.add_device(v)
                            dw.close()
                        except BaseException:
                            dw.abort()
                            raise
                    device_files.append(base + (".json" if fmt == "json" else ".pftrace"))
            if fmt == "perfetto":  # tracks are laid out over the whole process; encoding is chunked inside
                pe = build_events(s, index, offset_ns, id_base, links)
                writer.add(pe)
                id_base += pe.n
                events += pe.n
                continue
            n = s.num_events
            for lo in range(0, max(n, 1), CHUNK):
                part = s if n <= CHUNK else replace(s, events={k: v[lo:lo + CHUNK] for k, v in s.events.items()})
                pe = build_events(part, index, offset_ns, id_base, links)
                id_base += pe.n
                events += pe.n
                last = lo + CHUNK >= n
                if fmt == "parquet":
                    from .export_parquet import meta_row

                    writer.add(pe, meta_row(pe, off) if last else None)
                else:
                    writer.add(pe, first=lo == 0, last=last)
        if fmt == "parquet":
            writer.close(warnings)
        elif fmt == "json":
            writer.close({"clock_offsets": {k: vars(v) for k, v in offsets.items()},
                          "warnings": [m for m, _ in warnings]})
        elif writer is not None:
            writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    text = None
    if writer is None:
        summ = summary_mod.build(summaries, [m for m, _ in warnings], offsets,
                                 align.stragglers(strag_entries, offsets, cindex))
        text = summary_mod.render_text(summ) if fmt == "summary-text" else summary_mod.render_json(summ)
    return ViewResult(out, warnings, offsets, len(usable), events, time.perf_counter() - t_start, text,
                      device_files)
