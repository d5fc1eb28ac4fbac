"""The window index: every event of a profile as compact arrays sorted by (leaf, start), plus the
level-of-detail pyramid as arrays of the same shape, and the queries over them (building them is
:mod:`neuron_explorer.ui.index_build`). See docs/decisions/0016-ui-event-index.md.

Why: a zoomed-in window asks for a few thousand events out of tens of millions. Reading them from
the Parquet store means scanning the start column of every visible process (a part often holds one
row group, so statistics prune nothing): ~250 ms at 20M events on two cores, whatever the window's
size. With the events of each leaf sorted by start, the events overlapping ``[t0, t1)`` are one
contiguous slice found by two binary searches, and the work is proportional to what is returned.

Layout (``n`` events, ``L`` leaves; leaf ``i`` owns positions ``off[i]:off[i+1]``):

* ``s``   int64   start, ns relative to ``base`` (the earliest event start), sorted within each leaf
* ``d``   uint32 (int64 when some event is longer than ~4.3 s) duration, ``end - start``
* ``id``  int64   the event's ``id`` (to fetch its details)
* ``fn``  int32   the event's *flow number* ``j`` (its flow id is ``fx_id[j]``), -1 when the event has no
  flow id or no other event of the profile shares it. Flow ids come from ``SystemProfileEvents.flow_id``
  (host call <-> core execution, the ranks of one collective); numbers follow ids, so ordering by number
  is ordering by id, and 4 bytes per event do where the 64-bit id would take 8. An event in several
  flows (a host call is in its framework region's flow and in its core execution's) has its smallest
  number here and the others in ``xp`` / ``xo`` / ``xf``: event ``xp[i]`` (positions, ascending) is
  also in flows ``xf[xo[i]:xo[i+1]]``. The overflow is empty when no event is in two flows.
* ``fx_id`` (int64) / ``fx_off`` / ``fx_pos``: the flows with at least two events in the profile, ordered
  by flow id: flow ``j`` is ``fx_id[j]`` and its events are at positions ``fx_pos[fx_off[j]:fx_off[j+1]]``
  of the arrays above (int32 while positions fit). A wide window's flows are found by walking this table
  in flow-id order (see ``flows``).
* ``bmax`` int64  per block of ``BLOCK`` events of a leaf: the largest end among the leaf's events up to
  the end of that block (a running maximum, so it is sorted). Blocks of leaf ``i`` are
  ``boff[i]:boff[i+1]``. It gives a tight lower bound for "events ending at or after t0" even when a
  leaf holds one very long event among many short ones (a bound by the longest duration would not).
* pyramid level ``k`` (bucket width ``levels[k]``): ``p{k}_s`` (first start), ``p{k}_e`` (last end),
  ``p{k}_c`` (count, int32), ``p{k}_d`` (total duration), ``p{k}_id`` (smallest id: the event's id when
  the bucket holds one), sorted by start within each leaf, leaf ``i`` at ``p{k}_off[i]:p{k}_off[i+1]``.
  A bucket's number is ``s // levels[k]``, so it is not stored.

With a cache directory the arrays are ``.npy`` files opened with ``mmap_mode='r'``: reopening a
profile costs no scan, and the operating system keeps the touched pages in its page cache (reclaimable)
rather than the server holding them on its heap.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from neuron_explorer.ui.index_build import BLOCK, FORMAT, build_arrays

# a flow query over a window holding more events than this tries the walk in flow-id order first
FLOW_WALK_MIN_EVENTS = 200_000


class PyramidLevels:
    """What ``gather_level`` reads, shared by the index and the coarse level built before it
    (``coarse.CoarseLevel``, the same arrays as the index's level 0): the level widths, the longest
    duration per leaf, and the arrays ``p<k>_*`` of each level ``k``."""

    levels: list[int]
    maxdur: np.ndarray
    a: dict[str, np.ndarray]

    def gather_level(self, k: int, leaves: list[int], rows: list[int], t0: float, t1: float) -> dict[str, np.ndarray]:
        """Buckets of level ``k`` overlapping [t0, t1) (base-relative) of ``leaves``."""
        w = self.levels[k]
        a_ = self.a
        ps, poff = a_[f"p{k}_s"], a_[f"p{k}_off"]
        hi_t = math.ceil(t1)
        sl = []
        for lf, r in zip(leaves, rows):
            a, b = int(poff[lf]), int(poff[lf + 1])
            if b <= a:
                continue
            ls = ps[a:b]
            lo_b = math.floor((t0 - int(self.maxdur[lf])) / w)  # a bucket starting before this cannot reach t0
            lo = int(np.searchsorted(ls, lo_b * w, "left"))
            hi = int(np.searchsorted(ls, hi_t, "left"))
            if lo < hi:
                sl.append((lf, r, a + lo, a + hi))
        if not sl:
            return _empty()
        lens = np.array([b - a for _, _, a, b in sl], dtype=np.int64)
        out = {"row": np.repeat(np.array([r for _, r, _, _ in sl], dtype=np.int64), lens),
               "leaf": np.repeat(np.array([lf for lf, _, _, _ in sl], dtype=np.int64), lens)}
        for x in ("s", "e", "c", "d", "id"):
            col = a_[f"p{k}_{x}"]
            out[x] = np.concatenate([col[a:b] for _, _, a, b in sl]).astype(np.int64, copy=False)
        keep = out["e"] >= math.ceil(t0)
        if not keep.all():
            out = {kk: v[keep] for kk, v in out.items()}
        return out


class EventIndex(PyramidLevels):
    """Sorted per-leaf event arrays and pyramid levels (see the module docstring)."""

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        self.a = arrays
        self.meta = meta
        self.base = int(meta["base"])
        self.levels: list[int] = list(meta["levels"])
        self.maxdur = np.asarray(meta["maxdur"], dtype=np.int64)
        self.off = arrays["off"]
        self.boff = arrays["boff"]
        self.s, self.d, self.id, self.bmax = arrays["s"], arrays["d"], arrays["id"], arrays["bmax"]
        self.fn = arrays["fn"]
        self.fx_id, self.fx_off, self.fx_pos = arrays["fx_id"], arrays["fx_off"], arrays["fx_pos"]
        self.xp, self.xo, self.xf = arrays["xp"], arrays["xo"], arrays["xf"]
        self.flow_leaves: list[int] = list(meta.get("flow_leaves", []))

    @property
    def n(self) -> int:
        return int(self.off[-1])

    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.a.values()))

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, counts: list[int], maxdur: list[int], base: int, levels: list[int],
              chunks: Iterable[tuple[np.ndarray, ...]],
              out_dir: Path | None, extra: dict[str, Any] | Callable[[list[int]], dict[str, Any]] | None = None,
              on_level: Callable[[int], None] | None = None) -> "EventIndex":
        """Build from ``chunks`` of (leaf, start_abs, duration, id[, flow id]), each sorted by (leaf, start)
        (see :func:`neuron_explorer.ui.index_build.build_arrays`)."""
        return cls(*build_arrays(counts, maxdur, base, levels, chunks, out_dir, extra, on_level))

    @classmethod
    def load(cls, d: Path) -> "EventIndex | None":
        """The index cached in ``d`` (memory-mapped), or None when absent or of another format."""
        try:
            meta = json.loads((d / "meta.json").read_text())
            if meta.get("format") != FORMAT:
                return None
            names = ["s", "d", "id", "bmax", "off", "boff", "fn", "fx_id", "fx_off", "fx_pos", "xp", "xo", "xf"]
            for k in range(len(meta["levels"])):
                names += [f"p{k}_{x}" for x in ("s", "e", "c", "d", "id", "off")]
            # plain ndarray views of the maps: slicing a np.memmap costs a Python-level hook per slice
            arrays = {n: np.load(d / f"{n}.npy", mmap_mode="r").view(np.ndarray) for n in names}
        except (OSError, ValueError, KeyError):
            return None
        return cls(arrays, meta)

    @staticmethod
    def orphaned_build(path: Path) -> bool:
        """Whether ``path`` is the temporary directory of a build whose process has ended."""
        name = path.name
        if not name.endswith(".tmp") or ".idx." not in name:
            return False
        pid = name.rsplit(".idx.", 1)[1].split(".", 1)[0]
        if not (pid.isascii() and pid.isdigit()) or not path.is_dir() or path.is_symlink():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except (OSError, OverflowError):
            return False  # alive (another user's), or not a pid: keep it
        return False

    @classmethod
    def cached(cls, cache: Path | None, make: Callable[[Path | None], "EventIndex"]) -> "EventIndex":
        """Load the index from ``cache`` or build it there (atomically: a temp dir, then a rename)."""
        if cache is None:
            return make(None)
        got = cls.load(cache)
        if got is not None:
            return got
        if cache.is_dir() and not cache.is_symlink():
            # unreadable (damaged by hand: builds are renamed into place complete): rebuild it
            shutil.rmtree(cache, ignore_errors=True)
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            # the builder's pid in the name: a build cut short by its process's end is removed later
            # (``orphaned_build``), one still running elsewhere is not
            tmp = Path(tempfile.mkdtemp(prefix=f"{cache.name}.{os.getpid()}.", suffix=".tmp", dir=cache.parent))
        except OSError:
            return make(None)  # an unwritable cache only means building in memory every time
        try:
            make(tmp)
            try:
                os.rename(tmp, cache)
            except OSError:  # another process won the race, or the rename failed: use what is there
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        got = cls.load(cache)
        if got is None:
            raise OSError(f"window index written to {cache} could not be read back")
        return got

    # ------------------------------------------------------------------ queries
    def raw_slices(self, leaves: list[int], t0: float, t1: float) -> list[tuple[int, int, int]]:
        """(leaf, lo, hi): positions of the events starting before ``t1`` that may end at or after ``t0``.

        Times are relative to ``base``. Every event overlapping the window is in a slice; the caller
        still drops those ending before ``t0`` (few: one block's worth at most, plus events within the
        leaf's longest duration).
        """
        lo_t = math.ceil(t0)
        hi_t = math.ceil(t1)
        out = []
        s, off, boff, bmax = self.s, self.off, self.boff, self.bmax
        for lf in leaves:
            a, b = int(off[lf]), int(off[lf + 1])
            if b <= a:
                continue
            ls = s[a:b]
            hi = int(np.searchsorted(ls, hi_t, "left"))
            if hi == 0:
                continue
            j = int(np.searchsorted(bmax[boff[lf]:boff[lf + 1]], lo_t, "left"))
            lo = max(j * BLOCK, int(np.searchsorted(ls, lo_t - int(self.maxdur[lf]), "left")))
            if lo < hi:
                out.append((lf, a + lo, a + hi))
        return out

    def gather_raw(self, leaves: list[int], rows: list[int], t0: float, t1: float) -> dict[str, np.ndarray]:
        """Events overlapping [t0, t1) (base-relative) of ``leaves`` (row ``rows[i]`` for leaf i)."""
        row_of = dict(zip(leaves, rows))
        sl = self.raw_slices(leaves, t0, t1)
        if not sl:
            return _empty()
        s = np.concatenate([self.s[a:b] for _, a, b in sl])
        d = np.concatenate([self.d[a:b] for _, a, b in sl]).astype(np.int64)
        ids = np.concatenate([self.id[a:b] for _, a, b in sl])
        lens = np.array([b - a for _, a, b in sl], dtype=np.int64)
        leaf = np.repeat(np.array([lf for lf, _, _ in sl], dtype=np.int64), lens)
        row = np.repeat(np.array([row_of[lf] for lf, _, _ in sl], dtype=np.int64), lens)
        e = s + d
        keep = e >= math.ceil(t0)
        out = {"row": row, "s": s, "e": e, "c": np.ones(len(s), dtype=np.int64), "d": d, "id": ids, "leaf": leaf}
        if not keep.all():
            out = {k: v[keep] for k, v in out.items()}
        return out

    def count_starting(self, leaves: list[int], t0: float, t1: float) -> list[tuple[int, int, int]]:
        """(leaf, lo, hi): positions of the events starting in [t0, t1) (base-relative)."""
        lo_t, hi_t = math.ceil(t0), math.ceil(t1)
        out = []
        for lf in leaves:
            a, b = int(self.off[lf]), int(self.off[lf + 1])
            ls = self.s[a:b]
            lo, hi = int(np.searchsorted(ls, lo_t, "left")), int(np.searchsorted(ls, hi_t, "left"))
            out.append((lf, a + lo, a + hi))
        return out

    def level_starting(self, k: int, leaves: list[int], t0: float, t1: float) -> list[tuple[int, int, int]]:
        """(leaf, lo, hi): buckets of level ``k`` whose first event starts in [t0, t1)."""
        ps, poff = self.a[f"p{k}_s"], self.a[f"p{k}_off"]
        lo_t, hi_t = math.ceil(t0), math.ceil(t1)
        out = []
        for lf in leaves:
            a, b = int(poff[lf]), int(poff[lf + 1])
            ls = ps[a:b]
            out.append((lf, a + int(np.searchsorted(ls, lo_t, "left")), a + int(np.searchsorted(ls, hi_t, "left"))))
        return out

    def next_start(self, leaves: list[int], after: float, forward: bool) -> tuple[int, int] | None:
        """(leaf, position) of the first event starting after ``after`` (or the last before it)."""
        best: tuple[int, int] | None = None
        best_s = 0
        for lf in leaves:
            a, b = int(self.off[lf]), int(self.off[lf + 1])
            if b <= a:
                continue
            ls = self.s[a:b]
            if forward:
                i = int(np.searchsorted(ls, math.floor(after), "right"))  # s > after
                if i >= b - a:
                    continue
            else:
                i = int(np.searchsorted(ls, math.ceil(after), "left")) - 1  # s < after
                if i < 0:
                    continue
            v = int(ls[i])
            if best is None or (v < best_s if forward else v > best_s):
                best, best_s = (lf, a + i), v
        return best

    # ------------------------------------------------------------------ flows
    def flows(self, t0: float, t1: float, limit: int, how: str = "auto") -> dict[str, Any]:
        """The flows with at least two events among those overlapping [t0, t1) (base-relative; the
        events a window of every row would show: start < t1, end >= t0), the ``limit`` smallest flow ids.

        Returns ``fid`` (flow ids, ascending), ``off`` (flow ``j``'s endpoints are ``off[j]:off[j+1]``),
        ``pos`` (the endpoints' positions in the event arrays, ordered by start then event id within a
        flow) and ``truncated`` (more flows qualify than ``limit``).

        Two exact ways, picked by the number of events in the window (``how`` forces one: "gather" or
        "walk"): *gather* reads the flow numbers of the window's events (a slice per leaf holding flows,
        like a window) and groups them, costing what the window holds; *walk* goes through the profile's
        multi-event flows in flow-id order, checking their endpoints against the window, and stops at
        ``limit + 1`` qualifying flows. A wide window (most flows qualify) is answered by the walk after a few thousand
        flows instead of sorting millions of ids; a walk that reads more endpoints than the window holds
        events without finishing gives way to the gather.
        """
        lo_t, hi_t = math.ceil(t0), math.ceil(t1)
        limit = max(int(limit), 0)
        if not len(self.fx_id):
            return _no_flows()
        sl = self.raw_slices(self.flow_leaves, t0, t1)
        w = sum(b - a for _, a, b in sl)
        if not w:
            return _no_flows()
        if how == "walk" or (how == "auto" and w > FLOW_WALK_MIN_EVENTS):
            got = self._flows_walk(lo_t, hi_t, limit, None if how == "walk" else w)
            if got is not None:
                return got
        return self._flows_gather(sl, lo_t, limit)

    def flow_numbers(self, pos: int) -> list[int]:
        """Every flow number of the event at ``pos`` (smallest first; empty when it is in no flow)."""
        first = int(self.fn[pos])
        if first < 0:
            return []
        i = int(np.searchsorted(self.xp, pos, "left"))
        if i < len(self.xp) and int(self.xp[i]) == pos:
            return [first] + [int(x) for x in self.xf[int(self.xo[i]):int(self.xo[i + 1])]]
        return [first]

    def _overflow(self, sl: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """(positions, flow numbers) of the further flows of the events in slices ``sl``."""
        if not len(self.xp):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        ps, fs = [], []
        for _, a, b in sl:
            i0, i1 = (int(x) for x in np.searchsorted(self.xp, [a, b], "left"))
            if i1 > i0:
                o0, o1 = int(self.xo[i0]), int(self.xo[i1])
                ps.append(np.repeat(np.asarray(self.xp[i0:i1], dtype=np.int64), np.diff(self.xo[i0:i1 + 1])))
                fs.append(np.asarray(self.xf[o0:o1], dtype=np.int64))
        if not ps:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(ps), np.concatenate(fs)

    def _flows_gather(self, sl: list[tuple[int, int, int]], lo_t: int, limit: int) -> dict[str, Any]:
        f = np.concatenate([self.fn[a:b] for _, a, b in sl])  # flow numbers: order = flow id order
        keep = f >= 0
        if bool(keep.any()):
            e = np.concatenate([self.s[a:b] for _, a, b in sl]) + np.concatenate([self.d[a:b] for _, a, b in sl])
            keep &= e >= lo_t
        pos = np.concatenate([np.arange(a, b, dtype=np.int64) for _, a, b in sl])[keep]
        f = f[keep]
        xpos, xf = self._overflow(sl)  # the further flows of events in several
        if len(xpos):
            xk = self.s[xpos] + self.d[xpos] >= lo_t
            f, pos = np.concatenate((f.astype(np.int64), xf[xk])), np.concatenate((pos, xpos[xk]))
        if not len(f):
            return _no_flows()
        o = np.argsort(f, kind="stable")
        f, pos = f[o], pos[o]
        st = np.concatenate(([0], np.flatnonzero(f[1:] != f[:-1]) + 1))
        cnt = np.diff(np.append(st, len(f)))
        multi = np.flatnonzero(cnt >= 2)
        truncated = len(multi) > limit
        multi = multi[:limit]
        sel = np.repeat(st[multi], cnt[multi]) + _ramp(cnt[multi])
        return self._flow_answer(self.fx_id[f[st[multi]]], cnt[multi], pos[sel], truncated)

    def _flows_walk(self, lo_t: int, hi_t: int, limit: int, budget: int | None) -> dict[str, Any] | None:
        nf = len(self.fx_id)
        fx_off, fx_pos = self.fx_off, self.fx_pos
        got_f: list[np.ndarray] = []
        got_c: list[np.ndarray] = []
        got_p: list[np.ndarray] = []
        found = 0
        read = 0
        i = 0
        step = max(4096, 4 * (limit + 1))
        while i < nf and found <= limit:
            j = min(nf, i + step)
            a, b = int(fx_off[i]), int(fx_off[j])
            pos = fx_pos[a:b]
            s = self.s[pos]
            inw = (s < hi_t) & (s + self.d[pos] >= lo_t)
            cnt = np.add.reduceat(inw.astype(np.int64), (fx_off[i:j] - a).astype(np.int64))
            q = np.flatnonzero(cnt >= 2)
            if len(q) > limit + 1 - found:
                q = q[:limit + 1 - found]
            if len(q):
                flow_of = np.repeat(np.arange(j - i), np.diff(fx_off[i:j + 1]).astype(np.int64))
                take = np.zeros(j - i, dtype=bool)
                take[q] = True
                m = inw & take[flow_of]
                got_f.append(self.fx_id[i + q])
                got_c.append(cnt[q])
                got_p.append(pos[m])
                found += len(q)
            read += b - a
            i = j
            step *= 2
            if budget is not None and found <= limit and i < nf and read > budget:
                return None
        if not found:
            return _no_flows()
        fid, cnt, pos = np.concatenate(got_f), np.concatenate(got_c), np.concatenate(got_p)
        truncated = found > limit
        if truncated:
            fid, cnt = fid[:limit], cnt[:limit]
            pos = pos[:int(cnt.sum())]
        return self._flow_answer(fid, cnt, pos, truncated)

    def _flow_answer(self, fid: np.ndarray, cnt: np.ndarray, pos: np.ndarray, truncated: bool) -> dict[str, Any]:
        """Endpoints ordered by (flow, start, event id)."""
        flow_of = np.repeat(np.arange(len(fid)), cnt)
        o = np.lexsort((self.id[pos], self.s[pos], flow_of))
        off = np.zeros(len(fid) + 1, dtype=np.int64)
        np.cumsum(cnt, out=off[1:])
        return {"fid": fid.astype(np.int64, copy=False), "off": off, "pos": pos[o], "truncated": bool(truncated)}

    def leaf_of(self, pos: np.ndarray) -> np.ndarray:
        """The leaf owning each event position."""
        return np.searchsorted(self.off, pos, "right") - 1


def _no_flows() -> dict[str, Any]:
    z = np.zeros(0, dtype=np.int64)
    return {"fid": z, "off": np.zeros(1, dtype=np.int64), "pos": z, "truncated": False}


def _ramp(cnt: np.ndarray) -> np.ndarray:
    """0..c-1 for each c of ``cnt``, concatenated."""
    total = int(cnt.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    starts = np.cumsum(cnt) - cnt
    return np.arange(total, dtype=np.int64) - np.repeat(starts, cnt)


def _empty() -> dict[str, np.ndarray]:
    z = np.zeros(0, dtype=np.int64)
    return {"row": z, "s": z, "e": z, "c": z, "d": z, "id": z, "leaf": z}


def aggregate(items: dict[str, np.ndarray], t0: float, npp: float, single: np.ndarray,
              limit: int) -> dict[str, np.ndarray]:
    """Per row: items flagged ``single`` (one event at least a pixel long) alone, the others merged per
    pixel column (count, total duration, first start, last end, smallest id and leaf); ordered by row,
    then start. Times are whatever the items carry; ``t0`` must be in the same frame.

    Items arrive grouped by leaf and sorted by start within a leaf, so with one leaf per row (the
    common case) the (row, pixel) keys are already in order and no sort is needed.
    """
    n = len(items["s"])
    if n == 0:
        return items
    any_single = bool(single.any())
    m = {x: v[~single] for x, v in items.items()} if any_single else items
    parts: list[dict[str, np.ndarray]] = []
    if len(m["s"]):
        k = np.floor((m["s"] - t0) / npp).astype(np.int64)
        row = m["row"]
        kmin, kmax, rmax = int(k.min()), int(k.max()), int(row.max())
        span = kmax - kmin + 1
        if span * (rmax + 1) < (1 << 62):
            key = row * span + (k - kmin)
            if len(key) > 1 and bool((key[1:] < key[:-1]).any()):
                order = np.argsort(key, kind="stable")
                key = key[order]
                m = {x: v[order] for x, v in m.items()}
            brk = key[1:] != key[:-1]
        else:  # keys too wide to pack into one integer
            order = np.lexsort((k, row))
            k = k[order]
            m = {x: v[order] for x, v in m.items()}
            brk = (m["row"][1:] != m["row"][:-1]) | (k[1:] != k[:-1])
        st = np.concatenate(([0], np.flatnonzero(brk) + 1))
        parts.append({"row": m["row"][st], "c": np.add.reduceat(m["c"], st), "d": np.add.reduceat(m["d"], st),
                      "s": np.minimum.reduceat(m["s"], st), "e": np.maximum.reduceat(m["e"], st),
                      "id": np.minimum.reduceat(m["id"], st), "leaf": np.minimum.reduceat(m["leaf"], st)})
    if not any_single:
        res = parts[0]  # (row, pixel) order is (row, start) order
        return {x: v[:limit] for x, v in res.items()} if len(res["s"]) > limit else res
    parts.append({x: v[single] for x, v in items.items()})
    res = {x: np.concatenate([p[x] for p in parts]) for x in parts[0]}
    order = np.lexsort((res["s"], res["row"]))[:limit]
    return {x: v[order] for x, v in res.items()}
