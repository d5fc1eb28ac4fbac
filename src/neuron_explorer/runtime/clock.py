"""Clocks.  Events are stamped with the host monotonic clock (``time.perf_counter_ns``, which is
CLOCK_MONOTONIC on Linux and therefore shared by every process on a host); pairs of monotonic and
wall-clock readings (anchors) let ``view`` place them on the wall clock and across hosts."""

from __future__ import annotations

import os
import threading
import time

now_ns = time.perf_counter_ns

_get_ident = threading.get_ident
# Python thread ident -> OS thread id.  Hot paths read it inline (``native_ids[get_ident()]``, a C
# call and a dict subscript, no Python frame) and call native_tid() only on a KeyError.
native_ids: dict[int, int] = {}
if hasattr(os, "register_at_fork"):  # a forked child's thread has the parent's ident, not its id
    os.register_at_fork(after_in_child=native_ids.clear)


def native_tid() -> int:
    """The OS thread id, cached per thread (``get_native_id`` is a system call)."""
    ident = _get_ident()
    t = native_ids.get(ident)
    if t is None:
        t = native_ids[ident] = threading.get_native_id()
    return t


def anchor(label: str) -> tuple[int, int, str]:
    """A (monotonic, wall) pair taken as close together as possible (the tightest of three tries)."""
    best = None
    for _ in range(3):
        m0 = now_ns()
        w = time.time_ns()
        m1 = now_ns()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, (m0 + m1) // 2, w)
    assert best is not None
    return best[1], best[2], label
