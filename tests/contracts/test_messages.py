"""contracts.messages and util.pbmessage: the table of the capture messages against the generated
descriptors, and random messages encoded by both, byte for byte."""

from __future__ import annotations

import math
import random
import struct

import pytest

from neuron_explorer.contracts import messages
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb
from neuron_explorer.util.names import valid_text
from neuron_explorer.util.pbmessage import encode_message

_TYPES = {1: "double", 3: "int64", 4: "uint64", 5: "int32", 8: "bool", 9: "string", 12: "bytes", 13: "uint32"}


def _kind(f) -> str:
    if f.message_type is not None:
        return "map" if f.message_type.GetOptions().map_entry else f.message_type.name
    return _TYPES[f.type]


def test_the_table_is_the_schema_field_for_field():
    assert set(messages.SCHEMA) == set(pb.DESCRIPTOR.message_types_by_name)
    for name, fields in messages.SCHEMA.items():
        desc = pb.DESCRIPTOR.message_types_by_name[name]
        want = {f.name: (f.number, _kind(f), f.is_repeated and _kind(f) != "map") for f in desc.fields}
        assert {k: tuple(v) for k, v in fields.items()} == want, name
        assert [f.number for f in fields.values()] == sorted(f.number for f in fields.values()), name
        for f in desc.fields:  # a map's entries are string -> string, which is all the encoder writes
            if _kind(f) == "map":
                assert [_kind(x) for x in f.message_type.fields] == ["string", "string"]


_TEXT = ["", "a", "nc0", "é", "日本", "x" * 130, "\x00", "a b/c", "\U0001f600"]


def _value(rng: random.Random, kind: str, depth: int):
    if kind == "map":
        return {rng.choice(_TEXT) + str(i): rng.choice(_TEXT) for i in range(rng.randrange(4))}
    if kind in messages.SCHEMA:
        return _message(rng, kind, depth + 1)
    if kind == "string":
        return rng.choice(_TEXT)
    if kind == "bytes":
        return rng.randbytes(rng.choice([0, 1, 7, 200]))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "double":
        return rng.choice([0.0, -0.0, 1.5, -3e300, math.inf, 5e-324, rng.uniform(-1e9, 1e9)])
    lo, hi = {"int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
              "uint32": (0, (1 << 32) - 1), "uint64": (0, (1 << 64) - 1)}[kind]
    return rng.choice([0, 1, lo, hi, 127, 128, 16384, rng.randint(lo, hi)])


def _message(rng: random.Random, name: str, depth: int = 0) -> dict:
    out = {}
    for fname, f in messages.SCHEMA[name].items():
        if rng.random() < 0.3 or (depth > 2 and f.kind in messages.SCHEMA):
            continue
        if f.repeated:
            out[fname] = [_value(rng, f.kind, depth) for _ in range(rng.randrange(4))]
        else:
            out[fname] = _value(rng, f.kind, depth)
    return out


def _pb(cls, values: dict):
    """The generated class's message with ``values``."""
    msg = cls()
    for k, v in values.items():
        f = cls.DESCRIPTOR.fields_by_name[k]
        sub = f.message_type and getattr(pb, f.message_type.name, None)
        if isinstance(v, dict) and sub is None:  # a map
            getattr(msg, k).update(v)
        elif sub is not None and not isinstance(v, list):
            getattr(msg, k).CopyFrom(_pb(sub, v))
        elif sub is not None:
            getattr(msg, k).extend(_pb(sub, x) for x in v)
        elif isinstance(v, list):
            getattr(msg, k).extend(v)
        else:
            setattr(msg, k, v)
    return msg


def _sorted_maps(values: dict, name: str) -> dict:
    out = {}
    for k, v in values.items():
        f = messages.SCHEMA[name][k]
        if f.kind == "map":
            v = dict(sorted(v.items(), key=lambda kv: valid_text(kv[0]).encode()))
        elif f.kind in messages.SCHEMA:
            v = [_sorted_maps(x, f.kind) for x in v] if f.repeated else _sorted_maps(v, f.kind)
        out[k] = v
    return out


@pytest.mark.parametrize("name", sorted(messages.SCHEMA))
def test_random_messages_are_protobufs_bytes(name):
    rng = random.Random(name)
    for _ in range(300):
        values = _sorted_maps(_message(rng, name), name)
        ours = messages.encode(name, **values)
        theirs = _pb(getattr(pb, name), values)
        assert ours == theirs.SerializeToString(deterministic=True), values
        assert getattr(pb, name).FromString(ours) == theirs


def test_an_empty_message_is_empty_and_a_set_empty_submessage_is_kept():
    assert messages.encode("TraceInfo") == b""
    assert messages.encode("SystemTrace", events={}) == pb.SystemTrace(events=pb.EventColumns()).SerializeToString()
    assert messages.encode("SystemTrace", events={}) == b"\x2a\x00"


def test_a_submessage_may_come_encoded():
    anchor = {"monotonic_ns": 5, "wall_ns": -1, "label": "start"}
    assert (messages.encode("TraceInfo", anchors=[messages.encode("ClockAnchor", **anchor)])
            == messages.encode("TraceInfo", anchors=[anchor]))


@pytest.mark.parametrize("field, value, error", [
    ("rank", 1 << 31, ValueError), ("rank", -(1 << 31) - 1, ValueError), ("format_version", -1, ValueError),
    ("pid", 1.5, TypeError), ("pid", True, TypeError), ("hostname", b"h", TypeError), ("nope", 1, ValueError),
])
def test_values_protobuf_refuses_are_refused(field, value, error):
    with pytest.raises(error):
        messages.encode("TraceInfo", **{field: value})


def test_a_string_that_is_not_unicode_is_escaped_not_lost():
    arg = "data/caf\udce9.csv"  # the argument b"data/caf\xe9.csv" as Python decodes it
    got = pb.TraceInfo.FromString(messages.encode("TraceInfo", argv=[arg, "ok"], config={"K": "\ud800"}))
    assert list(got.argv) == ["data/caf\\xe9.csv", "ok"]
    assert got.config["K"] == "\\xed\\xa0\\x80"
    with pytest.raises(UnicodeEncodeError):
        pb.TraceInfo(argv=[arg]).SerializeToString()  # what the generated class does with it


def test_doubles_keep_their_bits():
    for x in (-0.0, math.nan, 1e-310):
        got = pb.ModelInfo.FromString(messages.encode("ModelInfo", flops=x)).flops
        assert struct.pack("<d", got) == struct.pack("<d", x)
    assert messages.encode("ModelInfo", flops=0.0) == b""


def test_encode_message_takes_any_schema():
    schema = {"P": {"xs": messages.Field(1, "int32", True), "q": messages.Field(2, "Q")},
              "Q": {"s": messages.Field(1, "string")}}
    assert encode_message(schema, "P", {"xs": [1, -1], "q": {"s": "hi"}}) == (
        b"\x0a\x0b\x01" + b"\xff" * 9 + b"\x01" + b"\x12\x04\x0a\x02hi")
