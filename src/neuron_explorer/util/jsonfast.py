"""JSON encoding for the monitor's hot loop: orjson when installed, the standard library otherwise.

The monitor parses one snapshot per application and encodes one report per
period; with 32 applications that is most of its CPU time.  orjson does both
several times faster, so it is used when present (the ``monitor`` extra
installs it) and the standard library keeps everything working without it.
Both produce the same documents: compact separators, str keys, and null for
non-finite floats (which the report never contains by construction).
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

from neuron_explorer.util.names import valid_texts

_orjson: ModuleType | None
try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised where orjson is absent
    _orjson = None

#: Which encoder is in use ("orjson" or "json"); the benchmark records it.
BACKEND = "orjson" if _orjson is not None else "json"


def loads(data: bytes | str) -> Any:
    """Decode a JSON document; raises ValueError on malformed input."""
    if _orjson is not None:
        return _orjson.loads(data)
    return json.loads(data)


def dumps_line(obj: Any) -> str:
    """Encode compactly as one line of text (no trailing newline)."""
    if _orjson is not None:
        return _orjson_dumps(obj).decode()
    return json.dumps(obj, separators=(",", ":"), check_circular=False)


def dumps_bytes(obj: Any) -> bytes:
    """Encode compactly to bytes (snapshot files)."""
    if _orjson is not None:
        return _orjson_dumps(obj)
    return json.dumps(obj, separators=(",", ":")).encode()


def _orjson_dumps(obj: Any) -> bytes:
    """orjson's document.  A string that is not valid Unicode (the lone surrogates of a non-UTF-8
    name or argument) is written with ``\\xNN`` escapes (``util.names.valid_text``) instead of
    failing the whole document; the standard library escapes it as ``\\udcNN`` and never fails."""
    assert _orjson is not None
    try:
        return _orjson.dumps(obj)
    except TypeError as e:  # orjson's JSONEncodeError
        if "surrogate" not in str(e):
            raise
    return _orjson.dumps(valid_texts(obj))
