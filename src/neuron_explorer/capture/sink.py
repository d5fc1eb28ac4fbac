"""The capture sink: drains the runtime's rings into bounded column stores and writes the session
directory, periodically and at stop.

A write appends only the events recorded since the last one to the cores' segment files
(``capture.segments``, decision 0111) and rewrites the small files (the tables, trace_info.pb, the
host samples) atomically, so it costs the same at 10 thousand or 100 million stored events.  Writes
start one flush period apart (start to start), so a SIGKILL loses at most what was recorded in the
last flush period plus the duration of one write.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time

from neuron_explorer.contracts.env import quiet
from neuron_explorer.contracts.events import EVENT_TYPES as _EVENT_TYPES
from neuron_explorer.contracts.layout import make_session_dir
from neuron_explorer.util.log import get_logger
from neuron_explorer.util.procs import is_launcher

from ..runtime import clock
from ..runtime.core import Runtime
from . import writer
from .samplers import HostSampler
from .segments import SegmentWriter
from .store import CoreStore, enabled_mask

_FRAMEWORKS = ("torch", "jax")


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
        self.segments: SegmentWriter | None = None
        self.note = ""
        self.sampler = HostSampler(sampler_pid or rt.ident.pid, cfg.sample_period_s, cfg.cpu_util, cfg.host_memory,
                                   max_samples=cfg.max_samples)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._io_lock = threading.Lock()
        self._next_write_gap = cfg.flush_period_s
        self.mask = enabled_mask([e and (cfg.type_filter is None or t.name in cfg.type_filter)
                                  for e, t in zip(rt.enabled, _EVENT_TYPES)])
        self.written = False
        self._owner_pid = os.getpid()
        # write only once a framework is imported or a runtime event is recorded (set for the
        # runtime's own sink when started from the environment, see _has_content)
        self.require_framework = False
        self.last_write_wall_ns = 0  # when the last complete write finished (wall clock)
        self.last_write_s = 0.0  # how long the last complete flush took, drain included
        self.last_write_started_ns = 0  # monotonic start (before its drain) of the last complete flush
        self.write_error: str | None = None  # why the latest write failed, None after a success
        self.final_error: str | None = None  # why the final write failed
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
        self.rt.settle()
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
            self._flush_locked(rt, final, reason, time.monotonic_ns())

    def _flush_locked(self, rt: Runtime, final: bool, reason: str, started_ns: int) -> None:
        """The flush under the I/O lock: drain the rings, then write (``flush``).  Everything
        handed to a ring before ``started_ns`` is on disk once this returns without an error."""
        self.drain()
        if final:
            self.end_reason = reason
            self._stop.set()
            self.sampler.stop()
        if self.cfg.on_fail and not rt.failed:
            return  # capture only when the workload fails
        if is_launcher():
            return  # torchrun's agent only spawns the workers, which profile themselves
        if self.require_framework and not self._has_content():
            return  # a Python process that ran no framework (a tool, a helper): no profile
        try:
            self.write()
        except Exception as e:  # noqa: BLE001 - a write must never take the workload down
            self._write_failed(e, final)
            return
        finally:
            if final and self.segments is not None:
                self.segments.close()
        self.write_error = None
        self.last_write_started_ns = started_ns
        took = self.last_write_s = (time.monotonic_ns() - started_ns) / 1e9
        # one period from start to start; a write that takes longer than the period (a disk
        # slower than the events) leaves a tenth of the period before the next
        period = self.cfg.flush_period_s
        self._next_write_gap = max(period - took, period / 10)

    def _has_content(self) -> bool:
        """Has this process anything to profile?  Every Python process started with the variables
        set boots the runtime, including the ones a job starts for side tasks (Inductor checking
        that a kernel loads, build tools): those that never import a framework nor record an
        event leave no profile directory, as they leave no NDET log."""
        return (any(m in sys.modules for m in _FRAMEWORKS) or bool(self.rt.models)
                or any(st.recorded for st in self.cores.values()))

    def write(self) -> str:
        """Rewrite the session's files.  They are renamed into place together once all are
        written, so a failed write (a full disk) leaves the previous complete set, not a mix."""
        rt = self.rt
        if self.session_dir is None:
            self.session_dir = make_session_dir(
                self.cfg.output_dir, rt.ident.instance_id, rt.ident.pid, self.start_anchor[1]
            )
        d = self.session_dir
        if self.segments is None:
            self.segments = SegmentWriter(d)
        writer.write_session(d, rt, self.cores, self.sampler, note=self.note, cfg=self.cfg,
                             start_anchor=self.start_anchor, end_reason=self.end_reason, segments=self.segments)
        if rt.devprof is not None:
            rt.devprof.write(d)
        self.written = True
        self.last_write_wall_ns = time.time_ns()
        return d

    def _write_failed(self, e: Exception, final: bool) -> None:
        """Say once per distinct failure that the profile on disk is not current; the final
        failure is reported by ``report_written`` instead of "profile written"."""
        msg = describe_error(e)
        if final:
            self.final_error = msg
        elif msg != self.write_error:
            get_logger(__name__).warning(f"neuron-explorer: warning: capture write failed ({msg}); "
                                         f"{self.last_complete()}; retrying at the next flush")
        self.write_error = msg

    def last_complete(self) -> str:
        """Where and when the last complete write went, in words."""
        if not self.last_write_wall_ns:
            return "no complete profile has been written"
        t = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.last_write_wall_ns / 1e9))
        return f"the last complete write is from {t} UTC, in {self.session_dir}"


def report_written(sink: CaptureSink) -> None:
    """After the final write: where the profile is, or, when that write failed, that the profile
    is incomplete and what the files on disk hold (always said, even with NEURON_EXPLORER_QUIET)."""
    if sink.final_error is not None:
        get_logger(__name__).error(f"neuron-explorer: profile incomplete: the final write failed ({sink.final_error}); "
                                   f"{sink.last_complete()}")
    elif sink.session_dir and sink.written:
        say_written(sink.session_dir)


def say_written(session_dir: str) -> None:
    """"profile written to DIR" on stderr, unless NEURON_EXPLORER_QUIET is set (also said by
    the JAX conversion, which writes its session without a sink).  One write with its newline:
    ``print`` writes the newline apart, and the ranks of a torchrun job, sharing one stderr, ran
    two such lines together and left an empty line."""
    if not quiet():
        get_logger(__name__).info(f"neuron-explorer: profile written to {session_dir}")


def describe_error(e: BaseException) -> str:
    """``ENOSPC: No space left on device: '/out/...'`` for an OSError, else the exception's text."""
    if isinstance(e, OSError) and e.errno is not None:
        name = errno.errorcode.get(e.errno, f"errno {e.errno}")
        text = f"{name}: {e.strerror or os.strerror(e.errno)}"
        return f"{text}: {e.filename!r}" if e.filename else text
    return f"{type(e).__name__}: {e}"

