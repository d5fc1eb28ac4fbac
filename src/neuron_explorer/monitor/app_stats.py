"""The import path docs/monitor.md gave in 0.1.0 for feeding neuron-monitor's counters by hand: an
alias of ``recorders.app_stats``, where the per-process counters live since they were named as the
runtime consumer they are (docs/decisions/0100-layers-named-by-the-tree.md).  Nothing in the
package imports it."""

from neuron_explorer.recorders.app_stats import AppStats  # noqa: F401
