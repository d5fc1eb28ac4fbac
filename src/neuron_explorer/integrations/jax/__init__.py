"""JAX integration: ``jax.profiler.trace`` also writes a neuron-explorer capture session.

- ``plugin``: what JAX's plugin discovery loads (``install``): wraps ``start_trace``/``stop_trace``
  and ``TraceAnnotation`` while a requested trace runs;
- ``marks``: the names of the clock markers the plugin writes into a trace and ``xplane`` reads;
- ``xplane``: reads the trace JAX wrote (this process's ``xplane.pb``, its clock, its ops);
- ``hlo``: per-op facts from the optimized HLO of the process's live executables;
- ``convert``: the trace as a capture session, written by ``capture.writer``.

See docs/jax.md and docs/decisions/0013-jax-plugin-hook.md.
"""

from neuron_explorer.integrations.jax.plugin import install

__all__ = ["install"]
