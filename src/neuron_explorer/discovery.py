"""Making every PyTorch/JAX process visible to neuron-monitor, with no variable set.

A running ``neuron-monitor`` keeps a small file fresh in the private stats directory
(``contracts.stats_files.MONITOR_FILE``).  Applications look for it when their framework is imported,
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

from neuron_explorer.util.log import get_logger

__all__ = ["WATCH_PERIOD_S", "adopt_all", "adopt_jitted_functions", "on_framework_import", "on_torch_import",
           "watching"]

#: How often a framework process without a monitor looks for one (seconds).
WATCH_PERIOD_S = 1.0
#: ``NEURON_EXPLORER_STATS=0`` keeps a process out of neuron-monitor altogether.
STATS_SWITCH = "NEURON_EXPLORER_STATS"
#: ``NEURON_EXPLORER_ON_DEMAND=0``: the process takes no ``neuron-explorer attach`` request (``ondemand``).
ON_DEMAND_SWITCH = "NEURON_EXPLORER_ON_DEMAND"

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
        get_logger(__name__).warning(f"neuron-explorer: warning: neuron-monitor discovery off ({framework}): {e}")


def watching() -> bool:
    """True while this process looks for a monitor."""
    w = _watcher
    return w is not None and w.is_alive()


_CORE = "neuron_explorer.runtime.core"


def _runtime_started() -> bool:
    """Whether this process's runtime runs, without importing the runtime when nothing did.

    The watch thread runs beside the program, which may be importing the runtime at this very
    moment (the spec's JAX pattern starts a capture from ``jax.profiler.trace``): a module is in
    ``sys.modules`` before its body has run, so reading it from there can meet a half-made
    module.  The ``import`` statement waits for the importing thread to finish it; so the module
    is only ever read through it."""
    if _CORE not in sys.modules:
        return False  # never imported: no runtime (and no import cost)
    from neuron_explorer.runtime.core import get_runtime  # waits while another thread imports it

    return get_runtime() is not None


def _check(framework: str) -> None:
    from neuron_explorer.util.procs import framework_helper, is_launcher

    if framework_helper() is not None or is_launcher():
        return  # Inductor's compile workers, torchrun's agent: they run none of the user's graphs
    if _runtime_started():
        # a capture or NDET from the environment (or a monitor found by an earlier framework
        # import): no monitor to look for; `attach --ndet` may still ask for the NDET log now
        if os.environ.get(ON_DEMAND_SWITCH, "1") != "0":
            _watch(False)
        return
    from neuron_explorer.contracts.stats_files import monitor_present

    looking = os.environ.get(STATS_SWITCH, "1") != "0"
    if looking and monitor_present():
        _start()
        looking = False
    if looking or os.environ.get(ON_DEMAND_SWITCH, "1") != "0":
        _watch(looking)


def _start() -> None:
    from neuron_explorer import boot

    rt = boot.start(for_monitor=True)
    if rt is not None:
        adopt_all(rt)


def adopt_all(rt) -> None:
    """Instrument what the program made before the runtime started: compiled graphs, jitted
    functions."""
    if "torch" in sys.modules:
        import torch  # (not sys.modules["torch"]: the import statement waits for a half-made module)

        adopt_compiled_graphs(rt, torch)
    if "jax" in sys.modules:
        adopt_jitted_functions()


def adopt_jitted_functions() -> int:
    """Instrument the functions the program jitted before the runtime started: JAX loads our
    plugin when it first initialises a backend, usually after a module's ``@jax.jit`` functions
    were made with JAX's own ``jit`` (``integrations.jax.runtime.JaxRuntime.adopt``)."""
    import jax  # noqa: F401 - (waits if another thread is still importing it)

    from neuron_explorer.integrations.jax.runtime import installed

    jx = installed()
    return 0 if jx is None else jx.adopt()


#: Dynamo keeps each compiled graph's callable in its frame's module globals under this prefix.
COMPILED_FN_PREFIX = "__compiled_fn_"


def adopt_compiled_graphs(rt, torch) -> int:
    """Instrument graphs compiled before the runtime started (a monitor that appeared later): the
    callables Dynamo stored in module globals are replaced by recording wrappers of the same
    graphs, so their next calls count.  Returns how many were adopted."""
    import hashlib

    from neuron_explorer.integrations import torch as torch_integration
    from neuron_explorer.integrations.torch.flops import count_first_call
    from neuron_explorer.integrations.torch.graphs import announce_model, wrap_graph

    inst = torch_integration.installed()
    core = rt.core()
    if inst is None or core is None:
        return 0
    n = 0
    for mod in list(sys.modules.values()):
        g = getattr(mod, "__dict__", None)
        if not isinstance(g, dict):
            continue
        for key in [k for k in list(g) if isinstance(k, str) and k.startswith(COMPILED_FN_PREFIX)]:
            fn = g[key]
            inner = getattr(fn, "_torchdynamo_orig_callable", None)
            if inner is None or getattr(fn, "_neuron_explorer_adopted", False):
                continue  # not Dynamo's disable wrapper, or already ours
            hval = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
            name = f"{getattr(mod, '__name__', 'graph')}.{key[len(COMPILED_FN_PREFIX):].split('_')[0]}"
            model = rt.add_model(name=f"graph_{name}"[:64], neff_name=f"neff_{hval}", graph_hash=f"{hval:016x}",
                                 backend="adopted", kind="forward", nc_idx=core.nc)
            announce_model(inst, model)
            new = torch._dynamo.disable(wrap_graph(inst, torch, core, model, count_first_call(torch, rt, model, inner)))
            new._neuron_explorer_adopted = True
            g[key] = new
            n += 1
    return n


def _watch(looking: bool) -> None:
    global _watcher
    with _lock:
        if _watcher is not None:
            return
        _watcher = threading.Thread(target=_watch_loop, args=(looking,), name="neuron-explorer-monitor-watch",
                                    daemon=True)
        _watcher.start()


def _watch_loop(looking: bool) -> None:
    """Once a second: a monitor, while ``looking`` for one (one ``stat``), and an on-demand
    request (one ``stat``, ``ondemand.Agent.poll``), which sets the next period itself (shorter
    while a capture window is open)."""
    from neuron_explorer.contracts.stats_files import monitor_present

    agent = None
    if os.environ.get(ON_DEMAND_SWITCH, "1") != "0":
        from neuron_explorer import ondemand

        ondemand.name_thread()
        agent = ondemand.Agent(adopt_all)
    stop = threading.Event()  # never set: the thread ends with the process (or when it has nothing to do)
    owner = os.getpid()
    period = WATCH_PERIOD_S
    while not stop.wait(period):
        if os.getpid() != owner:
            return
        if looking and _runtime_started():
            looking = False  # (started by an on-demand request)
        if looking and monitor_present():
            looking = False
            try:
                _start()
            except Exception as e:  # noqa: BLE001 - never take the application down
                get_logger(__name__).warning(f"neuron-explorer: warning: neuron-monitor counters not started: {e}")
        if agent is None:
            if not looking or _runtime_started():
                return
            continue
        period = agent.poll()
