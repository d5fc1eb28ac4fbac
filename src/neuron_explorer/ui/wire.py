"""How values cross the wire to the browser: 64-bit numbers as decimal strings; large per-pixel arrays
as raw little-endian bytes (``pack``).

Why: a JavaScript number is a double, exact only up to 2^53. A Unix-epoch timestamp in nanoseconds
(~1.8e18) loses its last digits as a JSON number (1795460428398393349 arrives as ...393300), which is
exactly the precision a user reads collective skew with. So every timestamp, event id and flow id is
sent as a string, whatever its value (so the browser sees one type per field), and any other integer
beyond 2^53 as well. Times *relative* to a profile's origin stay numbers: a profile would have to be
104 days long before they stopped being exact, and the server refuses such windows (``params``).
"""

from __future__ import annotations

import datetime
import decimal
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

SAFE_INT = (1 << 53) - 1

# fields that always travel as strings: absolute times and ids (64-bit by nature)
STRING_FIELDS = frozenset({"id", "start_ts", "end_ts", "ts", "start_wall_ns", "flow_id", "origin_ns",
                           "wall_offset_ns", "profile_id"})


def always_string(key: str) -> bool:
    """True for the fields sent as strings whatever their value (see ``STRING_FIELDS``)."""
    return key in STRING_FIELDS or key.endswith("_ts") or key.endswith("_wall_ns")


def value(v: Any, key: str = "") -> Any:
    """``v`` as JSON can carry it exactly: 64-bit fields and unsafe integers as strings, lists item by
    item, dates and decimals as text, other numbers and strings as they are."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, (list, tuple, np.ndarray)):
        return [value(x, key) for x in v]
    if isinstance(v, (int, np.integer)):
        v = int(v)
        return str(v) if always_string(key) or abs(v) > SAFE_INT else v
    if isinstance(v, (float, np.floating)):
        return float(v)
    if isinstance(v, str):
        return v
    if isinstance(v, (datetime.date, datetime.time, decimal.Decimal)):
        return str(v)
    return str(v)


def record(rec: dict[str, Any]) -> dict[str, Any]:
    """A row (column -> value) for the wire."""
    return {k: value(v, k) for k, v in rec.items()}


def ids(a: np.ndarray) -> np.ndarray | list[str]:
    """An id array for a window or flow answer: numbers while every id is exact in a double (the usual
    case: ``view`` numbers events from 0), else strings. The browser only hands ids back (and compares
    them with ids of the same kind of answer), so either type works there; ``id_value`` is the same
    rule for one id."""
    if len(a) and int(np.abs(a).max()) > SAFE_INT:
        return [str(x) for x in a.tolist()]
    return a


def id_value(i: int) -> int | str:
    """One event id by the rule of ``ids``."""
    return str(i) if abs(int(i)) > SAFE_INT else int(i)


# ---------------------------------------------------------------- binary answers (decision 0165)
MAGIC = b"NXB1"
ALIGN = 8
# the element types a packed answer may hold: numpy's little-endian name -> the wire's (and the
# browser's typed array: Uint8Array, Int32Array, Float32Array, Float64Array, ...)
DTYPES = {"u1": "|u1", "i1": "|i1", "u2": "<u2", "i2": "<i2", "u4": "<u4", "i4": "<i4", "f4": "<f4",
          "f8": "<f8"}


@dataclass
class Packed:
    """An answer sent as bytes: a JSON ``header`` plus named arrays (``arrays``), for the answers the
    browser asks at every pan and zoom (busy shading). Why: as JSON those arrays were base64 strings
    inside a large JSON text; each answer left ~1 MB of strings in the page's V8 heap, collected
    only by a full GC (decision 0165). Bytes are read with ``fetch().arrayBuffer()`` into typed-array
    views: no text, no string per array."""

    header: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def encode(self) -> bytes:
        return pack(self.header, self.arrays)


# the signed integer types a number array narrows to, smallest first (``narrow``)
_INTS = ((np.int8, "i1"), (np.int16, "i2"), (np.int32, "i4"))


def narrow(a: Any) -> np.ndarray:
    """A number array (or list of numbers) as the smallest wire type that carries every value exactly
    as the browser's ``JSON.parse`` would see it: integers in i1 / i2 / i4 when they fit, else f8 (a
    JavaScript number is a double, so an int64 beyond 2^53 was already rounded the same way in JSON);
    floats as f8. Why: a window answer's rows, leaves and counts fit a byte or two, its times do not;
    the bytes the browser receives (and DevTools keeps, decision 0165) shrink with them."""
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        if not a.size:
            return a.astype(np.int8)
        lo, hi = int(a.min()), int(a.max())
        for t, _ in _INTS:
            if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
                return a.astype(t)
    return a.astype(np.float64)


def packed(answer: dict[str, Any], fields: tuple[str, ...]) -> Packed:
    """A JSON answer as a ``Packed`` one: each of ``fields`` that holds numbers becomes a typed array
    (``narrow``); everything else, and a field sent as a list of strings (``ids`` beyond 2^53), stays
    in the header as it is. ``unpack`` then gives back the JSON answer's values, field for field (the
    window answers of decision 0175)."""
    head, arrays = dict(answer), {}
    for k in fields:
        v = head.get(k)
        if isinstance(v, np.ndarray) or (isinstance(v, list) and all(
                isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in v)):
            arrays[k] = narrow(head.pop(k))
    return Packed(head, arrays)


def pack(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """``MAGIC``, the header's length H (uint32 LE), the header as JSON with ``arrays``: name ->
    {dtype, offset, length, shape} added, zero bytes up to a multiple of 8 (the data's start,
    ``data_start(H)``), then each array's bytes, little-endian, at ``offset`` from the data's start
    (a multiple of 8, so the browser views every array in place)."""
    meta: dict[str, Any] = {}
    blobs: list[bytes] = []
    off = 0
    for name, a in arrays.items():
        code = next((k for k, v in DTYPES.items() if np.dtype(v) == a.dtype.newbyteorder("<")), None)
        if code is None:
            raise TypeError(f"{name}: dtype {a.dtype} cannot be packed (accepted: {', '.join(DTYPES)})")
        b = np.ascontiguousarray(a, dtype=DTYPES[code]).tobytes()
        meta[name] = {"dtype": code, "offset": off, "length": int(a.size), "shape": list(a.shape)}
        blobs.append(b + b"\0" * (-len(b) % ALIGN))
        off += len(blobs[-1])
    text = orjson.dumps({**header, "arrays": meta}, option=orjson.OPT_SERIALIZE_NUMPY)
    head = MAGIC + struct.pack("<I", len(text)) + text
    return b"".join([head, b"\0" * (data_start(len(text)) - len(head)), *blobs])


def data_start(header_len: int) -> int:
    """Where a packed body's arrays start: after MAGIC, the length and the header, rounded up to 8."""
    return -(-(8 + header_len) // ALIGN) * ALIGN


def unpack(body: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and arrays of a ``pack``ed body (what the browser's ``unpack`` in api.js does); a
    ValueError naming the problem for a body that is not one."""
    if len(body) < 8 or body[:4] != MAGIC:
        raise ValueError("not a packed answer (no NXB1 magic)")
    (n,) = struct.unpack_from("<I", body, 4)
    if 8 + n > len(body):
        raise ValueError(f"packed header of {n} bytes runs past the body's {len(body)}")
    header = orjson.loads(body[8:8 + n])
    start = data_start(n)
    if not isinstance(header, dict) or not isinstance(header.get("arrays", {}), dict):
        raise ValueError("packed header is not an object with an 'arrays' object")
    arrays: dict[str, np.ndarray] = {}
    for name, m in header.pop("arrays", {}).items():
        if not isinstance(m, dict) or m.get("dtype") not in DTYPES:
            raise ValueError(f"{name}: unknown dtype {m.get('dtype') if isinstance(m, dict) else m!r}")
        dt = np.dtype(DTYPES[m["dtype"]])
        off, length = m.get("offset"), m.get("length")
        if not (isinstance(off, int) and isinstance(length, int)) or off < 0 or length < 0 \
                or off % dt.itemsize or start + off + length * dt.itemsize > len(body):
            raise ValueError(f"{name}: offset {off!r} / length {length!r} outside the body of {len(body)} bytes")
        a = np.frombuffer(body, dtype=dt, count=length, offset=start + off)
        shape = m.get("shape")
        if isinstance(shape, list) and all(isinstance(x, int) and x >= 0 for x in shape) \
                and math.prod(shape) == length:
            a = a.reshape(shape)
        arrays[name] = a
    return header, arrays
