"""The drawn rows of each grouping mode, built from a profile's leaves and counter list.

Why a table: every grouping mode is a coarsening of the leaf key (instance, process, thread, core,
source, event name), so a mode is fully described by one small function that places a leaf (its row
key, group path, label and sort key) and by whether per-process counter tracks belong in it. Adding
a mode is one entry in ``MODE_TABLE``; the track lists are built from the leaves in Python without
touching the events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from neuron_explorer.contracts.dataset import DEVICE_MEMORY_PREFIX, MAIN_THREAD, MAIN_THREAD_WAIT
from neuron_explorer.contracts.tracks import on_device, process_label, track_kind
from neuron_explorer.ui.params import BadRequest

# Preferred order of event rows inside a group: host calls above the core work they cause.
NAME_ORDER = ["nrt_load", "model_load", "nrt_execute", "runtime_execute", "kmgr_exec_core", "kbl_exec_wait",
              "nrt_tensor_read", "nrt_tensor_write", "device_exec", "nc_exec_running", "cc_exec_barrier",
              "cc_running", "nrt_model_switch", "timestamp_sync_point"]
LAST = 1 << 30  # sorts after every rank and core
_CORE_MEM = re.compile(r"^" + re.escape(DEVICE_MEMORY_PREFIX) + r"nc(\d+)\.(.+)$")


def name_key(name: str) -> tuple[int, str]:
    """Sort key of an event name: ``NAME_ORDER`` first, then the others alphabetically."""
    return (NAME_ORDER.index(name) if name in NAME_ORDER else len(NAME_ORDER), name)


@dataclass
class Leaf:
    """One (instance, process, thread, core, source, name) combination, its extent and its event group."""

    leaf: int
    inst: str
    pid: int
    tid: int
    nc: int
    src: str
    name: str
    n: int
    mn: int
    mx: int
    maxdur: int
    group: str  # event_group of its events (hardware / software): with the name, it places the leaf's track

    def to_list(self) -> list[Any]:
        """The leaf without its number (stored with the cached index: the number is the position)."""
        return [self.inst, self.pid, self.tid, self.nc, self.src, self.name, self.n, self.mn, self.mx, self.maxdur,
                self.group]

    @property
    def on_device(self) -> bool:
        """Drawn with the device's tracks (by core) rather than the host's (by thread): the rule of
        ``contracts.tracks``, so the UI splits host and device exactly as the Perfetto and JSON outputs do."""
        return on_device(track_kind(self.name, self.group))


@dataclass
class Row:
    """One drawn track of a grouping mode: its group path, label and what feeds it."""

    key: str
    kind: str  # "events" | "counter"
    group: list[str]
    label: str
    leaves: list[int] = field(default_factory=list)
    series: list[tuple[str, int, str]] = field(default_factory=list)  # (instance, pid, counter)
    style: str = "line"  # counters: "line" | "stack"
    unit: str = ""
    count: int = 0
    name: str = ""
    sort: tuple = ()  # drawing order among the rows of a mode (not sent)
    # a memory track's limit, drawn as a line: {"bytes", "source", "cgroup"} (decision 0186)
    limit: dict[str, Any] | None = None

    def to_json(self, idx: int) -> dict[str, Any]:
        d: dict[str, Any] = {"idx": idx, "key": self.key, "kind": self.kind, "group": self.group,
                             "label": self.label, "count": self.count}
        if self.kind == "events":
            d["leaves"] = self.leaves
            d["name"] = self.name
        else:
            d["series"] = sorted({s[2] for s in self.series})
            d["style"] = self.style
            d["unit"] = self.unit
            if self.limit is not None:
                d["limit"] = self.limit
        return d


@dataclass(frozen=True)
class Proc:
    """How a process is shown: its label, and its place (by rank, then pid) among the processes."""

    label: str
    sort: tuple[int, int]


def proc_of(rank_of: dict[tuple[str, int], int], inst: str, pid: int) -> Proc:
    """The process's label (``contracts.tracks.process_label``; the instance is the group above it)."""
    rank = rank_of.get((inst, pid), -1)
    return Proc(process_label(pid, rank), (rank if rank >= 0 else LAST, pid))


# where a leaf goes in a mode: (row key, group path, label, sort key)
Placement = tuple[tuple, list[str], str, tuple]

# The two layouts of a mode's event rows. "names": one row per event name inside each group (the
# first version's rows; still the API's default). "tracks": one track per thread or core (or per
# process / instance in the coarser modes) holding every event name, drawn in lanes where events
# overlap or nest, as Perfetto does; the track tree of the browser is built on these.
LAYOUTS = ("names", "tracks")
DEFAULT_LAYOUT = "names"


def _cpu_device(lf: Leaf, proc: Proc) -> Placement:
    dev = lf.on_device
    cls = "Device" if dev else "CPU"
    sub = lf.nc if dev else lf.tid
    label = f"{lf.name} · NC {lf.nc}" if dev else f"{lf.name} · tid {lf.tid}"
    return ((lf.inst, lf.pid, cls, sub, lf.name), [lf.inst, proc.label, cls], label,
            (lf.inst, 1, *proc.sort, 1 if dev else 0, sub, name_key(lf.name)))


def _neuroncore(lf: Leaf, proc: Proc) -> Placement:
    return ((lf.inst, lf.nc, lf.name), [lf.inst, f"NC {lf.nc}" if lf.nc >= 0 else "no core"], lf.name,
            (lf.inst, 1, lf.nc if lf.nc >= 0 else LAST, name_key(lf.name)))


def _thread(lf: Leaf, proc: Proc) -> Placement:
    return ((lf.inst, lf.pid, lf.tid, lf.name), [lf.inst, proc.label, f"thread {lf.tid}"], lf.name,
            (lf.inst, 1, *proc.sort, lf.tid, name_key(lf.name)))


def _process(lf: Leaf, proc: Proc) -> Placement:
    return ((lf.inst, lf.pid, lf.name), [lf.inst, proc.label], lf.name, (lf.inst, 1, *proc.sort, 0, name_key(lf.name)))


def _instance(lf: Leaf, proc: Proc) -> Placement:
    return ((lf.inst, lf.name), [lf.inst], lf.name, (lf.inst, 1, name_key(lf.name)))


# track placements: the same groups one level up, the thread / core / process as the track
def _cpu_device_track(lf: Leaf, proc: Proc) -> Placement:
    dev = lf.on_device
    cls = "Device" if dev else "CPU"
    sub = lf.nc if dev else lf.tid
    return ((lf.inst, lf.pid, cls, sub), [lf.inst, proc.label, cls], f"NC {lf.nc}" if dev else f"thread {lf.tid}",
            (lf.inst, 1, *proc.sort, 1 if dev else 0, sub))


def _neuroncore_track(lf: Leaf, proc: Proc) -> Placement:
    return ((lf.inst, lf.nc), [lf.inst], f"NC {lf.nc}" if lf.nc >= 0 else "no core",
            (lf.inst, 1, lf.nc if lf.nc >= 0 else LAST))


def _thread_track(lf: Leaf, proc: Proc) -> Placement:
    return ((lf.inst, lf.pid, lf.tid), [lf.inst, proc.label], f"thread {lf.tid}", (lf.inst, 1, *proc.sort, lf.tid))


def _process_track(lf: Leaf, proc: Proc) -> Placement:
    return ((lf.inst, lf.pid), [lf.inst, proc.label], "events", (lf.inst, 1, *proc.sort, 0))


def _instance_track(lf: Leaf, proc: Proc) -> Placement:
    return ((lf.inst,), [lf.inst], "events", (lf.inst, 1))


@dataclass(frozen=True)
class Mode:
    """A grouping mode: its title, where it puts a leaf, and whether it shows per-process counters."""

    title: str
    place: Callable[[Leaf, Proc], Placement]
    process_counters: bool
    track: Callable[[Leaf, Proc], Placement]  # the "tracks" layout


MODE_TABLE: dict[str, Mode] = {
    "cpu_device": Mode("CPU vs Device", _cpu_device, True, _cpu_device_track),
    "neuroncore": Mode("NeuronCore", _neuroncore, False, _neuroncore_track),
    "thread": Mode("Thread", _thread, True, _thread_track),
    "process": Mode("Process", _process, True, _process_track),
    "instance": Mode("Instance", _instance, False, _instance_track),
}
MODES: dict[str, str] = {k: m.title for k, m in MODE_TABLE.items()}
DEFAULT_MODE = "cpu_device"


def mode_of_grouping(primary: str | None, secondary: str | None) -> str:
    """The grouping mode that shows a view's stored ``--system-trace-primary-group`` /
    ``--system-trace-secondary-group`` (ProfileMetadata), so the viewer opens grouped as the user asked
    at ingestion. The modes are the spec's five: a secondary group with ``thread_id`` is Thread, with
    ``nc_idx`` NeuronCore, the default (``cpu_vs_device``) CPU vs Device, process or instance fields
    alone Process (or Instance when neither group names ``process_id``). A primary group without
    ``process_id`` only changes the mode when the secondary group names process-level fields; every
    other combination has no mode of its own and opens in the nearest one (docs/ui.md)."""
    sec = {f.strip() for f in (secondary or "").split(",") if f.strip()}
    prim = {f.strip() for f in (primary or "").split(",") if f.strip()}
    if not sec or sec == {"cpu_vs_device"}:
        return DEFAULT_MODE
    if "thread_id" in sec:
        return "thread"
    if "nc_idx" in sec:
        return "neuroncore"
    return "process" if "process_id" in sec | prim else "instance"


def check_mode(mode: str) -> Mode:
    if mode not in MODE_TABLE:
        raise BadRequest(f"unknown grouping mode {mode!r}; one of {', '.join(MODES)}")
    return MODE_TABLE[mode]


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise BadRequest(f"unknown layout {layout!r}; one of {', '.join(LAYOUTS)}")
    return layout


Limits = dict[tuple[str, int], dict[str, Any]]


def build_rows(mode: str, leaves: list[Leaf], counter_list: list[tuple], rank_of: dict[tuple[str, int], int],
               nd_of: dict[tuple[str, int], int], layout: str = DEFAULT_LAYOUT,
               limits: Limits | None = None) -> list[Row]:
    """The rows of a grouping mode in drawing order: counter tracks above each group's event rows.

    ``limits``: each process's memory limit (``memory_limits``), drawn on its own memory tracks."""
    m = check_mode(mode)
    check_layout(layout)
    limits = limits or {}
    rows = _instance_counter_rows(counter_list, nd_of)
    if m.process_counters:
        rows += _process_counter_rows(counter_list, rank_of, limits)
    rows += _core_memory_rows(mode, counter_list, rank_of, layout, limits)
    rows += _event_rows(m.place if layout == "names" else m.track, leaves, rank_of, layout == "tracks")
    rows.sort(key=lambda r: r.sort)
    return rows


def _event_rows(place: Callable[[Leaf, Proc], Placement], leaves: list[Leaf], rank_of: dict[tuple[str, int], int],
                tracks: bool) -> list[Row]:
    rows: dict[tuple, Row] = {}
    for lf in leaves:
        key, group, label, sort = place(lf, proc_of(rank_of, lf.inst, lf.pid))
        r = rows.get(key)
        if r is None:
            r = rows[key] = Row("|".join(map(str, key)), "events", group, label, name="" if tracks else lf.name,
                                sort=sort)
        r.leaves.append(lf.leaf)
        r.count += lf.n
    return list(rows.values())


def _instance_counter_rows(counter_list: list[tuple], nd_of: dict[tuple[str, int], int]) -> list[Row]:
    """CPU utilization and host memory per instance; device memory per device.

    Host-level counters are recorded by every process of an instance; one process (the lowest pid)
    speaks for the instance. ``device_mem.<category>`` counters (none are captured yet) form one
    stacked track per (instance, device), summed over the processes using that device.
    """
    by_inst: dict[str, dict[str, list[tuple[int, str]]]] = {}
    for inst, pid, counter, unit in counter_list:
        by_inst.setdefault(inst, {}).setdefault(counter, []).append((int(pid), unit))
    out: list[Row] = []
    for inst, counters in sorted(by_inst.items()):
        def first(cn: str, inst: str = inst, counters: dict = counters) -> tuple[str, int, str]:
            return (inst, min(p for p, _ in counters[cn]), cn)  # (the lowest pid speaks for the instance)
        group = [inst, "Counters"]
        cpu = [first(cn) for cn in counters if cn == "cpu_util.host_mean" or
               (cn.startswith("cpu_util.cpu") and cn[12:].isdigit())]
        if cpu:
            out.append(Row(f"{inst}|cpu", "counter", group, "CPU utilization (host)", series=cpu, style="line",
                           unit="percent", sort=(inst, 0, 0)))
        mem = [first(cn) for cn in ("host_mem.host_used", "host_mem.host_available") if cn in counters]
        if mem:
            # drawn as used against a total line (used + available), not stacked
            out.append(Row(f"{inst}|mem", "counter", group, "Host memory (used / available)", series=mem,
                           style="used_total", unit="bytes", sort=(inst, 0, 1)))
        devs: dict[int, list[tuple[str, int, str]]] = {}
        for cn, plist in counters.items():
            if cn.startswith(DEVICE_MEMORY_PREFIX) and core_memory(cn) is None:
                for pid, _ in plist:
                    devs.setdefault(nd_of.get((inst, pid), 0), []).append((inst, pid, cn))
        for nd, series in sorted(devs.items()):
            out.append(Row(f"{inst}|devmem|{nd}", "counter", group, f"Device memory · nd {nd}", series=series,
                           style="stack", unit="bytes", sort=(inst, 0, 2, nd)))
    return out


def core_memory(counter: str) -> tuple[int, str] | None:
    """(core, category) of a ``device_mem.nc<N>.<category>`` counter (``contracts.dataset``), else None."""
    m = _CORE_MEM.match(counter)
    return (int(m.group(1)), m.group(2)) if m else None


def memory_limits(meta: list[dict[str, Any]]) -> Limits:
    """``{(instance, pid): {"bytes", "source", "cgroup", "device"}}`` of the processes whose
    ProfileMetadata row holds a cgroup memory limit (``memory_limit_bytes`` > 0: one the capture
    recorded below the host's memory, decision 0182).  ``device``: the process's device is the CPU,
    whose device memory that limit bounds too (decision 0159); a GPU's is not bounded by it."""
    out: Limits = {}
    for m in meta:
        try:
            lim = int(m.get("memory_limit_bytes") or 0)
            key = (str(m["instance_id"]), int(m["process_id"]))
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
        if lim > 0:
            out[key] = {"bytes": lim, "source": str(m.get("memory_limit_source") or ""),
                        "cgroup": str(m.get("memory_limit_cgroup") or ""),
                        "device": str(m.get("device_kind") or "").split(":", 1)[0] == "cpu"}
    return out


def _limit(limits: Limits, inst: str, pid: int, device: bool) -> dict[str, Any] | None:
    lim = limits.get((inst, pid))
    if lim is None or (device and not lim["device"]):
        return None
    return {k: lim[k] for k in ("bytes", "source", "cgroup")}


def _core_memory_rows(mode: str, counter_list: list[tuple], rank_of: dict[tuple[str, int], int],
                      layout: str = DEFAULT_LAYOUT, limits: Limits | None = None) -> list[Row]:
    """Device memory of each core by category: one stacked track per (process, core), placed with the
    core's tracks (the process's Device group, or the NC group) right after that core's own rows (so
    with several cores each memory track sits under its core, not all before the first core), the
    categories' sum being the used memory and hover giving the breakdown."""
    cores: dict[tuple[str, int, int], list[tuple[str, int, str]]] = {}
    for inst, pid, counter, _unit in counter_list:
        cm = core_memory(counter)
        if cm is not None:
            cores.setdefault((inst, int(pid), cm[0]), []).append((inst, int(pid), counter))
    out: list[Row] = []
    for (inst, pid, nc), series in sorted(cores.items()):
        proc = proc_of(rank_of, inst, pid)
        label = f"Device memory · NC {nc}"
        after_core = (LAST, "")  # sorts after the core's rows: (..., nc) in tracks, (..., nc, name_key) in names
        sort: tuple[Any, ...]
        if mode == "cpu_device":
            group, sort = [inst, proc.label, "Device"], (inst, 1, *proc.sort, 1, nc, after_core)
        elif mode in ("thread", "process"):
            group, sort = [inst, proc.label], (inst, 1, *proc.sort, -1, 2, nc)
        elif mode == "neuroncore" and layout == "tracks":
            # the core is a track of the instance group here: its memory goes right under it, in the
            # same group (a group "NC n" of its own held only the memory: a second "NC 0")
            group, sort = [inst], (inst, 1, nc, after_core, *proc.sort)
            label = f"{label} · {proc.label}"
        elif mode == "neuroncore":
            group, sort = [inst, f"NC {nc}"], (inst, 1, nc, after_core, *proc.sort)
        else:
            group, sort, label = [inst, "Counters"], (inst, 0, 3, *proc.sort, nc), f"{label} · {proc.label}"
        out.append(Row(f"{inst}|{pid}|devmem|{nc}", "counter", group, label, series=series, style="stack",
                       unit="bytes", sort=sort, limit=_limit(limits or {}, inst, pid, device=True)))
    return out


def _process_counter_rows(counter_list: list[tuple], rank_of: dict[tuple[str, int], int],
                          limits: Limits | None = None) -> list[Row]:
    """CPU utilization and memory of each process, drawn above the process's event rows."""
    per_proc: dict[tuple[str, int], set[str]] = {}
    for inst, pid, counter, _unit in counter_list:
        per_proc.setdefault((inst, int(pid)), set()).add(counter)
    out: list[Row] = []
    for (inst, pid), names in sorted(per_proc.items()):
        proc = proc_of(rank_of, inst, pid)
        if "cpu_util.process" in names:
            # with the shares of each period its main thread ran and waited for a CPU (decision 0203)
            cpu = [(inst, pid, cn) for cn in ("cpu_util.process", MAIN_THREAD, MAIN_THREAD_WAIT) if cn in names]
            out.append(Row(f"{inst}|{pid}|cpu", "counter", [inst, proc.label], "CPU utilization (process)",
                           series=cpu, style="line", unit="percent",
                           sort=(inst, 1, *proc.sort, -1, 0)))
        mem: list[tuple[str, int, str]] = [(inst, pid, cn) for cn in ("host_mem.process_rss", "host_mem.process_vms")
                                           if cn in names]
        if mem:
            out.append(Row(f"{inst}|{pid}|mem", "counter", [inst, proc.label], "Host memory (process RSS / VMS)",
                           series=mem, style="line", unit="bytes", sort=(inst, 1, *proc.sort, -1, 1),
                           limit=_limit(limits or {}, inst, pid, device=False)))
    return out
