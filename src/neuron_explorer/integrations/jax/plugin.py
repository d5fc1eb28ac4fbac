"""JAX: make ``jax.profiler.trace`` also write a neuron-explorer profile.

The spec's JAX pattern sets ``NEURON_RT_INSPECT_DEVICE_PROFILE`` and ``NEURON_RT_INSPECT_OUTPUT_DIR``
inside the script and wraps the work in ``with jax.profiler.trace(dir):``.  The variables are set
after start-up, so the ``.pth`` hook cannot see them; instead JAX itself loads us through its plugin
discovery (``jax_plugins.neuron_explorer_profiler.initialize`` calls ``install()``), and we wrap
``start_trace``/``stop_trace``.  While a requested trace runs we time each ``TraceAnnotation`` on
the host clock, emit clock markers into the trace and sample the host; when it stops, the trace
JAX just wrote is converted into a capture session (``convert.convert_trace``).

This module is imported by JAX's plugin initialization: keep its top level cheap (everything
else is imported when a trace is requested).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Mapping

from neuron_explorer.integrations.jax.marks import MARK_START, MARK_STOP
from neuron_explorer.util.log import get_logger

if TYPE_CHECKING:
    from neuron_explorer.capture.samplers import HostSampler


_installed = False
_warned: set[str] = set()
_active: "TraceRecording | None" = None
_orig: dict[str, object] = {}


def _warn_once(key: str, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        get_logger(__name__).warning(f"neuron-explorer: warning: {msg}")
        sys.stderr.flush()


def _requested(env: Mapping[str, str] | None = None) -> bool:
    """A neuron-explorer profile is wanted from this jax trace (any device-profile value other
    than 0 asks for one; a bad value is refused by ``start_trace``, naming the variable)."""
    from neuron_explorer.contracts.env import DEVICE_PROFILE

    env = os.environ if env is None else env
    dev = env.get(DEVICE_PROFILE, "").strip().lower()
    return dev not in ("", "0") or _enabled(env)


def _enabled(env: Mapping[str, str]) -> bool:
    """NEURON_RT_INSPECT_ENABLE as the runtime reads it ('false'/'off' are off; a bad value was
    already refused at start-up)."""
    from neuron_explorer.contracts.env import ConfigError, capture_requested

    try:
        return capture_requested(env)
    except ConfigError:
        return False


def _check_conflict() -> None:
    if _enabled(os.environ):
        _warn_once("enable", "NEURON_RT_INSPECT_ENABLE=1 conflicts with jax.profiler; use one or the other "
                             "(for JAX, set only NEURON_RT_INSPECT_DEVICE_PROFILE and NEURON_RT_INSPECT_OUTPUT_DIR)")


# -- installing --------------------------------------------------------------------------------

def install() -> None:
    """Wrap ``jax.profiler.start_trace``/``stop_trace`` (idempotent; called by the JAX plugin)."""
    global _installed
    if _installed:
        return
    _installed = True
    from jax._src import profiler as jp

    _orig["start"] = jp.start_trace
    _orig["stop"] = jp.stop_trace
    jp.start_trace = start_trace
    jp.stop_trace = stop_trace
    pub = sys.modules.get("jax.profiler")
    if pub is not None:
        if getattr(pub, "start_trace", None) is _orig["start"]:
            pub.start_trace = start_trace
        if getattr(pub, "stop_trace", None) is _orig["stop"]:
            pub.stop_trace = stop_trace
    # Plugins are initialized with the first backend; when that happens inside start_trace (a
    # program whose first JAX call is the trace), start_trace is already running: begin now.
    state = getattr(jp, "_profile_state", None)
    lock = getattr(state, "lock", None)
    if lock is not None and lock.locked() and getattr(state, "profile_session", None) is None and _requested():
        _check_conflict()
        try:
            _begin(in_start=True)
        except Exception as e:
            _warn_once("begin", f"JAX profile conversion disabled: {e}")


def start_trace(log_dir, *args, **kwargs) -> None:
    """``jax.profiler.start_trace``, and, when the variables ask for a profile, start recording."""
    want = _requested()
    if want:
        _check_conflict()
        from neuron_explorer.runtime.config import CaptureConfig

        CaptureConfig.from_env()  # a bad value fails here, before the work, naming the variable
    _yield_device_profile()
    _orig["start"](log_dir, *args, **kwargs)
    if want and _active is None:
        try:
            _begin(in_start=False)
        except Exception as e:
            _warn_once("begin", f"JAX profile conversion disabled: {e}")


def _yield_device_profile() -> None:
    """Only one XLA profiler session may run: the runtime's device profile (session mode) hands
    over to the program's own trace, and starts no new session while that trace runs."""
    rt_mod = sys.modules.get("neuron_explorer.integrations.jax.runtime")
    jx = rt_mod.installed() if rt_mod is not None else None
    if jx is not None and jx.devprof is not None:
        try:
            jx.devprof.harvest()
        except Exception:
            pass


def stop_trace() -> None:
    """``jax.profiler.stop_trace``; a recording in progress is then converted (after JAX has
    written its trace)."""
    global _active
    t = _active
    if t is not None:
        try:
            from jax._src import profiler as jp

            t.log_dir = getattr(jp._profile_state, "log_dir", None)
        except Exception:
            pass
        t.mark(MARK_STOP)
    try:
        return _orig["stop"]()
    finally:
        if t is not None:
            _active = None
            t.finish()


# -- one trace ---------------------------------------------------------------------------------

class TraceRecording:
    """What we record while a jax trace runs: clock markers, annotations, host samples."""

    def __init__(self) -> None:
        from neuron_explorer.runtime import clock

        self.clock = clock
        self.anchors = [clock.anchor("start")]
        self.marks: dict[str, tuple[int, int]] = {}
        self.annotations: list[tuple[int, int, int, str]] = []  # (start, end, thread id, label)
        self.waits: list[tuple[int, int, int]] = []  # host waits: (start, end, thread id)
        self.log_dir: str | None = None
        self.start_wall = time.time_ns()
        self.pid = os.getpid()
        self.sampler: HostSampler | None = None
        self._restore: list = []

    def mark(self, name: str) -> None:
        """A marker event in the trace, bracketed by host monotonic reads."""
        try:
            from jax._src.lib import _profiler

            now = time.perf_counter_ns
            tm = _profiler.TraceMe(name)  # constructed outside the bracket
            t0 = now()
            with tm:
                pass
            t1 = now()
            self.marks[name] = (t0, t1)
        except Exception:
            pass

    def patch_annotations(self) -> None:
        """Time each ``TraceAnnotation`` on the host monotonic clock (restored by ``unpatch``)."""
        import jax.profiler as jprof

        from neuron_explorer.integrations.jax.regions import time_annotations

        rec = self.annotations.append
        tid = threading.get_native_id
        self._restore.append(time_annotations(jprof.TraceAnnotation, lambda t0, t1, name: rec((t0, t1, tid(), name)),
                                              "_nx_trace", time.perf_counter_ns))

    def patch_waits(self) -> None:
        """Time each host wait (``block_until_ready``, and a read of an array's value while it is
        still being computed: ``waits.time_waits``) on the host monotonic clock: the host blocked
        on the device's results, ``kbl_exec_wait`` (restored by ``unpatch``)."""
        from neuron_explorer.integrations.jax.waits import time_waits

        rec = self.waits.append
        tid = threading.get_native_id
        self._restore.extend(time_waits(lambda t0, t1: rec((t0, t1, tid())), time.perf_counter_ns))

    def unpatch(self) -> None:
        for r in self._restore:
            if len(r) == 3:
                setattr(*r)
            else:
                cls, i, en, ex = r
                cls.__init__, cls.__enter__, cls.__exit__ = i, en, ex
        self._restore.clear()

    def start_sampler(self) -> None:
        from neuron_explorer.runtime.config import CaptureConfig

        try:
            cfg = CaptureConfig.from_env()
        except Exception:
            return
        for w in cfg.warnings:
            _warn_once(w, w)
        if cfg.cpu_util or cfg.host_memory:
            from neuron_explorer.capture.samplers import HostSampler

            self.sampler = HostSampler(self.pid, cfg.sample_period_s, cfg.cpu_util, cfg.host_memory,
                                       max_samples=cfg.max_samples)
            self.sampler.start()

    def finish(self) -> None:
        """Stop recording and convert; a failure is a warning, never the workload's exception."""
        self.anchors.append(self.clock.anchor("stop"))
        self.unpatch()
        if self.sampler is not None:
            self.sampler.stop()
        try:
            from neuron_explorer.capture.sink import say_written
            from neuron_explorer.integrations.jax.convert import convert_trace

            d = convert_trace(self)
            if d:
                say_written(d)
        except Exception as e:  # a profile must never take the workload down
            get_logger(__name__).warning(f"neuron-explorer: warning: JAX profile not converted: {e}")


def _begin(in_start: bool) -> None:
    global _active
    t = TraceRecording()
    t.patch_annotations()
    try:
        t.patch_waits()
    except Exception as e:  # a JAX without these names: no waits, the rest still recorded
        _warn_once("waits", f"host waits not timed: {e}")
    t.start_sampler()
    if not in_start:
        t.mark(MARK_START)
    _active = t
