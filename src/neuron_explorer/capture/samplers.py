"""Host samplers: per-CPU utilization and process/host memory, from /proc through psutil.

One daemon thread samples both at a fixed period; samples accumulate in plain lists and become
arrays only when written.
"""

from __future__ import annotations

import threading

import psutil

from ..runtime import clock


class HostSampler:
    def __init__(self, pid: int, period_s: float, cpu: bool = True, mem: bool = True) -> None:
        self.pid = pid
        self.period_s = period_s
        self.cpu = cpu
        self.mem = mem
        self.ncpu = psutil.cpu_count(logical=True) or 1
        self.cpu_ts: list[int] = []
        self.cpu_pct: list[list[float]] = []
        self.proc_pct: list[float] = []
        self.mem_ts: list[int] = []
        self.mem_rows: list[tuple[int, int, int, int, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            self._proc: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self._proc = None
        self.lock = threading.Lock()

    def start(self) -> None:
        if not (self.cpu or self.mem):
            return
        # prime the "since last call" counters so the first sample is meaningful
        psutil.cpu_percent(percpu=True)
        if self._proc is not None:
            try:
                self._proc.cpu_percent()
            except psutil.Error:
                self._proc = None
        self.sample()
        self._thread = threading.Thread(target=self._run, name="neuron-explorer-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def sample(self) -> None:
        t = clock.now_ns()
        proc = self._proc
        with self.lock:
            if self.cpu:
                pct = psutil.cpu_percent(percpu=True)
                p = 0.0
                if proc is not None:
                    try:
                        p = proc.cpu_percent()
                    except psutil.Error:
                        p = float("nan")
                self.cpu_ts.append(t)
                self.cpu_pct.append(pct)
                self.proc_pct.append(p)
            if self.mem:
                vm = psutil.virtual_memory()
                rss = vms = 0
                if proc is not None:
                    try:
                        mi = proc.memory_info()
                        rss, vms = mi.rss, mi.vms
                    except psutil.Error:
                        pass
                self.mem_ts.append(t)
                self.mem_rows.append((rss, vms, vm.total, vm.total - vm.available, vm.available))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self.period_s + 1)
        if self.cpu or self.mem:
            self.sample()

