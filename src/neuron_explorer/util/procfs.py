"""The host and process figures the capture's samplers take, read from Linux's ``/proc`` with
psutil's definitions and arithmetic, without importing psutil: its import is ~13 ms of CPU (eight
regular expressions, forty named tuples) in every profiled process, before the user's first line
(docs/decisions/0213-samplers-read-proc-themselves.md).  neuron-monitor, a process of its own,
keeps psutil.

Each reader returns None where the file cannot be read (a process that ended), as psutil raises
``psutil.Error`` there; ``tests/util/test_procfs.py`` compares every figure with psutil's.

Every file is read by one function, ``read`` below (Python's file object); a profiled process's
sampler puts the C extension's ``read_file`` in its place (``use_reader``), which keeps the GIL
through the read instead of handing it over around each system call
(docs/decisions/0217-proc-reads-keep-the-gil.md).
"""

from __future__ import annotations

import os
import time
from typing import Callable

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGESIZE = os.sysconf("SC_PAGE_SIZE")
# the per-CPU fields of /proc/stat in order (Linux >= 2.6.33), as psutil names them
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
_IDLE, _IOWAIT, _GUEST, _GUEST_NICE = 3, 4, 8, 9


def read_python(path: str) -> bytes | None:
    """The whole file at ``path``, or None where it cannot be opened or read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


_read: Callable[[str], bytes | None] = read_python


def use_reader(reader: Callable[[str], bytes | None] | None) -> None:
    """Read every file with ``reader`` (the same contract as ``read_python``) from now on; None
    puts ``read_python`` back."""
    global _read
    _read = reader or read_python


def read(path: str) -> bytes | None:
    """The whole file at ``path`` with the reader in use, or None where it cannot be read."""
    return _read(path)


def cpu_count() -> int:
    """Logical CPUs (psutil's ``cpu_count(logical=True)``: ``os.cpu_count()``), at least 1."""
    return os.cpu_count() or 1


def per_cpu_times(text: bytes | None = None) -> list[list[float]] | None:
    """Each logical CPU's times in seconds, ``CPU_FIELDS`` in order (fields a kernel lacks read
    0), from the ``cpuN`` lines of ``/proc/stat`` (``text``: its contents, for tests)."""
    if text is None:
        text = _read("/proc/stat")
        if text is None:
            return None
    rows = []
    for line in text.split(b"\n")[1:]:  # (the first line is the whole host)
        if line.startswith(b"cpu"):
            try:
                vals = [float(x) / CLOCK_TICKS for x in line.split()[1:len(CPU_FIELDS) + 1]]
            except ValueError:
                return None
            rows.append(vals + [0.0] * (len(CPU_FIELDS) - len(vals)))
    return rows


def busy_percent(t1: list[float], t2: list[float]) -> float:
    """One CPU's busy share between two reads, as psutil's ``cpu_percent`` computes it: per-field
    deltas (never negative), a total without the guest times (already in user and nice), busy =
    total - idle - iowait, rounded to 0.1; 0.0 when no time passed."""
    d = [max(0, b - a) for a, b in zip(t1, t2)]
    total = sum(d) - d[_GUEST] - d[_GUEST_NICE]
    busy = total - d[_IDLE] - d[_IOWAIT]
    try:
        return round((busy / total) * 100, 1)
    except ZeroDivisionError:
        return 0.0


class CpuPercent:
    """Per-CPU busy percentages since the previous call (psutil's ``cpu_percent(percpu=True)``
    with its state kept here, not in psutil's module: the first call primes and reads 0.0)."""

    def __init__(self) -> None:
        self.last = per_cpu_times()

    def __call__(self) -> list[float]:
        now = per_cpu_times()
        if now is None:
            return []
        last, self.last = self.last or now, now
        return [busy_percent(a, b) for a, b in zip(last, now)]


def host_memory(path: str = "/proc/meminfo") -> tuple[int, int] | None:
    """(total, available) bytes as psutil's ``virtual_memory()`` gives them: MemTotal and
    MemAvailable of ``/proc/meminfo``; on a kernel without MemAvailable (or reading 0) psutil's own
    estimate is asked for (its import, then, is the price of the same figure)."""
    text = _read(path)
    if text is None:
        return None
    mem = {}
    for line in text.split(b"\n"):
        parts = line.split()
        if len(parts) >= 2 and parts[0] in (b"MemTotal:", b"MemFree:", b"MemAvailable:"):
            try:
                mem[parts[0]] = int(parts[1]) * 1024
            except ValueError:
                return None
    total = mem.get(b"MemTotal:")
    avail = mem.get(b"MemAvailable:")
    if total is None or b"MemFree:" not in mem:
        return None
    if not avail:
        try:
            import psutil

            vm = psutil.virtual_memory()
            return int(vm.total), int(vm.available)
        except Exception:  # noqa: BLE001 - no estimate: report none
            return None
    if avail < 0:
        avail = 0
    elif avail > total:  # (a container's distorted figures: psutil, as procps, takes MemFree)
        avail = mem[b"MemFree:"]
    return total, avail


def process_memory(pid: int) -> tuple[int, int] | None:
    """(rss, vms) bytes of ``pid`` (``/proc/<pid>/statm``, psutil's ``memory_info()``)."""
    try:
        vms, rss = (_read(f"/proc/{pid}/statm") or b"").split()[:2]
        return int(rss) * PAGESIZE, int(vms) * PAGESIZE
    except ValueError:  # (unreadable, or not two numbers)
        return None


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces and
    parentheses: the last ``)`` ends it), or None where it cannot be read: the state is field 0,
    utime and stime 11 and 12, the start time in clock ticks since boot 19."""
    data = _read(f"/proc/{pid}/stat")
    if data is None:
        return None
    return data[data.rfind(b")") + 2:].split()


def process_cpu_times(pid: int) -> tuple[float, float] | None:
    """(user, system) CPU seconds of ``pid`` (psutil's ``cpu_times()``)."""
    f = stat_fields(pid)
    try:
        return (float(f[11]) / CLOCK_TICKS, float(f[12]) / CLOCK_TICKS) if f else None
    except (IndexError, ValueError):
        return None


class ProcessCpuPercent:
    """``pid``'s CPU since the previous call, 100 = one CPU (psutil's ``Process.cpu_percent()``,
    the same arithmetic: the first call primes and reads 0.0; None once the process cannot be
    read)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ncpu = cpu_count()
        self.last: tuple[float, tuple[float, float]] | None = None

    def __call__(self) -> float | None:
        st2, pt2 = time.monotonic() * self.ncpu, process_cpu_times(self.pid)
        if pt2 is None:
            return None
        last, self.last = self.last, (st2, pt2)
        if last is None:
            return 0.0
        st1, pt1 = last
        try:
            return round((((pt2[0] - pt1[0]) + (pt2[1] - pt1[1])) / (st2 - st1)) * 100 * self.ncpu, 1)
        except ZeroDivisionError:
            return 0.0


def boot_time() -> float | None:
    """The host's boot time, seconds since the epoch (``btime`` of ``/proc/stat``)."""
    for line in (_read("/proc/stat") or b"").split(b"\n"):
        if line.startswith(b"btime"):
            try:
                return float(line.split()[1])
            except (ValueError, IndexError):
                return None
    return None


def process_start_time(pid: int) -> float | None:
    """When ``pid`` started, seconds since the epoch (psutil's ``create_time()``: its start in
    clock ticks after boot, plus the boot time)."""
    f, bt = stat_fields(pid), boot_time()
    try:
        return float(f[19]) / CLOCK_TICKS + bt if f and bt is not None else None
    except (IndexError, ValueError):
        return None
