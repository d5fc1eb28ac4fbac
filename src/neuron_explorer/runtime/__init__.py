"""The in-process runtime every consumer hangs off: clocks (``clock``), the configuration read from
the environment (``config``), the ``Runtime`` with its consumer registry (``core``), process identity
(``identity``), the event ring (``ring``, with the C fast path ``_fastpath``) and the signal and exit
handling that keeps a job dying as it would unprofiled (``signals``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["clock", "config", "core", "identity", "ring", "signals"]
