"""The events overview ``view`` writes once per dataset (``contracts.dataset.EVENT_OVERVIEW``).

Why: a viewer's cold open reads the events summaries (one small file per process) to draw its
first picture. At 512 processes that read alone cost ~1 CPU-s of per-file overhead, and the merge
of their buckets into the whole-profile width ~2 CPU-s more, against a first paint wanted in under
2 s (docs/decisions/0142-ui-event-overview.md). Here the same merge is done once, when ``view``
finishes the dataset: every summary's buckets are merged into the width a whole-profile view draws
(``contracts.dataset.coarse_width`` of the profile's extent), into one file the viewer reads in one
go and uses as is.

The overview is tied to the events it was made from: its footer (``OVERVIEW_KEY``, JSON with a CRC
of its own text) names every events file with its size, row count, first start and last end, which
the viewer checks against the files on disk; its pages carry checksums. An overview that cannot be
made (a process without its summary) is not written, and the viewer reads the summaries instead.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from neuron_explorer.contracts.dataset import (
    EVENT_OVERVIEW,
    EVENT_SUMMARY,
    EVENTS,
    OVERVIEW_FORMAT,
    OVERVIEW_KEY,
    SUMMARY_EVENTS_BYTES,
    SUMMARY_EVENTS_ROWS,
    coarse_width,
    events_file_facts,
    table_file,
)
from neuron_explorer.util import arrays

_STR = pa.dictionary(pa.int32(), pa.string())
SCHEMA = pa.schema([("part", pa.int32()), ("thread_id", pa.int64()), ("nc_idx", pa.int32()),
                    ("trace_event_source", _STR), ("name", _STR), ("event_group", _STR), ("bucket", pa.int64()),
                    ("events", pa.int64()), ("first_start", pa.int64()), ("last_end", pa.int64()),
                    ("total_ns", pa.int64())])
_KEYS = ("part", "thread_id", "nc_idx", "trace_event_source", "name", "event_group", "bucket")


def header_text(header: dict[str, Any]) -> str:
    """The footer value: the header's JSON and, after a newline, the CRC-32 of that JSON (a digit
    changed in the footer, which no page checksum covers, is then seen)."""
    body = json.dumps(header, separators=(",", ":"), sort_keys=True)
    return f"{body}\n{zlib.crc32(body.encode()):08x}"


def _events_files(root: str) -> dict[str, list[str]]:
    """{process directory relative to the events table: its events file names}, sorted."""
    base = os.path.join(root, EVENTS)
    out: dict[str, list[str]] = {}
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        names = sorted(f for f in filenames if f.endswith(".parquet"))
        if names:
            out[os.path.relpath(dirpath, base).replace(os.sep, "/")] = names
    return out


def build(root: str) -> tuple[pa.Table, dict[str, Any]] | None:
    """The overview of the dataset at ``root`` (table, header), or None when some events file has no
    summary of its own (size and row count in the summary's footer) or there is no event."""
    parts = _events_files(root)
    tables: list[pa.Table] = []
    part_of: list[np.ndarray] = []
    header_parts = []
    for k, (d, names) in enumerate(parts.items()):
        files = []
        for name in names:
            ev = os.path.join(root, EVENTS, d, name)
            sm = os.path.join(root, EVENT_SUMMARY, d, name)
            if not os.path.isfile(sm):
                return None
            size, rows, lo, hi = events_file_facts(ev)
            # (ParquetFile.read: read_table imports pandas, decision 0050; many small files: no threads)
            t = pq.ParquetFile(sm).read(use_threads=False)
            meta = t.schema.metadata or {}
            if (int(meta.get(SUMMARY_EVENTS_BYTES.encode(), -1)) != size
                    or int(meta.get(SUMMARY_EVENTS_ROWS.encode(), -1)) != rows):
                return None
            files.append([name, size, rows, lo, hi])
            if t.num_rows:
                tables.append(t.select(["thread_id", "nc_idx", "trace_event_source", "name", "event_group", "shift",
                                        "bucket", "events", "first_start", "last_end", "total_ns", "max_ns"]))
                part_of.append(np.full(t.num_rows, k, dtype=np.int64))
        header_parts.append([d, files])
    if not tables:
        return None
    t = pa.concat_tables(tables, promote_options="permissive")
    col = {c: arrays.numpy_of(t.column(c))
           for c in ("thread_id", "nc_idx", "shift", "bucket", "events", "first_start", "last_end", "total_ns",
                     "max_ns")}
    start, end = int(col["first_start"].min()), int(col["last_end"].max())
    shift = int(col["shift"].max())
    w = coarse_width(max(end - start, 1), shift)
    s_w = w.bit_length() - 1
    base = start - start % w
    b = (col["bucket"] >> (s_w - col["shift"])) - (base >> s_w)
    codes = {c: arrays.sorted_codes(t.column(c)) for c in ("trace_event_source", "name", "event_group")}
    keys = {"part": np.concatenate(part_of), "thread_id": col["thread_id"], "nc_idx": col["nc_idx"],
            **{c: v[0] for c, v in codes.items()}, "bucket": b}
    order = np.lexsort([keys[c] for c in reversed(_KEYS)])
    srt = {c: v[order] for c, v in keys.items()}
    brk = np.zeros(len(order), dtype=bool)
    brk[0] = True
    for c in _KEYS:
        brk[1:] |= srt[c][1:] != srt[c][:-1]
    st = np.flatnonzero(brk)
    s_o, e_o = col["first_start"][order], col["last_end"][order]
    out = [arrays.numeric(srt["part"][st].astype(np.int32)), arrays.numeric(srt["thread_id"][st]),
           arrays.numeric(srt["nc_idx"][st].astype(np.int32)),
           *(arrays.dictionary(srt[c][st], codes[c][1]) for c in ("trace_event_source", "name", "event_group")),
           arrays.numeric(srt["bucket"][st]), arrays.numeric(np.add.reduceat(col["events"][order], st)),
           arrays.numeric(np.minimum.reduceat(s_o, st)), arrays.numeric(np.maximum.reduceat(e_o, st)),
           arrays.numeric(np.add.reduceat(col["total_ns"][order], st))]
    header = {"format": OVERVIEW_FORMAT, "base": base, "width": w, "shift": shift, "start": start, "end": end,
              "max_ns": int(col["max_ns"].max()), "rows": len(st), "parts": header_parts}
    return pa.Table.from_arrays(out, schema=SCHEMA), header


def write(root: str) -> bool:
    """Write the overview of the dataset at ``root`` beside its tables (False: none could be made)."""
    got = build(root)
    if got is None:
        return False
    t, header = got
    t = t.replace_schema_metadata({OVERVIEW_KEY.encode(): header_text(header).encode()})
    pq.write_table(t, os.path.join(root, table_file(EVENT_OVERVIEW)), compression="zstd", row_group_size=1 << 20,
                   write_page_checksum=True)
    return True
