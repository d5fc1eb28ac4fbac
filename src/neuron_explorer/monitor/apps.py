"""Application-level metric groups, computed from the snapshots applications publish.

Snapshots hold cumulative counters, so each group keeps the snapshot it last
used as its baseline and reports the difference.  An application discovered
after the monitor started gets the zero state at its own start as baseline,
so every execution is counted in exactly one report.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from neuron_explorer.contracts import stats_files, stats_histogram
from neuron_explorer.contracts.stats_files import (
    CORE_MEMORY_CATEGORIES,
    ERROR_CLASSES,
    EXECUTION_STATUSES,
    HOST_MEMORY_CATEGORIES,
)
from neuron_explorer.monitor.snapshot import SnapshotError, read_snapshot, zero_snapshot
from neuron_explorer.util.cgroup import CgroupMemory, Level

_HAVE_PROC = os.path.exists("/proc/self/stat")
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_BOOT_TIME = psutil.boot_time()
_NCPU = psutil.cpu_count() or 1
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

#: A snapshot older than this (seconds) while its process lives means the publisher is stuck.
STALE_AFTER_S = 10.0


class ProcessGone(Exception):
    """The application behind a snapshot has exited (or its pid now belongs to another process)."""


def _counter_delta(new: dict[str, int], old: dict[str, int], keys: tuple[str, ...]) -> dict[str, int]:
    return {k: max(0, int(new.get(k, 0)) - int(old.get(k, 0))) for k in keys}


def _percentiles(new: list, old: list | None) -> dict[str, float] | None:
    """Latency percentiles of the executions between two cumulative histograms."""
    return stats_histogram.percentiles_seconds(stats_histogram.delta(new, old))


@dataclass
class AppTracker:
    """What the monitor remembers about one application between reports."""

    pid: int
    path: Path
    tag: str
    start_time: float | None
    groups: dict[str, float]
    latest: dict[str, Any]
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    cpu_baseline: tuple[float, float, float] | None = None
    mem_last_t: float = 0.0
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str = ""
    # the process has exited and ``latest`` is the final snapshot it left (reported once, then the
    # tracker is retired: docs/decisions/0075-final-snapshots.md)
    exited: bool = False
    final_reported: bool = False
    # its memory cgroups (found when it is first seen) and their limits as last read: an exited
    # application keeps the limits it had (docs/decisions/0186)
    cgroup: CgroupMemory | None = None
    cgroup_levels: list[Level] = field(default_factory=list)
    _proc: psutil.Process | None = None
    _stat: tuple[bytes, float, float, float, int] | None = None
    _model_cache: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def process(self) -> psutil.Process:
        if self._proc is None:
            self._proc = psutil.Process(self.pid)
        return self._proc

    def _proc_stat(self) -> tuple[bytes, float, float, float, int] | None:
        """(state, user s, system s, start time, RSS bytes) from one read of /proc/<pid>/stat.

        None off Linux (psutil is used there).

        One file read per application per period instead of several psutil
        calls keeps the monitor's cost per application small.
        """
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise ProcessGone(self.pid) from None
        except OSError:
            return None
        fields = data[data.rfind(b")") + 2:].split()
        return (
            fields[0],
            int(fields[11]) / _CLK_TCK,
            int(fields[12]) / _CLK_TCK,
            _BOOT_TIME + int(fields[19]) / _CLK_TCK,
            int(fields[21]) * _PAGE_SIZE,
        )

    def _cpu_times(self) -> tuple[float, float]:
        if self.exited:
            ct = self.latest.get("cpu_times")
            if ct is None:
                raise ProcessGone(self.pid)
            return float(ct[0]), float(ct[1])
        st = self._stat if self._stat is not None else self._proc_stat()
        if st is not None:
            return st[1], st[2]
        ct = self.process.cpu_times()
        return ct.user, ct.system

    def _rss(self) -> int:
        if self.exited:
            if "rss_bytes" not in self.latest:
                raise OSError("the process has exited")
            return int(self.latest["rss_bytes"])
        st = self._stat if self._stat is not None else self._proc_stat()
        if st is not None:
            return st[4]
        return int(self.process.memory_info().rss)

    def check_alive(self) -> None:
        """Raise ProcessGone if the pid has exited or was reused by another process."""
        self._stat = None
        st = self._proc_stat() if _HAVE_PROC else None
        if st is not None:
            if st[0] in (b"Z", b"X"):
                raise ProcessGone(self.pid)
            ct = st[3]
            self._stat = st
        else:
            try:
                ct = self.process.create_time()
                if not self.process.is_running() or self.process.status() == psutil.STATUS_ZOMBIE:
                    raise ProcessGone(self.pid)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                raise ProcessGone(self.pid) from None
            except psutil.AccessDenied:
                return
        if self.start_time is not None and abs(ct - self.start_time) > 1.0:
            raise ProcessGone(self.pid)

    def refresh(self) -> None:
        """Re-read the snapshot; raises ProcessGone when the app is gone."""
        try:
            snap = read_snapshot(self.path)
        except FileNotFoundError:
            raise ProcessGone(self.pid) from None
        if snap.get("start_time") != self.start_time:
            # the pid was reused by a new monitored application: treat the old one as gone
            raise ProcessGone(self.pid)
        self.latest = snap
        age = (time.monotonic_ns() - snap["mono_ns"]) / 1e9
        stale = age > STALE_AFTER_S
        self.error = f"stats snapshot is {age:.1f}s old: the application's publisher is not running" if stale else ""

    def update(self) -> None:
        """Take the newest snapshot before a collection: a live process's current one, or the
        final one an exited process left (``exited`` is then set).  Raises ProcessGone when the
        process is gone without a final snapshot."""
        if self.exited:
            return  # the final snapshot is read; the file may be gone since
        try:
            self.check_alive()
        except ProcessGone:
            if not self.take_final():
                raise
            return
        self.refresh()
        if self.latest.get("final"):  # written in its last moments: the process is exiting
            self.exited = True
            self.error = ""

    def take_final(self) -> bool:
        """Read the final snapshot the process left as it exited; False when there is none (it
        was killed, or the file is another process's now)."""
        if self.exited:
            return True
        try:
            snap = read_snapshot(self.path)
        except (OSError, SnapshotError):
            return False
        if not snap.get("final") or snap.get("start_time") != self.start_time or snap.get("pid") != self.pid:
            return False
        self.latest = snap
        self.exited = True
        self.error = ""
        return True

    def prime(self, from_start: bool) -> None:
        """Set every group's baseline: the current snapshot, or the app's start for late arrivals."""
        base = zero_snapshot(self.latest) if from_start else self.latest
        for g in ("neuroncore_counters", "execution_stats", "memory_used"):
            self.baselines[g] = base
        now = time.monotonic()
        # (an application seen first in its final snapshot: its memory period runs from its start)
        self.mem_last_t = self.latest["created_mono_ns"] / 1e9 if from_start and self.exited else now
        try:
            user, system = self._cpu_times()
            if from_start and self.start_time is not None:
                # CPU used since process start, over the wall time since then
                self.cpu_baseline = (now - max(0.0, time.time() - self.start_time), 0.0, 0.0)
            else:
                self.cpu_baseline = (now, user, system)
        except (psutil.Error, ProcessGone):
            self.cpu_baseline = None

    # ---------------------------------------------------------------- the four groups

    def neuroncore_counters(self) -> dict[str, Any]:
        new, old = self.latest, self.baselines["neuroncore_counters"]
        self.baselines["neuroncore_counters"] = new
        dt = (new["mono_ns"] - old["mono_ns"]) / 1e9
        cores: dict[str, Any] = {}
        error = ""
        for idx in sorted(set(new["cores"]) | {str(i) for i in new.get("nc_indices", [])}, key=int):
            c = new["cores"].get(idx, {"busy_ns": 0, "flops": 0.0, "flops_known": False})
            o = old["cores"].get(idx, {"busy_ns": 0, "flops": 0.0})
            if dt <= 0:
                util = flops = None
            else:
                util = round(min(100.0, 100.0 * max(0, c["busy_ns"] - o["busy_ns"]) / (dt * 1e9)), 2)
                flops = (c["flops"] - o["flops"]) / dt if c.get("flops_known") else None
                if flops is not None and not 0 <= flops < 2.0 ** 62:  # a reset or a damaged file
                    flops = None
            cores[idx] = {"neuroncore_utilization": util, "flops": None if flops is None else int(round(flops))}
        if dt <= 0:
            error = "the application published no new stats during the period"
        elif any(v["flops"] is None for v in cores.values()):
            error = "flops unknown for cores whose graphs have no flop count"
        return {"period": round(max(dt, 0.0), 9), "neuroncores_in_use": cores, "error": error}

    def execution_stats(self) -> dict[str, Any]:
        new, old = self.latest, self.baselines["execution_stats"]
        self.baselines["execution_stats"] = new
        dt = (new["mono_ns"] - old["mono_ns"]) / 1e9
        lat_new, lat_old = new["latency"], old["latency"]
        return {
            "period": round(max(dt, 0.0), 9),
            "error_summary": _counter_delta(new["errors"], old["errors"], ERROR_CLASSES),
            "execution_summary": _counter_delta(new["executions"], old["executions"], EXECUTION_STATUSES),
            "latency_stats": {
                "total_latency": _percentiles(lat_new["total"], lat_old.get("total")),
                "device_latency": _percentiles(lat_new["device"], lat_old.get("device")),
            },
            "error": "" if dt > 0 else "the application published no new stats during the period",
        }

    def memory_used(self) -> dict[str, Any]:
        new, old = self.latest, self.baselines["memory_used"]
        self.baselines["memory_used"] = new
        now = new["mono_ns"] / 1e9 if self.exited else time.monotonic()  # an exited one: until its exit
        period = round(max(0.0, now - self.mem_last_t), 9)
        self.mem_last_t = now
        errors: list[str] = []
        mem = new.get("memory", {})
        host_cats = mem.get("host") or {}
        try:
            rss: int | None = self._rss()
        except (psutil.Error, OSError) as exc:
            rss = None
            errors.append(f"cannot read the process's resident memory ({exc})")
        accounted = sum(int(host_cats.get(k, 0)) for k in ("constants", "dma_buffers", "tensors"))
        if rss is not None:
            host_total = max(rss, accounted)
            application = host_total - accounted
        else:
            application = int(host_cats.get("application_memory", 0))
            host_total = application + accounted
        host_breakdown = {
            "application_memory": application,
            "constants": int(host_cats.get("constants", 0)),
            "dma_buffers": int(host_cats.get("dma_buffers", 0)),
            "tensors": int(host_cats.get("tensors", 0)),
        }
        per_core = {
            str(k): {c: int(v.get(c, 0)) for c in CORE_MEMORY_CATEGORIES}
            for k, v in sorted(mem.get("per_core", {}).items(), key=lambda kv: int(kv[0]))
        }
        device_total = sum(sum(v.values()) for v in per_core.values())
        old_exec = {m["model_id"]: m.get("executions", 0) for m in old.get("models", [])}
        models = []
        for m in new.get("models", []):
            models.append({
                "name": m["name"],
                "uuid": m["uuid"],
                "model_id": m["model_id"],
                "is_running": m.get("executions", 0) > old_exec.get(m["model_id"], 0),
                "subgraphs": self._subgraphs(m, new.get("device_kind") == "cuda"),
            })
        if mem.get("host") is None and not mem.get("per_core"):
            errors.append("the runtime has not reported its memory categories; host total is the process RSS")
        return {
            "period": period,
            "neuron_runtime_used_bytes": {
                "host": host_total,
                "neuron_device": device_total,
                "usage_breakdown": {"host": host_breakdown, "neuroncore_memory_usage": per_core},
            },
            "loaded_models": models,
            "error": "; ".join(errors),
        }

    def _subgraphs(self, m: dict[str, Any], cuda: bool) -> dict[str, Any]:
        """The ``subgraphs`` object of a loaded model; built once per model since it never changes.

        The runtime accounts memory per graph, not per subgraph, so the whole
        graph's device memory is attributed to ``sg_00`` and the other
        subgraphs carry null; host memory per graph is not tracked (null).
        """
        cached = self._model_cache.get(m["uuid"])
        if cached is not None:
            return cached
        subgraphs: dict[str, Any] = {}
        for i in range(int(m.get("subgraphs", 1))):
            used: Any = None
            if i == 0:
                used = {
                    "host": None,
                    "neuron_device": m["constants_bytes"] + m["code_bytes"],
                    "usage_breakdown": {
                        "host": dict.fromkeys(HOST_MEMORY_CATEGORIES),
                        "neuron_device": {"constants": m["constants_bytes"], "model_code": m["code_bytes"],
                                          "runtime_memory": None, "tensors": None},
                    },
                }
            subgraphs[f"sg_{i:02d}"] = {
                "memory_used_bytes": used,
                "neuroncore_index": m["nc_idx"],
                "neuron_device_index": m["nc_idx"] if cuda else 0,
            }
        if len(self._model_cache) > 4096:
            self._model_cache.clear()
        self._model_cache[m["uuid"]] = subgraphs
        return subgraphs

    def neuron_runtime_vcpu_usage(self) -> dict[str, Any]:
        """User and system CPU of the application's process, as a percentage of all host vCPUs
        (of an exited one: from its final snapshot, up to its exit)."""
        now = self.latest["mono_ns"] / 1e9 if self.exited else time.monotonic()
        try:
            user, system = self._cpu_times()
        except ProcessGone:
            if not self.exited:
                raise
            return {"period": None, "vcpu_usage": None, "error": "the application exited without its CPU times"}
        except psutil.NoSuchProcess:
            raise ProcessGone(self.pid) from None
        except psutil.Error as exc:
            return {"period": None, "vcpu_usage": None, "error": f"cannot read CPU times of pid {self.pid}: {exc}"}
        base = self.cpu_baseline
        self.cpu_baseline = (now, user, system)
        if base is None:
            return {"period": 0.0, "vcpu_usage": None, "error": "no baseline sample yet"}
        dt = now - base[0]
        capacity = dt * _NCPU
        if capacity <= 0:
            return {"period": round(dt, 9), "vcpu_usage": None, "error": "zero-length period"}
        return {
            "period": round(dt, 9),
            "vcpu_usage": {
                "user": round(100.0 * max(0.0, user - base[1]) / capacity, 2),
                "system": round(100.0 * max(0.0, system - base[2]) / capacity, 2),
            },
            "error": "",
        }

    def collect(self, group: str) -> None:
        """Compute one group into ``results``."""
        fn: Callable[[], dict[str, Any]] = getattr(self, group)
        self.results[group] = fn()

    def entry(self, group_order: tuple[str, ...]) -> dict[str, Any]:
        """This application's element of ``neuron_runtime_data``."""
        return {
            "pid": self.pid,
            "address": os.path.abspath(self.path),  # where this application is read: its stats file
            "neuron_runtime_tag": self.tag,
            "error": self.error,
            "report": {g: self.results[g] for g in group_order if g in self.results},
        }


def process_start_time(pid: int) -> float | None:
    """Start time of a live process (psutil's create_time scale), or None when it is gone."""
    if _HAVE_PROC:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            return None
        if fields[0] in (b"Z", b"X"):
            return None
        return _BOOT_TIME + int(fields[19]) / _CLK_TCK
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def remove_stale(path: Path, pid: int) -> bool:
    """Delete the snapshot of a process that no longer exists; never touches a live process's file,
    nor a final snapshot other monitors may still have to read (those go by age and count:
    ``stats_files.prune_final_snapshots``)."""
    try:
        if stats_files.is_final_head(stats_files.read_head(path)):
            return False
        if psutil.pid_exists(pid):
            snap = read_snapshot(path)
            if snap.get("start_time") is not None:
                try:
                    if abs(psutil.Process(pid).create_time() - snap["start_time"]) <= 1.0:
                        return False
                except psutil.NoSuchProcess:
                    pass
            else:
                return False
        os.unlink(path)
        return True
    except (OSError, SnapshotError):
        return False
