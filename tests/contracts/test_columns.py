"""contracts.columns: the column layout of ntrace.pb and .ntff, against the protobuf schema, and a
column message written by hand read back with the wire walk as the reader reads it."""

from __future__ import annotations

import numpy as np

from neuron_explorer.contracts import columns as col
from neuron_explorer.contracts.events import RECORD_WIDTH
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb
from neuron_explorer.util.pbwire import decode_varint, iter_fields


def test_event_columns_take_every_ring_slot_once_plus_the_core():
    rows = sorted(c.row for c in col.EVENT_COLUMNS if c.row is not None)
    assert rows == list(range(RECORD_WIDTH))
    assert [c.name for c in col.EVENT_COLUMNS if c.row is None] == ["nc_idx"]


def test_columns_are_bytes_fields_of_the_schema_with_little_endian_dtypes():
    for msg, cols in ((pb.EventColumns, col.EVENT_COLUMNS), (pb.DeviceOpColumns, col.OP_COLUMNS)):
        fields = msg.DESCRIPTOR.fields_by_name
        assert len({c.field for c in cols}) == len(cols)
        for c in cols:
            assert fields[c.name].number == c.field and fields[c.name].type == fields[c.name].TYPE_BYTES
            assert c.dtype.startswith("<") or np.dtype(c.dtype).itemsize == 1, c
    assert col.EVENT_COUNT_FIELD == 1  # the count comes first in a column message


def test_a_column_message_reads_back_column_by_column():
    n = 5
    rng = np.random.default_rng(0)
    data = {c.name: rng.integers(np.iinfo(c.dtype).min, np.iinfo(c.dtype).max, n, dtype=np.dtype(c.dtype),
                                 endpoint=True) for c in col.EVENT_COLUMNS}
    msg = pb.EventColumns(count=n, **{k: v.tobytes() for k, v in data.items()})
    trace = pb.SystemTrace(format_version=col.FORMAT_VERSION, events=msg).SerializeToString()
    (events,) = [(a, b) for f, t, a, b, _ in iter_fields(trace, 0, len(trace)) if f == col.SYSTEM_TRACE_EVENTS_FIELD]
    by_field = {f: (a, b) for f, t, a, b, _ in iter_fields(trace, *events)}
    assert decode_varint(trace, by_field[col.EVENT_COUNT_FIELD][0])[0] == n
    for c in col.EVENT_COLUMNS:
        a, b = by_field[c.field]
        assert np.array_equal(np.frombuffer(trace[a:b], dtype=c.dtype), data[c.name]), c.name
