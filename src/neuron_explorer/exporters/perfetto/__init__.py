"""``system_profile.pftrace``: the Perfetto exporter.

``wire`` holds the format's field numbers and ids, ``compress`` the compressed-packet sink,
``lanes`` the placement of events on tracks and sequence clocks (written a window at a time), and
``writer`` the trace file and the order a process is read in.
"""

from neuron_explorer.exporters.perfetto.wire import CLOCK_BOOTTIME, SHARED_SLOT, sequence_id
from neuron_explorer.exporters.perfetto.writer import READ_EVENTS, PerfettoWriter, SessionFeed
from neuron_explorer.exporters.perfetto.writer import assemble_files as assemble

__all__ = ["CLOCK_BOOTTIME", "READ_EVENTS", "SHARED_SLOT", "PerfettoWriter", "SessionFeed", "assemble", "sequence_id"]
