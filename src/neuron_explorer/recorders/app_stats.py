"""Per-application statistics that neuron-monitor reads.

The runtime layer calls the ``on_*`` hooks from the application's threads.
Each hook only updates in-memory counters under an uncontended lock; the
serialisation to JSON and the file write happen on a daemon thread every
``interval_s`` (0.5 s by default) or when :meth:`AppStats.publish` is called,
so a training step never waits for I/O.

Counters are cumulative since the process started.  The monitor subtracts two
snapshots to get the values "for the captured period" that the report format
asks for, which means any number of monitors can read the same application
without resetting each other's view.
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

from neuron_explorer.contracts import stats_files, stats_histogram
from neuron_explorer.contracts.dataset import DEVICE_MEMORY_TO_MONITOR
from neuron_explorer.contracts.events import RECORD_WIDTH
from neuron_explorer.contracts.stats_files import (
    CORE_MEMORY_CATEGORIES,
    ERROR_CLASSES,
    EXECUTION_STATUSES,
    HOST_MEMORY_CATEGORIES,
    SNAPSHOT_FORMAT,
)
from neuron_explorer.runtime.ring import NativeRing
from neuron_explorer.util import jsonfast as _json, procfs
from neuron_explorer.util.ranges import distinct

#: Outcomes for which the execution actually ran, so its latency is meaningful.
_TIMED_STATUSES = frozenset({"completed", "completed_with_err", "completed_with_num_err", "timed_out"})

TAG_ENV = "NEURON_PROCESS_TAG"
MAX_TAG_LEN = 255


def _process_start_time(pid: int) -> float | None:
    """Process start time as psutil reports it (``util.procfs``, without psutil's import); lets the
    monitor tell a reused pid from ours (None: it falls back to pid liveness only)."""
    return procfs.process_start_time(pid)


def _exit_facts() -> dict[str, Any]:
    """This process's CPU times and resident memory, for its final snapshot."""
    t = os.times()
    facts: dict[str, Any] = {"cpu_times": [round(t.user, 6), round(t.system, 6)]}
    try:
        with open("/proc/self/statm", "rb") as f:
            facts["rss_bytes"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    return facts


# runtime status code -> execution outcome; outcomes are counted as indices into EXECUTION_STATUSES
_RET_STATUS = {0: "completed", 1003: "completed_with_num_err", 5: "timed_out", 1002: "incorrect_input",
               7: "failed_to_queue"}
_STATUS_INDEX = {name: i for i, name in enumerate(EXECUTION_STATUSES)}
_TIMED_INDICES = sorted(_STATUS_INDEX[x] for x in _TIMED_STATUSES)

_publishers: dict[str, "AppStats"] = {}  # snapshot path -> the AppStats publishing it
_registry_lock = threading.Lock()


# Busy time is the union of the core's execution intervals (util.intervals, as in ``view``):
# overlapping executions count once.  Each batch is merged with the runs of the batches before it
# that ended within TAIL_NS of the latest end (at most TAIL_RUNS of them), so an execution that
# overlaps one counted in an earlier snapshot is not counted twice.
TAIL_NS = 10_000_000_000
TAIL_RUNS = 4096
# executions held per core between two publisher runs (the oldest are dropped beyond it)
RAW_CAPACITY = 1_000_000
# how long a second stop() waits for the one already ending the snapshot file (a small write)
END_WAIT_S = 10.0


class _Core:
    __slots__ = ("busy_ns", "flops", "flops_known", "executions", "tail_s", "tail_e")

    def __init__(self) -> None:
        self.busy_ns = 0
        self.flops = 0.0
        self.flops_known = False
        self.executions = 0
        self.tail_s = self.tail_e = None  # merged runs already counted in busy_ns

    def add_busy(self, starts, ends) -> None:
        """Add the union of ``[start, end)`` intervals (monotonic ns) to the busy time."""
        import numpy as np  # (not at import: the runtime starts this publisher in every process)

        from neuron_explorer.util import intervals

        if self.tail_s is not None:
            starts, ends = np.r_[self.tail_s, starts], np.r_[self.tail_e, ends]
        counted = 0 if self.tail_s is None else int((self.tail_e - self.tail_s).sum())
        rs, re_ = intervals.merge(starts, ends)
        self.busy_ns += int((re_ - rs).sum()) - counted
        keep = re_ > re_[-1] - TAIL_NS
        self.tail_s, self.tail_e = rs[keep][-TAIL_RUNS:], re_[keep][-TAIL_RUNS:]


class AppStats:
    """Cheap counters for one process, published as a private snapshot file.

    Args:
        tag: the application's tag; defaults to ``NEURON_PROCESS_TAG``, else the pid.
        pid: the process id (defaults to the current process).
        instance_id: the instance this process runs on (EC2 id or host name).
        nc_indices: the NeuronCores (CUDA devices, or the local rank on CPU) this process uses.
        stats_dir: directory for the snapshot; defaults to :func:`stats_files.default_stats_dir`.
        interval_s: how often the publisher thread rewrites the snapshot.
        idle_interval_s: when set, the snapshot is rewritten this often only, while no monitor
            has announced itself in ``stats_dir`` (``stats_files.monitor_present``, checked every
            ``interval_s``); the runtime sets it (docs/decisions/0063).
        device_kind: ``"cuda"`` when cores are GPUs (device index == core index), ``"cpu"``
            when the CPU is Neuron device 0.
        workload: whether the process already runs a workload.  False: nothing is published (no
            snapshot, no final one) until :meth:`begin_workload`; the runtime starts its counters
            so in every process that has one of the variables set, and marks the workload when a
            framework is hooked (docs/decisions/0095-monitor-lists-workloads.md).  A hand-made
            AppStats feeds counters of its own: a workload from the start.
    """

    def __init__(
        self,
        tag: str | None = None,
        pid: int | None = None,
        instance_id: str | None = None,
        nc_indices: list[int] | None = None,
        *,
        stats_dir: str | os.PathLike[str] | None = None,
        interval_s: float = 0.5,
        idle_interval_s: float | None = None,
        device_kind: str = "cpu",
        workload: bool = True,
    ) -> None:
        self.pid = int(pid) if pid is not None else os.getpid()
        self.workload = bool(workload)
        self._publish_soon = False  # the workload has just begun: publish at the next wake-up
        self._ended = False  # stop() has left the final snapshot or removed the file
        self._end_done = threading.Event()  # ... and is through (set: nothing under way)
        self._end_done.set()
        if tag is None:
            tag = os.environ.get(TAG_ENV) or str(self.pid)
        self.tag = str(tag)[:MAX_TAG_LEN]
        self.instance_id = instance_id or socket.gethostname()
        self.nc_indices = sorted(set(int(i) for i in (nc_indices if nc_indices is not None else [0])))
        self.device_kind = device_kind
        self.stats_dir = Path(stats_dir) if stats_dir is not None else stats_files.default_stats_dir()
        self.interval_s = float(interval_s)
        self.idle_interval_s = None if idle_interval_s is None else max(float(idle_interval_s), self.interval_s)
        self.path = stats_files.snapshot_path(self.stats_dir, self.pid)

        # the process that owns the snapshot file: a forked child inherits this object but must
        # neither overwrite nor delete its parent's file
        self._owner_pid = os.getpid()
        self._lock = threading.Lock()
        self._publish_lock = threading.Lock()
        self._created_mono_ns = time.monotonic_ns()
        self._start_time = _process_start_time(self.pid)
        self._executions = dict.fromkeys(EXECUTION_STATUSES, 0)
        self._errors = dict.fromkeys(ERROR_CLASSES, 0)
        self._cores: dict[int, _Core] = {i: _Core() for i in self.nc_indices}
        self._lat_total = [0] * stats_histogram.NUM_BUCKETS
        self._lat_device = [0] * stats_histogram.NUM_BUCKETS
        self._host_mem: dict[str, int] | None = None
        self._core_mem: dict[int, dict[str, int]] = {}
        self._memory_source = None  # see set_memory_source
        self._models: dict[int, dict[str, Any]] = {}
        self._seq = 0

        # executions counted through on_execution, applied with the runtime's records before each
        # snapshot: (model_id, nc_idx, host_ns, device_ns, status, busy_start, busy_end)
        self._pending: deque = deque(maxlen=1_000_000)
        self._raw: dict[int, Any] = {}  # per core: the runtime's own execution records (a C ring or a deque)

        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._atexit_registered = False
        self.last_error: str | None = None

    # ------------------------------------------------------------------ hooks (hot path)

    def on_model_load(
        self,
        model_id: int,
        name: str,
        nc_idx: int,
        flops: float | None,
        subgraphs: int = 1,
        code_bytes: int = 0,
        constants_bytes: int = 0,
    ) -> None:
        """Record a compiled graph; ``flops`` is per execution, counted once at compile time."""
        entry = {
            "model_id": int(model_id),
            "name": str(name),
            "uuid": uuid.uuid4().hex,
            "nc_idx": int(nc_idx),
            "flops": float(flops) if flops is not None else None,
            "subgraphs": max(1, int(subgraphs)),
            "code_bytes": int(code_bytes),
            "constants_bytes": int(constants_bytes),
            "executions": 0,
        }
        with self._lock:
            self._models[int(model_id)] = entry
            if int(nc_idx) not in self._cores:
                self._cores[int(nc_idx)] = _Core()

    def set_model_flops(self, model_id: int, flops: float) -> None:
        """A graph's flop count learned after its load (an eager graph counts its first call);
        executions counted from now on add them."""
        with self._lock:
            m = self._models.get(int(model_id))
            if m is not None:
                m["flops"] = float(flops)

    def on_execution(self, model_id: int, nc_idx: int, host_ns: int, device_ns: int, status: str,
                     end_ns: int | None = None) -> None:
        """Count one execution: its outcome, latencies, busy time and flops on its core.

        ``device_ns`` is the time the core was busy; a negative value means the substrate could
        not measure it, and the host time is used for busy time.  ``end_ns`` is when the core's
        work ended (``time.monotonic_ns()``; default: now), which places the busy interval so
        overlapping executions count once.  Applied with the runtime's records before each
        snapshot."""
        if status not in self._executions:
            raise ValueError(f"unknown execution status {status!r}; expected one of {', '.join(EXECUTION_STATUSES)}")
        end = time.monotonic_ns() if end_ns is None else int(end_ns)
        busy = device_ns if device_ns >= 0 else host_ns
        self._pending.append((int(model_id), int(nc_idx), int(host_ns), int(device_ns), status, end - busy, end))

    def on_error(self, err_class: str) -> None:
        """Count one error of a class from the report's ``error_summary``."""
        with self._lock:
            try:
                self._errors[err_class] += 1
            except KeyError:
                raise ValueError(
                    f"unknown error class {err_class!r}; expected one of {', '.join(ERROR_CLASSES)}"
                ) from None

    def set_memory(self, host: dict[str, int], per_core: dict[int, dict[str, int]]) -> None:
        """Replace the memory accounting (bytes by category) with the runtime's current view."""
        for key in host:
            if key not in HOST_MEMORY_CATEGORIES:
                raise ValueError(
                    f"unknown host memory category {key!r}; expected {', '.join(HOST_MEMORY_CATEGORIES)}"
                )
        for cats in per_core.values():
            for key in cats:
                if key not in CORE_MEMORY_CATEGORIES:
                    raise ValueError(
                        f"unknown core memory category {key!r}; expected {', '.join(CORE_MEMORY_CATEGORIES)}"
                    )
        h = {k: int(host.get(k, 0)) for k in HOST_MEMORY_CATEGORIES}
        pc = {int(nc): {k: int(c.get(k, 0)) for k in CORE_MEMORY_CATEGORIES} for nc, c in per_core.items()}
        with self._lock:
            self._host_mem = h
            self._core_mem = pc

    def set_memory_source(self, source) -> None:
        """Take the per-core memory from ``source()`` -> ``{(nc, category): bytes}`` (categories of
        ``contracts.dataset.DEVICE_MEMORY_CATEGORIES``) at every snapshot, mapped onto the report's
        categories: the same numbers a capture's ``device_mem`` counters show."""
        self._memory_source = source

    def _sample_memory(self) -> None:
        src = self._memory_source
        if src is None:
            return
        try:
            values = src()
        except Exception as exc:  # noqa: BLE001 - a failing source is dropped, never fatal
            self._memory_source = None
            self.last_error = f"memory source: {type(exc).__name__}: {exc}"
            return
        per_core: dict[int, dict[str, int]] = {}
        for (nc, cat), v in values.items():
            key = DEVICE_MEMORY_TO_MONITOR.get(cat)
            if key is not None:
                c = per_core.setdefault(int(nc), dict.fromkeys(CORE_MEMORY_CATEGORIES, 0))
                c[key] += int(v)
        with self._lock:
            self._core_mem = per_core

    # ------------------------------------------------------------------ publishing

    def runtime_feed(self, nc_idx: int):
        """An append function for the runtime's execution records of core ``nc_idx``.

        The runtime appends the very tuple it puts in its capture ring --
        ``(type, start_ns, end_ns, thread, model_id, exec_id, ret, device_start_ns, device_end_ns)``
        -- so counting an execution adds no allocation to its hot path."""
        q = self._raw.get(nc_idx)
        if q is None:
            # the C ring when there is one: the C execution wrapper then pushes the row itself (no
            # tuple per execution); a Python producer's append converts its tuple
            q = self._raw[nc_idx] = NativeRing(RAW_CAPACITY, RECORD_WIDTH) if NativeRing is not None \
                else deque(maxlen=RAW_CAPACITY)
        return q.append

    def _raw_columns(self) -> list[tuple]:
        """The runtime's records taken since the last call, per core as columns (model id, core,
        host ns, device ns, status index into EXECUTION_STATUSES, busy start, busy end)."""
        import numpy as np

        out = []
        for nc, q in list(self._raw.items()):
            if isinstance(q, deque):
                pop = q.popleft
                rows = np.array([pop() for _ in range(len(q))], dtype=np.int64).reshape(-1, RECORD_WIDTH)
            else:
                rows = np.frombuffer(q.take(), dtype=np.int64).reshape(-1, RECORD_WIDTH)
            if not len(rows):
                continue
            on_dev = rows[:, 8] > 0  # the core's own span measured (CUDA events), else the host call's
            s = np.where(on_dev, rows[:, 7], rows[:, 1])
            e = np.where(on_dev, rows[:, 8], rows[:, 2])
            st = np.full(len(rows), _STATUS_INDEX["completed_with_err"], dtype=np.int64)
            for code, name in _RET_STATUS.items():
                st[rows[:, 6] == code] = _STATUS_INDEX[name]
            out.append((rows[:, 4], np.full(len(rows), nc, dtype=np.int64), rows[:, 2] - rows[:, 1], e - s, st, s, e))
        return out

    def drain_pending(self) -> int:
        """Apply the executions counted through :meth:`on_execution` and :meth:`runtime_feed`, in
        one batch; returns how many.

        The hot path only appended rows (or tuples); counting them here in numpy columns keeps the
        publisher's cost per execution well under a microsecond."""
        import numpy as np

        q = self._pending
        pop = q.popleft
        recs = [pop() for _ in range(len(q))]
        parts = self._raw_columns() if self._raw else []
        if recs:
            mids, ncs, host, dev, status, b_start, b_end = zip(*recs)
            parts.append(tuple(np.asarray(c, dtype=np.int64) for c in (mids, ncs, host, dev))
                         + (np.asarray([_STATUS_INDEX[x] for x in status], dtype=np.int64),
                            np.asarray(b_start, dtype=np.int64), np.asarray(b_end, dtype=np.int64)))
        if not parts:
            return 0
        mid_a, nc_a, host_a, dev_a, st_a, bs, be = (np.concatenate(c) for c in zip(*parts))
        n = len(mid_a)
        timed = np.isin(st_a, _TIMED_INDICES)
        lat_total = np.bincount(stats_histogram.bucket_indices(host_a[timed]), minlength=stats_histogram.NUM_BUCKETS)
        measured = timed & (dev_a >= 0)
        lat_dev = np.bincount(stats_histogram.bucket_indices(dev_a[measured]), minlength=stats_histogram.NUM_BUCKETS)
        by_status = np.bincount(st_a, minlength=len(EXECUTION_STATUSES))
        with self._lock:
            for k in np.flatnonzero(by_status).tolist():
                self._executions[EXECUTION_STATUSES[k]] += int(by_status[k])
            for mid, c in zip(*np.unique(mid_a, return_counts=True)):
                m = self._models.get(int(mid))
                if m is not None:
                    m["executions"] += int(c)
            for nc in distinct(nc_a[timed]).tolist():
                core = self._cores.get(nc)
                if core is None:
                    core = self._cores[nc] = _Core()
                sel = timed & (nc_a == nc)
                core.add_busy(bs[sel], be[sel])
                core.executions += int(sel.sum())
                for mid, c in zip(*np.unique(mid_a[sel], return_counts=True)):
                    m = self._models.get(int(mid))
                    if m is not None and m["flops"] is not None:
                        core.flops += m["flops"] * int(c)
                        core.flops_known = True
            for i in np.flatnonzero(lat_total).tolist():
                self._lat_total[i] += int(lat_total[i])
            for i in np.flatnonzero(lat_dev).tolist():
                self._lat_device[i] += int(lat_dev[i])
        return n

    def snapshot(self, final: bool = False) -> dict[str, Any]:
        """A JSON-ready copy of every counter; taken under the lock so it is consistent.

        ``final``: the process's last one, written as it exits (see :meth:`stop`): marked
        ``"final": true`` right after the format, with the process's own CPU times and resident
        memory, which the monitor can no longer read from ``/proc`` once the process is gone."""
        self.drain_pending()
        self._sample_memory()
        exit_facts = _exit_facts() if final else None
        with self._lock:
            self._seq += 1
            cores = {
                str(i): {
                    "busy_ns": c.busy_ns,
                    "flops": c.flops,
                    "flops_known": c.flops_known,
                    "executions": c.executions,
                }
                for i, c in sorted(self._cores.items())
            }
            snap = {
                "format": SNAPSHOT_FORMAT,
                **({"final": True} if final else {}),  # (second key: stats_files.is_final_head reads it)
                "pid": self.pid,
                "tag": self.tag,
                "instance_id": self.instance_id,
                "start_time": self._start_time,
                "device_kind": self.device_kind,
                "nc_indices": self.nc_indices,
                "seq": self._seq,
                "created_mono_ns": self._created_mono_ns,
                "mono_ns": time.monotonic_ns(),
                "wall_time": time.time(),
                "executions": dict(self._executions),
                "errors": dict(self._errors),
                "cores": cores,
                "latency": {
                    "layout": [stats_histogram.MIN_NS, stats_histogram.BUCKETS_PER_DECADE, stats_histogram.DECADES],
                    "total": stats_histogram.to_run(self._lat_total),
                    "device": stats_histogram.to_run(self._lat_device),
                },
                "memory": {
                    "host": dict(self._host_mem) if self._host_mem is not None else None,
                    "per_core": {str(k): dict(v) for k, v in sorted(self._core_mem.items())},
                },
                "models": [dict(m) for m in self._models.values()],
            }
            if exit_facts:
                snap.update(exit_facts)
        return snap

    def forget_after_fork(self) -> None:
        """In a forked child (which never publishes): new locks, since the parent's publisher
        thread may have held one at the fork and does not exist here to release it."""
        self._lock = threading.Lock()
        self._publish_lock = threading.Lock()

    def publish(self, final: bool = False) -> Path:
        """Write the snapshot now; the rename makes the new file appear whole or not at all.
        ``final``: the last one, left behind at exit (:meth:`stop`).

        Raises :class:`~neuron_explorer.contracts.stats_files.EndpointError` or OSError when the
        stats directory cannot be used; does nothing in a forked child.
        """
        if os.getpid() != self._owner_pid:
            return self.path
        # one publisher at a time: a snapshot taken earlier must never replace a newer one,
        # or the monitor would see counters go backwards
        with self._publish_lock:
            data = _json.dumps_bytes(self.snapshot(final=final))
            stats_files.ensure_private_dir(self.stats_dir)
            tmp = self.path.with_name(f".{self.pid}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        return self.path

    def _due(self, last: float) -> bool:
        """Whether the publisher writes now: always without ``idle_interval_s``; with it, when a
        monitor is present or the snapshot is ``idle_interval_s`` old.

        Why: each publish runs on a thread that slept since the last one, with cold caches: on the
        toy training step it cost ~4.5 ms of CPU, 0.9% of the training thread's time at two a
        second, mostly for no reader. One ``stat`` tells whether someone reads."""
        if self.idle_interval_s is None or time.monotonic() - last >= self.idle_interval_s:
            return True
        return stats_files.monitor_present(self.stats_dir)

    def begin_workload(self) -> None:
        """The process runs a workload from now on (its runtime is live in a framework): it
        becomes an application for the monitors, published at once by the publisher thread.
        Cheap (called while the framework is being imported)."""
        if self.workload:
            return
        self._publish_soon = True
        self.workload = True
        self._wake.set()

    def _run(self) -> None:
        last = time.monotonic()  # start() has just published (if there was a workload)
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self.workload:
                continue  # nothing to show: a process that runs no workload is no application
            if self._publish_soon:
                self._publish_soon = False
                # what counting needs, loaded now: a final snapshot, taken as a signal ends the
                # process, may import nothing (runtime/signals.py)
                import neuron_explorer.util.intervals  # noqa: F401
            elif not self._due(last):
                continue
            try:
                self.publish()
                self.last_error = None
            except Exception as exc:  # noqa: BLE001 - keep the application alive, remember why
                self.last_error = f"{type(exc).__name__}: {exc}"
            last = time.monotonic()

    def start(self) -> "AppStats":
        """Start the publisher thread and arrange for the snapshot to be removed at exit.

        One publisher per snapshot file: an AppStats started later for the same process (an
        application feeding its own counters) supersedes the one the runtime started."""
        if self._thread is not None and self._thread.is_alive():
            return self
        with _registry_lock:
            prev = _publishers.get(str(self.path))
            _publishers[str(self.path)] = self
        if prev is not None and prev is not self:
            prev.stop(remove=False)
        stats_files.ensure_private_dir(self.stats_dir)
        self._ended = False
        if self.workload:
            self.publish()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="neuron-explorer-stats", daemon=True)
        self._thread.start()
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        return self

    def stop(self, remove: bool = True) -> None:
        """Stop publishing, and end the snapshot file (``remove=False``: leave the file to the
        publisher that superseded this one).

        While a monitor is announced, the last counters are published once more, marked final, and
        left for the monitors to report (an execution of the last moments is never lost); the
        monitors forget the process after that, and old final snapshots are removed by age and
        count (``stats_files.prune_final_snapshots``, docs/decisions/0075-final-snapshots.md).  With no
        monitor the file is removed."""
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is not None and t.is_alive() and t is not threading.current_thread():
            t.join(timeout=2.0)
        self._thread = None
        if os.getpid() != self._owner_pid or not remove:
            return
        if not self.workload:
            with _registry_lock:
                if _publishers.get(str(self.path)) is self:
                    _publishers.pop(str(self.path), None)
            return  # never published: nothing to end
        with _registry_lock:
            # not when another publisher owns the file now, or it was ended already (one final)
            mine = _publishers.get(str(self.path)) in (None, self) and not self._ended
            if mine:
                _publishers.pop(str(self.path), None)
                self._ended = True
                self._end_done.clear()
        if not mine:
            if self._ended:
                # another thread ends it (the exit's hook and a signal's final write, together):
                # return once its final snapshot is whole, for the process may end right after
                self._end_done.wait(END_WAIT_S)
            return
        try:
            self._end()
        finally:
            self._end_done.set()

    def _end(self) -> None:
        """Leave the final snapshot for the monitors, or remove the file when none is announced."""
        try:
            if stats_files.monitor_present(self.stats_dir):
                self.publish(final=True)
                stats_files.prune_final_snapshots(self.stats_dir)
                return
        except Exception as exc:  # noqa: BLE001 - never in the way of the exit; remove the file
            self.last_error = f"final snapshot: {type(exc).__name__}: {exc}"
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
