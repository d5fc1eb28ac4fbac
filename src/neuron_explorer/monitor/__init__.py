"""neuron-monitor: live metrics of running applications and of the host.

- ``app_stats``: the per-process counters applications keep and publish (``AppStats``).
- ``monitor`` / ``cli``: the ``neuron-monitor`` loop and command.
- ``apps`` / ``system``: application-level and system-level metric groups.
- ``metrics``, ``prometheus_exporter``, ``cloudwatch_exporter``: the companion exporters.

See docs/monitor.md.
"""
