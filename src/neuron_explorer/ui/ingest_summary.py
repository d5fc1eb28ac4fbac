"""Reading the events summaries ``view`` writes (``contracts.dataset.EVENT_SUMMARY``) for a cold open.

Why: a cold open's first paint needs the leaves and the coarse level; scanning the events for them
costs ~3 CPU-s at 20M events. ``view`` writes, beside each events file, per row group, per (thread,
core, event type) and aligned time bucket, what that scan computes (count, first start, last end,
total and longest duration), in a few kB per process. Merging whole buckets into the coarse width
gives the scan's answer exactly (same rows, same order), so everything after it is unchanged
(docs/decisions/0054-ui-event-summary.md).

A summary is used only when it is the events file's: its footer holds the events file's size and row
count, checked against the file on disk. A profile written before summaries existed, a process whose
summary is missing, damaged or stale, falls back to the scan of its events (``coarse.scan_sql``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import duckdb
import numpy as np

from neuron_explorer.contracts.dataset import SUMMARY_EVENTS_BYTES, SUMMARY_EVENTS_ROWS
from neuron_explorer.ui.sql import files_sql, quote

# what reading a damaged summary raises: DuckDB's errors, and a UnicodeDecodeError when its message
# quotes a damaged column name (the binding decodes the message as UTF-8)
DAMAGED = (duckdb.Error, UnicodeDecodeError)


class Scratch:
    """The in-memory database one open reads its summaries on, apart from the workspace's: DuckDB
    answers some damaged Parquet files with an internal error that invalidates the database it ran
    on, and the workspace's must live on. A fresh database costs 20-35 ms (most of it DuckDB's
    catalog), so the reads of one open share one; after a read that failed it is kept only if it
    still answers ``SELECT 1`` (the workspace's own test, decision 0059), so no read runs on a
    database a damaged file killed. One thread at a time; ``close`` when the open is done (or use it
    as a context manager)."""

    def __init__(self) -> None:
        self._con: duckdb.DuckDBPyConnection | None = None
        self.opened = 0  # databases made (tests: a clean open makes one)

    @contextlib.contextmanager
    def use(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._con is None:
            self._con = duckdb.connect(":memory:")
            self.opened += 1
        try:
            yield self._con
        except BaseException:
            if not self._alive():
                self.close()
            raise

    def _alive(self) -> bool:
        try:
            return self._con is not None and self._con.execute("SELECT 1").fetchall() == [(1,)]
        except DAMAGED:
            return False

    def close(self) -> None:
        con, self._con = self._con, None
        if con is not None:
            with contextlib.suppress(*DAMAGED):
                con.close()

    def __enter__(self) -> "Scratch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def matching(ev_files: list[tuple[str, int, str]], sum_files: list[tuple[str, int, str]],
             db: Scratch) -> dict[str, str]:
    """{events file: its summary file} for the events files whose summary is there and theirs: same
    instance, process and file name; the footer's size and row count equal the events file's; its
    events add up to that row count, its extent is the events' (their row-group statistics) and its
    bucket shifts are sane. Anything else, a damaged file included, is scanned instead.

    The checks read every summary in one query, on ``db`` (a failed read replaces it); when that
    query fails, each summary is checked alone, so one damaged file costs only its own process the
    scan."""
    by_key = {(inst, pid, Path(f).name): f for inst, pid, f in sum_files}
    cand = {f: by_key[(inst, pid, Path(f).name)] for inst, pid, f in ev_files if (inst, pid, Path(f).name) in by_key}
    got = _checked(cand, db)
    if got is not None:
        return got
    alone = [_checked({ev: sm}, db) for ev, sm in cand.items()] if len(cand) > 1 else []
    return {ev: sm for one in alone if one for ev, sm in one.items()}


def _checked(cand: dict[str, str], db: Scratch) -> dict[str, str] | None:
    """``matching`` over some candidates (None: reading them failed)."""
    if not cand:
        return {}
    try:
        with db.use() as con:
            kv = con.execute(f"""SELECT file_name, decode(key), decode(value)
                                 FROM parquet_kv_metadata({files_sql(list(cand.values()))})
                                 WHERE decode(key) IN ('{SUMMARY_EVENTS_BYTES}', '{SUMMARY_EVENTS_ROWS}')""").fetchall()
            rows = dict(con.execute("SELECT file_name, num_rows "
                                    f"FROM parquet_file_metadata({files_sql(list(cand))})").fetchall())
            stats = {r[0]: r[1:] for r in con.execute(f"""
                SELECT file_name, min(TRY_CAST(stats_min_value AS BIGINT)) FILTER (WHERE path_in_schema = 'start_ts'),
                       max(TRY_CAST(stats_max_value AS BIGINT)) FILTER (WHERE path_in_schema = 'end_ts')
                FROM parquet_metadata({files_sql(list(cand))}) GROUP BY file_name""").fetchall()}
            got = {r[0]: r[1:] for r in con.execute(f"""
                SELECT filename, sum(events)::BIGINT, min(first_start), max(last_end), min(shift), max(shift),
                       count(*) FILTER (WHERE events < 1 OR last_end < first_start OR total_ns < 0 OR max_ns < 0)
                FROM read_parquet({files_sql(list(cand.values()))}, filename = true) GROUP BY filename""").fetchall()}
    except DAMAGED:
        return None
    meta: dict[str, dict[str, str]] = {}
    for f, k, v in kv:
        meta.setdefault(f, {})[k] = v
    return {ev: sm for ev, sm in cand.items()
            if _consistent(ev, meta.get(sm, {}), rows.get(ev), stats.get(ev), got.get(sm))}


def _consistent(ev: str, meta: dict[str, str], rows: int | None, stats: tuple | None, got: tuple | None) -> bool:
    """Is a summary (its footer ``meta``, its totals ``got``) the one of events file ``ev``?"""
    try:
        if (int(meta[SUMMARY_EVENTS_BYTES]) != os.stat(ev).st_size or rows is None
                or int(meta[SUMMARY_EVENTS_ROWS]) != rows):
            return False
    except (KeyError, ValueError, OSError):
        return False
    if got is None or got[0] != rows or got[5] or not (10 <= got[3] <= got[4] <= 62):
        return False
    # the events' own statistics, where the file has them (view writes them for start_ts and end_ts)
    return stats is None or ((stats[0] is None or stats[0] == got[1]) and (stats[1] is None or stats[1] == got[2]))


def extent(files: list[str], db: Scratch) -> tuple[int, int, int, int] | None:
    """(earliest start, latest end, longest duration, widest bucket shift) over summary files; None
    when they hold no event (raises ``DAMAGED``)."""
    with db.use() as con:
        r = con.execute(f"""SELECT min(first_start), max(last_end), max(max_ns), max(shift)
                            FROM read_parquet({files_sql(files)})""").fetchall()[0]
    return None if r[0] is None else (int(r[0]), int(r[1]), int(r[2]), int(r[3]))


def max_shift(files: list[str], db: Scratch) -> int:
    """The widest bucket shift of some summary files (0 without any; raises ``DAMAGED``)."""
    if not files:
        return 0
    with db.use() as con:
        q = f"SELECT coalesce(max(shift), 0) FROM read_parquet({files_sql(files)})"
        return int(con.execute(q).fetchall()[0][0])


def scan(parts: list[list[str]], aligned_base: int, shift: int, db: Scratch) -> list[dict[str, np.ndarray] | None]:
    """The coarse scan's rows (``coarse.scan_sql``: per leaf key and bucket of ``2**shift`` counted
    from ``aligned_base``, a multiple of it, ordered by key, bucket and start) of each process from its
    summary files (``parts[i]``: process i's), in one query over them all; None for a process whose
    summary turned out damaged (a column the checks did not read: when the query over all fails,
    each process is read alone)."""
    try:
        with db.use() as con:
            return list(_scan(con, parts, aligned_base, shift))
    except DAMAGED:
        if len(parts) == 1:
            return [None]
    return [scan([fs], aligned_base, shift, db)[0] for fs in parts]


def _scan(con: duckdb.DuckDBPyConnection, parts: list[list[str]], aligned_base: int,
          shift: int) -> list[dict[str, np.ndarray]]:
    """``scan`` in one query (the keys of the rows are fetched once per key, not per row: a Python
    string per row and column cost more than the query; numpy indexing spreads them over the rows)."""
    files = [f for fs in parts for f in fs]
    which = ", ".join(f"({quote(f)}, {i})" for i, fs in enumerate(parts) for f in fs)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE nx_summary_rows AS
        SELECT m.part, thread_id AS tid, nc_idx AS nc, trace_event_source AS src, name, event_group AS g,
               (bucket >> ({int(shift)} - shift)::BIGINT) - {int(aligned_base) >> int(shift)} AS b,
               sum(events)::BIGINT AS c, min(first_start) AS s, max(last_end) AS e, sum(total_ns)::BIGINT AS d
        FROM read_parquet({files_sql(files)}, filename = true) x JOIN (VALUES {which}) m(f, part) ON m.f = x.filename
        GROUP BY ALL""")
    # the keys with their row counts, then the rows in the same order: row i's key is a repeat
    keys = con.execute("""SELECT part, tid, nc, src, name, max(g) AS g, count(*) AS n FROM nx_summary_rows
                          GROUP BY ALL ORDER BY part, tid, nc, src, name""").fetchnumpy()
    rows = con.execute("""SELECT b, c, s, e, d FROM nx_summary_rows
                          ORDER BY part, tid, nc, src, name, b, s""").fetchnumpy()  # (no pyarrow import)
    k = np.repeat(np.arange(len(keys["n"]), dtype=np.int64), np.asarray(keys["n"], dtype=np.int64))
    cols = {x: np.asarray(keys[x])[k] for x in ("tid", "nc", "src", "name", "g")}
    cols.update({x: np.asarray(rows[x]) for x in ("b", "c", "s", "e", "d")})
    part = np.asarray(keys["part"], dtype=np.int64)[k]
    cut = np.searchsorted(part, np.arange(len(parts) + 1))
    return [{x: v[cut[i]:cut[i + 1]] for x, v in cols.items()} for i in range(len(parts))]
