"""``system_profile.pftrace``: the Perfetto exporter.

``wire`` holds the format's field numbers and ids, ``compress`` the compressed-packet sink,
``lanes`` the placement of events on tracks and sequence clocks (written a window at a time), and
``writer`` the trace file and the order a process is read in.
"""

from neuron_explorer.exporters.perfetto.wire import CLOCK_BOOTTIME, SHARED_SLOT, sequence_id
from neuron_explorer.exporters.perfetto.writer import (
    READ_EVENTS,
    PerfettoProcess,
    PerfettoWriter,
    SessionFeed,
    assemble,
    open_process,
    ours,
)

__all__ = ["CLOCK_BOOTTIME", "READ_EVENTS", "SHARED_SLOT", "PerfettoProcess", "PerfettoWriter", "SessionFeed",
           "assemble", "open_process", "ours", "sequence_id"]
