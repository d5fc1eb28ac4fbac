"""A Dask worker preload for the kill tests (``dask worker --preload <this file>``): every
conversion, once its files are written, stays running ``NEURON_EXPLORER_TEST_HOLD_S`` seconds more,
so that a test that kills the worker "mid-conversion" cannot lose the race to a conversion that
has already finished.  The output and the result are the real conversion's."""

from __future__ import annotations

import functools
import os
import time

from neuron_explorer.view import tasks


def held(convert):
    @functools.wraps(convert)
    def held_convert(*args, **kwargs):
        out = convert(*args, **kwargs)
        time.sleep(float(os.environ.get("NEURON_EXPLORER_TEST_HOLD_S", "2")))
        return out

    held_convert.held = True
    return held_convert


# (dask may run a preload file more than once in a worker: wrap once)
if not getattr(tasks.convert, "held", False):
    tasks.convert = held(tasks.convert)
