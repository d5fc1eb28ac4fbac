"""The events summary ``view`` writes beside each events file (``contracts.dataset.EVENT_SUMMARY``).

Why: the viewer's first paint of a profile needs its tracks (every thread, core, source and name with
counts and extents) and a coarse picture of each (about 1024 time buckets over the profile). Read
from the events, that is one aggregate over every event (3 CPU-s at 20M events, most of a cold
open); here it is a by-product of writing them, while the columns are in memory: per row group, per
(thread, core, event type) and bucket of ``2**shift`` ns, the count, first start, last end, total
and longest duration. Buckets are aligned to multiples of their width, so the viewer merges whole
buckets into its own coarser width exactly (docs/decisions/0054-ui-event-summary.md).

The cost is kept to a few passes of numpy over integer columns (no sort and no hashing in the
common case: bincounts over dense numbers); keys or (key, bucket) pairs spread too wide for a dense
numbering fall back to ``np.unique``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from neuron_explorer.contracts.dataset import SUMMARY_EVENTS_BYTES, SUMMARY_EVENTS_ROWS, summary_shift

_STR = pa.dictionary(pa.int32(), pa.string())
SCHEMA = pa.schema([("thread_id", pa.int64()), ("nc_idx", pa.int32()), ("trace_event_source", _STR),
                    ("name", _STR), ("event_group", _STR), ("shift", pa.int32()),
                    ("bucket", pa.int64()), ("events", pa.int64()), ("first_start", pa.int64()),
                    ("last_end", pa.int64()), ("total_ns", pa.int64()), ("max_ns", pa.int64())])
_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min


def _key_codes(tid: np.ndarray, nc: np.ndarray, typ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A dense number per row for its (thread, core, type), and those keys as an (n_keys, 3) array.

    A process's thread ids lie close together (the OS numbers them near the pid) and cores and types
    are small numbers, so the three usually fit a small dense range: numbered there with a bincount
    (no sort, no hashing). Keys spread wider are numbered by ``np.unique`` (a sort)."""
    tid, nc, typ = (np.asarray(a, dtype=np.int64) for a in (tid, nc, typ))
    lo = (int(tid.min()), int(nc.min()), int(typ.min()))
    span = (int(tid.max()) - lo[0] + 1, int(nc.max()) - lo[1] + 1, int(typ.max()) - lo[2] + 1)
    if span[0] * span[1] * span[2] <= 4 * len(tid) + 65536:
        key = (tid - lo[0]) * (span[1] * span[2])
        key += (nc - lo[1]) * span[2]
        key += typ - lo[2]
        present = np.flatnonzero(np.bincount(key, minlength=span[0] * span[1] * span[2]))
        number = np.zeros(span[0] * span[1] * span[2], dtype=np.int64)
        number[present] = np.arange(len(present), dtype=np.int64)
        keys = np.stack([present // (span[1] * span[2]) + lo[0], present // span[2] % span[1] + lo[1],
                         present % span[2] + lo[2]], axis=1)
        return number[key], keys
    rec = np.rec.fromarrays([tid, nc, typ])
    u, codes = np.unique(rec, return_inverse=True)
    keys = np.stack([u.f0, u.f1, u.f2], axis=1).astype(np.int64)
    return np.asarray(codes, dtype=np.int64).reshape(-1), keys


def _strings(idx: np.ndarray, values: Sequence[str | None]) -> pa.Array:
    """``values[idx]`` as a dictionary column (no Python object per row; None is '')."""
    return pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32)),
                                          pa.array([v or "" for v in values], type=pa.string()))


def chunk(tid: np.ndarray, nc: np.ndarray, typ: np.ndarray, start: np.ndarray, end: np.ndarray,
          names: Sequence[str], sources: Sequence[str | None], groups: Sequence[str | None]) -> pa.Table:
    """The summary rows of one row group: ``typ`` indexes ``names``/``sources``/``groups``."""
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
    b = (start >> shift) - b0
    nb = int(b.max()) + 1
    codes, keys = _key_codes(tid, nc, typ)
    gid = codes * nb + b
    size = len(keys) * nb
    used = None
    if size > 4 * n + 4096:  # many keys: number the (key, bucket) pairs that occur instead
        used, gid = np.unique(gid, return_inverse=True)
        gid = np.asarray(gid, dtype=np.int64).reshape(-1)
        size = len(used)
    count = np.bincount(gid, minlength=size)
    dur = end - start
    total = np.zeros(size, dtype=np.int64)
    np.add.at(total, gid, dur)
    first = np.full(size, _I64_MAX, dtype=np.int64)
    np.minimum.at(first, gid, start)
    last = np.full(size, _I64_MIN, dtype=np.int64)
    np.maximum.at(last, gid, end)
    longest = np.full(size, _I64_MIN, dtype=np.int64)
    np.maximum.at(longest, gid, dur)
    keep = np.flatnonzero(count)
    g = used[keep] if used is not None else keep
    k = keys[g // nb]
    return pa.Table.from_arrays([
        pa.array(k[:, 0]), pa.array(k[:, 1].astype(np.int32)), _strings(k[:, 2], sources),
        _strings(k[:, 2], names), _strings(k[:, 2], groups), pa.array(np.full(len(keep), shift, dtype=np.int32)),
        pa.array(g % nb + b0), pa.array(count[keep].astype(np.int64)), pa.array(first[keep]),
        pa.array(last[keep]), pa.array(total[keep]), pa.array(longest[keep])], schema=SCHEMA)


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
