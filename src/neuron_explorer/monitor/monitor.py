"""The neuron-monitor loop: wait for the next due group, collect, print one report.

Groups run on timers keyed by ``(group, period)``, so applications that share
a configuration entry are collected together and a report is printed only
when something was collected.  Every report is complete: groups that were not
due repeat their last values (their ``period`` field tells consumers which
data is new).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from neuron_explorer.contracts import stats_files
from neuron_explorer.monitor.apps import (
    AppTracker,
    ProcessGone,
    process_start_time,
    remove_stale,
)
from neuron_explorer.monitor.config import DEFAULT_PERIOD_S, RUNTIME_GROUPS, SYSTEM_GROUPS, MonitorConfig
from neuron_explorer.monitor.gpu import Nvml
from neuron_explorer.monitor.snapshot import SnapshotError, read_snapshot
from neuron_explorer.monitor.system import (
    HwCounters,
    MemoryInfo,
    VcpuUsage,
    hardware_info,
    instance_info,
    with_memory_limit,
)
from neuron_explorer.util import jsonfast as _json
from neuron_explorer.util.cgroup import CgroupMemory, shared_limit
from neuron_explorer.util.log import get_logger
from neuron_explorer.util.stopflag import StopFlag


class Logger:
    """stderr diagnostics gated by ``--verbose`` (0 silent .. 4 everything)."""

    def __init__(self, level: int, stream: TextIO | None = None) -> None:
        self.level = level
        self.stream = stream  # None: the neuron_explorer logger tree (docs/logging.md)

    def __call__(self, level: int, msg: str) -> None:
        if level <= self.level:
            if self.stream is None:  # 1 errors, 2 warnings, 3 info and 4 debug (shown: --verbose chose them)
                get_logger(__name__).log({1: 40, 2: 30}.get(level, 20), f"neuron-monitor: {msg}")
            else:
                print(f"neuron-monitor: {msg}", file=self.stream, flush=True)


class Monitor:
    """Collects the configured metric groups and builds reports.

    Args:
        config: the validated configuration.
        stats_dir: where applications publish snapshots.
        log: a :class:`Logger`.
        use_nvml: try NVML for GPU info and ECC (off in tests that must not depend on a GPU).
        exclude_pids: processes never reported (the ``neuron-monitor`` command passes its own pid:
            the monitor is no application, whatever its environment says).
        cgroup_root: prepended to the /proc and cgroup paths read for the applications' memory
            limits (a test's fake tree; docs/decisions/0186).
    """

    def __init__(
        self,
        config: MonitorConfig,
        stats_dir: Path | None = None,
        log: Logger | None = None,
        use_nvml: bool = True,
        dmi_root: str = "/sys/class/dmi/id",
        edac_root: str = "/sys/devices/system/edac",
        exclude_pids: tuple[int, ...] = (),
        cgroup_root: str = "",
    ) -> None:
        self.config = config
        self.cgroup_root = cgroup_root
        self.exclude_pids = frozenset(exclude_pids)
        self.stats_dir = Path(stats_dir) if stats_dir is not None else stats_files.default_stats_dir()
        self.log = log or Logger(0)
        self.nvml = Nvml() if use_nvml else None
        if self.nvml is not None and not self.nvml.available:
            self.log(3, f"NVML unavailable: {self.nvml.reason}")
        self.instance_info = instance_info(dmi_root)
        self.hardware_info = hardware_info(self.nvml)
        self._system: dict[str, Callable[[], dict[str, Any]]] = {}
        for g in config.system_groups:
            if g == "vcpu_usage":
                self._system[g] = VcpuUsage().collect
            elif g == "memory_info":
                self._system[g] = MemoryInfo().collect
            elif g == "neuron_hw_counters":
                self._system[g] = HwCounters(self.nvml, edac_root).collect
        self.system_results: dict[str, dict[str, Any]] = {}
        self.apps: dict[int, AppTracker] = {}
        self._ignored: dict[int, float | None] = {}  # pid -> start_time of apps no entry selects
        self._bad: dict[int, int] = {}  # pid -> mtime of snapshot files that could not be used
        # pid -> mtime of final snapshots this monitor reported, or found at its start: not again
        self._finals_seen: dict[int, int] = {}
        now = time.monotonic()
        self.timers: dict[tuple[str, str, float], float] = {}
        for g, p in config.system_groups.items():
            self.timers[("system", g, p)] = now + p
        for sel in config.runtimes:
            for g, p in sel.groups.items():
                self.timers.setdefault(("runtime", g, p), now + p)
        if not self.timers:
            # nothing configured: still print instance and hardware info at the default period
            self.timers[("info", "", DEFAULT_PERIOD_S)] = now + DEFAULT_PERIOD_S
        self.discover(initial=True)

    # ------------------------------------------------------------------ applications

    def discover(self, initial: bool = False) -> None:
        """Track new snapshot files, forget vanished ones, delete those of dead processes."""
        seen: set[int] = set()
        for pid, name in stats_files.list_snapshots(self.stats_dir):
            seen.add(pid)
            if pid in self.apps or pid in self.exclude_pids:
                continue
            path = Path(name)
            if pid in self._finals_seen:
                try:
                    if os.stat(path).st_mtime_ns == self._finals_seen[pid]:
                        continue  # reported already (it goes by age: stats_files.prune_final_snapshots)
                except OSError:
                    continue
                del self._finals_seen[pid]  # a new process with that pid
            if pid in self._ignored:
                # an application no entry selects: check it is the same live process, without parsing
                started = process_start_time(pid)
                known = self._ignored[pid]
                if started is not None and (known is None or abs(started - known) <= 1.0):
                    continue
                del self._ignored[pid]
                if started is None:
                    if remove_stale(path, pid):
                        self.log(2, f"removed stale snapshot of exited pid {pid}")
                    continue
            mtime = -1
            try:
                mtime = os.stat(path).st_mtime_ns
                if self._bad.get(pid) == mtime:
                    continue  # already reported; wait until the file changes
                snap = read_snapshot(path)
            except FileNotFoundError:
                continue
            except (OSError, SnapshotError) as exc:
                self._bad[pid] = mtime
                self.log(1, f"ignoring {exc}" if isinstance(exc, SnapshotError) else f"ignoring {path}: {exc}")
                continue
            self._bad.pop(pid, None)
            tracker = AppTracker(pid, path, str(snap.get("tag", pid)), snap.get("start_time"), {}, snap)
            try:
                tracker.check_alive()
            except ProcessGone:
                if not snap.get("final"):
                    if remove_stale(path, pid):
                        self.log(2, f"removed stale snapshot of exited pid {pid}")
                    continue
            if snap.get("final"):
                if initial:  # it ended before this monitor started: not this monitor's to report
                    self._finals_seen[pid] = mtime
                    continue
                # it started and ended between two looks: its whole life is reported once
                tracker.exited = True
            groups = self.config.groups_for(tracker.tag)
            if groups is None:
                if tracker.exited:
                    self._finals_seen[pid] = mtime
                    continue
                self._ignored[pid] = snap.get("start_time")
                self.log(4, f"pid {pid} tag {tracker.tag!r} matches no tag_filter")
                continue
            tracker.groups = groups
            tracker.cgroup = CgroupMemory.find(pid, self.cgroup_root)
            tracker.prime(from_start=not initial)
            self.apps[pid] = tracker
            self.log(3, f"monitoring pid {pid} tag {tracker.tag!r} groups {sorted(groups)}")
        for pid, tracker in list(self.apps.items()):
            if pid not in seen and not tracker.exited:  # (an exited one's final snapshot is read)
                self.log(3, f"pid {pid} stopped publishing; dropped")
                del self.apps[pid]
        for pid in list(self._finals_seen):
            if pid not in seen:
                del self._finals_seen[pid]
        for pid in list(self._ignored):
            if pid not in seen:
                del self._ignored[pid]
        for pid in list(self._bad):
            if pid not in seen:
                del self._bad[pid]

    def watch_exits(self) -> None:
        """Between collections (at every heartbeat, whatever the periods): read the final snapshot
        of each application that exited, so that it is reported at the next collection even when
        that is long after the final snapshot was pruned; and prune old final snapshots."""
        self.discover()
        for pid, tracker in list(self.apps.items()):
            if tracker.exited:
                continue
            try:
                tracker.check_alive()
                if stats_files.is_final_head(stats_files.read_head(tracker.path)):
                    tracker.take_final()  # written in its last moments: it is exiting
            except ProcessGone:
                if not tracker.take_final():
                    self._drop(pid, "exited")
        try:
            for pid in stats_files.prune_final_snapshots(self.stats_dir):
                self.log(3, f"removed the final snapshot of pid {pid} (older than "
                            f"{stats_files.FINAL_KEEP_S:.0f} s, or beyond {stats_files.MAX_FINAL_SNAPSHOTS} of them)")
        except OSError as exc:
            self.log(1, f"cannot prune final snapshots in {self.stats_dir}: {exc}")

    def _retire(self) -> None:
        """Forget the applications whose final report was made: they are in that report and in
        no later one."""
        for pid, tracker in list(self.apps.items()):
            if tracker.final_reported:
                del self.apps[pid]
                try:
                    self._finals_seen[pid] = os.stat(tracker.path).st_mtime_ns
                except OSError:
                    pass

    def _drop(self, pid: int, why: str) -> None:
        tracker = self.apps.pop(pid, None)
        if tracker is not None:
            self.log(2, f"pid {pid} ({tracker.tag}) {why}; dropped")
            remove_stale(tracker.path, pid)

    # ------------------------------------------------------------------ scheduling

    def next_due(self) -> float:
        """Monotonic time at which the next group is due."""
        return min(self.timers.values()) if self.timers else float("inf")

    def collect_due(self, now: float | None = None) -> bool:
        """Collect every group that is due; True when something was collected."""
        now = time.monotonic() if now is None else now
        due = [k for k, t in self.timers.items() if t <= now + 0.002]
        if not due:
            return False
        t0 = time.perf_counter()
        self._retire()
        self.discover()
        refreshed: set[int] = set()
        for key in due:
            scope, group, period = key
            if scope == "info":
                pass
            elif scope == "system":
                self.system_results[group] = self._system[group]()
            else:
                for pid, tracker in list(self.apps.items()):
                    if tracker.groups.get(group) != period or tracker.final_reported:
                        continue
                    try:
                        if pid not in refreshed:
                            tracker.update()
                            refreshed.add(pid)
                        if tracker.exited:
                            # its final report: every group at once, from the final snapshot
                            for g in tracker.groups:
                                tracker.collect(g)
                            tracker.final_reported = True
                            self.log(3, f"pid {pid} ({tracker.tag}) exited; final report")
                        else:
                            tracker.collect(group)
                    except ProcessGone:
                        self._drop(pid, "exited")
                    except SnapshotError as exc:
                        tracker.error = str(exc)
            nxt = self.timers[key] + period
            self.timers[key] = nxt if nxt > now else now + period
        ms = 1e3 * (time.perf_counter() - t0)
        self.log(4, f"collected {[k[1] for k in due]} for {len(self.apps)} apps in {ms:.2f} ms")
        return True

    def report(self) -> dict[str, Any]:
        """The complete report as the spec lays it out."""
        runtimes = [
            t.entry(RUNTIME_GROUPS) for _, t in sorted(self.apps.items()) if t.results
        ]
        return {
            "neuron_runtime_data": runtimes,
            "system_data": {g: self.system_results[g] for g in SYSTEM_GROUPS if g in self.system_results},
            "instance_info": self.instance_info,
            "neuron_hardware_info": self.device_info(),
        }

    def device_info(self) -> dict[str, Any]:
        """``neuron_hardware_info``: on a CPU device, its memory size is what the reported
        applications can hold together under their memory cgroups' limits, where that is below the
        host's memory (read again for each report; an exited application keeps its last limits)."""
        if self.hardware_info.get("neuron_device_type") != "cpu":
            return self.hardware_info
        seen: dict[str, int | None] = {}
        chains = []
        for _, t in sorted(self.apps.items()):
            if not t.results:
                continue
            if t.cgroup is not None and not t.exited:
                t.cgroup_levels = t.cgroup.levels(seen)
            chains.append(t.cgroup_levels)
        return with_memory_limit(self.hardware_info, shared_limit(chains))

    def run(self, out: TextIO, stop: threading.Event | StopFlag | None = None, max_reports: int | None = None) -> int:
        """Print reports until ``stop`` is set, stdout closes, or ``max_reports`` were written."""
        stop = stop or threading.Event()
        written = 0
        next_beat = self.announce()
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_beat:
                    next_beat = self.announce()
                    self.watch_exits()
                wait = min(self.next_due(), next_beat) - now
                if wait > 0:
                    if stop.wait(wait):
                        break
                if not self.collect_due():
                    continue
                try:
                    out.write(_json.dumps_line(self.report()) + "\n")
                    out.flush()
                except BrokenPipeError:
                    return 0
                written += 1
                if max_reports is not None and written >= max_reports:
                    break
        finally:
            stats_files.withdraw_monitor(self.stats_dir)
        return 0

    def announce(self) -> float:
        """Tell applications a monitor is reading (they start publishing when they see it, see
        docs/decisions/0030-monitor-discovery.md); returns when to refresh the announcement."""
        try:
            stats_files.announce_monitor(self.stats_dir)
        except (OSError, stats_files.EndpointError) as exc:
            self.log(1, f"cannot announce this monitor in {self.stats_dir}: {exc}; "
                        "only applications that publish on their own are seen")
        return time.monotonic() + stats_files.MONITOR_HEARTBEAT_S
