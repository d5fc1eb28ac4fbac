"""Parquet value encoders in C (``exporters/_pqenc.c``), for ``view``'s own Parquet writer (and, at the
end, its Chrome trace-event JSON events).

``exporters/parquet_file.py`` is the only caller of the Parquet ones: it keeps everything per page and
per file (Thrift headers, Snappy, statistics, layout) and hands the per-value loops to these functions.  There is no
Python copy of them: without the module ``parquet_file`` cannot be imported and ``view`` writes
``SystemProfileEvents`` with Arrow's writer (``exporters/parquet.py``, the same columns and values;
``NEURON_EXPLORER_PARQUET_WRITER=arrow`` chooses it on purpose), which is the reference
``tests/exporters/test_parquet_file_fuzz.py`` and ``test_parquet_own_writer.py`` hold these to.
Why they exist: docs/decisions/0040-own-parquet-encoder.md and 0051-parquet-fused-c-passes.md.

Common rules.  Every function is positional-only.  A *values* buffer is a C-contiguous array
exporting its item size (a numpy array); *valid*, *data* and *prefix* are any bytes-like object.
``prefix`` (the page's levels, already encoded) is written first, which saves copying the page.
Output sizes are bounded from the input lengths, never from a value read from the input; a bad
argument raises ``ValueError`` or ``TypeError``.  Deltas wrap modulo 2**64, as readers decode them.
"""

from typing import Any

from _typeshed import ReadableBuffer
from numpy.typing import NDArray

# (numpy arrays export their buffer, but numpy's stubs say so only for Python >= 3.12)
_Values = ReadableBuffer | NDArray[Any]

def delta_binary_packed(values: _Values, valid: _Values | None, prefix: ReadableBuffer, /) -> bytes:
    """``prefix``, then DELTA_BINARY_PACKED (blocks of 128 values, 4 miniblocks) of the int64 or
    int32 ``values`` whose ``valid`` byte is non-zero (all of them when ``valid`` is None; ``valid``
    has one byte per value): what Arrow's writer writes for such a column with
    ``column_encoding="DELTA_BINARY_PACKED"``."""

def rle_hybrid(values: _Values, bit_width: int, prefix: ReadableBuffer = b"", /) -> bytes:
    """``prefix``, then the RLE / bit-packed hybrid encoding of uint8 or int32 ``values`` at
    ``bit_width`` (0..32) bits, without a length prefix: definition and repetition levels (width
    1 or 2) and dictionary indices.  Runs are looked for at multiples of 8 values."""

def plain_byte_array(offsets: _Values, data: _Values, valid: _Values | None,
                     prefix: ReadableBuffer = b"", /) -> bytes:
    """``prefix``, then PLAIN BYTE_ARRAY (4-byte length, bytes) of the strings
    ``data[offsets[i]:offsets[i + 1]]`` (int32 offsets, n + 1 of them, Arrow's string layout) whose
    ``valid`` byte is non-zero (all when None).  Offsets must rise and stay within ``data``."""

def delta_nonneg(values: _Values, as32: bool = False, /) -> tuple[bytes, int]:
    """The data page body of an optional int64/int32 column whose negative values are its nulls
    (``view``'s "none" for ids, sizes, return codes): definition levels (4-byte length, RLE hybrid at
    width 1), then DELTA_BINARY_PACKED of the other values; and the null count.  ``as32``: int64
    input written as an INT32 column (each value truncated to 32 bits, as numpy's ``astype`` does).
    Replaces, in one pass, numpy's mask, count, negation and level pass."""

def group_stats(gid: _Values, start: _Values, end: _Values, count: _Values, total: _Values, first: _Values,
                last: _Values, longest: _Values, /) -> None:
    """The event summary's reductions over one chunk in one pass, into the five int64 output
    arrays of one length ``size`` (count and total zeroed, first at INT64_MAX, last and longest at
    INT64_MIN): per event i of group ``gid[i]``, its count, total ``end - start``, minimum start,
    maximum end and longest duration (differences and sums wrap as numpy's int64 do).
    ``ValueError`` for a gid outside [0, size), lengths that differ or arrays that are not int64.
    Twin: ``exporters/event_summary.py`` ``group_stats_numpy``."""

def present(ids: _Values, k: int, /) -> bytes | None:
    """One byte per value 0..k-1 of the int64 ``ids``: 1 where some id equals it; None when an id
    lies outside [0, k).  The numpy equivalent is ``np.bincount(ids, minlength=k) > 0`` with a range
    check; ``parquet_file.present`` wraps it."""

def list_page(first: _Values, second: _Values | None, /) -> tuple[bytes, int]:
    """The data page body of ``flow_id`` (a list of up to two int64 a row, written as never-null
    lists of never-null values): row i is ``[first[i], second[i]]`` without the zeros (0 = none).
    Repetition levels (4-byte length, width 1), definition levels (width 2: 1 an empty list, 3 a
    value), DELTA_BINARY_PACKED values; and the level count.  ``first`` and ``second`` are int64
    buffers of one length; ``second`` None means every row has at most one value."""

def dict_page(ids: _Values, lut: _Values, offset: int, null_pos: int, nvalues: int, bit_width: int,
              want_used: bool = True, /) -> tuple[bytes, int, bytes]:
    """A dictionary-encoded data page body of an optional flat column from per-row int32/int64
    ``ids``: row i's dictionary position is ``lut[ids[i] + offset]`` (int32 ``lut``); a row whose
    position is ``null_pos`` is null, and so is an id outside ``lut`` when ``null_pos >= 0`` (else it
    is a ``ValueError``, as is a position outside the ``nvalues`` values or ``bit_width``).
    Returns ``(body, nulls, used)``: body = definition levels (4-byte length, RLE hybrid width 1),
    the bit-width byte, the non-null rows' positions (RLE hybrid); nulls = the null count; used =
    one byte per dictionary value, 1 where a non-null row holds it (min/max statistics; all 0
    unless ``want_used``).  Replaces numpy's gather, null mask, compaction and two level passes."""

# ---- Chrome trace-event JSON (``exporters/chrome_json.py``; docs/json-output.md) ----

def chrome_events(n: int, cols: tuple[_Values | None, ...], tables: tuple[list[bytes], ...], origin: int,
                  pid: bytes, extra_offsets: _Values | None, extra_data: _Values | None,
                  extra_valid: _Values | None, ascii: bool, sep: ReadableBuffer, /) -> list[bytes] | None:
    """``n`` events of one chunk, ``sep``-joined, in parts to write one after the other: exactly the
    bytes ``chrome_json._render``'s dicts encode to.  ``cols``: 17 int64 columns of ``n`` (order,
    start, end, type, tid, model, exec_id, seq, bytes, ret, op, group, dtype, flow_id,
    framework_stream_id or None, device_profile, role); ``tables``: the encoded names, categories,
    model names, strings and device profiles the columns index (-1: absent); ``extra_*``: the
    extra_json column's Arrow offsets (n + 1 int32), data and one valid byte per event (or None);
    ``ascii``: the standard library's escaping and float repr, else orjson's.  None: a chunk it
    does not reproduce (the caller renders it in Python)."""

def chrome_flows(kind: _Values, ids: _Values, pids: _Values, tids: _Values, ts: _Values, sep: ReadableBuffer,
                 /) -> bytes:
    """The collectives' flow events of ``chrome_json._collective_flows``, ``sep``-joined: kind 0 ``s``,
    1 ``t``, 2 ``f`` (``bp: e``); int64 ids, pids, tids, and ts in nanoseconds since the origin
    (printed as repr of ts / 1000.0)."""
