"""The in-process runtime: ids, the string and model tables, per-core rings and the sink registry.

Integrations ask the runtime for a core's ring once (``ring_for``) and then append tuples to it;
sinks (capture, NDET, stats) are driven by the runtime's flush and stop calls.  Nothing here runs
per event except the ring append the integration does itself.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol

from neuron_explorer.contracts import events as ev
from neuron_explorer.util.log import get_logger

from . import clock
from .config import CaptureConfig
from .identity import ProcessIdentity
from .ring import Ring


@dataclass
class Model:
    id: int
    name: str
    neff_name: str
    graph_hash: str
    backend: str
    kind: str
    nc_idx: int
    compile_ns: int = 0
    source_location: str = ""
    module_path: str = ""
    num_nodes: int = 0
    flops: float = 0.0
    constants_bytes: int = 0
    signature: str = ""
    artifacts: dict = field(default_factory=dict)  # extra data for device profiles (graph code, ...)
    # (model_load start, nrt_load start, end) on the host monotonic clock, when the load was seen;
    # NDET's log carries it so that neuron-det draws the load on the core's row
    load_span: tuple[int, int, int] | tuple[()] = ()


# Names under which the layers above register their consumers (see Runtime.register).
STATS = "stats"  # per-process counters for neuron-monitor (recorders.app_stats.AppStats)
NDET = "ndet"  # the NDET flight recorder (recorders.ndet.NdetRecorder)
DEVICE_PROFILER = "devprof"  # device profiles (integrations.torch.device.DeviceProfiler)

# ``Runtime.enabled`` holds one flag per event type (indexed by type id), then this one: are
# executions recorded at all?  True when the capture keeps any type an execution produces
# (``events.EXECUTION_TYPES``) or a consumer that counts executions is registered (NDET, the
# monitor's counters); the execution hooks check it, never one type of their own
# (docs/decisions/0073-type-filters-gate-mechanisms.md).  A list slot, so that the C gates read it
# by index and a forked child's ``forget_after_fork`` clears it with the others.
EXECUTIONS = len(ev.EVENT_TYPES)


class Sink(Protocol):
    name: str

    def flush(self, rt: "Runtime", final: bool, reason: str) -> None: ...


class CoreState:
    """Per-core bookkeeping used by the hooks: the ring, which also hands out execution ids."""

    __slots__ = ("nc", "ring")

    def __init__(self, nc: int, ring: Ring) -> None:
        self.nc = nc
        self.ring = ring

    @property
    def exec_count(self) -> int:
        """Executions started on this core so far (the next execution id)."""
        return self.ring.executions()


class Runtime:
    def __init__(self, config: CaptureConfig, ident: ProcessIdentity | None = None) -> None:
        self.config = config
        self.ident = ident or ProcessIdentity.current()
        self.strings: dict[str, int] = {"": 0}
        self.string_list: list[str] = [""]
        self.models: list[Model] = []
        self.cores: dict[int, CoreState] = {}
        self.enabled = [config.type_enabled(t.name) for t in ev.EVENT_TYPES]
        self.enabled.append(self.keeps_any(ev.EXECUTION_TYPES))  # [EXECUTIONS]
        self.anchors: list[tuple[int, int, str]] = [clock.anchor("start")]
        self.sinks: list[Sink] = []  # what flush() drives, in the order added
        # what records events late (completions a C callback only timed): run before a ring is drained
        self._settlers: list[Callable[[], None]] = []
        self._settle_failed = False
        self._consumers: dict[str, object] = {}  # named consumers (see register)
        # the device profiler, when on, in a one-item list the C execution wrapper reads per call
        # without a lookup (kept in step by register/unregister)
        self.devprof_cell: list = [None]
        # where compiled graphs are cached at load time (TORCH_NEURONX_NEFF_CACHE_DIR / NeuronConfig)
        self.neff_cache_dir: str | None = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR") or None
        self.device_kind = "cpu"
        self.nd_idx = 0
        self.end_reason = "running"
        self.failed = False
        self._lock = threading.RLock()
        self._stopped = False

    # -- consumers ----------------------------------------------------------------------------
    def register(self, name: str, consumer: object) -> None:
        """Make ``consumer`` known under ``name`` (``STATS``, ``NDET``, ``DEVICE_PROFILER``): the
        runtime knows its consumers by name only, never by type, so it imports none of them."""
        self._consumers[name] = consumer
        if name == DEVICE_PROFILER:
            self.devprof_cell[0] = consumer
        if name in (NDET, STATS) and not self._stopped:
            # they count every execution, whatever the capture's type filter keeps
            self.enabled[EXECUTIONS] = True

    def unregister(self, name: str) -> None:
        self._consumers.pop(name, None)
        if name == DEVICE_PROFILER:
            self.devprof_cell[0] = None

    def keeps_any(self, names) -> bool:
        """Is any of the event types ``names`` recorded (not removed by the type filter)?"""
        return any(self.enabled[ev.type_id(n)] for n in names)

    def consumer(self, name: str):
        """The consumer registered under ``name``, or None."""
        return self._consumers.get(name)

    @property
    def ndet(self):
        return self._consumers.get(NDET)

    @property
    def stats(self):
        return self._consumers.get(STATS)

    @property
    def devprof(self):
        return self.devprof_cell[0]

    # -- tables -------------------------------------------------------------------------------
    def intern(self, s: str) -> int:
        i = self.strings.get(s)
        if i is None:
            with self._lock:
                i = self.strings.get(s)
                if i is None:
                    i = len(self.string_list)
                    self.string_list.append(s)
                    self.strings[s] = i
        return i

    def add_model(self, **info) -> Model:
        with self._lock:
            m = Model(id=len(self.models), **info)
            self.models.append(m)
        return m

    def core(self, nc: int | None = None) -> CoreState | None:
        """The state of core ``nc`` (default: this process's core), or None when filtered out."""
        if nc is None:
            nc = self.ident.default_core
        st = self.cores.get(nc)
        if st is None:
            if not self.config.nc_enabled(nc):
                return None
            with self._lock:
                st = self.cores.get(nc)
                if st is None:
                    st = CoreState(nc, Ring(nc, self.config.max_events_per_nc))
                    self.cores[nc] = st
        return st

    # -- lifecycle ----------------------------------------------------------------------------
    def add_sink(self, sink: Sink) -> None:
        """Have ``flush`` drive ``sink`` (periodic and final writes)."""
        self.sinks.append(sink)

    def add_settler(self, fn: Callable[[], None]) -> None:
        """Have ``settle`` call ``fn``: it appends to the rings what is known but not recorded yet."""
        self._settlers.append(fn)

    def settle(self) -> None:
        """Record what the settlers hold; call before draining a ring.  Never raises."""
        for fn in list(self._settlers):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - recording must never take the workload down
                if not self._settle_failed:  # (once: a drain comes every flush)
                    self._settle_failed = True
                    get_logger(__name__).warning(f"neuron-explorer: warning: late events not recorded: {e}")

    def discard(self) -> None:
        """Drop what the rings hold (what ran before a session, or while nothing records), the
        settlers' late events included."""
        self.settle()
        for st in list(self.cores.values()):
            st.ring.drain()

    def remove_sink(self, sink: Sink) -> None:
        if sink in self.sinks:
            self.sinks.remove(sink)

    def sync_point(self, core: CoreState, exec_id: int = -1) -> None:
        """Record a host/device clock pair.  On the CPU both clocks are the host monotonic clock."""
        if self.enabled[ev.TIMESTAMP_SYNC_POINT]:
            t = clock.now_ns()
            core.ring.append((ev.TIMESTAMP_SYNC_POINT, t, t, clock.native_tid(), t, t, exec_id, 0, 0))
            core.ring.tick()

    def flush(self, final: bool = False, reason: str = "running") -> None:
        with self._lock:
            if self._stopped:
                return
            if final:
                self._stopped = True
                self.end_reason = reason
                for st in list(self.cores.values()):
                    self.sync_point(st, st.exec_count - 1)
            self.anchors.append(clock.anchor("stop" if final else "flush"))
            for sink in list(self.sinks):
                try:
                    sink.flush(self, final, reason)
                except Exception as e:  # a sink must never take the workload down

                    get_logger(__name__).warning(f"neuron-explorer: warning: {sink.name} flush failed: {e}")

    @property
    def stopped(self) -> bool:
        return self._stopped

    def wait_for_final_write(self) -> None:
        """Return once a flush under way in another thread has ended (the lock it holds)."""
        with self._lock:
            pass

    def writing_here(self) -> bool:
        """Does the calling thread hold the runtime's lock (inside a flush, say)?  A signal handler
        run there must not wait for a write that needs this thread to go on."""
        owned = getattr(self._lock, "_is_owned", None)
        try:
            return bool(owned()) if owned is not None else False
        except Exception:  # noqa: BLE001
            return False

    def forget_after_fork(self) -> None:
        """In a forked child: record nothing more and never write.  The session directory, NDET
        log, stats file and exit handlers are the parent's (docs/decisions/0008-forked-children.md).
        The locks are new ones: a thread of the parent (the flush thread) may have held one at the
        fork, and it does not exist in the child to release it."""
        self._lock = threading.RLock()
        self._stopped = True
        self.end_reason = "forked"
        for i in range(len(self.enabled)):
            self.enabled[i] = False  # in place: the hooks hold this list
        if self.ndet is not None:
            self.ndet.forget_after_fork()
        if self.stats is not None:
            self.stats.forget_after_fork()


_RUNTIME: Runtime | None = None


def get_runtime() -> Runtime | None:
    return _RUNTIME


def set_runtime(rt: Runtime | None) -> None:
    global _RUNTIME
    _RUNTIME = rt
