"""Protobuf wire format: a vectorized encoder, and the small scalar helpers every reader and writer
shares (varints, tags, walking the fields of a message).

Vectorized encoding: N messages of the same shape, built column by column with numpy.

Building one protobuf object per trace event costs microseconds in Python; a profile has millions.
Here ``Rows`` describes the fields of N messages as *pieces*: a piece is a run of bytes that every
row may hold (a tag, a varint, a fixed64, a length prefix) with a per-row length (0 where the field
is absent).  ``encode`` lays the pieces out as the columns of an N x W byte matrix: bytes that are
the same on every row come from one template row, each varying piece is stored with one unaligned
8-byte write per row, and only when rows differ in length (absent fields, varints of different
lengths that are not padded) are the bytes each row holds kept with one compaction.  The output is
ordinary protobuf wire format (fields may come in any order in a message, and a varint may carry
redundant high bytes).
"""

from __future__ import annotations

import functools
import mmap
from collections.abc import Iterator
from typing import Any, Literal, Union

import numpy as np
import numpy.typing as npt

VARINT, FIXED64, LEN = 0, 1, 2

_U7 = np.uint64(0x7F)
# A varint may carry redundant high bytes (0x80 ... 0x00): every protobuf reader, Perfetto's
# included, accepts them, and Perfetto writes such lengths itself.  A varint column whose values
# differ in length is padded to the longest when that costs at most PAD_BYTES a row on average,
# which keeps the rows of a batch one length and spares the compaction pass.
PAD_BYTES = 1
# smallest value that needs k+2 bytes, k = 0..8
_VARINT_BOUNDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def tag(field: int, wire: int) -> bytes:
    """A field's key: its number and wire type as a varint."""
    return encode_varint_scalar((field << 3) | wire)


_ONE_BYTE = [bytes((v,)) for v in range(128)]


def encode_varint_scalar(v: int) -> bytes:
    if 0 <= v < 128:  # (most tags and lengths)
        return _ONE_BYTE[v]
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint_len(v: np.ndarray) -> np.ndarray:
    """Bytes needed for each uint64 value as a varint (1..10)."""
    v = np.asarray(v).astype(np.uint64, copy=False)
    n = np.ones(v.shape, dtype=np.int64)
    if not v.size:
        return n
    top = int(v.max())
    for b in _VARINT_BOUNDS.tolist():
        if top < b:
            break
        n += v >= np.uint64(b)
    return n


# a piece's rows: None every row, False no row, else a bool array (``Rows._present``)
Present = Union[np.ndarray, None, Literal[False]]
Lens = Union[int, np.ndarray]  # bytes a row takes: the same on every row, or per row
Buf = Union[bytes, bytearray, memoryview, mmap.mmap]  # what a message is decoded from


@functools.lru_cache(maxsize=4096)
def _window(offset: int, itemsize: int) -> np.dtype:
    """A record of ``itemsize`` bytes seen as one little-endian uint64 at ``offset``."""
    return np.dtype({"names": ["w"], "formats": ["<u8"], "offsets": [offset], "itemsize": itemsize})


def _varint_word(v: np.ndarray, lens: Lens, w: int) -> np.ndarray:
    """Each value's varint bytes (``w`` <= 8 of them) packed into a uint64, first byte lowest."""
    word = v & _U7
    for j in range(1, w):
        word |= ((v >> np.uint64(7 * j)) & _U7) << np.uint64(8 * j)
    if isinstance(lens, int):  # every row uses all w bytes
        cont = sum(0x80 << (8 * j) for j in range(w - 1))
        if cont:
            word |= np.uint64(cont)
    else:
        for j in range(w - 1):
            word |= (lens > j + 1).astype(np.uint64) << np.uint64(8 * j + 7)
    return word


def _as_u64(values: npt.ArrayLike) -> np.ndarray:
    a = np.asarray(values)
    if a.dtype == np.uint64:
        return a
    return a.astype(np.int64, copy=False).view(np.uint64)


class _Piece:
    """``kind``: "const" (``data`` bytes), "varint" or "fixed64" (``data`` a uint64 array).
    ``present``: None (every row) or a bool array; ``lens``: bytes on a present row (int, or an
    int64 array for varints)."""

    __slots__ = ("kind", "data", "lens", "present", "width")

    # ``data`` follows ``kind`` (bytes, or a uint64 array): Any, as a tagged union mypy cannot follow
    def __init__(self, kind: str, data: Any, lens: Lens, present: Present, width: int) -> None:
        self.kind, self.data, self.lens, self.present, self.width = kind, data, lens, present, width

    def row_lens(self) -> Lens:
        """Bytes on every row: an int when it is the same on all rows."""
        if self.present is None:
            return self.lens
        return np.where(self.present, self.lens, 0)


class Rows:
    """N protobuf messages of one shape (see the module docstring)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pieces: list[_Piece] = []

    def _present(self, present: npt.ArrayLike | None) -> Present:
        """None: every row; False: no row; else a bool array."""
        if present is None:
            return None
        pr = np.asarray(present, dtype=bool)
        if pr.ndim == 0:
            return None if bool(pr) else False
        k = int(np.count_nonzero(pr))
        if k == self.n:
            return None
        if k == 0:
            return False
        return pr

    # ---- pieces
    def const(self, data: bytes, present: npt.ArrayLike | None = None) -> Rows:
        return self._const(data, self._present(present))

    def _const(self, data: bytes, pr: Present) -> Rows:
        if data and pr is not False:
            last = self.pieces[-1] if self.pieces else None
            if last is not None and last.kind == "const" and last.present is pr:
                last.data += data  # same rows: one run
                last.lens = last.width = len(last.data)
            else:
                self.pieces.append(_Piece("const", data, len(data), pr, len(data)))
        return self

    def varint(self, values: npt.ArrayLike, present: npt.ArrayLike | None = None) -> Rows:
        return self._varint(_as_u64(values), self._present(present))

    def _varint(self, v: np.ndarray, pr: Present) -> Rows:
        if v.ndim == 0:
            return self._const(encode_varint_scalar(int(v)), pr)
        if pr is False or not self.n:
            return self
        vp = v if pr is None else v[pr]
        lo, hi = int(vp.min()), int(vp.max())
        if lo == hi:  # the same value on every present row
            return self._const(encode_varint_scalar(lo), pr)
        width = int(varint_len(np.array([hi], dtype=np.uint64))[0])
        lens: int | np.ndarray = width  # every present row has the same length ...
        if width != int(varint_len(np.array([lo], dtype=np.uint64))[0]):
            lens = varint_len(v)
            k = self.n if pr is None else int(np.count_nonzero(pr))
            if width * k - int(lens.sum() if pr is None else lens[pr].sum()) <= PAD_BYTES * k:
                lens = width  # ... or is padded to it (see PAD_BYTES)
        self.pieces.append(_Piece("varint", v, lens, pr, width))
        return self

    def fixed64(self, values: npt.ArrayLike, present: npt.ArrayLike | None = None) -> Rows:
        v = _as_u64(values)
        if v.ndim == 0:
            return self.const(int(v).to_bytes(8, "little"), present)
        pr = self._present(present)
        if pr is False or not self.n:
            return self
        self.pieces.append(_Piece("fixed64", v, 8, pr, 8))
        return self

    # ---- fields
    def field_varint(self, field: int, values: npt.ArrayLike, present: npt.ArrayLike | None = None) -> Rows:
        pr = self._present(present)
        if pr is False:
            return self
        return self._const(tag(field, VARINT), pr)._varint(_as_u64(values), pr)

    def field_fixed64(self, field: int, values: npt.ArrayLike, present: npt.ArrayLike | None = None) -> Rows:
        pr = self._present(present)
        if pr is False:
            return self
        self._const(tag(field, FIXED64), pr)
        v = _as_u64(values)
        if v.ndim == 0:
            return self._const(int(v).to_bytes(8, "little"), pr)
        self.pieces.append(_Piece("fixed64", v, 8, pr, 8))
        return self

    def message(self, field: int, sub: Rows, present: npt.ArrayLike | None = None) -> Rows:
        """A nested message (``sub`` has the same rows); absent rows hold none of its bytes."""
        pr = self._present(present)
        if pr is False:
            return self
        size = sub.lengths()  # (only the present rows' sizes are written)
        self._const(tag(field, LEN), pr)
        self._varint(_as_u64(size), pr)
        combined: dict[int, Present] = {}  # (False: no row has both)
        for p in sub.pieces:
            if pr is None:
                q = p.present
            elif p.present is None:
                q = pr
            else:
                key = id(p.present)
                if key not in combined:
                    both = pr & p.present
                    combined[key] = both if both.any() else False
                q = combined[key]
                if q is False:
                    continue
            if p.kind == "const":
                self._const(p.data, q)
            else:
                self.pieces.append(_Piece(p.kind, p.data, p.lens, q, p.width))
        return self

    # ---- output
    def lengths(self) -> Lens:
        """Bytes of every row: an int when it is the same on all rows."""
        fixed = 0
        var = None
        for p in self.pieces:
            rl = p.row_lens()
            if isinstance(rl, int):
                fixed += rl
            else:
                var = rl.copy() if var is None else var + rl
        if var is None:
            return fixed
        return var + fixed if fixed else var

    def encode(self) -> np.ndarray:
        """The N messages back to back (uint8)."""
        n = self.n
        width = sum(p.width for p in self.pieces)
        if not n or not width:
            return np.zeros(0, dtype=np.uint8)
        # bytes the same on every row come from one template row; varying pieces are written over it
        template = np.zeros(width, dtype=np.uint8)
        keep_t = np.ones(width, dtype=bool)
        c = 0
        varying = []
        ragged = False
        for p in self.pieces:
            if p.kind == "const":
                template[c:c + p.width] = np.frombuffer(p.data, dtype=np.uint8)
            else:
                varying.append((c, p))
            if p.present is not None or not isinstance(p.lens, int):
                ragged = True
            c += p.width
        mat = np.empty((n, width), dtype=np.uint8)
        mat[:] = template
        flat = mat.reshape(-1)
        for c, p in varying:
            v = p.data
            w = p.width
            if c + 8 <= width and w <= 8:
                # one unaligned 8-byte store per row: this piece's bytes, then the template's
                # (later pieces overwrite their own bytes)
                if p.kind == "fixed64":
                    word = v.astype(np.uint64, copy=False)
                else:
                    word = _varint_word(v, p.lens, w)
                if w < 8:
                    tail = int.from_bytes(template[c + w:c + 8].tobytes(), "little") << (8 * w)
                    if tail:
                        word = word | np.uint64(tail)
                flat.view(_window(c, width))["w"] = word
            elif p.kind == "fixed64":
                raw = v.astype("<u8", copy=False).view(np.uint8).reshape(n, 8)
                for j in range(8):
                    mat[:, c + j] = raw[:, j]
            else:
                vl = p.lens
                for j in range(w):  # 7 bits a byte, high bit set on every byte but the last
                    col = ((v >> np.uint64(7 * j)) & _U7 if j else v & _U7).astype(np.uint8)
                    if j < w - 1:
                        if isinstance(vl, int):
                            col |= 0x80
                        else:
                            col |= (vl > j + 1).view(np.uint8) << 7
                    mat[:, c + j] = col
        if not ragged:
            return mat.reshape(-1)
        keep = np.empty((n, width), dtype=bool)
        keep[:] = keep_t
        c = 0
        for p in self.pieces:
            if p.present is not None or not isinstance(p.lens, int):
                if isinstance(p.lens, int):
                    for j in range(p.width):
                        keep[:, c + j] = p.present
                else:
                    for j in range(p.width):
                        col = p.lens > j
                        if p.present is not None:
                            col &= p.present
                        keep[:, c + j] = col
            c += p.width
        return np.compress(keep.reshape(-1), mat.reshape(-1))


def length_delimited(field: int, payload: bytes | bytearray) -> bytes:
    """One LEN field (tag, length, payload) as bytes."""
    return tag(field, LEN) + encode_varint_scalar(len(payload)) + payload


def varint_field(field: int, value: int) -> bytes:
    return tag(field, VARINT) + encode_varint_scalar(value)


def decode_varint(buf: Buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def iter_fields(buf: Buf, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, start, end, tag start) of each field in buf[pos:end]: start..end is
    the payload (the varint itself for wire type 0); the whole field is ``tag_start..end``.

    Field number 0 is invalid in protobuf, and it is what a run of zero bytes decodes to (two bytes
    a field): it ends the walk at once instead of after a gigabyte of zeros."""
    while pos < end:
        tag_start = pos
        key, pos = decode_varint(buf, pos)
        field_no, wt = key >> 3, key & 7
        if field_no == 0:
            raise ValueError(f"field number 0 at byte {tag_start}")
        if wt == 0:
            value_start = pos
            _, pos = decode_varint(buf, pos)
            start = value_start
        elif wt in (1, 5, 2):
            if wt == 2:
                n, pos = decode_varint(buf, pos)
            else:
                n = 8 if wt == 1 else 4
            start, pos = pos, pos + n
        else:
            raise ValueError(f"unsupported wire type {wt}")
        if pos > end:  # checked before the field is handed out: a declared length is not trusted
            raise ValueError(f"field {field_no} runs past the end of its message")
        yield field_no, wt, start, pos, tag_start
