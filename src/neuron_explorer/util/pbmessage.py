"""Encoding small protobuf messages from a table of their fields, without the protobuf package.

A profiled process writes a handful of small messages per flush (a capture's ``TraceInfo``, its
tables, its sample columns).  Building them with the generated protobuf classes means importing
protobuf and the schema at start-up, 25-40 ms of every profiled process's CPU (decision 0214).  Here
a message is a ``Mapping`` from field names to values, encoded from a ``Schema`` that names each
field's number and type, with proto3's rules: a scalar equal to its default is not written, a
repeated number is packed, a ``map<string, string>`` is a run of (key = 1, value = 2) entries, and
the fields come in field-number order.  Given a map's keys in sorted order, the bytes are what
``SerializeToString(deterministic=True)`` of the upb implementation gives (tests compare them).

Values are checked as protobuf checks them (an int32 out of range, a float for an integer raise
``ValueError`` / ``TypeError``), with one difference: a string that is not valid Unicode (a
non-UTF-8 file name or argument, which Python keeps as lone surrogates) is written with
``\\xNN`` escapes instead of failing the whole message (``util.names.valid_text``).
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from neuron_explorer.util.names import valid_text
from neuron_explorer.util.pbwire import FIXED64, LEN, encode_varint_scalar, length_delimited, tag, varint_field


class Field(NamedTuple):
    number: int
    kind: str  # a scalar type ("uint32", "int64", "bool", "double", "string", "bytes", ...), "map" or a message name
    repeated: bool = False


Schema = Mapping[str, Mapping[str, Field]]  # message name -> field name -> Field, in field-number order

_RANGES = {"int32": (-(1 << 31), 1 << 31), "int64": (-(1 << 63), 1 << 63),
           "uint32": (0, 1 << 32), "uint64": (0, 1 << 64)}
_LEN_KINDS = ("string", "bytes")


def _int(kind: str, v: Any) -> int:
    if kind == "bool":
        return int(bool(v))
    if isinstance(v, bool):
        raise TypeError(f"expected an int for a {kind} field, got a bool")
    v = operator.index(v)  # an int, or a numpy integer; a float raises TypeError
    lo, hi = _RANGES[kind]
    if not lo <= v < hi:
        raise ValueError(f"value out of range for {kind}: {v}")
    return v & 0xFFFFFFFFFFFFFFFF  # a negative number is its 64-bit two's complement, 10 bytes


def _each_delimited(number: int, payloads: Sequence[bytes | bytearray]) -> bytes:
    """A repeated LEN field: each payload with its tag and length (a string table's thousands of
    entries: ~0.15 us each)."""
    key = tag(number, LEN)
    return b"".join([key + encode_varint_scalar(len(p)) + p for p in payloads])


def _payload(kind: str, v: Any) -> bytes:
    """A string's or bytes field's payload; a string's lone surrogates (undecodable bytes of a
    name) become ``\\xNN`` escapes."""
    if kind == "bytes":
        return bytes(v)
    if not isinstance(v, str):
        raise TypeError(f"expected a str for a string field, got {type(v).__name__}")
    try:
        return v.encode()
    except UnicodeEncodeError:
        return valid_text(v).encode()


def _payloads(kind: str, values: Any) -> list[bytes]:
    if kind == "string":
        try:
            return [s.encode() for s in values]
        except (UnicodeEncodeError, AttributeError):  # a lone surrogate, or not a str: the checked path
            pass
    return [_payload(kind, s) for s in values]


def encode_message(schema: Schema, name: str, values: Mapping[str, Any]) -> bytes:
    """The message ``name`` with ``values`` (missing fields: their defaults).  A message field's
    value is a ``Mapping`` of its own fields, or its bytes already encoded."""
    fields = schema[name]
    unknown = set(values) - set(fields)
    if unknown:
        raise ValueError(f"{name} has no field {sorted(unknown)[0]!r}")
    out = bytearray()
    for fname, f in fields.items():
        v = values.get(fname)
        if v is None:
            continue
        if f.kind == "map":  # entries always hold both fields, empty or not, as upb writes them
            for k, val in v.items():
                entry = length_delimited(1, _payload("string", k)) + length_delimited(2, _payload("string", val))
                out += length_delimited(f.number, entry)
        elif f.kind in schema:
            subs = [m if isinstance(m, (bytes, bytearray)) else encode_message(schema, f.kind, m)
                    for m in (v if f.repeated else (v,))]
            out += _each_delimited(f.number, subs)
        elif f.repeated and f.kind in _LEN_KINDS:
            out += _each_delimited(f.number, _payloads(f.kind, v))
        elif f.kind in _LEN_KINDS:
            p = _payload(f.kind, v)
            if p:
                out += length_delimited(f.number, p)
        elif f.kind == "double":
            if f.repeated:
                if v:
                    out += length_delimited(f.number, struct.pack(f"<{len(v)}d", *v))
            elif struct.pack("<d", v) != bytes(8):  # -0.0 and NaN are not the default
                out += tag(f.number, FIXED64) + struct.pack("<d", v)
        elif f.repeated:
            if v:
                out += length_delimited(f.number, b"".join(encode_varint_scalar(_int(f.kind, x)) for x in v))
        else:
            x = _int(f.kind, v)
            if x:
                out += varint_field(f.number, x)
    return bytes(out)
