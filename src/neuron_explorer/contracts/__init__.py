"""The contracts every package shares, each with one home: the event vocabulary and its NDET mapping
(``events``), environment variables and their parsers (``env``), the file layout, made and parsed
(``layout``), event and op columns (``columns``), the capture messages' fields (``messages``), the
Parquet dataset's tables and columns (``dataset``), track classification and labels (``tracks``),
the NDET log format (``ndet_log``), where and in what form applications publish their stats for
neuron-monitor (``stats_files``, with the latency buckets both sides share, ``stats_histogram``),
the straggler rule the CLI summary and the UI must agree on (``stragglers``), and the files of
on-demand capture (``ondemand``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["columns", "dataset", "env", "events", "layout", "messages", "ndet_log", "ondemand", "stats_files",
           "stats_histogram", "stragglers", "tracks"]
