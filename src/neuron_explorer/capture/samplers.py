"""Host samplers: per-CPU utilization and process/host memory, from /proc (``util.procfs``:
psutil's figures), and device memory by category from the runtime's memory source.

One daemon thread samples both at a fixed period.  Samples go into bounded rings of numpy rows
(like the event rings: the newest ``capacity`` samples are kept, the oldest overwritten and
counted), so a long job neither grows the process without bound nor makes every periodic write
re-encode a growing list.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from neuron_explorer.contracts.dataset import DEVICE_MEMORY_CATEGORIES, DEVICE_MEMORY_SOURCE
from neuron_explorer.util import procfs
from neuron_explorer.util.cgroup import CgroupMemory, Limit
from neuron_explorer.util.ranges import distinct

from ..runtime import clock
from ..runtime.core import get_runtime
from ..runtime.ring import read_file

# The default capacity keeps each sampler's rows under this many bytes (~70 h of samples at the
# default 250 ms on a small host, ~6 h on a 192-CPU one); NEURON_EXPLORER_MAX_SAMPLES overrides it.
SAMPLE_MEMORY_BUDGET = 64 << 20
MAX_DEFAULT_SAMPLES = 1_000_000
MEM_COLUMNS = ("process_rss", "process_vms", "host_total", "host_used", "host_available")
_DEV_COL = {c: i for i, c in enumerate(DEVICE_MEMORY_CATEGORIES)}


class SampleRing:
    """The newest ``capacity`` samples: a timestamp and a row of ``width`` values each.

    Storage grows by doubling as samples arrive, up to the capacity (never allocated from the
    capacity alone); beyond it the oldest sample is overwritten and counted in ``dropped``."""

    def __init__(self, capacity: int, width: int, dtype: str) -> None:
        if capacity < 1:
            raise ValueError(f"a sample ring needs a capacity of at least 1, not {capacity}")
        self.capacity = capacity
        self.ts = np.empty(0, dtype=np.int64)
        self.rows = np.empty((0, width), dtype=dtype)
        self.first = 0  # index of the oldest sample
        self.count = 0
        self.dropped = 0

    def __len__(self) -> int:
        return self.count

    def append(self, t: int, row) -> None:
        n = len(self.ts)
        if self.count == n:
            if n < self.capacity:
                self._grow(min(self.capacity, max(64, 2 * n)))
            else:  # full: overwrite the oldest
                self.first = (self.first + 1) % n
                self.count -= 1
                self.dropped += 1
        i = (self.first + self.count) % len(self.ts)
        self.ts[i] = t
        self.rows[i] = row
        self.count += 1

    def _grow(self, n: int) -> None:
        ts, rows = self.arrays()
        self.ts = np.empty(n, dtype=np.int64)
        self.rows = np.empty((n, self.rows.shape[1]), dtype=self.rows.dtype)
        self.ts[:len(ts)] = ts
        self.rows[:len(rows)] = rows
        self.first = 0

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the timestamps and rows, oldest first."""
        idx = (self.first + np.arange(self.count)) % max(len(self.ts), 1)
        return self.ts[idx], self.rows[idx]


def default_capacity(ncpu: int) -> int:
    """Samples kept by default: the CPU rows (timestamp, one float per CPU, the process's share and
    its main thread's run and wait shares) within SAMPLE_MEMORY_BUDGET, and at most
    MAX_DEFAULT_SAMPLES."""
    return max(1, min(MAX_DEFAULT_SAMPLES, SAMPLE_MEMORY_BUDGET // (8 + 4 * (ncpu + 3))))


def main_thread_times(pid: int) -> tuple[int, int] | None:
    """The time the process's main thread has run on a CPU and the time it has waited for one,
    runnable, since it began (the first two fields of Linux's ``/proc/<pid>/schedstat``, ns), or
    None where they cannot be read."""
    try:
        ran, waited = (procfs.read(f"/proc/{pid}/schedstat") or b"").split()[:2]
        return int(ran), int(waited)
    except ValueError:  # (unreadable, or not two numbers)
        return None


# shares of a shorter period are not taken: the kernel updates a running thread's times at its
# clock ticks and switches, so a period of microseconds reads 0 or several hundred percent
SHORTEST_PERIOD_NS = 1_000_000


class MainThreadShares:
    """The shares of each period between two reads that the main thread ran and waited for a CPU
    (100 = the whole period; NaN when either read failed or the period was shorter than
    SHORTEST_PERIOD_NS): decision 0203."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.last: tuple[int, tuple[int, int] | None] = (clock.now_ns(), main_thread_times(pid))

    def __call__(self, t: int) -> tuple[float, float]:
        (t0, a), b = self.last, main_thread_times(self.pid)
        self.last = (t, b)
        if a is None or b is None or t - t0 < SHORTEST_PERIOD_NS or b[0] < a[0] or b[1] < a[1]:
            return float("nan"), float("nan")
        return 100.0 * (b[0] - a[0]) / (t - t0), 100.0 * (b[1] - a[1]) / (t - t0)


class HostSampler:
    def __init__(self, pid: int, period_s: float, cpu: bool = True, mem: bool = True,
                 max_samples: int | None = None, ncpu: int | None = None) -> None:
        """``max_samples``: samples kept per sampler (default: ``default_capacity``); ``ncpu``:
        the logical CPUs sampled (default: the host's)."""
        self.pid = pid
        self.period_s = period_s
        self.cpu = cpu
        self.mem = mem
        self.ncpu = ncpu or procfs.cpu_count()
        cap = max_samples or default_capacity(self.ncpu)
        # CPU rows: one percentage per logical CPU, then this process's, then its main thread's run
        # and wait shares
        self.cpu_ring = SampleRing(cap, self.ncpu + 3, "float32")
        # the main thread's times and this process's CPU time at the last sample (read again at start)
        self._main = MainThreadShares(pid)
        self._own = (clock.now_ns(), time.process_time_ns())
        self.mem_ring = SampleRing(cap, len(MEM_COLUMNS), "int64")
        # device memory by category (docs/decisions/0031-device-memory-by-category.md): one ring per
        # core, a column per category, -1 where the source did not know it
        self.capacity = cap
        self.dev_rings: dict[int, SampleRing] = {}
        self.dev_error: str | None = None
        # the monitored process's cgroup memory limit files (decision 0182), found at the first write
        self._cgroup: CgroupMemory | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # another process's CPU share (this process's is read to the ns: ``sample``); None when
        # ``pid`` could not be read at the start (then it reads 0 and no memory, as it always did)
        self._proc: procfs.ProcessCpuPercent | None = (
            procfs.ProcessCpuPercent(pid) if procfs.process_memory(pid) is not None else None)
        self._per_cpu = procfs.CpuPercent()
        self.lock = threading.Lock()

    def start(self) -> None:
        # /proc read with the GIL held: the training thread is not made to hand it over around each
        # system call of a sample (decision 0217); the stats publisher's reads too
        procfs.use_reader(read_file)
        if not (self.cpu or self.mem):
            return
        # prime the "since last call" counters so the first sample is meaningful
        self._per_cpu()
        if self.cpu:
            self._main = MainThreadShares(self.pid)
            self._own = (clock.now_ns(), time.process_time_ns())
        if self._proc is not None and self._proc() is None:
            self._proc = None
        self.sample()
        self._thread = threading.Thread(target=self._run, name="neuron-explorer-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def record_cpu(self, t: int, per_cpu: list[float], process: float,
                   main: tuple[float, float] = (float("nan"), float("nan"))) -> None:
        """One CPU sample: a percentage per logical CPU, this process's (100 = one CPU) and the shares
        of the period its main thread ran and waited for a CPU (``MainThreadShares``)."""
        row = list(per_cpu[:self.ncpu]) + [0.0] * (self.ncpu - len(per_cpu)) + [process, *main]
        with self.lock:
            self.cpu_ring.append(t, row)

    def record_mem(self, t: int, row: tuple[int, int, int, int, int]) -> None:
        """One memory sample: MEM_COLUMNS in bytes."""
        with self.lock:
            self.mem_ring.append(t, row)

    def sample(self) -> None:
        t = clock.now_ns()
        proc = self._proc
        if self.cpu:
            pct = self._per_cpu()
            p = 0.0
            if self.pid == os.getpid():  # this process: its CPU time to the ns, not in clock ticks
                (t0, c0), c = self._own, time.process_time_ns()
                self._own = (t, c)
                # (the sample taken at the start, microseconds after the first read: 0, as psutil
                # read it, not a share of a moment that a clock tick's update makes 200%)
                p = 100.0 * (c - c0) / (t - t0) if t - t0 >= SHORTEST_PERIOD_NS else 0.0
            elif proc is not None:
                got = proc()
                p = float("nan") if got is None else got
            self.record_cpu(t, pct, p, self._main(t))
        if self.mem:
            total, avail = procfs.host_memory() or (0, 0)
            rss, vms = (procfs.process_memory(self.pid) or (0, 0)) if proc is not None else (0, 0)
            self.record_mem(t, (rss, vms, total, total - avail, avail))
            self.sample_device_memory(t)

    def memory_limit(self, host_total: int) -> Limit | None:
        """The monitored process's cgroup memory limit now, when below the host's memory
        ``host_total`` (``util.cgroup``: never raises).  Read when host_mem.pb is written, not at
        each sample: a read costs about a third of a sample (decision 0182)."""
        if self._cgroup is None:
            self._cgroup = CgroupMemory.find(self.pid)
        lim = self._cgroup.read()
        return lim if lim is not None and lim.bytes < host_total else None

    def sample_device_memory(self, t: int) -> None:
        """Ask the runtime's memory source (an integration registers it) for bytes by core and
        category; a source that fails is remembered once and not asked again."""
        rt = get_runtime()
        src = rt.consumer(DEVICE_MEMORY_SOURCE) if rt is not None and self.dev_error is None else None
        if src is None:
            return
        try:
            values = src()
        except Exception as e:  # noqa: BLE001 - a sampler never takes the process down
            self.dev_error = f"{type(e).__name__}: {e}"
            return
        self.record_device_memory(t, values)

    def record_device_memory(self, t: int, values: dict[tuple[int, str], int]) -> None:
        """One device memory sample: ``{(nc, category): bytes}``; unknown categories are ignored."""
        rows: dict[int, list[int]] = {}
        for (nc, cat), v in values.items():
            if cat in _DEV_COL:
                rows.setdefault(int(nc), [-1] * len(DEVICE_MEMORY_CATEGORIES))[_DEV_COL[cat]] = int(v)
        with self.lock:
            for nc, row in rows.items():
                ring = self.dev_rings.get(nc)
                if ring is None:
                    ring = self.dev_rings[nc] = SampleRing(self.capacity, len(DEVICE_MEMORY_CATEGORIES), "int64")
                ring.append(t, row)

    def device_memory_columns(self) -> tuple[np.ndarray, list[str], np.ndarray, int]:
        """Timestamps, series names (``nc<N>.<category>``), values [samples x names] with -1 where a
        series has no sample at that time, and samples dropped."""
        with self.lock:
            parts = [(nc, *r.arrays(), r.dropped) for nc, r in sorted(self.dev_rings.items())]
        if not parts:
            return np.empty(0, np.int64), [], np.empty((0, 0), np.int64), 0
        ts = distinct(np.concatenate([p[1] for p in parts]))
        names: list[str] = []
        cols: list[np.ndarray] = []
        for nc, pts, rows, _ in parts:
            at = np.searchsorted(ts, pts)
            for j, cat in enumerate(DEVICE_MEMORY_CATEGORIES):
                if (rows[:, j] >= 0).any():
                    col = np.full(len(ts), -1, np.int64)
                    col[at] = rows[:, j]
                    names.append(f"nc{nc}.{cat}")
                    cols.append(col)
        values = np.stack(cols, axis=1) if cols else np.empty((len(ts), 0), np.int64)
        return ts, names, values, sum(p[3] for p in parts)

    def cpu_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """Timestamps, per-CPU percentages [samples x ncpu], process percentages, the main thread's
        run and wait percentages [samples x 2], samples dropped."""
        with self.lock:
            ts, rows = self.cpu_ring.arrays()
            return ts, rows[:, :-3], rows[:, -3], rows[:, -2:], self.cpu_ring.dropped

    def mem_columns(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Timestamps, rows of MEM_COLUMNS, samples dropped."""
        with self.lock:
            ts, rows = self.mem_ring.arrays()
            return ts, rows, self.mem_ring.dropped

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self.period_s + 1)
        if self.cpu or self.mem:
            self.sample()
