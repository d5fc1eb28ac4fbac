"""Search over event names and arguments (model name, collective op), stepped through as "k of N".

Why this shape: a name match is a set of leaves, so its N is a sum of leaf counts and stepping is a
few binary searches per leaf, with nothing materialized even when 40M events match. An argument
(``model_name``, ``op``) is not part of the leaf key, so its matches are read once from Parquet (only
when some distinct value of those columns contains the query) and kept as index positions, sorted.
Every match has one place in a total order, (start, leaf, position in the index), so "next" never
skips events that start at the same nanosecond and "k" is exact.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neuron_explorer.ui import wire
from neuron_explorer.ui.flows import locate
from neuron_explorer.ui.profile import Profile
from neuron_explorer.ui.rows import DEFAULT_LAYOUT
from neuron_explorer.ui.sql import files_sql

ARG_COLUMNS = ("model_name", "op")
ARG_MATCH_MAX = 5_000_000  # argument matches kept per query (N is exact up to this, flagged beyond)
CACHED_QUERIES = 8
_LOCK = threading.Lock()


@dataclass
class Matches:
    """The events matching a query: whole leaves (by name), plus argument matches in other leaves as
    index positions sorted by (start, leaf, position)."""

    q: str
    leaves: list[int]
    s: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # index time
    leaf: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    pos: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    values: list[tuple[str, str]] = field(default_factory=list)  # (column, value) that matched
    capped: bool = False

    def n(self, p: Profile) -> int:
        return sum(p.leaves[lf].n for lf in self.leaves) + len(self.pos)


def _distinct_args(p: Profile) -> dict[str, list[str]]:
    """Distinct values of the argument columns (read once per profile; a few hundred at most)."""
    got = getattr(p, "_arg_values", None)
    if got is not None:
        return got
    files = [f for _, _, f in p.ev_files]
    out: dict[str, list[str]] = {}
    if files:
        c = p.cursor()
        have = {r[0] for r in c.execute(f"DESCRIBE SELECT * FROM read_parquet({files_sql(files[:1])})").fetchall()}
        for col in ARG_COLUMNS:
            if col in have:
                rows = c.execute(f"SELECT DISTINCT {col}::VARCHAR FROM read_parquet({files_sql(files)}, "
                                 f"union_by_name = true) WHERE {col} IS NOT NULL").fetchall()
                out[col] = sorted(str(r[0]) for r in rows if r[0])
    p._arg_values = out  # type: ignore[attr-defined]
    return out


def matches(p: Profile, q: str) -> Matches:
    """The matches of ``q`` (case-insensitive substring of the name, the model name or the op); cached."""
    ql = q.strip().lower()
    cache: OrderedDict[str, Matches] = p.__dict__.setdefault("_search_cache", OrderedDict())
    with _LOCK:
        if ql in cache:
            cache.move_to_end(ql)
            return cache[ql]
    m = Matches(ql, [lf.leaf for lf in p.leaves if ql and ql in lf.name.lower()])
    if ql and p.index is not None:
        vals = {col: [v for v in vs if ql in v.lower()] for col, vs in _distinct_args(p).items()}
        vals = {c: v for c, v in vals.items() if v}
        if vals:
            _arg_matches(p, m, vals)
    with _LOCK:
        cache[ql] = m
        while len(cache) > CACHED_QUERIES:
            cache.popitem(last=False)
    return m


def _arg_matches(p: Profile, m: Matches, vals: dict[str, list[str]]) -> None:
    """Fill ``m`` with the events (outside its name-matched leaves) whose argument columns match."""
    idx = p.index
    assert idx is not None
    m.values = [(c, v) for c, vs in vals.items() for v in vs]
    cond = " OR ".join(f"ev.{c}::VARCHAR IN (SELECT unnest(${c}::VARCHAR[]))" for c in vals)
    rows = p.cursor().execute(f"""
        SELECT l.leaf::BIGINT AS leaf, ev.start_ts AS s, ev.id AS id
        FROM read_parquet({files_sql([f for _, _, f in p.ev_files])}, union_by_name = true) ev
        JOIN {p.leaf_table()} l ON l.inst = ev.instance_id AND l.pid = ev.process_id
             AND l.tid = coalesce(ev.thread_id, -1) AND l.nc = coalesce(ev.nc_idx, -1)
             AND l.src = coalesce(ev.trace_event_source, '') AND l.name = ev.name
        WHERE ({cond}) AND NOT list_contains($skip::BIGINT[], l.leaf::BIGINT)
        LIMIT {ARG_MATCH_MAX + 1}""", {**vals, "skip": m.leaves}).fetchnumpy()
    leaf = np.asarray(rows["leaf"], dtype=np.int64)
    s = np.asarray(rows["s"], dtype=np.int64) - idx.base
    ids = np.asarray(rows["id"], dtype=np.int64)
    m.capped = len(leaf) > ARG_MATCH_MAX
    leaf, s, ids = leaf[:ARG_MATCH_MAX], s[:ARG_MATCH_MAX], ids[:ARG_MATCH_MAX]
    pos = np.empty(len(leaf), dtype=np.int64)
    for lf in np.unique(leaf).tolist():
        sel = np.flatnonzero(leaf == lf)
        a, b = int(idx.off[lf]), int(idx.off[lf + 1])
        q = a + np.searchsorted(idx.s[a:b], s[sel], "left")
        bad = idx.id[np.minimum(q, b - 1)] != ids[sel]  # events sharing a start: find the id
        for j in np.flatnonzero(bad).tolist():
            k = int(q[j])
            while k < b and idx.s[k] == s[sel][j] and idx.id[k] != ids[sel][j]:
                k += 1
            q[j] = k
        pos[sel] = q
    o = np.lexsort((pos, leaf, s))
    m.s, m.leaf, m.pos = s[o], leaf[o], pos[o]


def search(p: Profile, mode: str, q: str, layout: str = DEFAULT_LAYOUT) -> dict[str, Any]:
    """What ``q`` matches: event names (with counts), argument values, the rows showing matches, N."""
    m = matches(p, q)
    if not m.q:
        return {"q": q, "names": [], "rows": [], "n": 0, "args": []}
    names: dict[str, int] = {}
    for lf in m.leaves:
        names[p.leaves[lf].name] = names.get(p.leaves[lf].name, 0) + p.leaves[lf].n
    hit = set(m.leaves) | set(np.unique(m.leaf).tolist())
    rows = [i for i, r in enumerate(p.rows(mode, layout)) if r.kind == "events" and hit.intersection(r.leaves)]
    return {"q": q, "names": sorted(names.items(), key=lambda kv: -kv[1]), "rows": rows, "n": m.n(p),
            "args": [{"column": c, "value": v} for c, v in m.values], "capped": m.capped}


Cursor = tuple[int, int, int]  # (start in index time, leaf, position)


def _count_before(p: Profile, m: Matches, cur: Cursor) -> int:
    """Matches strictly before ``cur`` in the (start, leaf, position) order."""
    idx = p.index
    assert idx is not None
    s0, l0, p0 = cur
    n = 0
    for lf in m.leaves:
        a, b = int(idx.off[lf]), int(idx.off[lf + 1])
        ls = idx.s[a:b]
        if lf < l0:
            n += int(np.searchsorted(ls, s0, "right"))
        elif lf == l0:
            n += max(0, min(p0, b) - a)
        else:
            n += int(np.searchsorted(ls, s0, "left"))
    lo, hi = int(np.searchsorted(m.s, s0, "left")), int(np.searchsorted(m.s, s0, "right"))
    ties = (m.leaf[lo:hi] < l0) | ((m.leaf[lo:hi] == l0) & (m.pos[lo:hi] < p0))
    return n + lo + int(ties.sum())


def _step(p: Profile, m: Matches, cur: Cursor, forward: bool) -> Cursor | None:
    """The first match after (or the last before) ``cur``."""
    idx = p.index
    assert idx is not None
    s0, l0, p0 = cur
    best: Cursor | None = None
    for lf in m.leaves:
        a, b = int(idx.off[lf]), int(idx.off[lf + 1])
        if lf == l0:
            i = p0 + 1 if forward else p0 - 1
        else:  # in a lower leaf, ties in start come before the cursor; in a higher leaf, after it
            i = a + int(np.searchsorted(idx.s[a:b], s0, "right" if lf < l0 else "left")) - (0 if forward else 1)
        if not a <= i < b:
            continue
        c = (int(idx.s[i]), lf, i)
        if best is None or (c < best if forward else c > best):
            best = c
    j = _arg_index(m, cur, forward)
    if j is not None:
        c = (int(m.s[j]), int(m.leaf[j]), int(m.pos[j]))
        if best is None or (c < best if forward else c > best):
            best = c
    return best


def _arg_index(m: Matches, cur: Cursor, forward: bool) -> int | None:
    """Index in the argument matches of the first entry after (last before) ``cur``."""
    if not len(m.pos):
        return None
    lo, hi = int(np.searchsorted(m.s, cur[0], "left")), int(np.searchsorted(m.s, cur[0], "right"))
    ties = [(int(m.leaf[j]), int(m.pos[j])) for j in range(lo, hi)]
    if forward:
        j = next((lo + k for k, t in enumerate(ties) if t > cur[1:]), hi)
        return j if j < len(m.s) else None
    j = next((lo + k for k in range(len(ties) - 1, -1, -1) if ties[k] < cur[1:]), lo - 1)
    return j if j >= 0 else None


def search_next(p: Profile, q: str, after: float, direction: int, leaf: int | None = None,
                event_id: int | None = None) -> dict[str, Any]:
    """The next (``direction`` >= 0) or previous match, with its place ``k`` (1-based) among ``n``.

    From an event (``leaf`` and ``event_id``, ``after`` its start): the match right after or before it in
    the (start, leaf, position) order. From a time alone: the first match starting after ``after``
    (or the last starting before it), as in the first version."""
    m = matches(p, q)
    if p.index is None or not m.q or not (m.leaves or len(m.pos)):
        return {"found": False, "n": 0}
    forward = direction >= 0
    if leaf is not None and event_id is not None:
        pos = locate(p, event_id, leaf, after)
        cur: Cursor = (int(p.index.s[pos]), leaf, pos)
    else:
        t = after - p.shift
        cur = (int(np.floor(t)), 1 << 62, 1 << 62) if forward else (int(np.ceil(t)), -1, -1)
    got = _step(p, m, cur, forward)
    n = m.n(p)
    if got is None:
        return {"found": False, "n": n}
    s_i, lf, i = got
    s = s_i + p.shift
    return {"found": True, "id": wire.id_value(int(p.index.id[i])), "s": s, "e": s + int(p.index.d[i]), "leaf": lf,
            "name": p.leaves[lf].name, "k": _count_before(p, m, got) + 1, "n": n, "capped": m.capped}
