"""The state of the PyTorch hooks in this process, on one object.

``install`` makes one ``Installed`` per process and hands it to the graph and collective hooks, so
what they share across calls (the compile in progress, the collectives whose end is not recorded
yet, the warnings already printed) is visible in one place instead of module globals.  Nothing on
the execution hot path reads it: the wrappers capture what they need when a graph is wrapped.
"""

from __future__ import annotations

import os
from typing import Callable

from neuron_explorer.runtime.core import Runtime
from neuron_explorer.util.log import get_logger

__all__ = ["Installed", "env_switch"]

DONE_CC_KEPT = 64  # completed collectives remembered for a later Work.wait


class Installed:
    """What ``install`` set up, and the state its hooks keep between calls."""

    def __init__(self, rt: Runtime, torch_dir: str = "") -> None:
        self.rt = rt
        # PyTorch's own source directory (with a trailing separator): frames below it are not the
        # user's code when a graph is named after its source line
        self.torch_dir = torch_dir
        # when Dynamo's start callback ran for the compile in progress (0: none seen)
        self.compile_start = 0
        # the c10d ``torch.library.Library`` (or the C++ kernels' ``Kernels``): kernel
        # registrations live as long as it does
        self.lib = None
        # id(Work) (the Work's address with the C++ kernels) -> [Work, finish(entry, t1, status),
        # op, seq, group, ...] for collectives whose end is not recorded yet (collectives._finisher
        # lists the rest)
        self.pending_cc: dict[int, list] = {}
        # id(Work) -> that entry, for collectives completed but not waited on yet (what a later
        # Work.wait names).  The Work is kept so that its id stays its own: a completion before the
        # op has returned to Python would otherwise free the wrapper, and Python would get a new
        # one.  Bounded, since work waited on in C++ (DDP's buckets) is never waited on here.
        self.done_cc: dict[int, list] | None = None
        # with the C++ kernels: ``adopt()``, which files their queued records in pending_cc, and
        # their queue's size: ``queued()`` and the address of the C long it reads
        self.adopt_cc: Callable[[], None] | None = None
        self.cc_queued: Callable[[], int] | None = None
        self.cc_queued_address: int | None = None
        self.warned: set[str] = set()
        self.eager = None  # the eager hooks (integrations.torch.eager.Eager), when installed

    def warn_once(self, key: str, msg: str) -> None:
        """Print a warning the first time ``key`` is seen: recording problems repeat per call."""
        if key not in self.warned:
            self.warned.add(key)
            get_logger(__name__).warning(f"neuron-explorer: warning: {msg}")

    def cc_complete(self, key: int, t1: int, status: int, remember: bool = True) -> None:
        """Record the end of the collective whose Work has id ``key``, unless it was recorded;
        ``remember``: keep it for a waiter on another thread (not needed when the wait records)."""
        p = self.pending_cc.pop(key, None)  # atomic under the GIL: the first of wait/callback records
        if p is not None:
            done = self.done_cc
            if remember and done is not None:  # before the record: a waiter on another thread looks here next
                done[key] = p
                if len(done) > DONE_CC_KEPT:
                    done.pop(next(iter(done)), None)
            p[1](p, t1, status)


def env_switch(var: str, what: str, default: bool = True) -> bool:
    """An on/off variable of the hooks (default on unless ``default``).  Read at torch's import, too
    late to stop the launch: a bad value is said once and leaves the feature at its default."""
    from neuron_explorer.contracts.env import ConfigError, parse_bool

    try:
        return parse_bool(var, os.environ.get(var), default)
    except ConfigError as e:
        get_logger(__name__).warning(f"neuron-explorer: warning: {e}; {what} stay {'on' if default else 'off'}")
        return default
