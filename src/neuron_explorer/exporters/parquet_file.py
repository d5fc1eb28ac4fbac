"""A Parquet file writer for flat tables of integer, string and dictionary-string columns plus
lists of int64: the shape of ``SystemProfileEvents``.

Why our own: Arrow's encoder needed ~0.23 CPU-s per 1M events for that schema, more than the whole
5M events/s/core budget (docs/decisions/0040-own-parquet-encoder.md).  Here the per-value work is
three C loops (``_pqenc``: delta packing, RLE/bit-packed hybrid, plain byte arrays) over numpy
buffers; what remains in Python is per page or per file: Thrift compact headers, Snappy (Arrow's
codec), statistics from numpy reductions.

The files are standard Parquet (format 2.6 features: v1 data pages, ``RLE_DICTIONARY``,
``DELTA_BINARY_PACKED``) with the Arrow schema stored under ``ARROW:schema`` as Arrow's writer
stores it, so pyarrow/pandas, DuckDB and Spark read them as they read the files Arrow writes.
One data page per column chunk; the caller bounds a row group's rows (``view`` chunks: 256k).
"""

from __future__ import annotations

import base64
import struct
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from neuron_explorer.exporters import _pqenc  # (ImportError: the caller falls back to Arrow's writer)

# Thrift compact types
_BOOL_TRUE, _I16, _I32, _I64, _BIN, _LIST, _STRUCT = 1, 4, 5, 6, 8, 9, 12
# Parquet enums
INT32, INT64, BYTE_ARRAY = 1, 2, 6
PLAIN, RLE, DELTA_BINARY_PACKED, RLE_DICTIONARY = 0, 3, 5, 8
UNCOMPRESSED, SNAPPY = 0, 1
REQUIRED, OPTIONAL, REPEATED = 0, 1, 2
_DATA_PAGE, _DICTIONARY_PAGE = 0, 2
MAGIC = b"PAR1"
_MAX_PAGE = 1 << 30  # page sizes are i32; Snappy may grow a page by 1/6
_SNAPPY = pa.Codec("snappy")


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _zz(v: int) -> int:
    return (v << 1) ^ (v >> 63)


def _value(t: int, v) -> bytes:
    if t in (_I16, _I32, _I64):
        return _varint(_zz(int(v)))
    if t == _BIN:
        b = v.encode() if isinstance(v, str) else bytes(v)
        return _varint(len(b)) + b
    if t == _STRUCT:
        return v  # an encoded struct
    if t == _LIST:
        et, items = v
        n = len(items)
        head = bytes([(n << 4) | et]) if n < 15 else bytes([0xF0 | et]) + _varint(n)
        return head + b"".join(_value(et, x) for x in items)
    raise ValueError(f"thrift type {t}")


def tstruct(*fields: tuple[int, int, object]) -> bytes:
    """A Thrift compact struct from (field id, type, value) in field order; None values are left out."""
    out = bytearray()
    last = 0
    for fid, t, v in fields:
        if v is None:
            continue
        d = fid - last
        out += bytes([(d << 4) | t]) if 0 < d <= 15 else bytes([t]) + _varint(_zz(fid))
        if t != _BOOL_TRUE:
            out += _value(t, v)
        last = fid
    out.append(0)
    return bytes(out)


_EMPTY = tstruct()


# ----- columns ---------------------------------------------------------------------------------


@dataclass
class Leaf:
    """A column of the schema: ``kind`` is "int" (INT32/INT64), "str" (plain strings), "dict"
    (dictionary strings) or "list" (a list of non-null INT64, Arrow's ``list<item: int64>``)."""

    name: str
    kind: str
    ptype: int = INT64
    delta: bool = False  # ints: DELTA_BINARY_PACKED (else PLAIN)
    stats: bool = False  # min/max statistics
    snappy: bool = True
    crc: bool = False  # a CRC-32 of each page in its header (a reader verifying checksums refuses damage)

    @property
    def path(self) -> list[str]:
        return [self.name, "list", "element"] if self.kind == "list" else [self.name]

    def schema_elements(self) -> list[bytes]:
        if self.kind == "list":
            return [tstruct((3, _I32, OPTIONAL), (4, _BIN, self.name), (5, _I32, 1), (6, _I32, 3),
                            (10, _STRUCT, tstruct((3, _STRUCT, _EMPTY)))),
                    tstruct((3, _I32, REPEATED), (4, _BIN, "list"), (5, _I32, 1)),
                    tstruct((1, _I32, INT64), (3, _I32, OPTIONAL), (4, _BIN, "element"))]
        if self.kind in ("str", "dict"):
            return [tstruct((1, _I32, BYTE_ARRAY), (3, _I32, OPTIONAL), (4, _BIN, self.name), (6, _I32, 0),
                            (10, _STRUCT, tstruct((1, _STRUCT, _EMPTY))))]
        return [tstruct((1, _I32, self.ptype), (3, _I32, OPTIONAL), (4, _BIN, self.name))]


def _bit_width(v: int) -> int:
    return max(int(v).bit_length(), 1)


def _def_levels(null: np.ndarray | None, n: int) -> bytes:
    """Definition levels (bit width 1) of an optional flat column, with their 4-byte length."""
    if null is None:
        body = _varint(n << 1) + b"\x01"
    else:
        body = _pqenc.rle_hybrid(np.logical_not(null).view(np.uint8), 1)
    return struct.pack("<I", len(body)) + body


def int_stats(leaf: Leaf, v: np.ndarray, nulls: int) -> bytes:
    """Statistics of the non-null values ``v`` of an integer column (Thrift ``Statistics``)."""
    if not len(v):
        return tstruct((3, _I64, nulls))
    fmt = "<q" if leaf.ptype == INT64 else "<i"
    lo, hi = struct.pack(fmt, int(v.min())), struct.pack(fmt, int(v.max()))
    return tstruct((1, _BIN, hi), (2, _BIN, lo), (3, _I64, nulls), (5, _BIN, hi), (6, _BIN, lo))


def _str_stats(values: list[str], used: np.ndarray, nulls: int) -> bytes:
    present = [values[i].encode() for i in np.flatnonzero(used).tolist()]
    if not present:
        return tstruct((3, _I64, nulls))
    return tstruct((3, _I64, nulls), (5, _BIN, max(present)), (6, _BIN, min(present)))


@dataclass
class Encoded:
    """One column chunk, ready to write: its pages (headers included) and what its metadata needs."""

    pages: list[bytes]  # the pieces of the pages, in order
    dict_pages: int  # how many of ``pages`` come first: the dictionary page
    num_values: int
    uncompressed: int
    encodings: list[int]
    stats: bytes | None


def _page(leaf: Leaf, kind: int, body: bytes, sub: bytes) -> tuple[list[bytes], int]:
    """A page: [header, (compressed) body] (written one after the other, not joined: a copy less);
    returns it and its uncompressed size (header included)."""
    if len(body) > _MAX_PAGE:  # page sizes are i32 in the header: refuse rather than write a bad file
        raise ValueError(f"column {leaf.name}: a page of {len(body)} bytes is over this writer's 1 GiB a page")
    data = _SNAPPY.compress(body, asbytes=True) if leaf.snappy else body
    field = 5 if kind == _DATA_PAGE else 7
    crc = None
    if leaf.crc:  # (of the page's bytes as written; Thrift's i32 is signed)
        crc = zlib.crc32(data)
        crc = crc - (1 << 32) if crc >= 1 << 31 else crc
    head = tstruct((1, _I32, kind), (2, _I32, len(body)), (3, _I32, len(data)), (4, _I32, crc), (field, _STRUCT, sub))
    return [head, data], len(head) + len(body)


def _data_page(leaf: Leaf, body: bytes, num_values: int, encoding: int) -> tuple[list[bytes], int]:
    return _page(leaf, _DATA_PAGE, body, tstruct((1, _I32, num_values), (2, _I32, encoding), (3, _I32, RLE),
                                                 (4, _I32, RLE)))


def encode_int(leaf: Leaf, values: np.ndarray, null: np.ndarray | None = None) -> Encoded:
    """An INT32/INT64 column; ``null`` marks the null slots (their values are ignored)."""
    n = len(values)
    dtype = np.int64 if leaf.ptype == INT64 else np.int32
    v = np.ascontiguousarray(values, dtype=dtype)
    nulls = int(np.count_nonzero(null)) if null is not None else 0
    if not nulls:
        null = None
    valid = np.logical_not(null) if null is not None else None
    levels = _def_levels(null, n)
    if leaf.delta:
        enc, body = DELTA_BINARY_PACKED, _pqenc.delta_binary_packed(v, None if valid is None else valid.view(np.uint8),
                                                                    levels)
    else:
        enc, body = PLAIN, levels + (v if valid is None else v[valid]).tobytes()
    page, size = _data_page(leaf, body, n, enc)
    stats = None
    if leaf.stats:
        stats = int_stats(leaf, v if valid is None else v[valid], nulls)
    return Encoded(page, 0, n, size, [RLE, enc], stats)


def encode_nulls(leaf: Leaf, n: int) -> Encoded:
    """An integer column of ``n`` nulls: one run of definition level 0, no values."""
    levels = _varint(n << 1) + b"\x00"
    levels = struct.pack("<I", len(levels)) + levels
    enc = DELTA_BINARY_PACKED if leaf.delta else PLAIN
    body = _pqenc.delta_binary_packed(np.zeros(0, np.int64 if leaf.ptype == INT64 else np.int32), None, levels) \
        if leaf.delta else levels
    page, size = _data_page(leaf, body, n, enc)
    return Encoded(page, 0, n, size, [RLE, enc], int_stats(leaf, np.zeros(0), n) if leaf.stats else None)


def encode_int_nonneg(leaf: Leaf, values: np.ndarray) -> Encoded:
    """A delta-coded INT32/INT64 column whose negative values are the nulls, in one C pass
    (``encode_int`` with ``null=values < 0`` gives the same page, from four numpy passes more)."""
    if not leaf.delta or leaf.stats:  # (the C pass is for the plain case: no statistics)
        return encode_int(leaf, values, values < 0)
    n = len(values)
    v = np.ascontiguousarray(values)
    if v.dtype not in (np.int64, np.int32) or (v.dtype == np.int32 and leaf.ptype == INT64):
        v = v.astype(np.int64)
    body, _nulls = _pqenc.delta_nonneg(v, leaf.ptype == INT32)
    page, size = _data_page(leaf, body, n, DELTA_BINARY_PACKED)
    return Encoded(page, 0, n, size, [RLE, DELTA_BINARY_PACKED], None)


def encode_const(leaf: Leaf, value: int, n: int, step: int = 0) -> Encoded:
    """An INT32/INT64 column ``value, value + step, ...`` (n rows) without building the column
    (delta-coded: every delta is ``step``, so each block is its min delta and four zero bit
    widths).  ``step`` 0: one value in every row; 1: consecutive ids."""
    blocks = (n - 1 + 127) // 128 if n > 1 else 0
    body = (_def_levels(None, n) + _varint(128) + _varint(4) + _varint(n) + _varint(_zz(int(value)))
            + (_varint(_zz(int(step))) + b"\x00" * 4) * blocks)
    page, size = _data_page(leaf, body, n, DELTA_BINARY_PACKED)
    ends = [value, value + step * (n - 1)] if n else []
    stats = int_stats(leaf, np.array(ends, dtype=np.int64), 0) if leaf.stats else None
    return Encoded(page, 0, n, size, [RLE, DELTA_BINARY_PACKED], stats)


def _plain_strings(values: list[str]) -> bytes:
    return b"".join(struct.pack("<I", len(b)) + b for b in (s.encode() for s in values))


def encode_dict(leaf: Leaf, indices: np.ndarray, values: list[str], null: np.ndarray | None = None) -> Encoded:
    """A dictionary-string column: int32 ``indices`` into ``values`` (distinct strings, in range)."""
    n = len(indices)
    idx = np.ascontiguousarray(indices, dtype=np.int32)
    nulls = int(np.count_nonzero(null)) if null is not None else 0
    if null is not None and nulls:
        idx = idx[~null]
    dpage, dsize = _page(leaf, _DICTIONARY_PAGE, _plain_strings(values), tstruct((1, _I32, len(values)),
                                                                                 (2, _I32, PLAIN)))
    w = _bit_width(len(values) - 1)
    body = _pqenc.rle_hybrid(idx, w, _def_levels(null if nulls else None, n) + bytes([w]))
    page, size = _data_page(leaf, body, n, RLE_DICTIONARY)
    stats = None
    if leaf.stats:
        stats = _str_stats(values, np.bincount(idx, minlength=len(values)) if len(idx) else np.zeros(0), nulls)
    return Encoded(dpage + page, 2, n, dsize + size, [PLAIN, RLE, RLE_DICTIONARY], stats)


def encode_dict_ids(leaf: Leaf, ids: np.ndarray, lut: np.ndarray, values: list[str], offset: int = 0,
                    null_pos: int = -1) -> Encoded:
    """A dictionary-string column straight from per-row ``ids``: row i holds
    ``values[lut[ids[i] + offset]]``, null where that position is ``null_pos`` (and where the id
    falls outside ``lut``, when ``null_pos`` >= 0).  One C pass instead of the numpy gathers
    ``encode_dict`` needs (docs/decisions/0051)."""
    n = len(ids)
    ids = np.ascontiguousarray(ids)
    if ids.dtype not in (np.int64, np.int32):
        ids = ids.astype(np.int64)
    w = _bit_width(len(values) - 1)
    body, nulls, used = _pqenc.dict_page(ids, np.ascontiguousarray(lut, dtype=np.int32), offset, null_pos,
                                         len(values), w, leaf.stats)
    dpage, dsize = _page(leaf, _DICTIONARY_PAGE, _plain_strings(values), tstruct((1, _I32, len(values)),
                                                                                 (2, _I32, PLAIN)))
    page, size = _data_page(leaf, body, n, RLE_DICTIONARY)
    stats = None
    if leaf.stats:
        stats = _str_stats(values, np.frombuffer(used, dtype=np.uint8), nulls)
    return Encoded(dpage + page, 2, n, dsize + size, [PLAIN, RLE, RLE_DICTIONARY], stats)


def encode_strings(leaf: Leaf, arr: pa.Array) -> Encoded:
    """A plain string column from an Arrow string array (nulls kept)."""
    arr = arr.cast(pa.string()) if arr.type != pa.string() else arr
    n = len(arr)
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], dtype=np.int32, count=arr.offset + n + 1)[arr.offset:] if bufs[1] else \
        np.zeros(n + 1, dtype=np.int32)
    data = bufs[2] if bufs[2] is not None else b""
    null = None
    if arr.null_count:  # from the validity bitmap (a boolean ``to_numpy`` would import pandas)
        bits = np.frombuffer(bufs[0], dtype=np.uint8)
        null = np.unpackbits(bits, count=arr.offset + n, bitorder="little")[arr.offset:] == 0
    valid = None if null is None else np.logical_not(null).view(np.uint8)
    body = _pqenc.plain_byte_array(off, data, valid, _def_levels(null, n))
    page, size = _data_page(leaf, body, n, PLAIN)
    return Encoded(page, 0, n, size, [RLE, PLAIN], None)


def encode_list(leaf: Leaf, offsets: np.ndarray, values: np.ndarray) -> Encoded:
    """A list<int64> column of non-null lists of non-null values: row i is values[offsets[i]:offsets[i+1]]."""
    counts = np.diff(offsets)
    n = len(counts)
    if n and counts.max() <= 1:  # 0 or 1 value a row: no repeated entries
        total = n
        rep_body = _varint(n << 1) + b"\x00"
        defs = np.where(counts == 1, 3, 1).astype(np.uint8)
    else:
        entries = np.maximum(counts, 1)
        total = int(entries.sum())
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(entries[:-1], out=starts[1:])
        rep = np.ones(total, dtype=np.uint8)
        rep[starts] = 0
        defs = np.full(total, 3, dtype=np.uint8)
        defs[starts[counts == 0]] = 1
        rep_body = _pqenc.rle_hybrid(rep, 1)
    def_body = _pqenc.rle_hybrid(defs, 2)
    levels = struct.pack("<I", len(rep_body)) + rep_body + struct.pack("<I", len(def_body)) + def_body
    body = _pqenc.delta_binary_packed(np.ascontiguousarray(values, dtype=np.int64), None, levels)
    page, size = _data_page(leaf, body, total, DELTA_BINARY_PACKED)
    return Encoded(page, 0, total, size, [RLE, DELTA_BINARY_PACKED], None)


def encode_flows(leaf: Leaf, first: np.ndarray, second: np.ndarray | None = None) -> Encoded:
    """A list<int64> column whose row i lists first[i] and second[i] without the zeros, in one C
    pass (``encode_list`` over the same lists gives the same values, from offsets and level arrays
    built in numpy)."""
    a = np.ascontiguousarray(first, dtype=np.int64)
    b = None if second is None or not second.any() else np.ascontiguousarray(second, dtype=np.int64)
    body, total = _pqenc.list_page(a, b)
    page, size = _data_page(leaf, body, total, DELTA_BINARY_PACKED)
    return Encoded(page, 0, total, size, [RLE, DELTA_BINARY_PACKED], None)


def presence(ids: np.ndarray, k: int) -> bytes | None:
    """One byte per value 0..k-1 of int64 ``ids``: 1 where some id equals it; None when an id is
    outside [0, k) (``_pqenc.present``)."""
    return _pqenc.present(np.ascontiguousarray(ids, dtype=np.int64), k)


# ----- the file ----------------------------------------------------------------------------------


class ParquetFileWriter:
    """Row groups of encoded column chunks, then the footer. Writes to ``path`` as it goes."""

    def __init__(self, path: str, leaves: list[Leaf], arrow_schema: pa.Schema, created_by: str,
                 metadata: dict[bytes, bytes] | None = None) -> None:
        self.leaves = leaves
        self.kv = [(b"ARROW:schema", base64.b64encode(arrow_schema.serialize().to_pybytes()))]
        self.kv += list((metadata or {}).items())  # (as Arrow's writer keeps a schema's metadata)
        self.created_by = created_by
        self.f = open(path, "wb")
        self.f.write(MAGIC)
        self.pos = len(MAGIC)
        self.row_groups: list[bytes] = []
        self.rows = 0

    def write_row_group(self, n: int, chunks: list[Encoded]) -> None:
        if len(chunks) != len(self.leaves):
            raise ValueError(f"{len(chunks)} column chunks for {len(self.leaves)} columns")
        start = self.pos
        metas, total_unc = [], 0
        for leaf, c in zip(self.leaves, chunks):
            first = self.pos
            data_off = first + sum(len(p) for p in c.pages[:c.dict_pages])
            for p in c.pages:
                self.f.write(p)
            size = sum(len(p) for p in c.pages)
            self.pos += size
            total_unc += c.uncompressed
            meta = tstruct((1, _I32, leaf.ptype if leaf.kind in ("int", "list") else BYTE_ARRAY),
                           (2, _LIST, (_I32, c.encodings)), (3, _LIST, (_BIN, leaf.path)),
                           (4, _I32, SNAPPY if leaf.snappy else UNCOMPRESSED), (5, _I64, c.num_values),
                           (6, _I64, c.uncompressed), (7, _I64, size), (9, _I64, data_off),
                           (11, _I64, first if c.dict_pages else None), (12, _STRUCT, c.stats))
            metas.append(tstruct((2, _I64, first), (3, _STRUCT, meta)))
        self.row_groups.append(tstruct((1, _LIST, (_STRUCT, metas)), (2, _I64, total_unc), (3, _I64, n),
                                       (5, _I64, start), (6, _I64, self.pos - start),
                                       (7, _I16, len(self.row_groups))))
        self.rows += n

    def close(self) -> None:
        if self.f.closed:
            return
        try:
            schema = [tstruct((4, _BIN, "schema"), (5, _I32, len(self.leaves)))]
            for leaf in self.leaves:
                schema += leaf.schema_elements()
            kv = [tstruct((1, _BIN, k), (2, _BIN, v)) for k, v in self.kv]
            orders = [tstruct((1, _STRUCT, _EMPTY))] * sum(1 for _ in self.leaves)
            footer = tstruct((1, _I32, 2), (2, _LIST, (_STRUCT, schema)), (3, _I64, self.rows),
                             (4, _LIST, (_STRUCT, self.row_groups)), (5, _LIST, (_STRUCT, kv)),
                             (6, _BIN, self.created_by), (7, _LIST, (_STRUCT, orders)))
            self.f.write(footer + struct.pack("<I", len(footer)) + MAGIC)
        finally:
            self.f.close()
