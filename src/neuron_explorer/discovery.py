"""Making every PyTorch/JAX process visible to neuron-monitor, with no variable set.

A running ``neuron-monitor`` keeps a small file fresh in the private stats directory
(``monitor.endpoint.MONITOR_FILE``).  Applications look for it when their framework is imported,
through the framework's own plugin hooks, so no other Python process runs any of our code:

* PyTorch imports every ``torch.backends`` entry point at the end of ``import torch``
  (:func:`on_torch_import`; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off);
* JAX imports its ``jax_plugins`` when it first initializes a backend (the plugin calls
  :func:`on_framework_import`).

If a monitor is there, the runtime starts with only the neuron-monitor counters
(``boot.start(for_monitor=True)``).  If not, a daemon thread looks again every
:data:`WATCH_PERIOD_S` (one ``stat`` call) and starts it when a monitor appears, so a monitor
started after the job still sees it.  Without a monitor the process pays one small import and a
``stat`` per second.  See docs/decisions/0030-monitor-discovery.md.
"""

from __future__ import annotations

import os
import sys
import threading

__all__ = ["WATCH_PERIOD_S", "on_framework_import", "on_torch_import", "watching"]

#: How often a framework process without a monitor looks for one (seconds).
WATCH_PERIOD_S = 1.0
#: ``NEURON_EXPLORER_STATS=0`` keeps a process out of neuron-monitor altogether.
STATS_SWITCH = "NEURON_EXPLORER_STATS"

_watcher: threading.Thread | None = None
_lock = threading.Lock()


def on_torch_import() -> None:
    """The ``torch.backends`` entry point: torch calls it once, at the end of its import."""
    on_framework_import("torch")


def on_framework_import(framework: str) -> None:
    """Start the monitor counters now if a monitor runs, else watch for one.  Never raises: an
    error here must not break the framework's import."""
    try:
        _check(framework)
    except Exception as e:  # noqa: BLE001 - the user's import comes first
        print(f"neuron-explorer: warning: neuron-monitor discovery off ({framework}): {e}", file=sys.stderr)


def watching() -> bool:
    """True while this process looks for a monitor."""
    w = _watcher
    return w is not None and w.is_alive()


def _runtime_started() -> bool:
    core = sys.modules.get("neuron_explorer.runtime.core")  # not imported: no runtime (and no cost)
    return core is not None and core.get_runtime() is not None


def _check(framework: str) -> None:
    if os.environ.get(STATS_SWITCH, "1") == "0" or _runtime_started():
        return
    from neuron_explorer.util.procs import framework_helper, is_launcher

    if framework_helper() is not None or is_launcher():
        return  # Inductor's compile workers, torchrun's agent: they run none of the user's graphs
    from neuron_explorer.monitor.endpoint import monitor_present

    if monitor_present():
        _start()
    else:
        _watch()


def _start() -> None:
    from neuron_explorer import boot

    boot.start(for_monitor=True)


def _watch() -> None:
    global _watcher
    with _lock:
        if _watcher is not None:
            return
        _watcher = threading.Thread(target=_watch_loop, name="neuron-explorer-monitor-watch", daemon=True)
        _watcher.start()


def _watch_loop() -> None:
    from neuron_explorer.monitor.endpoint import monitor_present

    stop = threading.Event()  # never set: the thread ends when a monitor is found or with the process
    owner = os.getpid()
    while not stop.wait(WATCH_PERIOD_S):
        if os.getpid() != owner or _runtime_started():
            return
        if monitor_present():
            try:
                _start()
            except Exception as e:  # noqa: BLE001 - never take the application down
                print(f"neuron-explorer: warning: neuron-monitor counters not started: {e}", file=sys.stderr)
            return
