"""What a request may ask for, checked before any query runs, and the two ways it can be refused.

Why here: every number a browser sends (a time range, a pixel width, row lists, ids) reaches integer
conversions, NumPy and DuckDB. Checking it once at the edge turns ``inf``, ``nan``, ``1e308`` or a
row list of a billion entries into a 400 naming the value, instead of a 500 from deep in a query.
"""

from __future__ import annotations

import math
from typing import Mapping


class NotFound(LookupError):
    """The requested profile, event or device profile does not exist."""


class BadRequest(ValueError):
    """The request's parameters are malformed."""


def one_line(e: BaseException) -> str:
    """A failure as the one line a browser shows: the first line of its message (at most 300
    characters), or its type's name. DuckDB's message quoting a damaged column name is not UTF-8:
    its binding raises a UnicodeDecodeError holding the message's bytes, shown with the bad ones
    replaced."""
    msg = e.object.decode("utf-8", "replace") if isinstance(e, UnicodeDecodeError) and isinstance(e.object, bytes) \
        else str(e)
    return msg.strip().splitlines()[0][:300] if msg.strip() else type(e).__name__


MAX_PARAM = float(1 << 62)  # ns from a profile's origin, ids, rows: every number a request may need
MAX_REL_NS = 1 << 62  # times in requests are ns from the profile's origin: +-146 years is plenty
MAX_PX = 20000
MAX_ROWS = 100_000
MAX_WINDOW_ROWS = 400_000  # safety net: a window answer is ~ rows x pixels, far below this


def parse_rows(s: str | None) -> list[int]:
    """Row lists as ``1,2,5-9``: compact for the hundreds of rows of a tall screen (order kept)."""
    out: list[int] = []
    if not s:
        return out
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part[1:]:
            a, b = part.split("-", 1)
            lo, hi = int(a), int(b)
            if hi < lo or hi - lo > MAX_ROWS:
                raise BadRequest("bad row range")
            out.extend(range(lo, hi + 1))
        else:
            out.append(int(part))
        if len(out) > MAX_ROWS:
            raise BadRequest("too many rows")
    return out


def number(params: Mapping[str, str], key: str, default: float | None = None) -> float:
    """A finite number of magnitude at most 2^62: ``inf``/``nan`` or 1e308 would otherwise reach
    integer conversions and queries and fail there (a 500) instead of here (a 400 naming the value)."""
    v = params.get(key)
    if v is None:
        if default is None:
            raise BadRequest(f"missing parameter {key}")
        return default
    try:
        x = float(v)
    except ValueError:
        raise BadRequest(f"{key}={v[:40]!r} is not a number") from None
    if not math.isfinite(x) or abs(x) > MAX_PARAM:
        raise BadRequest(f"{key}={v[:40]!r} is not valid; accepted: a finite number within +-2^62")
    return x


def integer(params: Mapping[str, str], key: str, default: int | None = None) -> int:
    """An exact 64-bit integer (event ids: a double would round ids beyond 2^53)."""
    v = params.get(key)
    if v is None or v == "":
        if default is None:
            raise BadRequest(f"missing parameter {key}")
        return default
    try:
        x = int(v.strip())
    except ValueError:
        try:  # "12.0" from a client that sent a number as a float
            f = float(v)
        except ValueError:
            raise BadRequest(f"{key}={v[:40]!r} is not an integer") from None
        if not math.isfinite(f) or abs(f) > MAX_PARAM or f != int(f):
            raise BadRequest(f"{key}={v[:40]!r} is not valid; accepted: an integer within +-2^62") from None
        x = int(f)
    if abs(x) >= 1 << 63:
        raise BadRequest(f"{key}={v[:40]!r} is not valid; accepted: a 64-bit integer")
    return x


def window_args(t0: float, t1: float, px: int) -> tuple[float, float, int]:
    """A time range (ns from the profile's origin) and a pixel width a window query can use."""
    try:
        t0, t1, px = float(t0), float(t1), int(px)
    except (TypeError, ValueError, OverflowError):
        raise BadRequest("t0, t1 must be numbers and px an integer") from None
    if not (math.isfinite(t0) and math.isfinite(t1)) or t1 <= t0:
        raise BadRequest("need finite t0 < t1")
    if not (-MAX_REL_NS <= t0 and t1 <= MAX_REL_NS):
        raise BadRequest(f"t0 and t1 must lie within +-{MAX_REL_NS} ns of the profile's origin")
    if not 1 <= px <= MAX_PX:
        raise BadRequest(f"px must be in 1..{MAX_PX}")
    return t0, t1, px


def ns_per_px(t0: float, t1: float, px: int) -> float:
    """The width of one pixel column in ns (never zero)."""
    return max((t1 - t0) / px, 1e-9)
