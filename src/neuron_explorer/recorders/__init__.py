"""The recorders the runtime's flush drives besides the capture (consumers, like ``capture``): the
NDET flight recorder (``ndet``: one bounded log per process, in the format of
``contracts.ndet_log``, read by ``neuron-det``) and the per-process counters neuron-monitor reads
(``app_stats``: ``AppStats``, publishing snapshots where ``contracts.stats_files`` says).

They live apart from the tools that read what they write (``ndet``, ``monitor``) because they run
in the user's process, below the line of files (docs/architecture.md).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["app_stats", "ndet"]
