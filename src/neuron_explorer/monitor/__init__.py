"""neuron-monitor: live metrics of running applications and of the host.

- ``app_stats``: the per-process counters applications keep and publish (``AppStats``), a runtime
  consumer; ``endpoint`` (where and in what form they publish) and ``histogram`` are contracts.
- ``snapshot``: reading a published snapshot without trusting it; ``config``: the configuration file;
  ``gpu``: optional NVML access.
- ``monitor`` / ``cli``: the ``neuron-monitor`` loop and command.
- ``apps`` / ``system``: application-level and system-level metric groups.
- ``metrics``, ``prometheus_exporter``, ``cloudwatch_exporter``: the companion exporters.

See docs/monitor.md.
"""

__all__ = ["app_stats", "apps", "cli", "cloudwatch_exporter", "config", "endpoint", "gpu", "histogram",
           "metrics", "monitor", "prometheus_exporter", "snapshot", "system"]
