"""The events summary ``view`` writes beside each events file (``contracts.dataset.EVENT_SUMMARY``).

Why: the viewer's first paint of a profile needs its tracks (every thread, core, source and name with
counts and extents) and a coarse picture of each (about 1024 time buckets over the profile). Read
from the events, that is one aggregate over every event (3 CPU-s at 20M events, most of a cold
open); here it is a by-product of writing them, while the columns are in memory: per row group, per
(thread, core, event type) and bucket of ``2**shift`` ns, the count, first start, last end, total
and longest duration. Buckets are aligned to multiples of their width, so the viewer merges whole
buckets into its own coarser width exactly (docs/decisions/0054-ui-event-summary.md).

The cost is kept to a few passes over integer columns (no sort and no hashing in the common case:
dense group numbers, and the five reductions in one C pass, ``_pqenc.group_stats``); keys or (key,
bucket) pairs spread too wide for a dense numbering fall back to ``np.unique``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from neuron_explorer.contracts.dataset import SUMMARY_EVENTS_BYTES, SUMMARY_EVENTS_ROWS, summary_shift
from neuron_explorer.util import arrays

_STR = pa.dictionary(pa.int32(), pa.string())
SCHEMA = pa.schema([("thread_id", pa.int64()), ("nc_idx", pa.int32()), ("trace_event_source", _STR),
                    ("name", _STR), ("event_group", _STR), ("shift", pa.int32()),
                    ("bucket", pa.int64()), ("events", pa.int64()), ("first_start", pa.int64()),
                    ("last_end", pa.int64()), ("total_ns", pa.int64()), ("max_ns", pa.int64())])
_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min

_c_group_stats: Callable[..., None] | None
try:  # the five reductions in one C pass (group_stats_numpy below otherwise)
    from neuron_explorer.exporters._pqenc import group_stats as _c_group_stats
except ImportError:  # pragma: no cover - extension not built
    _c_group_stats = None


def _dense_key(tid: np.ndarray, nc: np.ndarray, typ: np.ndarray, key: np.ndarray, tmp: np.ndarray
               ) -> tuple[np.ndarray, tuple, tuple] | None:
    """(key, lows, spans): each row's (thread, core, type) as one number in their dense range, when
    that range is small (a process's thread ids lie close together, the OS numbers them near the pid;
    cores and types are small numbers); None when it is not. A constant column costs no pass.
    ``key`` and ``tmp`` are scratch arrays of the rows' length (written, returned as ``key``)."""
    n = len(key)
    lo = (int(tid.min()), int(nc.min()), int(typ.min()))
    span = (int(tid.max()) - lo[0] + 1, int(nc.max()) - lo[1] + 1, int(typ.max()) - lo[2] + 1)
    if span[0] * span[1] * span[2] > 4 * n + 65536:
        return None
    np.subtract(typ, lo[2], out=key, casting="unsafe")
    for col, low, mult, used in ((nc, lo[1], span[2], span[1] > 1), (tid, lo[0], span[1] * span[2], span[0] > 1)):
        if used:
            np.subtract(col, low, out=tmp, casting="unsafe")
            tmp *= mult
            key += tmp
    return key, lo, span


def _unique_keys(tid: np.ndarray, nc: np.ndarray, typ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A number per row for its (thread, core, type) and those keys as an (n_keys, 3) array, by
    ``np.unique`` (a sort: keys spread too wide for ``_dense_key``)."""
    rec = np.rec.fromarrays([np.asarray(a, dtype=np.int64) for a in (tid, nc, typ)])
    u, codes = np.unique(rec, return_inverse=True)
    return np.asarray(codes, dtype=np.int64).reshape(-1), np.stack([u["f0"], u["f1"], u["f2"]], axis=1).astype(np.int64)


def _strings(idx: np.ndarray, values: Sequence[str | None]) -> pa.Array:
    """``values[idx]`` as a dictionary column (no Python object per row; None is '')."""
    return arrays.dictionary(idx, [v or "" for v in values])


def _scratch(scratch: dict[str, np.ndarray] | None, name: str, n: int) -> np.ndarray:
    """An int64 array of ``n`` to write into, reused from chunk to chunk when ``scratch`` is given:
    fresh arrays of a chunk's length cost more in page faults (on this VM ~1.5 ms per 2 MB) than
    the arithmetic written into them."""
    if scratch is None:
        return np.empty(n, dtype=np.int64)
    a = scratch.get(name)
    if a is None or len(a) < n:
        a = scratch[name] = np.empty(n, dtype=np.int64)
    return a[:n]


def group_stats_numpy(gid: np.ndarray, start: np.ndarray, end: np.ndarray, size: int, dur: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group 0..size-1 of the events (``gid``: each event's group), the count, total duration,
    first start, last end and longest duration (INT64_MAX / INT64_MIN where a group has no event):
    a bincount and four ``ufunc.at`` passes.  The twin of ``_pqenc.group_stats``, which makes them
    in one pass.  ``dur``: a scratch array of the events' length."""
    count = np.bincount(gid, minlength=size).astype(np.int64, copy=False)
    dur = np.subtract(end, start, out=dur) if dur is not None else np.subtract(end, start)
    total = np.zeros(size, dtype=np.int64)
    np.add.at(total, gid, dur)
    first = np.full(size, _I64_MAX, dtype=np.int64)
    np.minimum.at(first, gid, start)
    last = np.full(size, _I64_MIN, dtype=np.int64)
    np.maximum.at(last, gid, end)
    longest = np.full(size, _I64_MIN, dtype=np.int64)
    np.maximum.at(longest, gid, dur)
    return count, total, first, last, longest


def group_stats(gid: np.ndarray, start: np.ndarray, end: np.ndarray, size: int, dur: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``group_stats_numpy``'s five arrays, in C when the extension is built (``gid``, ``start`` and
    ``end``: contiguous int64)."""
    if _c_group_stats is None:
        return group_stats_numpy(gid, start, end, size, dur)
    out = (np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64), np.full(size, _I64_MAX, dtype=np.int64),
           np.full(size, _I64_MIN, dtype=np.int64), np.full(size, _I64_MIN, dtype=np.int64))
    _c_group_stats(gid, start, end, *out)
    return out


def chunk(tid: np.ndarray, nc: np.ndarray, typ: np.ndarray, start: np.ndarray, end: np.ndarray,
          names: Sequence[str], sources: Sequence[str | None], groups: Sequence[str | None],
          scratch: dict[str, np.ndarray] | None = None) -> pa.Table:
    """The summary rows of one row group: ``typ`` indexes ``names``/``sources``/``groups``.
    ``scratch``: a dict kept by the caller from chunk to chunk (work arrays reused)."""
    n = len(start)
    if n == 0:
        return SCHEMA.empty_table()
    tid, nc, typ = (np.asarray(a) for a in (tid, nc, typ))
    # contiguous int64: numpy's ufunc.at takes its fast path only then (a strided column took ~60 ns
    # per event and call instead of ~2)
    start, end = (np.ascontiguousarray(a, dtype=np.int64) for a in (start, end))
    lo = int(start.min())
    shift = summary_shift(int(start.max()) - lo)
    b0 = lo >> shift
    b = np.right_shift(start, shift, out=_scratch(scratch, "b", n))
    b -= b0
    nb = int(b.max()) + 1
    dense = _dense_key(tid, nc, typ, _scratch(scratch, "key", n), _scratch(scratch, "tmp", n))
    if dense is not None:  # the (key, bucket) number straight from the dense key: no renumbering pass
        gid, lo_k, span = dense
        size = span[0] * span[1] * span[2] * nb
    else:
        gid, keys = _unique_keys(tid, nc, typ)
        size = len(keys) * nb
    gid *= nb
    gid += b
    used = None
    if size > 4 * n + 4096:  # many keys or buckets: number the (key, bucket) pairs that occur instead
        used, gid = np.unique(gid, return_inverse=True)
        gid = np.asarray(gid, dtype=np.int64).reshape(-1)
        size = len(used)
    count, total, first, last, longest = group_stats(gid, start, end, size, _scratch(scratch, "tmp", n))
    keep = np.flatnonzero(count)
    g = used[keep] if used is not None else keep
    if dense is not None:
        kk = g // nb
        k = np.stack([kk // (span[1] * span[2]) + lo_k[0], kk // span[2] % span[1] + lo_k[1], kk % span[2] + lo_k[2]],
                     axis=1)
    else:
        k = keys[g // nb]
    i64 = pa.int64()
    return pa.Table.from_arrays([
        arrays.numeric(k[:, 0], i64), arrays.numeric(k[:, 1], pa.int32()), _strings(k[:, 2], sources),
        _strings(k[:, 2], names), _strings(k[:, 2], groups), arrays.numeric(np.full(len(keep), shift, dtype=np.int32)),
        arrays.numeric(g % nb + b0, i64), arrays.numeric(count[keep], i64), arrays.numeric(first[keep], i64),
        arrays.numeric(last[keep], i64), arrays.numeric(total[keep], i64), arrays.numeric(longest[keep], i64)],
        schema=SCHEMA)


def footer(events_bytes: int, events_rows: int) -> dict[bytes, bytes]:
    """The key-value metadata that ties a summary to its events file."""
    return {SUMMARY_EVENTS_BYTES.encode(): str(int(events_bytes)).encode(),
            SUMMARY_EVENTS_ROWS.encode(): str(int(events_rows)).encode()}


def write(path: str, tables: list[pa.Table], events_bytes: int, events_rows: int) -> None:
    """One summary file: the row groups' summaries, tied to the events file by its size and rows."""
    import pyarrow.parquet as pq

    t = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    t = t.replace_schema_metadata(footer(events_bytes, events_rows))
    pq.write_table(t, path, compression="zstd")
