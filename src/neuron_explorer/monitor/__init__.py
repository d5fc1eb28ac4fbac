"""neuron-monitor: live metrics of running applications and of the host.

- ``snapshot``: reading a published snapshot without trusting it; ``config``: the configuration file;
  ``gpu``: optional NVML access.
- ``monitor`` / ``cli``: the ``neuron-monitor`` loop and command; ``control``: its endpoint that relays
  ``neuron-explorer attach`` requests to the processes of its host.
- ``apps`` / ``system``: application-level and system-level metric groups.
- ``metrics``, ``prometheus_exporter``, ``cloudwatch_exporter``: the companion exporters;
  ``companions``: their console entry points.  ``python -m neuron_explorer.monitor`` runs ``cli``.

What applications publish and where is a contract (``contracts.stats_files``, with the latency
buckets of ``contracts.stats_histogram``); the per-process counters are a runtime consumer
(``recorders.app_stats``); ``app_stats`` keeps the import path 0.1.0 documented for ``AppStats``.

See docs/monitor.md.
"""

__all__ = ["app_stats", "apps", "cli", "cloudwatch_exporter", "companions", "config", "control", "gpu", "metrics",
           "monitor", "prometheus_exporter", "snapshot", "system"]
