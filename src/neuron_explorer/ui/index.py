"""The window index: every event of a profile as compact arrays sorted by (leaf, start), plus the
level-of-detail pyramid as arrays of the same shape. See docs/decisions/ui-event-index.md.

Why: a zoomed-in window asks for a few thousand events out of tens of millions. Reading them from
the Parquet store means scanning the start column of every visible process (a part often holds one
row group, so statistics prune nothing): ~250 ms at 20M events on two cores, whatever the window's
size. With the events of each leaf sorted by start, the events overlapping ``[t0, t1)`` are one
contiguous slice found by two binary searches, and the work is proportional to what is returned.

Layout (``n`` events, ``L`` leaves; leaf ``i`` owns positions ``off[i]:off[i+1]``):

* ``s``   int64   start, ns relative to ``base`` (the earliest event start), sorted within each leaf
* ``d``   uint32 (int64 when some event is longer than ~4.3 s) duration, ``end - start``
* ``id``  int64   the event's ``id`` (to fetch its details)
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

FORMAT = 1  # bump when the layout changes: old cache directories are then ignored
BLOCK = 128
PYRAMID_FACTOR = 4
PYRAMID_TOP_BUCKETS = 512  # the coarsest level spans the profile in about this many buckets
U32_MAX = (1 << 32) - 1


def pyramid_levels(duration: int, n_leaves: int, n_events: int) -> list[int]:
    """Bucket widths W_0 * 4^k; W_0 (a power of two, >= 1 us) gives ~4 events per bucket per leaf."""
    w0 = max(1000, int(4 * duration * max(n_leaves, 1) / max(n_events, 1)))
    w0 = 1 << max(10, math.ceil(math.log2(w0)))
    levels = [w0]
    while duration / levels[-1] > PYRAMID_TOP_BUCKETS:
        levels.append(levels[-1] * PYRAMID_FACTOR)
    return levels


class EventIndex:
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

    @property
    def n(self) -> int:
        return int(self.off[-1])

    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.a.values()))

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, counts: list[int], maxdur: list[int], base: int, levels: list[int],
              chunks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
              out_dir: Path | None, extra: dict[str, Any] | None = None) -> "EventIndex":
        """Build from ``chunks`` of (leaf, start_abs, duration, id), each sorted by (leaf, start).

        ``counts[i]`` is the number of events of leaf ``i``. A leaf spread over several chunks is
        re-sorted at the end. With ``out_dir`` the arrays are written there as .npy files. ``extra`` is
        stored with the metadata (the profile keeps its leaf table there).
        """
        nl = len(counts)
        off = np.zeros(nl + 1, dtype=np.int64)
        np.cumsum(np.asarray(counts, dtype=np.int64), out=off[1:])
        n = int(off[-1])
        ddtype = np.uint32 if max(maxdur, default=0) <= U32_MAX else np.int64

        def alloc(name: str, shape: int, dtype: Any) -> np.ndarray:
            if out_dir is None:
                return np.zeros(shape, dtype=dtype)
            return np.lib.format.open_memmap(out_dir / f"{name}.npy", mode="w+", dtype=dtype, shape=(shape,))

        s = alloc("s", n, np.int64)
        d = alloc("d", n, ddtype)
        ids = alloc("id", n, np.int64)
        fill = off[:-1].copy()
        seen = np.zeros(nl, dtype=np.int32)
        for leaf, start, dur, eid in chunks:
            if not len(leaf):
                continue
            cut = np.flatnonzero(leaf[1:] != leaf[:-1]) + 1
            for a, b in zip(np.concatenate(([0], cut)), np.concatenate((cut, [len(leaf)]))):
                lf = int(leaf[a])
                p = int(fill[lf])
                q = p + int(b - a)
                if q > off[lf + 1]:
                    raise ValueError(f"leaf {lf}: more events than counted")
                s[p:q] = start[a:b] - base
                d[p:q] = dur[a:b]
                ids[p:q] = eid[a:b]
                fill[lf] = q
                seen[lf] += 1
        if not np.array_equal(fill, off[1:]):
            raise ValueError("the events read do not match the leaf counts")
        for lf in np.flatnonzero(seen > 1):  # a leaf spread over several parts: sort its slice
            a, b = int(off[lf]), int(off[lf + 1])
            o = np.argsort(s[a:b], kind="stable")
            s[a:b], d[a:b], ids[a:b] = s[a:b][o], d[a:b][o], ids[a:b][o]
        # running maximum of ends, per block
        nblocks = [(int(c) + BLOCK - 1) // BLOCK for c in counts]
        boff = np.zeros(nl + 1, dtype=np.int64)
        np.cumsum(np.asarray(nblocks, dtype=np.int64), out=boff[1:])
        bmax = alloc("bmax", int(boff[-1]), np.int64)
        for lf in range(nl):
            a, b = int(off[lf]), int(off[lf + 1])
            if b > a:
                e = s[a:b] + d[a:b].astype(np.int64)
                bmax[boff[lf]:boff[lf + 1]] = np.maximum.accumulate(np.maximum.reduceat(e, np.arange(0, b - a, BLOCK)))
        arrays: dict[str, np.ndarray] = {"s": s, "d": d, "id": ids, "bmax": bmax, "off": off, "boff": boff}
        # pyramid: level 0 from the events, level k from level k-1 (widths are powers of two, so
        # floor(s / w_k) of a bucket's first start is the bucket it falls in at level k)
        prev: dict[str, np.ndarray] | None = None
        for k, w in enumerate(levels):
            src = prev
            parts: dict[str, list[np.ndarray]] = {x: [] for x in ("s", "e", "c", "d", "id")}
            poff = np.zeros(nl + 1, dtype=np.int64)
            for lf in range(nl):
                if src is None:
                    a, b = int(off[lf]), int(off[lf + 1])
                    ls = s[a:b]
                    ld = d[a:b].astype(np.int64)
                    le, lc, lid = ls + ld, None, ids[a:b]
                else:
                    a, b = int(src["off"][lf]), int(src["off"][lf + 1])
                    ls, ld, le, lc, lid = src["s"][a:b], src["d"][a:b], src["e"][a:b], src["c"][a:b], src["id"][a:b]
                if b <= a:
                    poff[lf + 1] = poff[lf]
                    continue
                bk = ls // w
                st = np.concatenate(([0], np.flatnonzero(bk[1:] != bk[:-1]) + 1))
                parts["s"].append(ls[st])
                parts["e"].append(np.maximum.reduceat(le, st))
                parts["c"].append(np.diff(np.append(st, b - a)).astype(np.int32) if lc is None
                                  else np.add.reduceat(lc, st).astype(np.int32))
                parts["d"].append(np.add.reduceat(ld, st))
                parts["id"].append(np.minimum.reduceat(lid, st))
                poff[lf + 1] = poff[lf] + len(st)
            lvl: dict[str, np.ndarray] = {"off": poff}
            for x, dt in (("s", np.int64), ("e", np.int64), ("c", np.int32), ("d", np.int64), ("id", np.int64)):
                v = alloc(f"p{k}_{x}", int(poff[-1]), dt)
                pos = 0
                pending = parts[x][::-1]
                parts[x].clear()
                while pending:  # copy leaf by leaf, freeing as we go: no second full-size copy
                    part = pending.pop()
                    v[pos:pos + len(part)] = part
                    pos += len(part)
                lvl[x] = v
            for x, v in lvl.items():
                arrays[f"p{k}_{x}"] = v
            prev = lvl
        meta = {"format": FORMAT, "base": int(base), "levels": list(levels), "maxdur": [int(x) for x in maxdur],
                "events": n, **(extra or {})}
        if out_dir is not None:
            for name in ("off", "boff") + tuple(f"p{k}_off" for k in range(len(levels))):
                np.save(out_dir / f"{name}.npy", arrays[name])
            for v in arrays.values():
                if isinstance(v, np.memmap):
                    v.flush()
            (out_dir / "meta.json").write_text(json.dumps(meta))
        return cls(arrays, meta)

    @classmethod
    def load(cls, d: Path) -> "EventIndex | None":
        """The index cached in ``d`` (memory-mapped), or None when absent or of another format."""
        try:
            meta = json.loads((d / "meta.json").read_text())
            if meta.get("format") != FORMAT:
                return None
            names = ["s", "d", "id", "bmax", "off", "boff"]
            for k in range(len(meta["levels"])):
                names += [f"p{k}_{x}" for x in ("s", "e", "c", "d", "id", "off")]
            # plain ndarray views of the maps: slicing a np.memmap costs a Python-level hook per slice
            arrays = {n: np.load(d / f"{n}.npy", mmap_mode="r").view(np.ndarray) for n in names}
        except (OSError, ValueError, KeyError):
            return None
        return cls(arrays, meta)

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
            tmp = Path(tempfile.mkdtemp(prefix=cache.name + ".", suffix=".tmp", dir=cache.parent))
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
