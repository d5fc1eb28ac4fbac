"""neuron-explorer's JAX plugin.

JAX imports every module of the ``jax_plugins`` namespace package (and every module named by a
``jax_plugins`` entry point) when it first initializes its backends, and calls its
``initialize()``.  That is the only moment we run inside a JAX program, so programs that never use
JAX pay nothing, and JAX programs pay one small import.  We register no backend: we only make
``jax.profiler.trace`` also write a neuron-explorer profile when ``NEURON_RT_INSPECT_*`` asks for one.
"""


def initialize() -> None:
    from neuron_explorer.discovery import on_framework_import
    from neuron_explorer.integrations.jax.plugin import install

    on_framework_import("jax")  # neuron-monitor discovery (docs/decisions/0030-monitor-discovery.md)
    install()
