"""The coarse level: what a cold open draws while the event index builds in the background.

Why: building the index of a 20M-event profile reads every event and sorts it (seconds to minutes),
and the viewer used to show nothing but a progress bar until it was done. The scan that finds the
profile's leaves (one aggregate per process, which had to run first anyway) now also groups each
leaf's events by a time bucket of width ``W`` (a power of two, about ``COARSE_BUCKETS`` buckets over
the profile) and keeps, per bucket, what a pyramid level keeps: first start, last end, count, total
duration and smallest id. That *is* a pyramid level, so windows and busy shares are answered from it
by the index's own code (``PyramidLevels.gather_level``) until the index is ready; the answers say
``"coarse": true`` and the browser asks again once the index is built. The scan reads only the
columns a first paint needs (docs/decisions/0039-ui-cold-first-paint.md): buckets carry no event id
(-1), and each leaf's longest duration is a bound until the index build computes it.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from neuron_explorer.contracts.dataset import coarse_width
from neuron_explorer.ui.index import PyramidLevels
from neuron_explorer.ui.sql import files_sql

LEVEL = 0  # the coarse object has one level


def bucket_width(extent: int) -> int:
    """A power of two (>= 1 us) giving at most ``COARSE_BUCKETS`` buckets over ``extent`` ns (the
    dataset contract's rule: ``view``'s events overview is made at the same width)."""
    return coarse_width(extent)


def extent(con: duckdb.DuckDBPyConnection, files: list[str]) -> tuple[int, int, int] | None:
    """(earliest start, latest end, longest duration) of the events, from the Parquet row-group
    statistics (no event read) or, when some row group has none, from a scan of those columns. None
    without events."""
    cols = ("start_ts", "end_ts", "duration_ns")
    try:
        r = con.execute(f"""
            SELECT min(TRY_CAST(stats_min_value AS BIGINT)) FILTER (WHERE path_in_schema = 'start_ts'),
                   max(TRY_CAST(stats_max_value AS BIGINT)) FILTER (WHERE path_in_schema = 'end_ts'),
                   max(TRY_CAST(stats_max_value AS BIGINT)) FILTER (WHERE path_in_schema = 'duration_ns'),
                   count(*) FILTER (WHERE stats_min_value IS NULL OR stats_max_value IS NULL),
                   count(DISTINCT path_in_schema)
            FROM parquet_metadata({files_sql(files)}) WHERE path_in_schema IN {cols}""").fetchall()[0]
        if None not in r[:3] and r[3] == 0 and r[4] == len(cols):
            return int(r[0]), int(r[1]), int(r[2])
    except duckdb.Error:
        pass
    r = con.execute("SELECT min(start_ts), max(end_ts), max(duration_ns) "
                    f"FROM read_parquet({files_sql(files)})").fetchall()[0]
    return None if r[0] is None else (int(r[0]), int(r[1]), int(r[2] or 0))


def scan_sql(files: list[str], base: int, w: int) -> str:
    """Per leaf key and bucket (of width ``w`` counted from ``base``, a multiple of ``w`` so that
    buckets are aligned as the summaries' are): count, first start, last end, total duration; ordered
    by key then bucket (one process's files). Only what a first paint needs: the process comes from the part, the
    event ids and each leaf's exact longest duration from the index build (reading them here made the
    scan ~1.7x slower)."""
    return f"""
        SELECT coalesce(thread_id, -1) AS tid, coalesce(nc_idx, -1) AS nc, coalesce(trace_event_source, '') AS src,
               name, coalesce(event_group, '') AS g, (start_ts - {int(base)}) // {int(w)} AS b,
               count(*) AS c, min(start_ts) AS s, max(end_ts) AS e, sum(end_ts - start_ts) AS d
        FROM read_parquet({files_sql(files)})
        GROUP BY ALL ORDER BY tid, nc, src, name, b, s"""


class CoarseLevel(PyramidLevels):
    """One pyramid level (width ``levels[0]``) over leaves, relative to ``base``: the arrays of
    ``EventIndex`` level 0, so the same ``gather_level`` serves it."""

    def __init__(self, base: int, w: int, arrays: dict[str, np.ndarray], maxdur: list[int]) -> None:
        self.base = int(base)
        self.levels = [int(w)]
        self.a = arrays
        self.maxdur = np.asarray(maxdur, dtype=np.int64)

    def nbytes(self) -> int:
        return int(sum(v.nbytes for v in self.a.values()))


def split_part(inst: str, pid: int, cols: dict[str, Any],
               max_duration: int) -> list[tuple[tuple, dict[str, np.ndarray]]]:
    """One process's scan answer (``scan_sql``, as numpy columns) cut into leaves: per leaf its row
    (inst, pid, tid, nc, src, name, n, min start, max end, longest duration bound, group) and its
    buckets. The bound is the widest bucket's extent (no event of the leaf is longer), capped by the
    profile's longest duration; the index build replaces it by the exact value."""
    n = len(cols["c"])
    if not n:
        return []
    key = [np.asarray(cols[k]) for k in ("tid", "nc", "src", "name")]
    brk = np.zeros(n, dtype=bool)
    brk[0] = True
    for k in key:
        brk[1:] |= k[1:] != k[:-1]
    st = np.flatnonzero(brk)
    en = np.append(st[1:], n)
    c, s, e, d, b = (np.asarray(cols[k], dtype=np.int64) for k in ("c", "s", "e", "d", "b"))
    out = []
    for i, j in zip(st.tolist(), en.tolist()):
        bs = {"s": s[i:j], "e": e[i:j], "c": c[i:j], "d": d[i:j], "id": np.full(j - i, -1, dtype=np.int64)}
        if bool((b[i + 1:j] == b[i:j - 1]).any()):  # a name in two event groups: one bucket per b
            bs = _merge_buckets(b[i:j], bs)
        row = (inst, pid, int(key[0][i]), int(key[1][i]), str(key[2][i]), str(key[3][i]), int(c[i:j].sum()),
               int(s[i:j].min()), int(e[i:j].max()), min(int((e[i:j] - s[i:j]).max()), int(max_duration)),
               _group(cols["g"][i:j]))
        out.append((row, bs))
    return out


def _group(g: np.ndarray) -> str:
    """A leaf's event group: its buckets' (one, but for a name in two groups: the greatest)."""
    return str(g[0]) if bool((g == g[0]).all()) else max(str(x) for x in g)


def _merge_buckets(b: np.ndarray, bs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    st = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))
    return {"s": np.minimum.reduceat(bs["s"], st), "e": np.maximum.reduceat(bs["e"], st),
            "c": np.add.reduceat(bs["c"], st), "d": np.add.reduceat(bs["d"], st), "id": bs["id"][st]}


Coded = tuple[np.ndarray, list[str]]  # a string column as (codes, sorted values): ``util.arrays.sorted_codes``


def split_all(part_of_row: np.ndarray, part_keys: list[tuple[str, int]], tid: np.ndarray, nc: np.ndarray,
              src: Coded, name: Coded, group: Coded, cols: dict[str, np.ndarray], base: int, w: int,
              max_duration: int) -> tuple[list[tuple], CoarseLevel]:
    """What ``split_part`` over every process, the sort by leaf and ``build`` give, from one table of
    every process's rows at once: the leaf rows in leaf order and the coarse level.

    Why: at 512 processes (2048 leaves, 1.2M buckets) the per-leaf Python loop, the per-row strings
    and the concatenation took ~0.15 CPU-s of a cold open's first paint; here every step is a
    vector operation over the whole table and the strings are made once per leaf. The rows are
    grouped by (process, key) and ordered by bucket within a key (``part_of_row`` numbers the
    process in ``part_keys``); strings come as (codes, sorted values), so codes compare as the
    strings do. ``cols``: ``b`` (bucket), ``c``, ``s``, ``e``, ``d``."""
    n = len(part_of_row)
    if not n:
        return [], build([], base, w)
    sc, sv = src
    nmc, nmv = name
    gc, gv = group
    brk = np.zeros(n, dtype=bool)
    brk[0] = True
    for k in (part_of_row, tid, nc, sc, nmc):
        brk[1:] |= k[1:] != k[:-1]
    st = np.flatnonzero(brk)
    c, s, e, d, b = (np.asarray(cols[k], dtype=np.int64) for k in ("c", "s", "e", "d", "b"))
    # per leaf: events, first start, last end, longest-duration bound (the widest row, before any
    # merge, as split_part) and group (the greatest code is the greatest string; one group: that one)
    ln = np.add.reduceat(c, st)
    lmn = np.minimum.reduceat(s, st)
    lmx = np.maximum.reduceat(e, st)
    lmd = np.minimum(np.maximum.reduceat(e - s, st), int(max_duration))
    lg = np.maximum.reduceat(gc, st)
    lpart = part_of_row[st]
    # buckets: a name in two event groups has two rows per bucket, merged into one
    bb = brk.copy()
    bb[1:] |= b[1:] != b[:-1]
    if bool(bb.all()):
        bst = st_rows = np.arange(n)
        bs, be, bc, bd = s, e, c, d
    else:
        st_rows = np.flatnonzero(bb)
        bs, be = np.minimum.reduceat(s, st_rows), np.maximum.reduceat(e, st_rows)
        bc, bd = np.add.reduceat(c, st_rows), np.add.reduceat(d, st_rows)
        bst = st_rows
    # the first bucket of each leaf among the merged buckets, and each leaf's bucket count
    first = np.searchsorted(bst, st)
    cnt = np.diff(np.append(first, len(bst)))
    # leaf order: (instance, process, thread, core, source, name), as sorting the rows' tuples does
    order_of_part = np.empty(len(part_keys), dtype=np.int64)
    order_of_part[sorted(range(len(part_keys)), key=lambda i: part_keys[i])] = np.arange(len(part_keys))
    perm = np.lexsort((nmc[st], sc[st], nc[st], tid[st], order_of_part[lpart]))
    off = np.zeros(len(perm) + 1, dtype=np.int64)
    np.cumsum(cnt[perm], out=off[1:])
    # gather the buckets leaf by leaf in the new order
    idx = np.arange(off[-1], dtype=np.int64) + np.repeat(first[perm] - off[:-1], cnt[perm])
    arrays = {"p0_off": off, "p0_s": bs[idx] - base, "p0_e": be[idx] - base, "p0_c": bc[idx].astype(np.int32),
              "p0_d": bd[idx], "p0_id": np.full(len(idx), -1, dtype=np.int64)}
    rows = []
    for li in perm.tolist():
        inst, pid = part_keys[int(lpart[li])]
        r0 = int(st[li])
        rows.append((inst, pid, int(tid[r0]), int(nc[r0]), sv[int(sc[r0])], nmv[int(nmc[r0])], int(ln[li]),
                     int(lmn[li]), int(lmx[li]), int(lmd[li]), gv[int(lg[li])]))
    return rows, CoarseLevel(base, w, arrays, [r[9] for r in rows])


def build(leaves: list[tuple[tuple, dict[str, np.ndarray]]], base: int, w: int) -> CoarseLevel:
    """The coarse level of ``leaves`` (in leaf order), times relative to ``base``."""
    counts = [len(b["c"]) for _, b in leaves]
    off = np.zeros(len(leaves) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=off[1:])
    arrays: dict[str, np.ndarray] = {"p0_off": off}
    for x, dt in (("s", np.int64), ("e", np.int64), ("c", np.int32), ("d", np.int64), ("id", np.int64)):
        parts = [b[x] for _, b in leaves]
        v = np.concatenate(parts).astype(dt) if parts else np.zeros(0, dtype=dt)
        arrays[f"p0_{x}"] = v - base if x in ("s", "e") else v
    return CoarseLevel(base, w, arrays, [r[9] for r, _ in leaves])
