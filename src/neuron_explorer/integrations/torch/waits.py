"""Host waits: ``kbl_exec_wait`` spans, the host blocked until work it handed off is done.

Three calls block a PyTorch host on such work: ``Work.wait`` on a collective (patched in
``collectives``, which calls the recorder made here), ``torch.cuda.synchronize`` on a CUDA host,
and ``torch.neuron.synchronize`` / ``neuron_explorer.torch.synchronize`` (the names scripts written
for Trainium call; on a CPU host they return at once, and the wait is recorded all the same, so a
script's synchronization points stay visible).  A wait on a collective names it (op, sequence
number, group); a synchronize names the core's latest execution id (model id -1: the wait covers
everything queued, not one graph).
"""

from __future__ import annotations

import functools
from typing import Callable

from neuron_explorer.contracts import events as ev
from neuron_explorer.integrations.torch.state import Installed
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.core import CoreState, Runtime

__all__ = ["install_waits", "record_sync", "wait_recorder"]

now_ns = clock.now_ns
native_tid = clock.native_tid


def wait_recorder(inst: Installed, core: CoreState) -> Callable | None:
    """``waited(t0, t1, key, entry)`` for ``Work.wait`` (``key``: the Work's id; ``entry``: its
    ``Installed.pending_cc`` entry as the wait began, None if its completion was recorded already:
    then it is in ``Installed.done_cc``): one ``kbl_exec_wait`` naming the collective; None when the
    type is filtered out."""
    if not inst.rt.enabled[ev.KBL_EXEC_WAIT]:
        return None
    append, tick = core.ring.append, core.ring.tick
    done = inst.done_cc = {}

    def waited(t0: int, t1: int, key: int, entry) -> None:
        found = done.pop(key, None)  # (also when the entry is known: a callback may have put it there)
        if entry is None:
            entry = found
        if entry is not None:
            append((ev.KBL_EXEC_WAIT, t0, t1, native_tid(), -1, -1, entry[2], entry[3], entry[4]))
        else:  # (a Work this process's kernels did not record)
            append((ev.KBL_EXEC_WAIT, t0, t1, native_tid(), -1, -1, 0, -1, 0))
        tick()

    return waited


def record_sync(rt: Runtime | None, t0: int, t1: int) -> None:
    """One ``kbl_exec_wait`` for a device synchronize on this process's core."""
    if rt is None or rt.stopped or not rt.enabled[ev.KBL_EXEC_WAIT]:
        return
    core = rt.core()
    if core is None:
        return
    core.ring.append((ev.KBL_EXEC_WAIT, t0, t1, native_tid(), -1, core.exec_count - 1, 0, -1, 0))
    core.ring.tick()


def install_waits(rt: Runtime, torch) -> None:
    """Record ``torch.cuda.synchronize`` on a CUDA host (on a CPU host there is nothing to wait for)."""
    if not (rt.enabled[ev.KBL_EXEC_WAIT] and torch.cuda.is_available()):
        return
    orig = torch.cuda.synchronize
    if getattr(orig, "_neuron_explorer", False):
        return

    @functools.wraps(orig)
    def synchronize(*args, **kwargs):
        t0 = now_ns()
        r = orig(*args, **kwargs)
        record_sync(rt, t0, now_ns())
        return r

    synchronize._neuron_explorer = True  # type: ignore[attr-defined]
    torch.cuda.synchronize = synchronize
