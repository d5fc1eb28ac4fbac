"""Reading the events overview ``view`` writes once per dataset (``contracts.dataset.EVENT_OVERVIEW``).

Why: at 512 processes a cold open spent ~3.4 CPU-s before its first paint, nearly all of it reading
one summary per process (~1 CPU-s of per-file overhead) and merging their buckets in DuckDB. The
overview holds that merge's answer for the whole profile, in one file: here it is read in one go
and checked, and each process's rows are handed on as ``ingest_summary.scan`` hands them
(``coarse.split_part`` then makes the leaves and the coarse level), so the first picture is the
same, only sooner (docs/decisions/0142-ui-event-overview.md).

Never a wrong picture: the overview is used only when every check passes, and anything else (a
truncated or damaged file, a footer whose CRC or numbers do not add up, an events file added,
removed or rewritten since: size, rows and extent compared with each file's footer) raises
``Unusable`` with one line naming the problem; the caller says it once and reads the summaries or
the events instead. A dataset without an overview (an older ``view``, another writer) is no problem.
"""

from __future__ import annotations

import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from neuron_explorer.contracts.dataset import OVERVIEW_FORMAT, OVERVIEW_KEY, coarse_width, events_file_facts
from neuron_explorer.ui import coarse

_INTS = ("part", "thread_id", "nc_idx", "bucket", "events", "first_start", "last_end", "total_ns")
_STRS = ("trace_event_source", "name", "event_group")
_HEADER_INTS = ("format", "base", "width", "shift", "start", "end", "max_ns", "rows")


class Unusable(Exception):
    """The overview cannot be used (one line: what is wrong with it)."""


def _header(raw: bytes | None) -> dict[str, Any]:
    """The footer's JSON, its CRC and its numbers checked."""
    if raw is None:
        raise Unusable("its footer has no header")
    try:
        body, crc = raw.decode().rsplit("\n", 1)
        ok = int(crc, 16) == zlib.crc32(body.encode())
        h = json.loads(body) if ok else None
    except (UnicodeDecodeError, ValueError):
        raise Unusable("its header is damaged") from None
    if not isinstance(h, dict):
        raise Unusable("its header does not match its checksum")
    if any(type(h.get(k)) is not int for k in _HEADER_INTS) or not isinstance(h.get("parts"), list):
        raise Unusable("its header lacks a field")
    if h["format"] != OVERVIEW_FORMAT:
        raise Unusable(f"format {h['format']} (this viewer reads {OVERVIEW_FORMAT})")
    w, start, end = h["width"], h["start"], h["end"]
    if not (10 <= h["shift"] <= 62 and end >= start and w == coarse_width(max(end - start, 1), h["shift"])
            and h["base"] == start - start % w and 0 <= h["max_ns"] <= end - start):
        raise Unusable("its header's extent and bucket width disagree")
    return h


def _files(h: dict[str, Any], events_root: str, parts: list[tuple[tuple[str, int], list[str]]]) -> list[int]:
    """For each of the header's process directories, the index of the profile's process it is (the
    events files on disk, as the viewer found them: ``parts``); every events file must be named
    with its size, rows and extent as its footer gives them, and no other."""
    where: dict[str, tuple[int, str]] = {}  # relative path -> (part, real path)
    for i, (_, files) in enumerate(parts):
        for f in files:
            where[os.path.relpath(f, events_root).replace(os.sep, "/")] = (i, f)
    seen: set[str] = set()
    part_of: list[int] = []
    used: set[int] = set()
    for entry in h["parts"]:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], list) and entry[1]):
            raise Unusable("its list of events files is damaged")
        d, files = entry
        mine: set[int] = set()
        for fe in files:
            if not (isinstance(fe, list) and len(fe) == 5 and isinstance(fe[0], str)
                    and all(type(x) is int for x in fe[1:3]) and all(x is None or type(x) is int for x in fe[3:])):
                raise Unusable("its list of events files is damaged")
            rel = f"{d}/{fe[0]}"
            if rel not in where or rel in seen:
                raise Unusable(f"it names {rel}, which is not an events file of the profile (stale)")
            seen.add(rel)
            k, real = where[rel]
            mine.add(k)
            try:
                facts = events_file_facts(real)
            except Exception as e:  # noqa: BLE001 - pyarrow's errors have no common base but Exception
                raise Unusable(f"{rel} cannot be read ({type(e).__name__})") from None
            if facts[:2] != tuple(fe[1:3]) or (None not in facts[2:] and facts[2:] != tuple(fe[3:])):
                raise Unusable(f"{rel} changed since it was written (stale)")
        if len(mine) != 1 or mine & used:
            raise Unusable(f"its directory {d} is not one process of the profile")
        used |= mine
        part_of.append(mine.pop())
    if len(seen) != len(where):
        missing = sorted(set(where) - seen)[0]
        raise Unusable(f"it does not name {missing} (stale)")
    ext = [fe[3:] for _, fs in h["parts"] for fe in fs]
    if all(None not in x for x in ext) and (min(x[0] for x in ext), max(x[1] for x in ext)) != (h["start"], h["end"]):
        raise Unusable("its extent is not its events files'")
    return part_of


def _rows_named(h: dict[str, Any]) -> int:
    """The rows of the events files the header names (0 when its list is damaged: ``_files`` says so)."""
    try:
        return sum(fe[2] for _, fs in h["parts"] for fe in fs if type(fe[2]) is int)
    except (TypeError, ValueError, IndexError, KeyError):
        return 0


def _load(path: str, events_root: str, parts: list[tuple[tuple[str, int], list[str]]]) -> tuple[Any, dict, list[int]]:
    """The overview's table, its checked header and, per header process, the profile's process it is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
        h = _header((pf.metadata.metadata or {}).get(OVERVIEW_KEY.encode()))
        # the events files' footers are checked (~0.1 CPU-s at 512 files, most of it Python) while the
        # table is read (Arrow's decoding leaves the GIL), each problem reported as before: a stale
        # list first, then a row count the events cannot hold, read only when it can (decision 0185)
        with ThreadPoolExecutor(1, thread_name_prefix="overview-files") as pool:
            checked = pool.submit(_files, h, events_root, parts)
            t = failed = None
            if 0 < pf.metadata.num_rows == h["rows"] <= _rows_named(h):  # (nothing is read past what the events hold)
                try:
                    t = pf.read(use_threads=False)
                except (OSError, pa.ArrowException, ValueError) as e:
                    failed = e
            part_of = checked.result()
        if t is None and failed is None:
            raise Unusable("its row count disagrees with its header")
        if failed is not None:
            raise failed
        return t, h, part_of
    except Unusable:
        raise
    except (OSError, pa.ArrowException, ValueError) as e:
        raise Unusable(f"it cannot be read ({type(e).__name__})") from None


def _ext(h: dict[str, Any]) -> tuple[int, ...]:
    return h["start"], h["end"], h["max_ns"], h["width"], h["base"]


def read(path: str, events_root: str,
         parts: list[tuple[tuple[str, int], list[str]]]) -> tuple[list[dict[str, np.ndarray]], tuple[int, ...]]:
    """Each process's coarse rows (as ``ingest_summary.scan`` gives them: tid, nc, src, name, g, b, c,
    s, e, d, grouped by key then bucket) and (earliest start, latest end, longest duration, bucket
    width, aligned base), from the overview at ``path`` of the profile whose events files are
    ``parts`` (per process, its files under ``events_root``). Raises ``Unusable``."""
    import pyarrow as pa

    t, h, part_of = _load(path, events_root, parts)
    try:
        return _rows(t, h, part_of, len(parts)), _ext(h)
    except (KeyError, TypeError, ValueError, IndexError, pa.ArrowException) as e:
        raise Unusable(f"its rows are damaged ({type(e).__name__})") from None


def read_coarse(path: str, events_root: str, parts: list[tuple[tuple[str, int], list[str]]]
                ) -> tuple[list[tuple], coarse.CoarseLevel, tuple[int, ...]]:
    """What a cold open paints from, read from the overview in one go: the leaf rows (in leaf order),
    the coarse level and the extent of ``read``; the same as ``read`` then ``coarse.split_part`` per
    process, the sort and ``coarse.build``, without a Python step per leaf's buckets or per row's
    strings (~0.15 CPU-s less at 512 processes). Raises ``Unusable``."""
    import pyarrow as pa

    t, h, part_of = _load(path, events_root, parts)
    try:
        c, codes = _checked(t, h, part_of)
        where = np.asarray(part_of, dtype=np.int64)[c["part"]]  # the profile's process of each row
        rows, level = coarse.split_all(where, [k for k, _ in parts], c["thread_id"], c["nc_idx"],
                                       codes["trace_event_source"], codes["name"], codes["event_group"],
                                       {"b": c["bucket"], "c": c["events"], "s": c["first_start"],
                                        "e": c["last_end"], "d": c["total_ns"]}, h["start"], h["width"], h["max_ns"])
    except (KeyError, TypeError, ValueError, IndexError, pa.ArrowException) as e:
        raise Unusable(f"its rows are damaged ({type(e).__name__})") from None
    return rows, level, _ext(h)


def _checked(t: Any, h: dict[str, Any], part_of: list[int]) -> tuple[dict[str, np.ndarray], dict[str, tuple]]:
    """The table's columns once its rows are checked (types, order, buckets, counts per process):
    the integer columns, and each string column as (codes, sorted values)."""
    from neuron_explorer.util import arrays  # (imports pyarrow: not at the server's start, decision 0054)

    if t.num_rows != h["rows"] or any(t.column(c).null_count for c in _INTS + _STRS):
        raise Unusable("its rows are damaged (count or nulls)")
    c = {k: arrays.numpy_of(t.column(k)) for k in _INTS}
    codes = {k: arrays.sorted_codes(t.column(k)) for k in _STRS}
    w, base = h["width"], h["base"]
    sh = w.bit_length() - 1
    hp = c["part"]
    if hp.min() < 0 or hp.max() >= len(part_of):
        raise Unusable("its rows name a process it does not list")
    # grouped by (part, key) and ordered by bucket within a key: what split_part relies on
    keys = [hp, c["thread_id"], c["nc_idx"], codes["trace_event_source"][0], codes["name"][0], c["bucket"]]
    bad = np.zeros(len(hp) - 1, dtype=bool)
    eq = np.ones(len(hp) - 1, dtype=bool)
    for k in keys:
        d = k[1:] - k[:-1]
        bad |= eq & (d < 0)
        eq &= d == 0
    s, e = c["first_start"], c["last_end"]
    if (bad.any() or (c["events"] < 1).any() or (c["total_ns"] < 0).any() or (e < s).any() or s.min() < h["start"]
            or e.max() > h["end"] or ((s >> sh) - (base >> sh) != c["bucket"]).any()):
        raise Unusable("its rows are damaged (order, bucket or extent)")
    want = np.zeros(len(part_of), dtype=np.int64)
    for i, (_, files) in enumerate(h["parts"]):
        want[i] = sum(fe[2] for fe in files)
    got = np.zeros(len(part_of), dtype=np.int64)
    np.add.at(got, hp, c["events"])
    if not (got == want).all():
        raise Unusable("its events do not add up to the events files' rows")
    return c, codes


def _rows(t: Any, h: dict[str, Any], part_of: list[int], n_parts: int) -> list[dict[str, np.ndarray]]:
    """The table's rows checked (``_checked``) and cut per process."""
    c, codes = _checked(t, h, part_of)
    hp = c["part"]
    cut = np.searchsorted(hp, np.arange(len(part_of) + 1))
    strs = {k: np.asarray(v[1], dtype=object)[v[0]] for k, v in codes.items()}
    cols = {"tid": c["thread_id"], "nc": c["nc_idx"], "src": strs["trace_event_source"], "name": strs["name"],
            "g": strs["event_group"], "b": c["bucket"], "c": c["events"], "s": c["first_start"], "e": c["last_end"],
            "d": c["total_ns"]}
    out: list[dict[str, np.ndarray]] = [{k: v[:0] for k, v in cols.items()} for _ in range(n_parts)]
    for i, j in enumerate(part_of):
        out[j] = {x: v[cut[i]:cut[i + 1]] for x, v in cols.items()}
    return out


def path_of(profile_dir: Path) -> Path:
    """Where a profile's overview is (it may not be there)."""
    from neuron_explorer.contracts.dataset import EVENT_OVERVIEW, table_file

    return profile_dir / table_file(EVENT_OVERVIEW)
