"""Text from files made safe for the places it ends up: path components and one-line messages."""

from __future__ import annotations

from typing import Any

_SAFE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


# longest encoded name kept whole: with "device_profile_model_" + ".pftrace" around it, still under
# the 255-byte limit of a file name
_MAX_COMPONENT = 200


def safe_component(name: str) -> str:
    """A name read from a file (instance id, profile id, graph hash) as one safe path component.

    Letters, digits, ``.``, ``_`` and ``-`` stay; every other byte of the UTF-8 name becomes
    ``%XX`` (so ``/``, NUL, ``%`` and spaces cannot survive), and ``.``/``..`` become ``%2E``/``%2E%2E``.
    Percent-encoding is one-to-one, so two different names never share a directory, and it is what
    hive-partitioned readers (pyarrow, DuckDB, Spark) decode back.  A name whose encoding exceeds
    200 bytes keeps a prefix plus ``~`` and a 64-bit hash of the whole name (``~`` is always encoded
    otherwise, so this form cannot collide with a whole name); it no longer decodes to the name.
    """
    if not name:
        raise ValueError("a path component cannot be empty")
    if name in (".", ".."):
        return "%2E" * len(name)
    raw = raw_bytes(name)
    out = "".join(chr(b) if chr(b) in _SAFE_CHARS else f"%{b:02X}" for b in raw)
    if len(out) <= _MAX_COMPONENT:
        return out
    cut = out[:_MAX_COMPONENT - 20]
    if "%" in cut[-2:]:  # do not split a %XX escape
        cut = cut[:cut.rindex("%")]
    import hashlib  # only for long names: hashlib loads OpenSSL, which start-up need not pay for

    return cut + "~" + hashlib.blake2b(raw, digest_size=8).hexdigest()


def raw_bytes(name: str) -> bytes:
    """The bytes of ``name``: a non-UTF-8 file name or argument arrives with its undecodable bytes as
    lone surrogates (surrogateescape), which become those bytes again; any other lone surrogate is
    kept as its 3-byte form."""
    try:
        return name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogatepass")


def valid_text(text: str) -> str:
    """``text`` if it can be written as UTF-8; else with its lone surrogates (the undecodable bytes of
    a non-UTF-8 name or argument, as Python keeps them) as ``\\xNN`` escapes."""
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        return raw_bytes(text).decode("utf-8", "backslashreplace")


def valid_texts(obj: Any) -> Any:
    """``obj`` (dicts, lists and tuples of strings and other values) with every string and key made
    ``valid_text``: what a JSON document written as UTF-8 can hold."""
    if isinstance(obj, str):
        return valid_text(obj)
    if isinstance(obj, dict):
        return {valid_texts(k): valid_texts(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [valid_texts(v) for v in obj]
    return obj


def printable(text: str) -> str:
    """``text`` fit for a one-line message in any output: control characters and the bytes of a
    name that is not UTF-8 (which Python keeps as lone surrogates) become ``\\xNN`` escapes."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:  # an undecodable byte of a file name (surrogateescape)
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
    return "".join(out)
