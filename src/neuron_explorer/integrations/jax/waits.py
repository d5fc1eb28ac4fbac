"""JAX host waits: the calls that block the host until a dispatched computation is done.

JAX dispatches a jitted computation asynchronously: the call returns an ``Array`` whose buffers
are still being computed, and the host blocks only when it asks for them.  Timed here, each as
one ``record(t0, t1)`` (the callers make it a ``kbl_exec_wait``):

* ``block_until_ready``: the method, ``jax.block_until_ready`` and ``jax._src.api``'s (a call
  inside another counts once);
* the reads of an array's value on the host: ``Array.item`` and the ``ArrayImpl._value``
  property, through which jax 0.10 routes ``float()``, ``int()``, ``bool()``,
  ``operator.index``, ``complex()``, ``tolist``, ``tobytes``, ``__array__``,
  ``format``/``str``/``repr`` and ``jax.device_get``.  ``np.asarray(x)`` itself reads the
  buffer through the C buffer protocol, which no Python patch sees: not timed.

Every call is recorded with its duration, ready or not: a read of an array already computed is
a synchronisation point that costs a copy (microseconds), one still being computed is the wait
for it; recording both keeps a capture's event counts the same from run to run
(docs/decisions/0196-jax-host-reads-as-waits.md).

The program's call behaves as without us: same arguments, same result object, same exception;
a failure of our own record is swallowed.
"""

from __future__ import annotations

import threading
from typing import Callable

__all__ = ["time_waits", "unrecorded"]

class _Flag(threading.local):
    """A per-thread flag, False in every thread until set (a class default: reading it never
    raises and catches an AttributeError, as ``getattr(local, name, False)`` does on a miss)."""

    on = False


_quiet = _Flag()  # ``on`` while our own code waits (``unrecorded``)


class unrecorded:
    """``with unrecorded():`` the waits of this thread inside are ours (a profiled execution
    waited for by the runtime), not the program's: none is recorded."""

    def __enter__(self) -> None:
        self.prev = _quiet.on
        _quiet.on = True

    def __exit__(self, *exc) -> None:
        _quiet.on = self.prev


def time_waits(record: Callable[[int, int], None], now: Callable[[], int]) -> list[tuple]:
    """Patch JAX so each host wait calls ``record(t0, t1)`` (``now`` the clock; not inside
    ``unrecorded``).  Returns ``(owner, name, original)`` for each attribute replaced, to restore
    with ``setattr``."""
    import jax
    from jax._src import api, array

    restore: list[tuple] = []
    inside = _Flag()  # in a timed block_until_ready (a call inside it counts once)

    def timed(orig):
        def block_until_ready(*a, **kw):
            if inside.on or _quiet.on:
                return orig(*a, **kw)
            inside.on = True
            t0 = now()
            try:
                return orig(*a, **kw)
            finally:
                inside.on = False
                t1 = now()
                try:
                    record(t0, t1)
                except Exception:
                    pass
        block_until_ready.__doc__ = getattr(orig, "__doc__", None)
        block_until_ready.__wrapped__ = orig  # type: ignore[attr-defined]
        return block_until_ready

    def read_timed(orig):
        """``orig(self, ...)`` timed (``record`` is not called when it raises)."""
        def read(self, *a, **kw):
            t0 = now()
            out = orig(self, *a, **kw)
            if not _quiet.on:
                t1 = now()
                try:
                    record(t0, t1)
                except Exception:
                    pass
            return out
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(read, attr, getattr(orig, attr))
            except (AttributeError, TypeError):
                pass
        read.__wrapped__ = orig  # type: ignore[attr-defined]
        return read

    def patch(owner, name: str, orig, new) -> None:
        setattr(owner, name, new)
        restore.append((owner, name, orig))

    try:
        for owner, name in ((array.ArrayImpl, "block_until_ready"), (api, "block_until_ready"),
                            (jax, "block_until_ready")):
            orig = getattr(owner, name, None)
            if orig is not None:
                patch(owner, name, orig, timed(orig))
        cls = array.ArrayImpl
        item = vars(cls).get("item")
        if callable(item):
            patch(cls, "item", item, read_timed(item))
        value = vars(cls).get("_value")
        if isinstance(value, property) and value.fget is not None:
            patch(cls, "_value", value, property(read_timed(value.fget), value.fset, value.fdel, value.__doc__))
    except BaseException:  # all or nothing: what was patched is put back
        for owner, name, orig in reversed(restore):
            setattr(owner, name, orig)
        raise
    return restore
