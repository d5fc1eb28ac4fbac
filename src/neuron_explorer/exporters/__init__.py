"""Output formats of ``view``, behind one interface (``interface``): Parquet (``parquet``), Chrome
trace-event JSON (``chrome_json``, written through the one Chrome-trace writer ``chrome_trace``
that ``neuron-det`` uses too) and Perfetto (``perfetto``). Beside the Parquet events, ``parquet``
writes each file's events summary (``event_summary``), the dataset's events overview
(``event_overview``) and each file's diff items (``diff_items``, with their reader).

Importing this package loads only the interface; each format's module is imported when a run
asks for it (``exporter(fmt)``), so Parquet output never loads the Perfetto writer and
``neuron-det`` loads only ``chrome_trace``.
"""

from neuron_explorer.exporters.interface import (
    FORMATS,
    Exporter,
    Piece,
    ProcessTarget,
    ProcessWriter,
    RunInfo,
    exporter,
)

__all__ = ["FORMATS", "Exporter", "Piece", "ProcessTarget", "ProcessWriter", "RunInfo", "exporter",
           "interface", "parquet", "diff_items", "chrome_json", "chrome_trace", "perfetto"]
