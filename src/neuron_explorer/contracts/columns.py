"""The column layout of the capture files, shared by the writer and every reader.

``ntrace.pb`` stores system events and each ``.ntff`` stores device ops column-wise: packed
little-endian arrays in ``bytes`` fields of ``EventColumns`` / ``DeviceOpColumns`` (see
``proto/neuron_explorer_capture.proto``).  A column's field number comes from the schema
(``contracts.messages``); its name,
dtype and (for events) the slot of the runtime's ring record it is taken from are defined here once.
"""

from __future__ import annotations

from dataclasses import dataclass

from neuron_explorer.contracts.messages import number

# The version of the capture files' format: every capture message (SystemTrace, TraceInfo, CpuUtil,
# HostMem, DeviceTrace, NeffFile) starts with it (field 1, the first field serialized).  Readers
# refuse a newer version than this one instead of reading it as if it were this one.  Version 2
# (decision 0111): the capture sink writes ntrace.pb's events to segment files beside it
# (EventSegment); an older reader would take its ntrace.pb for a trace without events.
FORMAT_VERSION = 2


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # numpy dtype, little-endian on disk
    field: int  # field number in the column message
    row: int | None = None  # events: slot of the ring record (None: nc_idx, which the store adds)


EVENT_COLUMNS: tuple[Column, ...] = tuple(
    Column(name, dtype, number("EventColumns", name), row) for name, dtype, row in
    [("type", "<u2", 0), ("start_ns", "<i8", 1), ("end_ns", "<i8", 2), ("nc_idx", "<i4", None),
     ("thread_id", "<i8", 3)] + [(name, "<i8", 4 + i) for i, name in enumerate("abcde")])
EVENT_COUNT_FIELD = number("EventColumns", "count")
SYSTEM_TRACE_EVENTS_FIELD = number("SystemTrace", "events")
EVENT_SEGMENT_BLOCKS_FIELD = number("EventSegment", "blocks")

OP_COLUMNS: tuple[Column, ...] = tuple(
    Column(name, dtype, number("DeviceOpColumns", name)) for name, dtype in
    [("start_ns", "<i8"), ("end_ns", "<i8"), ("name", "<i4"), ("track", "<i4"), ("exec_idx", "<i4"),
     ("flops", "<f8"), ("nbytes", "<i8"), ("detail", "<i4"), ("source", "<i4")])
DEVICE_TRACE_OPS_FIELD = number("DeviceTrace", "ops")
