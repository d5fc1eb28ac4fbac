"""Perfetto's trace format as far as the writer uses it: field numbers, clock ids, packet sequence
ids, and the few messages that are encoded one at a time (track descriptors, interned names).

Field numbers are those of Perfetto's ``perfetto_trace.proto``; the events themselves are encoded
column-wise by the stream (``util.pbwire.Rows``), with these numbers.
"""

from __future__ import annotations

import numpy as np

from neuron_explorer.util import pbwire

# TracePacket
TRACE_PACKET = 1
P_TIMESTAMP, P_CLOCK_SNAPSHOT, P_SEQ_ID, P_TRACK_EVENT, P_INTERNED, P_SEQ_FLAGS = 8, 6, 10, 11, 12, 13
P_DEFAULTS, P_TRACK_DESC = 59, 60
P_COMPRESSED = 50
P_CLOCK_ID = 58  # TracePacket.timestamp_clock_id: set on late packets, which carry absolute times
# TrackEvent, its debug annotations, interned data
TE_TYPE, TE_NAME_IID, TE_TRACK_UUID, TE_DEBUG, TE_FLOW_IDS, TE_DOUBLE_COUNTER = 9, 10, 11, 4, 47, 44
DA_NAME_IID, DA_INT, DA_STRING_IID = 1, 4, 17
ID_EVENT_NAMES, ID_DEBUG_NAMES, ID_DEBUG_STRINGS = 2, 3, 29
# TrackDescriptor, ProcessDescriptor, CounterDescriptor
TD_UUID, TD_NAME, TD_PROCESS, TD_PARENT, TD_COUNTER = 1, 2, 3, 5, 8
PD_PID, PD_NAME = 1, 6
CD_UNIT, CD_UNIT_NAME = 3, 6
# TracePacketDefaults, ClockSnapshot
DEF_CLOCK_ID, DEF_TRACK_EVENT, TED_TRACK_UUID = 58, 11, 11
CS_CLOCKS, CLK_ID, CLK_TS, CLK_INCREMENTAL = 1, 1, 2, 3
# TrackEvent.Type, TracePacket.SequenceFlags
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
SEQ_CLEARED, SEQ_NEEDS_STATE = 1, 2

CLOCK_BOOTTIME = 6  # the trace clock: timestamps without a clock id are in it
CLOCK_EVENTS = 64  # sequence-scoped, incremental (ids 64..127 are scoped to their sequence)

# packet sequences: a process has 2**SEQ_BITS of them (slot 0 carries the counters, slots
# 1..SHARED_SLOT-1 one track each, SHARED_SLOT the tracks beyond, whose events name their track);
# the id interleaves the bits of the process index and the slot (see sequence_id)
SEQ_BITS = 10
SHARED_SLOT = (1 << SEQ_BITS) - 1
PROCESS_BITS = 21  # process indexes that sequence ids keep apart

# debug annotations an event may carry, in the order they are written; their name iids
ANNOTATIONS = ("model_name", "exec_id", "op", "seq", "bytes", "group", "dtype", "ret")
ANNOTATION_IID = {nm: i + 1 for i, nm in enumerate(ANNOTATIONS)}


def sequence_ids(index: int) -> np.ndarray:
    """sequence_id(index, slot) for every slot."""
    assert 0 <= index < (1 << PROCESS_BITS)
    slot = np.arange(SHARED_SLOT + 1, dtype=np.int64)
    out = np.zeros(SHARED_SLOT + 1, dtype=np.int64)
    bit = 0
    for k in range(PROCESS_BITS):
        if k < SEQ_BITS:
            out |= ((slot >> k) & 1) << bit
            bit += 1
        out |= ((index >> k) & 1) << bit
        bit += 1
    return out + 1


def sequence_id(index: int, slot: int) -> int:
    """Packet sequence id of a process's slot: the bits of ``slot`` (SEQ_BITS) and ``index`` (21)
    interleaved, plus one, so small traces keep 1-byte ids and every (process, slot) differs."""
    assert 0 <= slot < (1 << SEQ_BITS)
    return int(sequence_ids(index)[slot])


def packet(body: bytes) -> bytes:
    """One TracePacket (as an entry of the Trace message)."""
    return pbwire.length_delimited(TRACE_PACKET, body)


P_TRACE_CONFIG, TC_UNIQUE_SESSION_NAME = 33, 22  # TracePacket.trace_config, TraceConfig.unique_session_name
# The first packet of every .pftrace ``view`` writes: a trace config naming the session
# "neuron-explorer-view", as Perfetto's service records the config of the session it traced.  It
# is the file's mark (``writer.ours``): ``view`` replaces a trace at its default name only when the
# file opens with these bytes.
MARK = b"neuron-explorer-view"
MARK_PACKET = packet(pbwire.length_delimited(P_TRACE_CONFIG, pbwire.length_delimited(TC_UNIQUE_SESSION_NAME, MARK)))


def interned(kind: int, items) -> bytes:
    """InternedData entries of one kind from (string, iid) pairs."""
    return b"".join(pbwire.length_delimited(kind, pbwire.varint_field(1, i) + pbwire.length_delimited(2, s.encode()))
                    for s, i in items)


def track_descriptor(uuid: int, name: str, parent: int | None = None, pid: int | None = None,
                     pname: str | None = None, counter_unit: int | None = None,
                     unit_name: str | None = None) -> bytes:
    """A TrackDescriptor packet: a track (under ``parent``), a process (``pid``) or a counter."""
    td = pbwire.varint_field(TD_UUID, uuid) + pbwire.length_delimited(TD_NAME, name.encode())
    if parent is not None:
        td += pbwire.varint_field(TD_PARENT, parent)
    if pid is not None:
        pd = pbwire.varint_field(PD_PID, pid) + pbwire.length_delimited(PD_NAME, (pname or name).encode())
        td += pbwire.length_delimited(TD_PROCESS, pd)
    if counter_unit is not None:
        cd = pbwire.varint_field(CD_UNIT, counter_unit)
        if unit_name:
            cd += pbwire.length_delimited(CD_UNIT_NAME, unit_name.encode())
        td += pbwire.length_delimited(TD_COUNTER, cd)
    return packet(pbwire.length_delimited(P_TRACK_DESC, td))
