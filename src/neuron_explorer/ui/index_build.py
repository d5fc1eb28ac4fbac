"""Building the window index (see :mod:`neuron_explorer.ui.index` for its layout and its queries).

Why a module of its own: building is one pass over every event of a profile when it is first opened
(sorting, block maxima, the flow table and the pyramid levels, written as ``.npy`` files), while the
queries only read the finished arrays. The layout constants live here, with the code that writes them;
the reader imports them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

FORMAT = 4  # bump when the layout changes: old cache directories are then ignored (2: flows, 3: leaf groups,
# 4: every flow of an event, not only its first)
BLOCK = 128
PYRAMID_FACTOR = 4
PYRAMID_TOP_BUCKETS = 512  # the coarsest level spans the profile in about this many buckets
U32_MAX = (1 << 32) - 1
LEVEL_FIELDS = (("s", np.int64), ("e", np.int64), ("c", np.int32), ("d", np.int64), ("id", np.int64))

Alloc = Callable[[str, int, Any], np.ndarray]


def pyramid_levels(duration: int, n_leaves: int, n_events: int) -> list[int]:
    """Bucket widths W_0 * 4^k; W_0 (a power of two, >= 1 us) gives ~4 events per bucket per leaf."""
    w0 = max(1000, int(4 * duration * max(n_leaves, 1) / max(n_events, 1)))
    w0 = 1 << max(10, math.ceil(math.log2(w0)))
    levels = [w0]
    while duration / levels[-1] > PYRAMID_TOP_BUCKETS:
        levels.append(levels[-1] * PYRAMID_FACTOR)
    return levels


def build_arrays(counts: list[int], maxdur: list[int], base: int, levels: list[int],
                 chunks: Iterable[tuple[np.ndarray, ...]], out_dir: Path | None,
                 extra: dict[str, Any] | Callable[[list[int]], dict[str, Any]] | None = None,
                 on_level: Callable[[int], None] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The index's arrays and metadata from ``chunks`` of (leaf, start_abs, duration, id[, flow id[,
    extra rows, extra flow ids]]), each sorted by (leaf, start).

    ``counts[i]`` is the number of events of leaf ``i``. A leaf spread over several chunks is
    re-sorted at the end. A chunk without flow ids (4 arrays) means none of its events has one (0).
    ``maxdur[i]`` may be an upper bound of leaf ``i``'s longest duration (its maximum picks the type
    of the duration array); the metadata keeps the exact values, which a callable ``extra`` receives.
    An event in several flows (a host call is in its framework region's flow and in its execution's)
    has its first id in ``flow id`` and each further one as a pair (its row in the chunk, the id).
    With ``out_dir`` the arrays are written there as .npy files. ``extra`` is stored with the
    metadata (the profile keeps its leaf table there).
    """
    nl = len(counts)
    off = np.zeros(nl + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=off[1:])
    n = int(off[-1])
    alloc = _allocator(out_dir)
    s = alloc("s", n, np.int64)
    d = alloc("d", n, np.uint32 if max(maxdur, default=0) <= U32_MAX else np.int64)
    ids = alloc("id", n, np.int64)
    # the flow ids themselves are only needed until the flow table is made: a scratch array
    fl = alloc("flow_ids.tmp", n, np.int64)
    xpos, xflow = _fill_events(chunks, off, base, s, d, ids, fl)
    maxdur = _leaf_maxdur(off, d)
    bmax, boff = _block_maxima(counts, off, s, d, alloc)
    arrays: dict[str, np.ndarray] = {"s": s, "d": d, "id": ids, "bmax": bmax, "off": off, "boff": boff}
    fx_id, fx_off, fx_pos, flow_leaves = _flow_table(fl, off, xpos, xflow)
    del fl  # before the flow numbers are allocated: at 100M events the scratch ids are 800 MB
    if out_dir is not None:
        (out_dir / "flow_ids.tmp.npy").unlink()
    fn = alloc("fn", n, np.int32 if len(fx_id) < (1 << 31) else np.int64)
    fn[:] = -1
    arrays.update(fx_id=fx_id, fx_off=fx_off, fx_pos=fx_pos)
    arrays.update(fn=fn, **_event_flows(fn, fx_off, fx_pos, multi=len(xpos) > 0))
    # pyramid: level 0 from the events, level k from level k-1 (widths are powers of two, so
    # floor(s / w_k) of a bucket's first start is the bucket it falls in at level k)
    prev: dict[str, np.ndarray] | None = None
    for k, w in enumerate(levels):
        if on_level is not None:
            on_level(k)  # progress: the levels are the build's last phase
        prev = _pyramid_level(k, w, prev, off, s, d, ids, alloc)
        for x, v in prev.items():
            arrays[f"p{k}_{x}"] = v
    more = extra(maxdur) if callable(extra) else (extra or {})
    meta = {"format": FORMAT, "base": int(base), "levels": list(levels), "maxdur": maxdur,
            "events": n, "flow_leaves": flow_leaves, **more}
    if out_dir is not None:
        _save(out_dir, arrays, meta, len(levels))
    return arrays, meta


def _allocator(out_dir: Path | None) -> Alloc:
    """Zeroed arrays in memory, or (with a cache directory) ``.npy`` files mapped for writing."""
    def alloc(name: str, shape: int, dtype: Any) -> np.ndarray:
        if out_dir is None:
            return np.zeros(shape, dtype=dtype)
        return np.lib.format.open_memmap(out_dir / f"{name}.npy", mode="w+", dtype=dtype, shape=(shape,))
    return alloc


def _fill_events(chunks: Iterable[tuple[np.ndarray, ...]], off: np.ndarray, base: int, s: np.ndarray,
                 d: np.ndarray, ids: np.ndarray, fl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Copy each chunk's runs of one leaf to that leaf's next free positions; then sort the slices of
    leaves that came in several chunks (each chunk is sorted, their concatenation need not be).

    Returns the events' further flow ids as (position, flow id) pairs."""
    nl = len(off) - 1
    fill = off[:-1].copy()
    seen = np.zeros(nl, dtype=np.int32)
    xpos: list[np.ndarray] = []
    xflow: list[np.ndarray] = []
    for chunk in chunks:
        leaf, start, dur, eid = chunk[:4]
        flow = chunk[4] if len(chunk) > 4 else None
        xrow = chunk[5] if len(chunk) > 6 and len(chunk[5]) else None
        if not len(leaf):
            continue
        cut = np.flatnonzero(leaf[1:] != leaf[:-1]) + 1
        rowpos = np.empty(len(leaf), dtype=np.int64) if xrow is not None else None
        for a, b in zip(np.concatenate(([0], cut)), np.concatenate((cut, [len(leaf)]))):
            lf = int(leaf[a])
            p = int(fill[lf])
            q = p + int(b - a)
            if q > off[lf + 1]:
                raise ValueError(f"leaf {lf}: more events than counted")
            s[p:q] = start[a:b] - base
            d[p:q] = dur[a:b]
            ids[p:q] = eid[a:b]
            fl[p:q] = 0 if flow is None else flow[a:b]
            if rowpos is not None:
                rowpos[a:b] = np.arange(p, q)
            fill[lf] = q
            seen[lf] += 1
        if rowpos is not None:
            xpos.append(rowpos[np.asarray(xrow, dtype=np.int64)])
            xflow.append(np.asarray(chunk[6], dtype=np.int64))
    if not np.array_equal(fill, off[1:]):
        raise ValueError("the events read do not match the leaf counts")
    xp = np.concatenate(xpos) if xpos else np.zeros(0, dtype=np.int64)
    for lf in np.flatnonzero(seen > 1).tolist():  # a leaf spread over several parts: sort its slice
        a, b = int(off[lf]), int(off[lf + 1])
        o = np.argsort(s[a:b], kind="stable")
        s[a:b], d[a:b], ids[a:b], fl[a:b] = s[a:b][o], d[a:b][o], ids[a:b][o], fl[a:b][o]
        moved = (xp >= a) & (xp < b)
        if bool(moved.any()):  # the further flow ids follow their events
            inv = np.empty(b - a, dtype=np.int64)
            inv[o] = np.arange(b - a)
            xp[moved] = a + inv[xp[moved] - a]
    return xp, (np.concatenate(xflow) if xflow else np.zeros(0, dtype=np.int64))


def _leaf_maxdur(off: np.ndarray, d: np.ndarray) -> list[int]:
    """Each leaf's longest duration (0 for a leaf without events)."""
    cnt = np.diff(off)
    out = np.zeros(len(cnt), dtype=np.int64)
    some = np.flatnonzero(cnt > 0)
    if len(some):
        out[some] = np.maximum.reduceat(np.asarray(d), off[:-1][some])
    return [int(x) for x in out]


def _block_maxima(counts: list[int], off: np.ndarray, s: np.ndarray, d: np.ndarray,
                  alloc: Alloc) -> tuple[np.ndarray, np.ndarray]:
    """(bmax, boff): per block of ``BLOCK`` events of a leaf, the running maximum of ends."""
    nl = len(counts)
    nblocks = [(int(c) + BLOCK - 1) // BLOCK for c in counts]
    boff = np.zeros(nl + 1, dtype=np.int64)
    np.cumsum(np.asarray(nblocks, dtype=np.int64), out=boff[1:])
    bmax = alloc("bmax", int(boff[-1]), np.int64)
    for lf in range(nl):
        a, b = int(off[lf]), int(off[lf + 1])
        if b > a:
            e = s[a:b] + d[a:b].astype(np.int64)
            bmax[boff[lf]:boff[lf + 1]] = np.maximum.accumulate(np.maximum.reduceat(e, np.arange(0, b - a, BLOCK)))
    return bmax, boff


def _flow_table(fl: np.ndarray, off: np.ndarray, xpos: np.ndarray,
                xflow: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """(flow ids, offsets, positions, leaves holding them) of the flows with >= 2 events, by flow id.

    ``fl`` holds each event's first flow id (0: none), (``xpos``, ``xflow``) its further ones.
    Positions (and offsets) are int32 while they fit.
    """
    n = len(fl)
    pdt = np.int32 if n < (1 << 31) else np.int64
    pos = np.flatnonzero(np.asarray(fl)).astype(pdt)
    f = np.asarray(fl[pos])
    if len(xpos):  # every (event, flow) pair once, ordered by flow then position
        keep = xflow != 0
        pos = np.concatenate((pos, xpos[keep].astype(pdt)))
        f = np.concatenate((f, xflow[keep]))
        pairs = np.unique(np.stack((f, pos.astype(np.int64))), axis=1)
        f, pos = pairs[0], pairs[1].astype(pdt)
        del pairs
    if not len(pos):
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=pdt), np.zeros(0, dtype=pdt), []
    if not len(xpos):
        o = np.argsort(f, kind="stable")
        f = f[o]
        pos = pos[o]
        del o
    st = np.concatenate(([0], np.flatnonzero(f[1:] != f[:-1]) + 1))
    cnt = np.diff(np.append(st, len(f)))
    multi = cnt >= 2
    fx_id = f[st[multi]].astype(np.int64)
    del f
    fx_pos = pos[np.repeat(multi, cnt)]
    del pos
    fx_off = np.zeros(len(fx_id) + 1, dtype=pdt)
    np.cumsum(cnt[multi], out=fx_off[1:])
    has = np.zeros(len(off) - 1, dtype=bool)
    if len(fx_pos):
        has[np.searchsorted(off, fx_pos, "right") - 1] = True
    return fx_id, fx_off, fx_pos, [int(x) for x in np.flatnonzero(has)]


def _event_flows(fn: np.ndarray, fx_off: np.ndarray, fx_pos: np.ndarray, multi: bool) -> dict[str, np.ndarray]:
    """Fill ``fn`` (each event's smallest flow number, -1: none) and return the events' further flows,
    ``xp`` (their positions, ascending), ``xo`` (offsets) and ``xf`` (flow numbers): event ``xp[i]`` is
    also in flows ``xf[xo[i]:xo[i+1]]``. Empty when no event is in two flows (a rare overflow kept apart
    so that one flow per event stays 4 bytes per event)."""
    num = np.repeat(np.arange(len(fx_off) - 1, dtype=fn.dtype), np.diff(fx_off))
    if not multi:
        fn[fx_pos] = num
        return {"xp": np.zeros(0, dtype=fx_pos.dtype), "xo": np.zeros(1, dtype=np.int64),
                "xf": np.zeros(0, dtype=fn.dtype)}
    o = np.lexsort((num, fx_pos))
    pos, num = np.asarray(fx_pos)[o], num[o]
    first = np.ones(len(pos), dtype=bool)
    first[1:] = pos[1:] != pos[:-1]
    fn[pos[first]] = num[first]
    rest_pos, rest_num = pos[~first], num[~first]
    xp, cnt = np.unique(rest_pos, return_counts=True)
    xo = np.zeros(len(xp) + 1, dtype=np.int64)
    np.cumsum(cnt, out=xo[1:])
    return {"xp": xp.astype(fx_pos.dtype), "xo": xo, "xf": rest_num}


def _pyramid_level(k: int, w: int, src: dict[str, np.ndarray] | None, off: np.ndarray, s: np.ndarray,
                   d: np.ndarray, ids: np.ndarray, alloc: Alloc) -> dict[str, np.ndarray]:
    """Level ``k`` (bucket width ``w``): from the events when ``src`` is None, else from level k-1."""
    nl = len(off) - 1
    parts: dict[str, list[np.ndarray]] = {x: [] for x, _ in LEVEL_FIELDS}
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
    for x, dt in LEVEL_FIELDS:
        v = alloc(f"p{k}_{x}", int(poff[-1]), dt)
        pos = 0
        pending = parts[x][::-1]
        parts[x].clear()
        while pending:  # copy leaf by leaf, freeing as we go: no second full-size copy
            part = pending.pop()
            v[pos:pos + len(part)] = part
            pos += len(part)
        lvl[x] = v
    return lvl


def _save(out_dir: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any], n_levels: int) -> None:
    """Write the arrays not allocated as files, flush the mapped ones, and the metadata last."""
    names = ("off", "boff", "fx_id", "fx_off", "fx_pos", "xp", "xo", "xf") + tuple(f"p{k}_off" for k in range(n_levels))
    for name in names:
        np.save(out_dir / f"{name}.npy", arrays[name])
    for v in arrays.values():
        if isinstance(v, np.memmap):
            v.flush()
    (out_dir / "meta.json").write_text(json.dumps(meta))


def column_np(col: Any, dtype: Any) -> np.ndarray:
    """A non-null Arrow column as a numpy array."""
    return np.asarray(col.to_numpy(), dtype=dtype)


def split_flows(col: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first id per row, 0 when none; rows with further ids; those ids) of an Arrow list column of flow
    ids, without a Python object per row (null lists and null or 0 ids count as none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(arr)
    first = np.zeros(n, dtype=np.int64)
    if n == 0:
        return first, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lens = np.asarray(pc.fill_null(pc.list_value_length(arr), 0).to_numpy(), dtype=np.int64)
    starts = np.asarray(arr.offsets.to_numpy()[:-1], dtype=np.int64)
    vals = np.asarray(pc.fill_null(arr.values, 0).to_numpy(), dtype=np.int64)
    has = lens > 0
    first[has] = vals[starts[has]]
    many = np.flatnonzero(lens > 1)
    if not len(many):
        return first, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    extra = lens[many] - 1
    xrow = np.repeat(many, extra)
    ramp = np.arange(int(extra.sum()), dtype=np.int64) - np.repeat(np.cumsum(extra) - extra, extra)
    xflow = vals[starts[xrow] + 1 + ramp]
    keep = xflow != 0
    return first, xrow[keep], xflow[keep]
