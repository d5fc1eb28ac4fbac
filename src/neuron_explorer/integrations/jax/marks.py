"""The clock markers a JAX trace carries: marker events the plugin (and the device profiler) emit
right after a trace starts and right before it stops, each bracketed by two host monotonic reads;
``xplane.clock_map`` finds them in the trace to map its clock to the host's.

A module of its own so that the writers (``plugin``, ``devprof``) and the reader (``xplane``) share
the names without importing each other: ``plugin`` is imported by JAX's plugin discovery in every
JAX process and keeps its top level to the standard library's cheapest modules.
"""

MARK_PREFIX = "neuron_explorer_clock_sync"
MARK_START = MARK_PREFIX + "_start"
MARK_STOP = MARK_PREFIX + "_stop"
