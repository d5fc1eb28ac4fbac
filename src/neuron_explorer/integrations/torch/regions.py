"""``torch.profiler.record_function`` regions as framework events (docs/decisions/0026-framework-regions.md).

A region is recorded on the thread that ran it, named by its label (the string table holds the
label; ``view`` names the event after it), whether or not ``torch.profiler`` is running.  The
context manager's own ``__enter__``/``__exit__`` are wrapped (in C with the extension:
``runtime/_hooks.h``, the Python functions below otherwise): they are what ``with
record_function(...)`` and its decorator form call, and what PyTorch's Python code (the optimizers'
``Optimizer.step#...``, DDP's forward) uses.  The cost is two clock reads, a dictionary lookup for
the label and one append on top of PyTorch's own ``_record_function_enter_new`` dispatcher call
(see the decision record for the figures).  ``NEURON_EXPLORER_FRAMEWORK_REGIONS=0`` turns it off.
"""

from __future__ import annotations

from neuron_explorer.contracts import events as ev
from neuron_explorer.contracts.env import FRAMEWORK_REGIONS
from neuron_explorer.integrations.torch.state import env_switch
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.core import CoreState, Runtime
from neuron_explorer.runtime.ring import region_methods

__all__ = ["install_regions", "regions_enabled"]

now_ns = clock.now_ns
native_tid = clock.native_tid


def install_regions(rt: Runtime, torch, core: CoreState) -> None:
    """Wrap ``record_function``'s enter and exit so each region appends one framework event."""
    rf = torch.autograd.profiler.record_function
    if getattr(rf, "_neuron_explorer_wrapped", False):
        return
    enter, exit_ = rf.__enter__, rf.__exit__
    append, tick, intern, strings = core.ring.append, core.ring.tick, rt.intern, rt.strings
    enabled = rt.enabled
    FW = ev.FRAMEWORK_OP
    made = None
    if region_methods is not None and core.ring.buffer is not None:
        # the same two methods in C (runtime/_hooks.h): no Python frame of ours per region
        made = region_methods(rf, enter, exit_, core.ring.buffer, core.ring.ticks, strings, intern, enabled, FW)
    if made is not None:
        rf.__enter__, rf.__exit__ = made
        rf._neuron_explorer_wrapped = True
        return

    def __enter__(self):
        self._neuron_explorer_t0 = now_ns()
        return enter(self)

    def __exit__(self, *exc):
        out = exit_(self, *exc)
        t0 = getattr(self, "_neuron_explorer_t0", 0)
        if t0 and enabled[FW]:
            name = self.name
            sid = strings.get(name)
            if sid is None:
                sid = intern(name if isinstance(name, str) else str(name))
            append((FW, t0, now_ns(), native_tid(), sid, 0, 0, 0, 0))
            tick()
        return out

    __enter__.__wrapped__, __exit__.__wrapped__ = enter, exit_  # type: ignore[attr-defined]
    rf.__enter__, rf.__exit__ = __enter__, __exit__
    rf._neuron_explorer_wrapped = True


def regions_enabled() -> bool:
    """``NEURON_EXPLORER_FRAMEWORK_REGIONS=0`` leaves ``record_function`` alone."""
    return env_switch(FRAMEWORK_REGIONS, "framework regions")
