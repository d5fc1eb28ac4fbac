"""The capture sink: drains the runtime's rings into bounded column stores and writes the session
directory, periodically (so a SIGKILL loses at most one period) and at stop.

Periodic writes rewrite the files atomically.  To keep that from competing with the workload on
large captures, the next periodic write is postponed to at least 20x the duration of the last one.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from ..runtime.core import Runtime
from . import writer
from .samplers import HostSampler
from ..runtime import clock
from ..runtime.events import EVENT_TYPES as _EVENT_TYPES
from .store import CoreStore, enabled_mask


class CaptureSink:
    name = "capture"

    def __init__(self, rt: Runtime, sampler_pid: int | None = None, config=None) -> None:
        """``config`` overrides the runtime's (a torch.profiler session has its own)."""
        cfg = self.cfg = config or rt.config
        self.rt = rt
        # events produced before this sink existed belong to no session of it
        self._base = {nc: st.ring.produced() for nc, st in rt.cores.items()}
        self.cores: dict[int, CoreStore] = {}
        self.session_dir: str | None = None
        self.note = ""
        self.sampler = HostSampler(sampler_pid or rt.ident.pid, cfg.sample_period_s, cfg.cpu_util, cfg.host_memory)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._io_lock = threading.Lock()
        self._next_write_gap = cfg.flush_period_s
        self.mask = enabled_mask([e and (cfg.type_filter is None or t.name in cfg.type_filter)
                                  for e, t in zip(rt.enabled, _EVENT_TYPES)])
        self.written = False
        self._owner_pid = os.getpid()
        self.start_anchor = rt.anchors[0]
        self.end_reason = "running"

    def start(self) -> None:
        self.start_anchor = clock.anchor("start")
        self.sampler.start()
        self._thread = threading.Thread(target=self._run, name="neuron-explorer-flush", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._next_write_gap):
            self.rt.flush(final=False)

    def drain(self) -> None:
        for nc, st in list(self.rt.cores.items()):
            if not self.cfg.nc_enabled(nc):
                st.ring.drain()
                continue
            store = self.cores.get(nc)
            if store is None:
                store = self.cores[nc] = CoreStore(nc, min(st.ring.capacity, self.cfg.max_events_per_nc))
            produced = st.ring.produced() - self._base.get(nc, 0)
            store.add(st.ring.drain(), self.mask, produced)

    def flush(self, rt: Runtime, final: bool, reason: str) -> None:
        if os.getpid() != self._owner_pid:
            return  # a forked child: the session directory is its parent's
        with self._io_lock:
            self.drain()
            if final:
                self.end_reason = reason
                self._stop.set()
                self.sampler.stop()
            if self.cfg.on_fail and not rt.failed:
                return  # capture only when the workload fails
            if _is_launcher():
                return  # torchrun's agent only spawns the workers, which profile themselves
            t0 = time.perf_counter()
            self.write()
            took = time.perf_counter() - t0
            # rewriting the files costs ~1 us per stored event: keep it under ~1% of the run
            self._next_write_gap = max(self.cfg.flush_period_s, 100 * took)

    def write(self) -> str:
        rt = self.rt
        if self.session_dir is None:
            self.session_dir = writer.make_session_dir(
                self.cfg.output_dir, rt.ident.instance_id, rt.ident.pid, self.start_anchor[1]
            )
        d = self.session_dir
        if self.cfg.system_profile:
            writer.atomic_write(os.path.join(d, "ntrace.pb"), writer.encode_system_trace(rt, self.cores))
        writer.atomic_write(os.path.join(d, "trace_info.pb"),
                            writer.encode_trace_info(rt, self.cores, d, self.note, self.cfg, self.start_anchor,
                                                     self.end_reason))
        if self.sampler.cpu:
            writer.atomic_write(os.path.join(d, "cpu_util.pb"), writer.encode_cpu_util(self.sampler))
        if self.sampler.mem:
            writer.atomic_write(os.path.join(d, "host_mem.pb"), writer.encode_host_mem(self.sampler))
        if rt.devprof is not None:
            rt.devprof.write(d)
        self.written = True
        return d


def _is_launcher() -> bool:
    """True in torchrun's agent (``torchrun`` or ``python -m torch.distributed.run``).

    Reads the real command line: while ``-m`` is still importing, ``sys.argv[0]`` is just '-m'."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        argv = list(sys.argv)
    launchers = ("torch.distributed.run", "torch.distributed.launch")
    for i, a in enumerate(argv[:4]):
        if os.path.basename(a) == "torchrun" or (a == "-m" and i + 1 < len(argv) and argv[i + 1] in launchers):
            return True
    return False


def report_written(sink: CaptureSink) -> None:
    if sink.session_dir and os.environ.get("NEURON_EXPLORER_QUIET", "") in ("", "0"):
        print(f"neuron-explorer: profile written to {sink.session_dir}", file=sys.stderr)

