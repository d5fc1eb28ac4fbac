"""Reading the trace ``jax.profiler`` wrote: find this process's ``xplane.pb``, map its clock to
the host monotonic clock, and pull out what the conversion needs (XLA ops grouped into
executions, host execute calls, compilations, readable track names).

``jax.profiler.ProfileData`` decodes the file; everything here works on its planes, lines and
events, so no XLA protobuf schema is needed.  The rows are plain named tuples: a trace can hold
hundreds of thousands of ops, and they are sorted and grouped, never mutated.
"""

from __future__ import annotations

import glob
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from neuron_explorer.integrations.jax.marks import MARK_PREFIX, MARK_START, MARK_STOP

if TYPE_CHECKING:
    from jax.profiler import ProfileData

# host events that are the call into a compiled computation
_EXEC_NAME = ("LoadedExecutable::Execute", "LoadedExecutable::ExecuteHelper")
# how much older than the trace's start an xplane.pb may look (file systems' mtime granularity)
_MTIME_SLACK_NS = 2_000_000_000


class XlaOp(NamedTuple):
    """An XLA op run on a device; ``module`` is None for a host thunk execution that only
    carries a ``run_id`` (it widens its execution's span, it is not an op)."""
    dev: int
    run_id: Any
    module: str | None
    program_id: Any
    name: str | None
    start: int
    end: int
    plane: str
    line: str
    stats: dict


class HostCall(NamedTuple):
    """The host's call into a compiled computation."""
    start: int
    end: int
    plane: str
    line: str
    run_id: Any
    module: str | None


class Compile(NamedTuple):
    start: int
    end: int
    plane: str
    line: str
    name: str


class ModuleMark(NamedTuple):
    """A host event that names a module in ``(...)``, which places a compilation."""
    start: int
    end: int
    module: str


@dataclass
class TraceEvents:
    """What the conversion takes from a trace."""
    ops: list[XlaOp] = field(default_factory=list)
    hosts: list[HostCall] = field(default_factory=list)
    compiles: list[Compile] = field(default_factory=list)
    module_marks: list[ModuleMark] = field(default_factory=list)


@dataclass
class Execution:
    """One execution of a computation on one device: its ops and its span."""
    dev: int
    start: int
    end: int
    module: str | None = None
    program_id: Any = None
    ops: list[XlaOp] = field(default_factory=list)
    names: set = field(default_factory=set)

    @property
    def key(self) -> tuple[str | None, Any]:
        """The computation: (module name, program id)."""
        return (self.module, self.program_id)


def load(path: str) -> "ProfileData":
    """The trace at ``path`` as a ``jax.profiler.ProfileData``."""
    from jax.profiler import ProfileData

    return ProfileData.from_file(path)


def find_xplane(log_dir: str | None, since_wall_ns: int, pid: int) -> tuple[str | None, str | None]:
    """This process's xplane.pb (and trace.json.gz) written under ``log_dir`` by the trace that
    started at ``since_wall_ns``; the newest file whose ``/host:metadata`` names our pid (or no pid)."""
    if not log_dir:
        return None, None
    runs = os.path.join(log_dir, "plugins", "profile")
    cands = []
    for p in glob.glob(os.path.join(runs, "*", "*.xplane.pb")):
        try:
            m = os.stat(p).st_mtime_ns
        except OSError:
            continue
        if m >= since_wall_ns - _MTIME_SLACK_NS:
            cands.append((m, p))
    for _, p in sorted(cands, reverse=True):
        try:
            pd = load(p)
        except Exception:
            continue
        meta = pd.find_plane_with_name("/host:metadata")
        found = dict(meta.stats).get("process_id") if meta is not None else None
        if found in (None, pid):
            tj = p[: -len(".xplane.pb")] + ".trace.json.gz"
            return p, tj if os.path.exists(tj) else None
    return None, None


def clock_map(pd: "ProfileData", marks: dict[str, tuple[int, int]], anchor: tuple[int, int, str]) -> tuple[int, str]:
    """(offset, note): host monotonic ns = trace ns + offset.

    ``marks``: the host monotonic reads around each marker the plugin emitted; ``anchor``: the
    recording's (monotonic, wall, label) start anchor, the fallback when no marker is found."""
    found = {}
    for plane in pd.planes:
        if not plane.name.startswith("/host"):
            continue
        for line in plane.lines:
            for e in line.events:
                if e.name in (MARK_START, MARK_STOP) and e.name in marks:
                    found[e.name] = (e.start_ns + e.end_ns) / 2
    offs = []
    for name, mid in found.items():
        t0, t1 = marks[name]
        offs.append(((t0 + t1) / 2 - mid, (t1 - t0) / 2))
    if offs:
        # the marker read most tightly: a host read around a marker widens when the thread is
        # preempted there (a loaded machine, the GIL taken by another thread), and averaging with a
        # wide one moved the offset by milliseconds, past the slack executions are matched with
        off, unc = min(offs, key=lambda o: o[1])
        return int(round(off)), (f"clock: trace mapped to the host monotonic clock by {len(offs)} marker(s), "
                                 f"offset {int(off)} ns, uncertainty +-{int(unc) + 1} ns")
    env = None
    for plane in pd.planes:
        if plane.name == "Task Environment":
            env = dict(plane.stats)
    start = env.get("profile_start_time") if env else None
    if start:
        # relative trace time + profile start (wall ns) -> monotonic through our wall/monotonic anchor
        return int(start) - (anchor[1] - anchor[0]), (
            "clock: no marker in the trace; mapped through the trace's wall-clock start and a "
            "wall/monotonic anchor (uncertainty: a few microseconds plus any wall-clock step during the trace)")
    return anchor[0], "clock: no marker and no trace start time; trace times assumed to start at the trace start"


def line_labels(pd: "ProfileData") -> dict[tuple[str, str], tuple[str, int]]:
    """Readable track names and synthetic thread ids per (plane, line)."""
    out = {}
    counts: dict[str, int] = {}
    for plane in pd.planes:
        for line in plane.lines:
            name = line.name
            base = re.sub(r"/-?\d+$", "", name)
            base = base[3:] if base.startswith("tf_") else base
            if plane.name.startswith("/host"):
                k = counts.get(base, 0)
                counts[base] = k + 1
                label = f"{base} #{k}" if base != name or k else base
            else:
                label = f"{plane.name} {name}"
            out[(plane.name, name)] = (label, zlib.crc32(f"{plane.name}/{name}".encode()) & 0x7FFFFFFF)
    return out


def collect(pd: "ProfileData") -> TraceEvents:
    """Pull XLA ops, host execute calls and compilations out of the trace's host and device planes."""
    out = TraceEvents()
    for plane in pd.planes:
        dev_from_plane = None
        m = re.match(r"/device:[A-Z]+:(\d+)", plane.name)
        if m:
            dev_from_plane = int(m.group(1))
        host = plane.name.startswith("/host")
        if not (host or dev_from_plane is not None):
            continue
        for line in plane.lines:
            for e in line.events:
                if not e.name.startswith("$") and not e.name.startswith(MARK_PREFIX):
                    _add_event(out, e, plane.name, line.name, host, dev_from_plane)
    return out


def _add_event(out: TraceEvents, e, plane: str, line: str, host: bool, dev_from_plane: int | None) -> None:
    """File one trace event: an op (it carries ``hlo_op``/``hlo_module``), else, on a host plane,
    an execute call, a compilation, or an event naming a module."""
    nm = e.name
    st = dict(e.stats)
    start, end = int(e.start_ns), int(e.end_ns)
    if "hlo_op" in st and "hlo_module" in st:
        dev = st.get("device_ordinal", dev_from_plane if dev_from_plane is not None else 0)
        out.ops.append(XlaOp(int(dev), st.get("run_id"), str(st["hlo_module"]), st.get("program_id"),
                             str(st["hlo_op"]), start, end, plane, line, st))
        return
    if not host:
        return
    if any(x in nm for x in _EXEC_NAME) and not nm.startswith("[") and "Prepare" not in nm:
        mm = re.search(r"\(([^()]+)\)$", nm)
        out.hosts.append(HostCall(start, end, plane, line, st.get("run_id"),
                                  st.get("name") or (mm.group(1) if mm else None)))
    elif nm == "backend_compile_and_load" or nm.endswith("Client::Compile"):
        out.compiles.append(Compile(start, end, plane, line, nm))
    else:
        mm = re.search(r"\((jit_[^()]+|pmap_[^()]+|[\w.\-]+)\)$", nm)
        if mm:
            out.module_marks.append(ModuleMark(start, end, mm.group(1)))
    if nm.startswith("ThunkExecutor::Execute") and "run_id" in st:
        out.ops.append(XlaOp(int(st.get("device_ordinal", 0)), st.get("run_id"), None, None, None,
                             start, end, plane, line, st))


def executions(ops: list[XlaOp]) -> list[Execution]:
    """Group op rows into executions: by (device, run_id), else by runs of one module per device
    (a new execution starts when the module changes or an op name repeats)."""
    groups: dict[tuple, Execution] = {}
    order = []
    by_dev_open: dict[int, tuple] = {}
    for row in sorted(ops, key=lambda r: r.start):
        if row.run_id is not None:
            key = (row.dev, "run", row.run_id)
        else:
            cur = by_dev_open.get(row.dev)
            g = groups.get(cur) if cur else None
            if g is None or g.module != row.module or row.name in g.names:
                key = (row.dev, "seq", len(order))
                by_dev_open[row.dev] = key
            else:
                key = cur
        g = groups.get(key)
        if g is None:
            g = groups[key] = Execution(row.dev, row.start, row.end)
            order.append(key)
        if row.module is not None:
            g.module = row.module
            g.program_id = row.program_id
            g.ops.append(row)
            g.names.add(row.name)
        g.start = min(g.start, row.start)
        g.end = max(g.end, row.end)
    out = [groups[k] for k in order if groups[k].module is not None]
    out.sort(key=lambda g: g.start)
    return out
