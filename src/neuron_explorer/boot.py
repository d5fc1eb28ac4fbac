"""Turning the runtime on in a process, and flushing it however the process ends.

``start()`` runs from the ``neuron_explorer_autostart.pth`` file at interpreter start-up when one of
the spec's variables is set (so every ``torchrun`` child is covered without code changes), or
programmatically.  It parses the configuration (exiting with status 2 on a bad value when started
from the environment), attaches the sinks, arranges for framework hooks to be installed when the
framework is imported, and registers the flush at normal exit, SIGTERM/SIGINT and unhandled
exceptions.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

from neuron_explorer.contracts import env as cfgmod, events as ev
from neuron_explorer.runtime.config import CaptureConfig
from neuron_explorer.runtime.core import DEVICE_PROFILER, NDET, STATS, Runtime, get_runtime, set_runtime
from neuron_explorer.runtime.signals import SignalExit
from neuron_explorer.util.log import get_logger
from neuron_explorer.util.procs import framework_helper, is_launcher

AUTOSTART = "NEURON_EXPLORER_AUTOSTART"  # starts the runtime (neuron-monitor counters) without a capture
ON_DEMAND = "NEURON_EXPLORER_ON_DEMAND"  # 0: no `neuron-explorer attach` requests (contracts.ondemand)


def on_demand() -> bool:
    """Does this process take `neuron-explorer attach` requests (``ondemand``)?"""
    return os.environ.get(ON_DEMAND, "1") != "0"


def start(config: CaptureConfig | None = None, *, from_env: bool = True, capture: bool | None = None,
          keep_rings: bool = False, for_monitor: bool = False) -> Runtime | None:
    """Start the runtime (once per process).

    ``capture``: attach the capture sink (default: as the environment says, or True when a config
    is given).  ``keep_rings``: full-size rings even without a capture sink, for sessions that a
    framework API starts later (``neuron_explorer.torch``).  ``for_monitor``: started because a
    neuron-monitor runs (``discovery``), with no variable set: the counters only, and no signal
    handlers (nothing needs a final write; the monitor removes a dead process's snapshot)."""
    rt = get_runtime()
    if rt is not None:
        return rt
    auto = from_env and config is None  # started by the .pth hook, from the environment
    if auto and (framework_helper() is not None or is_launcher()):
        # multiprocessing's resource tracker, Inductor's compile workers, torchrun's agent (its
        # ranks profile themselves): never profiled, and they run as without neuron-explorer
        return None
    try:
        if capture is None:
            capture = cfgmod.capture_requested() if config is None else True
        ndet_on = cfgmod.ndet_requested()
        if auto and not (capture or ndet_on or for_monitor or cfgmod.PROCESS_TAG in os.environ
                         or AUTOSTART in os.environ):
            return None  # e.g. NEURON_RT_INSPECT_ENABLE=false: the .pth's cheap check let it through
        cfg = config or CaptureConfig.from_env()
        for w in cfg.warnings:
            get_logger(__name__).warning(f"neuron-explorer: warning: {w}")
        # neuron-monitor's counters alone: found by discovery (``for_monitor``), or started from the
        # environment for them (NEURON_PROCESS_TAG, NEURON_EXPLORER_AUTOSTART: no capture, no NDET)
        monitor_only = for_monitor or (auto and not ndet_on)
        if not capture and not keep_rings and not (monitor_only and on_demand()):
            # Nothing drains the capture rings without a capture sink: keep them minimal.  (For
            # neuron-monitor's counters with on-demand capture on, the watcher drains them
            # once a second, and a `neuron-explorer attach` window keeps what it needs: ondemand.
            # A tagged job's rings were kept minimal too, and `attach` refused it: decision 0216)
            cfg.max_events_per_nc = 1
        if capture:
            _check_output_dir(cfg.output_dir)
        rt = Runtime(cfg)
        if not capture and not keep_rings:
            # Framework regions (record_function) only ever reach the capture: an NDET-only or
            # monitor-only process does not hook them (torch's optimizer step alone enters two
            # regions a step, six Python frames)
            rt.enabled[ev.FRAMEWORK_OP] = False
        if ndet_on:
            from neuron_explorer.recorders.ndet import NdetRecorder

            rt.register(NDET, NdetRecorder.from_env(rt))
    except cfgmod.ConfigError as e:
        if not from_env:
            raise
        get_logger(__name__).error(f"neuron-explorer: error: {e}")
        sys.stderr.flush()
        os._exit(2)
    set_runtime(rt)
    if capture:
        from neuron_explorer.capture.sink import CaptureSink

        sink = CaptureSink(rt)
        sink.require_framework = from_env
        rt.add_sink(sink)
        sink.start()
        _say_if_no_extension()
    if rt.ndet is not None:
        rt.add_sink(rt.ndet)
        rt.ndet.start()
    _start_stats(rt)
    _install_integrations(rt)
    if for_monitor and not (capture or ndet_on):
        atexit.register(stop, "exit")
    else:
        _install_exit_handlers(rt)
    _forget_in_forked_children()
    return rt


def _say_if_no_extension() -> None:
    """Once per process (a runtime starts once): the C hot path was not built, and what that costs
    (setup.py said so at install; decision 0120).  Not when the user chose the Python path."""
    from neuron_explorer.runtime import ring

    if ring.NativeRing is None and os.environ.get("NEURON_EXPLORER_PURE_PYTHON", "0") in ("", "0"):
        get_logger(__name__).warning(
            "neuron-explorer: warning: the C hot path (neuron_explorer.runtime._fastpath) is not built: this capture "
            "runs the Python fallback, about 3x the overhead per event; reinstall with a C compiler and the Python "
            "headers (docs/install.md)")


def _check_output_dir(path: str) -> None:
    """Fail at start-up, not at the first flush, when the output directory cannot be used."""
    try:
        os.makedirs(path, exist_ok=True)
        ok = os.access(path, os.W_OK | os.X_OK)
        err = "not writable"
    except OSError as e:
        ok, err = False, e.strerror or str(e)
    if not ok:
        raise cfgmod.ConfigError(f"{cfgmod.OUTPUT_DIR}={path!r} cannot be used ({err}); "
                                 "accepted: a directory this process can create or write")


STATS_PERIOD = "NEURON_EXPLORER_STATS_PERIOD_MS"
# with no neuron-monitor announced, the counters are published this often only (decision 0063): a
# monitor that starts reads a snapshot at most this old, then one per period from its next check
STATS_IDLE_PERIOD_S = 5.0


def _start_stats(rt: Runtime) -> None:
    """Publish this process's counters for neuron-monitor; never fatal for the application."""
    if os.environ.get("NEURON_EXPLORER_STATS", "1") == "0":
        return
    try:
        from neuron_explorer.recorders.app_stats import AppStats

        # NEURON_EXPLORER_STATS_PERIOD_MS: the publisher's period (default 500 ms); benchmarks that
        # count instructions stretch it so the timer thread stays out of the count
        period_ms = cfgmod.parse_positive_int(STATS_PERIOD, os.environ.get(STATS_PERIOD), 500)
        # published only once the process runs a workload (_workload_began): a tagged process that
        # never hooks a framework (a shell tool, neuron-monitor itself, a helper) is no application
        stats = AppStats(instance_id=rt.ident.instance_id, nc_indices=[rt.ident.default_core],
                         interval_s=period_ms / 1000.0, idle_interval_s=STATS_IDLE_PERIOD_S, workload=False)
        stats.start()
        rt.register(STATS, stats)
    except Exception as e:
        get_logger(__name__).warning(f"neuron-explorer: warning: neuron-monitor counters disabled: {e}")


def _install_integrations(rt: Runtime) -> None:
    from neuron_explorer.integrations.importhook import when_imported

    def on_torch(torch) -> None:
        from neuron_explorer.integrations import torch as torch_integration, versions

        versions.check("torch", getattr(torch, "__version__", "?"))
        _workload_began(rt)  # (first: the process runs PyTorch even should a hook fail to install)
        if rt.config.device_profile and rt.devprof is None and any(s.name == "capture" for s in rt.sinks):
            from neuron_explorer.integrations.torch.device import DeviceProfiler

            rt.register(DEVICE_PROFILER, DeviceProfiler(rt, rt.config.device_profile))
        torch_integration.install(rt, torch)
        _install_memory(rt, torch)

    when_imported("torch", on_torch)

    def on_jax(jax) -> None:
        from neuron_explorer.integrations import versions
        from neuron_explorer.integrations.jax.runtime import install as install_jax

        versions.check("jax", getattr(jax, "__version__", "?"))
        _workload_began(rt)
        install_jax(rt, jax)

    when_imported("jax", on_jax)


def _workload_began(rt: Runtime) -> None:
    """The runtime is live in a framework: from now on neuron-monitor lists this process as an
    application (docs/decisions/0095-monitor-lists-workloads.md).  Never torchrun's agent, which
    imports torch only to start the ranks (they are the applications)."""
    if rt.stats is not None and not is_launcher():
        rt.stats.begin_workload()


def _install_memory(rt: Runtime, torch) -> None:
    """Device memory by category for the profile's counters and the monitor's memory_used; not
    installed when neither reads it (host memory sampling off and no monitor counters)."""
    if rt.stats is None and not (rt.config.host_memory and any(s.name == "capture" for s in rt.sinks)):
        return
    from neuron_explorer.integrations.torch.memory import install_memory

    src = install_memory(rt, torch)
    if src is not None and rt.stats is not None:
        rt.stats.set_memory_source(src)


def stop(reason: str = "exit") -> None:
    rt = get_runtime()
    if rt is None:
        return
    if _SIGNALS is not None:
        _SIGNALS.hold_if_ending()  # the program ends while a signal's final write is under way
    if rt.stopped:
        # another thread's final write may be under way (a rank's exception and its launcher's
        # SIGTERM come together): a signal's end must not cut it short
        rt.wait_for_final_write()
        return
    rt.flush(final=True, reason=reason)
    # no capture sink unless its module is loaded: a final write imports nothing (runtime/signals.py)
    sink_mod = sys.modules.get("neuron_explorer.capture.sink")
    if sink_mod is not None:
        for s in rt.sinks:
            if isinstance(s, sink_mod.CaptureSink):
                sink_mod.report_written(s)


def _stop_on_signal(reason: str) -> None:
    """The last write of a process that a signal ends (``runtime.signals``): the flush, then its
    final counters for neuron-monitor, which ``atexit`` leaves on a normal exit but never runs
    here (a pool's workers all end that way: docs/decisions/0096-final-counts-on-a-signal.md)."""
    stop(reason)
    rt = get_runtime()
    if rt is not None and rt.stats is not None:
        rt.stats.stop()


def _install_exit_handlers(rt: Runtime) -> None:
    atexit.register(stop, "exit")

    prev_hook = sys.excepthook

    def excepthook(tp, value, tb):
        if not issubclass(tp, KeyboardInterrupt):
            rt.failed = True
        stop(f"exception:{tp.__name__}")
        prev_hook(tp, value, tb)

    sys.excepthook = excepthook

    prev_thread_hook = threading.excepthook

    def thread_excepthook(args):
        rt.failed = True
        prev_thread_hook(args)

    threading.excepthook = thread_excepthook

    def on_signal() -> None:
        rt.failed = True

    global _SIGNALS
    _SIGNALS = SignalExit(_stop_on_signal, on_signal, rt.config.final_write_timeout_s, rt.writing_here)
    _SIGNALS.install()


_SIGNALS: SignalExit | None = None


_FORK_HOOK = False


def _forget_in_forked_children() -> None:
    """A forked child records nothing and writes nothing (docs/decisions/0008-forked-children.md):
    it inherits the runtime, its rings, session directory and exit handlers, and writing any of
    them would replace or duplicate its parent's profile.  Its signal dispositions go back to the
    program's, so it dies as it would unprofiled.  (A child that execs, like every subprocess,
    starts afresh and profiles itself.)"""
    global _FORK_HOOK
    if _FORK_HOOK or not hasattr(os, "register_at_fork"):
        return
    _FORK_HOOK = True

    def after_in_child() -> None:
        rt = get_runtime()
        if rt is not None:
            rt.forget_after_fork()
        if _SIGNALS is not None:
            _SIGNALS.reset_in_child()

    os.register_at_fork(after_in_child=after_in_child)
