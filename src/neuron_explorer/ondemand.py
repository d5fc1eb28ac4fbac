"""On-demand capture in a running process: the side of ``neuron-explorer attach`` that the job runs.

Every PyTorch or JAX process with the package installed has the discovery watcher thread
(``discovery``), which calls :meth:`Agent.poll` once a second: one ``stat`` of this process's
request file (``contracts.ondemand``), nothing else, and no hook in the program while nobody asks.

A request (docs/decisions/0107-on-demand-capture.md) arms the process: the runtime starts as the
environment variables would start it (the request carries them), the framework hooks go in, and
the watcher drains the rings every :data:`ARMED_PERIOD_S` instead of once a second.  Steps are
read off the drained records (:class:`StepCounter`, the offline analysis's definition): no hook
of its own.  The requester aligns every
target on the same step numbers from the boundaries they report, then names the window; the
process keeps the events that start inside it, writes a session directory in the spec's layout and
turns recording off again.  A request that does not parse, names another process or asks for
options that do not validate changes nothing: its reason goes into the answer file, never to the
job's output.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from neuron_explorer.contracts import ondemand as od

__all__ = ["ARMED_PERIOD_S", "Agent", "IDLE_PERIOD_S", "THREAD_NAME", "enabled", "imports_paused",
           "monitor_runtime", "name_thread", "StepCounter", "steps_by_optimizer"]

#: Seconds between looks at the request file while nobody asks (the discovery watcher's period).
IDLE_PERIOD_S = 1.0
#: Seconds between drains while a request is armed or recording.
ARMED_PERIOD_S = 0.02
#: An armed process that gets no window within this many seconds disarms (its requester is gone).
ARM_TIMEOUT_S = 120.0
THREAD_NAME = od.THREAD_NAME
#: The label of the region that gives a profile's first step number (``analysis.steps.STEP_MARK``:
#: the analysis layer is not imported by the process's side).
STEP_MARK = "neuron_explorer.step#"
#: Steps kept before a window is known (the window may start at a boundary already drained).
KEEP_STEPS = 32


def enabled() -> bool:
    """``NEURON_EXPLORER_ON_DEMAND=0`` opts a process out."""
    return os.environ.get(od.ON_DEMAND, "1") != "0"


def name_thread() -> None:
    """Give the calling thread the OS name :data:`THREAD_NAME` (``prctl(PR_SET_NAME)``; Linux
    only, best effort)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(15, THREAD_NAME.encode(), 0, 0, 0)
    except Exception:  # noqa: BLE001 - a name is a convenience for `attach --all`
        pass


class StepCounter:
    """Training steps read off drained ring rows, as ``analysis.steps`` finds them offline.

    The one definition of a step in the process, that of the offline analysis (its rules 2 and
    3): in a process that made an optimizer (:func:`steps_by_optimizer`, decided once when it arms
    so that every rank counts alike from its first drain), a step ends where an execution of the
    optimizer stepped most often ends (PyTorch, eager or compiled); otherwise where an execution
    of the root graph executed most often ends (not a backward; ties: the longer total), e.g. a
    ``jax.jit`` ``train_step``.  ``ends()`` are the boundaries since the process armed."""

    def __init__(self, by_optimizer: bool) -> None:
        self.by_optimizer = by_optimizer
        self.per_model: dict[int, list[int]] = {}  # model id -> its executions' ends
        self.total: dict[int, int] = {}  # model id -> its executions' summed durations
        self.leader = -1

    def add(self, rows, kinds: list[str]) -> bool:
        """Count the executions among ``rows``; True when the boundaries changed."""
        from neuron_explorer.contracts import events as ev

        pairs = rows[rows[:, 0] == ev.EXEC_PAIR]
        if not len(pairs):
            return False
        changed = False
        want = "optimizer" if self.by_optimizer else None
        for t0, t1, mid in pairs[:, [1, 2, 4]].tolist():
            kind = kinds[mid] if 0 <= mid < len(kinds) else ""
            if (kind != want) if want else kind in ("backward", "optimizer", ""):
                continue
            self.per_model.setdefault(mid, []).append(t1)
            self.total[mid] = self.total.get(mid, 0) + t1 - t0
            changed |= mid == self.leader
        if self.per_model:
            if self.by_optimizer:
                best = max(self.per_model, key=lambda m: (len(self.per_model[m]), m))
            else:
                best = max(self.per_model, key=lambda m: (len(self.per_model[m]), self.total[m], -m))
            changed |= best != self.leader
            self.leader = best
        return changed

    def ends(self) -> list[int]:
        return sorted(self.per_model.get(self.leader, ()))


def steps_by_optimizer() -> bool:
    """Are this process's steps its optimizer steps?  Decided once, when it arms, so that every
    rank counts alike from its first drain: yes when the program has made a PyTorch optimizer
    (torch marks the class's ``step`` ``hooked`` at its first instance)."""
    torch = sys.modules.get("torch")
    optim = getattr(torch, "optim", None) if torch is not None else None
    base = getattr(optim, "Optimizer", None)
    if base is None:
        return False
    seen, todo = set(), list(type.__subclasses__(base))
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if getattr(cls.__dict__.get("step"), "hooked", False):
            return True
        todo.extend(type.__subclasses__(cls))
    return False


class _Runtime:
    """The runtime this module started, and the event flags it records with."""

    rt: Any = None
    flags: list[bool] = []
    owned = True  # started here (recording turned on and off), or neuron-monitor's (left as it is)


def monitor_runtime(rt) -> bool:
    """Is ``rt`` the runtime of neuron-monitor's counters (``boot.start(for_monitor=True)``), with
    rings an on-demand window can use?  No capture sink, no NDET, rings of the default size."""
    return (rt.ndet is None and not any(getattr(s, "name", "") == "capture" for s in rt.sinks)
            and rt.config.max_events_per_nc > 1 and not rt.stopped)


def _start_runtime(cfg, adopt: Callable[[Any], None]) -> Any:
    """The process's runtime, started for on-demand capture if none runs (``adopt`` then
    instruments what the program made before: ``discovery.adopt_all``); raises RuntimeError when
    another one runs (a capture from the environment, neuron-monitor's counters)."""
    from neuron_explorer import boot
    from neuron_explorer.runtime.core import get_runtime

    rt = get_runtime()
    if rt is not None and rt is _Runtime.rt:
        return rt
    if rt is not None and monitor_runtime(rt):
        # neuron-monitor's counters: their hooks record executions and collectives already (no
        # record_function regions), into rings the watcher empties; recording is never turned off
        _Runtime.rt, _Runtime.flags, _Runtime.owned = rt, list(rt.enabled), False
        return rt
    if rt is not None:
        raise RuntimeError("this process already runs neuron-explorer (a capture or NDET from the environment): "
                           "on-demand capture is for processes started without it")
    _preload()
    with imports_paused():
        rt = boot.start(cfg, from_env=False, capture=False, keep_rings=True, for_monitor=True)
        if rt is None:
            raise RuntimeError("the runtime did not start")
        _Runtime.rt, _Runtime.flags = rt, list(rt.enabled)
        adopt(rt)
    return rt


def _preload() -> None:
    """Import what starting the runtime imports, before pausing the program's imports (none of
    these modules imports a framework module at load time)."""
    import importlib

    names = ["neuron_explorer.boot", "neuron_explorer.capture.sink", "neuron_explorer.recorders.app_stats",
             "neuron_explorer.integrations.importhook"]
    if "torch" in sys.modules:
        names += ["neuron_explorer.integrations.torch", "neuron_explorer.integrations.torch.memory",
                  "neuron_explorer.integrations.torch.device", "neuron_explorer.integrations.torch.flops"]
    if "jax" in sys.modules:
        names += ["neuron_explorer.integrations.jax.runtime", "neuron_explorer.integrations.jax.regions"]
    for n in names:
        importlib.import_module(n)


#: How long the watcher waits for the program to finish an import before it arms anyway: never.
IMPORT_WAIT_S = 10.0


@contextmanager
def imports_paused(wait_s: float = IMPORT_WAIT_S):
    """Hold the interpreter's import lock at a moment when no thread is importing a module.

    The hooks go in from the watcher thread while the program runs.  Installing them touches
    framework modules (``torch._dynamo``'s, JAX's); should the program be importing one of those
    at that moment, the two threads' imports meet half-made modules and the program's import
    fails (a DDP job died at ``torch._dynamo``'s import, issue 32).  So: wait until no module
    lock is held, then keep new imports waiting (the program's next import blocks on the lock,
    without the GIL) until the hooks are in.  Raises RuntimeError after ``wait_s``."""
    try:
        import _imp
        from importlib import _bootstrap

        locks = _bootstrap._module_locks  # type: ignore[attr-defined]
    except (ImportError, AttributeError):  # another interpreter: arm without the pause
        yield
        return
    deadline = time.monotonic() + wait_s
    while True:
        _imp.acquire_lock()
        if not any(r() is not None for r in list(locks.values())):
            break
        _imp.release_lock()
        if time.monotonic() > deadline:
            raise RuntimeError("the program kept importing modules; not armed (ask again)")
        time.sleep(0.005)
    try:
        yield
    finally:
        _imp.release_lock()


def _record(on: bool) -> None:
    """Turn recording on (the flags the runtime started with) or off, in place: the hooks hold
    the list."""
    rt = _Runtime.rt
    if rt is None or not _Runtime.owned:
        return
    for i, f in enumerate(_Runtime.flags):
        rt.enabled[i] = f and on


class Window:
    """One request in this process: armed, then recording its window, then written."""

    def __init__(self, agent: "Agent", req: od.Request) -> None:
        from neuron_explorer.contracts.env import OUTPUT_DIR
        from neuron_explorer.runtime.config import CaptureConfig

        self.agent, self.req = agent, req
        # validated before anything starts: a bad option changes nothing (ConfigError)
        cfg = self.cfg = CaptureConfig.from_env({OUTPUT_DIR: req.output_dir, **req.capture})
        from neuron_explorer.capture.sink import CaptureSink
        from neuron_explorer.runtime import clock

        if cfg.device_profile and "torch" not in sys.modules:
            raise RuntimeError("device profiles on demand are recorded for PyTorch only; "
                               "this process has not imported torch (ask without --device-profile)")
        os.makedirs(req.output_dir, exist_ok=True)
        if not os.access(req.output_dir, os.W_OK | os.X_OK):
            raise OSError(f"{req.output_dir} is not writable")
        # the runtime records every type into rings of the default size, whatever this request
        # filters (its sink does: CaptureSink's mask, CoreStore's limit, the core filter in _keep):
        # it outlives the request, and the next one may ask for types or events this one did not
        rt = self.rt = _start_runtime(CaptureConfig.from_env({OUTPUT_DIR: req.output_dir}), agent.adopt)
        if cfg.device_profile and rt.devprof is not None:
            raise RuntimeError("a device profile is already being recorded in this process")
        self.clock = clock
        self.anchor = clock.anchor("on-demand")
        _record(True)
        self.sink = CaptureSink(rt, config=cfg)  # (events before this moment belong to no window)
        self.sink.note = f"on-demand capture (neuron-explorer attach, request {req.id})"
        from neuron_explorer.contracts import events as ev

        # the step mark is a framework event, kept unless the request's type filter removes them
        # (neuron-monitor's counters' runtime records no record_function region of its own)
        self.sink.mask[ev.FRAMEWORK_OP] = cfg.type_enabled(ev.EVENT_TYPES[ev.FRAMEWORK_OP].name)
        self.count = 0  # steps ended since the process armed
        self.bounds: list[tuple[int, int]] = []  # (count, monotonic ns) of every step end since armed
        self.pending: list[tuple[int, Any]] = []  # (core, rows) drained before the window is known
        self.kept: dict[int, int] = {}  # events handed to each core's store
        self.t_start: int | None = None
        self.t_end: int | None = None
        self.first_step: int | None = None
        self.last_step: int | None = None
        self.recording = False  # the record phase arrived
        self.armed_at = time.monotonic()
        self.done = False
        self.steps = StepCounter(steps_by_optimizer())
        self.devprof: Any = None  # the device profiler of the window (--device-profile), from its record phase

    # -- the phases -----------------------------------------------------------------------
    def record(self, req: od.Request) -> None:
        self.req, self.recording = req, True
        if self.cfg.device_profile and self.devprof is None:
            self._start_devprof(self.cfg.device_profile)

    def _start_devprof(self, mode: str) -> None:
        """Register a device profiler for the window (docs/decisions/0110-on-demand-device-profiles.md):
        from the record phase it profiles every execution, since the window's first step is known
        only once drained; the sink writes only those that start inside the window."""
        from neuron_explorer.integrations.torch.device import DeviceProfiler
        from neuron_explorer.runtime.core import DEVICE_PROFILER

        dp = DeviceProfiler(self.rt, mode)
        dp.window(self.cfg.nc_enabled)
        self.devprof = dp
        self.rt.register(DEVICE_PROFILER, dp)

    def _stop_devprof(self) -> None:
        from neuron_explorer.runtime.core import DEVICE_PROFILER

        if self.devprof is not None and self.rt.devprof is self.devprof:
            self.rt.unregister(DEVICE_PROFILER)

    def answer(self, state: str, **kw) -> None:
        wall = self.anchor[1] - self.anchor[0]
        self.agent.answer(od.Answer(id=self.req.id, state=state, pid=os.getpid(), step=self.count,
                                    arm_wall_ns=self.anchor[1],
                                    boundaries=[(c, t + wall) for c, t in self.bounds[-od.MAX_BOUNDARIES:]], **kw))

    # -- every drain ----------------------------------------------------------------------
    def tick(self) -> None:
        """Drain, count steps, keep what falls in the window; write it once it is over."""
        self.rt.settle()
        drained = [(nc, st.ring.drain()) for nc, st in list(self.rt.cores.items())]
        kinds = [m.kind for m in list(self.rt.models)]  # (after the drain: a model is registered before its records)
        new_bounds = False
        for nc, rows in drained:
            if len(rows):
                new_bounds |= self.steps.add(rows, kinds)
                self.pending.append((nc, rows))
        if new_bounds:
            self.bounds = [(i + 1, t) for i, t in enumerate(self.steps.ends())]
            self.count = len(self.bounds)
        if self.recording:
            self._place_window()
        if self.t_start is not None:
            self._keep()
        elif len(self.bounds) > KEEP_STEPS:
            cut = self.bounds[-KEEP_STEPS][1]
            self.pending = [(nc, r[r[:, 1] > cut]) for nc, r in self.pending]
        now = self.clock.now_ns()
        if self.t_end is not None and now > self.t_end + 50_000_000:
            self.finish("window")
        elif new_bounds or self.recording is False and len(self.bounds) == 0:
            self.answer("recording" if self.t_start is not None else "armed")
        if not self.recording and time.monotonic() - self.armed_at > ARM_TIMEOUT_S:
            self.cancel()

    def _place_window(self) -> None:
        req = self.req
        if self.t_start is None:
            want = req.start - 1 - req.offset  # the local count whose end opens the window
            hit = [b for b in self.bounds if b[0] >= want]
            if not hit:
                return
            kept_from = self.bounds[-KEEP_STEPS][0] if len(self.bounds) > KEEP_STEPS else 0
            c, t = hit[0] if hit[0][0] >= kept_from else self.bounds[-1]  # too late: the next one
            self.t_start, self.first_step = t, c + 1 + req.offset
            self._mark_first_step(t)
            self.sink.start_anchor = self.clock.anchor("start")
            self.sink.sampler.start()
        if self.t_end is None and self.first_step is not None:
            if req.steps is not None:
                end = self.first_step - 1 + req.steps - req.offset
                for c, t in self.bounds:
                    if c == end:
                        self.t_end, self.last_step = t, c + req.offset
                        break
            elif req.duration_s is not None:
                self.t_end = self.t_start + int(req.duration_s * 1e9)
        if self.devprof is not None and self.t_start is not None:
            self.devprof.set_window(self.t_start, self.t_end)

    def _mark_first_step(self, t_start: int) -> None:
        """A framework region ``neuron_explorer.step#<first step>`` at the window's start: the
        offline analysis (``analysis.steps.STEP_MARK``) numbers the steps of the profile from it,
        as this process and the command numbered them."""
        import numpy as np

        from neuron_explorer.contracts import events as ev

        t = t_start + 1
        row = np.zeros((1, ev.RECORD_WIDTH), dtype=np.int64)
        row[0, :5] = (ev.FRAMEWORK_OP, t, t, threading.get_native_id(), self.rt.intern(f"{STEP_MARK}{self.first_step}"))
        self.pending.append((self.rt.ident.default_core, row))

    def _keep(self) -> None:
        from neuron_explorer.capture.store import CoreStore
        from neuron_explorer.contracts import events as ev

        lo, hi = self.t_start, self.t_end
        for nc, rows in self.pending:
            sel = rows[:, 1] > lo
            if hi is not None:
                sel &= rows[:, 1] <= hi
            rows = rows[sel]
            if not self.cfg.nc_enabled(nc) or not len(rows):
                continue
            store = self.sink.cores.get(nc)
            if store is None:
                store = self.sink.cores[nc] = CoreStore(nc, self.cfg.max_events_per_nc)
            self.kept[nc] = self.kept.get(nc, 0) + len(rows) + int((rows[:, 0] == ev.EXEC_PAIR).sum())
            store.add(rows, self.sink.mask, self.kept[nc])
        self.pending = []

    def finish(self, reason: str) -> None:
        """Stop recording and write what the window holds (also at exit, mid-window)."""
        if self.done:
            return
        self.done = True
        _record(False)
        if self.t_start is None:
            self._stop_devprof()
            self.answer("error", error=f"the process {reason} before its window began")
            return
        if self.t_end is None:  # the process exits mid-window: what it captured
            self.t_end = self.clock.now_ns()
            self.last_step = self.count + self.req.offset
            self._keep()
        self.sink.sampler.stop()
        self.sink.end_reason = reason
        if self.req.steps is None and self.first_step is not None:  # duration: the steps it spans
            end = self.t_end
            self.last_step = max([c for c, t in self.bounds if t <= end] or [self.first_step - 1 - self.req.offset]) \
                + self.req.offset
        if self.devprof is not None:
            self.devprof.set_window(self.t_start, self.t_end)
        try:
            d = self.sink.write()  # (the device profiles with it: rt.devprof)
        except Exception as e:  # noqa: BLE001 - the job goes on; the requester hears why
            from neuron_explorer.capture.sink import describe_error

            self.answer("error", error=f"write failed: {describe_error(e)}")
            return
        finally:
            self._stop_devprof()
        self.answer("done", session_dir=d, first_step=self.first_step, last_step=self.last_step,
                    window_wall_ns=self.t_start + self.anchor[1] - self.anchor[0])

    def cancel(self) -> None:
        if not self.done:
            self.done = True
            _record(False)
            self._stop_devprof()
            self.sink.sampler.stop()


def _monitor_runtime():
    """The runtime of neuron-monitor's counters, if this process runs one (no import otherwise)."""
    core = sys.modules.get("neuron_explorer.runtime.core")
    rt = core.get_runtime() if core is not None else None
    return rt if rt is not None and monitor_runtime(rt) else None


class Agent:
    """This process's end of the on-demand protocol, driven by the discovery watcher thread."""

    def __init__(self, adopt: Callable[[Any], None], directory=None) -> None:
        """``adopt(rt)``: instrument what the program made before the runtime started."""
        self.adopt = adopt
        self.dir = str(directory if directory is not None else od.default_dir())
        self.pid = os.getpid()
        self.req_path = od.request_path(self.dir, self.pid)
        self.ans_path = od.answer_path(self.dir, self.pid)
        self.seen: tuple | None = None
        self.window: Window | None = None
        self.lock = threading.Lock()
        self._atexit = False

    def poll(self) -> float:
        """One look at the request file (and a drain while a window is open); returns the seconds
        until the next look.  Never raises."""
        try:
            with self.lock:
                return self._poll()
        except Exception:  # noqa: BLE001 - nothing of ours may reach the job
            return IDLE_PERIOD_S

    def _poll(self) -> float:
        key: tuple | None = None
        # idle, the file is not there: access() says so without raising (a failed stat() builds an
        # exception: ~10k instructions a look instead of ~1k, bench/ondemand_idle.py)
        if os.access(self.req_path, os.F_OK):
            try:
                st = os.stat(self.req_path, follow_symlinks=False)
                key = (st.st_ino, st.st_mtime_ns, st.st_size)
            except OSError:
                pass
        if key != self.seen:
            self.seen = key
            if key is None:
                if self.window is not None and not self.window.done:
                    self.window.cancel()  # the requester withdrew it
                self.window = None
            else:
                self._handle()
        w = self.window
        if w is not None and not w.done:
            w.tick()
            return ARMED_PERIOD_S
        rt = _Runtime.rt or _monitor_runtime()
        if rt is not None:  # (recording off, a JAX call still appends; neuron-monitor's counters' rings)
            rt.discard()
        return IDLE_PERIOD_S

    def _handle(self) -> None:
        try:
            od.check_private_dir(Path(self.dir))
            data = od.read_private(self.req_path)
        except (OSError, od.RequestError, od.EndpointError):
            return  # not a request we can trust: no answer either (the directory may not be ours)
        try:
            req = od.parse_request(data)
        except od.RequestError as e:
            self.answer(od.Answer(id=od.loose_id(data), state="error", pid=self.pid, error=str(e)))
            return
        if req.pid != self.pid or req.start_time != od.process_start_time(self.pid):
            self.answer(od.Answer(id=req.id, state="error", pid=self.pid,
                                  error=f"request for process {req.pid} (start {req.start_time}), not this one"))
            return
        w = self.window
        try:
            if req.phase == "ndet":
                self.answer(self._ndet_now(req))
            elif req.phase == "arm":
                if w is not None and w.req.id == req.id:
                    return
                if w is not None and not w.done:
                    raise RuntimeError(f"busy with request {w.req.id}")
                self.window = Window(self, req)
                self._arm_exit()
                self.window.answer("armed")
            elif w is None or w.req.id != req.id or w.done:
                raise RuntimeError(f"no armed request {req.id} to record")
            else:
                w.record(req)
        except Exception as e:  # noqa: BLE001 - the requester hears it, the job does not
            self.answer(od.Answer(id=req.id, state="error", pid=self.pid, error=f"{type(e).__name__}: {e}"))

    def _ndet_now(self, req: od.Request) -> od.Answer:
        """Write the NDET flight recorder now (the process runs one: NEURON_RT_DBG_NDET_*)."""
        core = sys.modules.get("neuron_explorer.runtime.core")  # (not imported: no runtime, no NDET)
        rt = core.get_runtime() if core is not None else None
        rec = rt.ndet if rt is not None else None
        if rec is None:
            return od.Answer(id=req.id, state="error", pid=self.pid,
                             error="this process does not run NDET (NEURON_RT_DBG_NDET_FLUSH_USEC is not set)")
        path = rec.write(final=False, reason="on-demand")
        if path is None:
            return od.Answer(id=req.id, state="error", pid=self.pid,
                             error="NDET wrote no log (the process has recorded nothing yet, or has ended)")
        return od.Answer(id=req.id, state="done", pid=self.pid, ndet_log=str(path))

    def _arm_exit(self) -> None:
        if not self._atexit:
            self._atexit = True
            atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        """A process that ends mid-window still writes what it captured."""
        with self.lock:
            w = self.window
            if w is not None and not w.done:
                w.tick()
                w.finish("exit")

    def answer(self, a: od.Answer) -> None:
        try:
            od.write_private(self.ans_path, od.encode(a))
        except OSError:
            pass
