"""How values cross the wire to the browser: 64-bit numbers as decimal strings.

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
from typing import Any

import numpy as np

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
