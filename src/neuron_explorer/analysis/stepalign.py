"""Step numbers that agree across ranks when counting boundaries does not.

``analysis.steps`` numbers a process's steps by counting its boundaries from the first one the
capture holds, unless ``ProfilerStep#N`` regions or a ``neuron_explorer.step#B`` mark give the
numbers.  Counting agrees across the ranks of a job only when every capture holds the job's steps
from the same one.  It does not when a rank's ring overwrote its oldest events (a rank that
records more events per step loses more of them under ``NEURON_RT_INSPECT_MAX_EVENTS``), or when
one capture began later: that rank counts from a later step, and every per-step comparison across
ranks (stragglers, the per-step table, ``diff``) pairs different steps.

The collectives say which step is which: the k-th collective of a group and op is the same call
on every rank (its ``seq``), so the steps that hold it must carry one number.  Each process keeps
a few *anchors*: the collectives whose sequence number is a multiple of a power of two chosen so
that about ``ANCHORS_PER_GROUP`` remain per (group, op), each as (key, number of the step it
starts in).  The multiples of the larger of two such strides are multiples of the smaller, so
processes that chose different strides still share anchors.  ``offsets`` shifts each counted
process by the offset most of its matched anchors agree on; the processes numbered by regions or
marks are never moved and are matched first.  With none of those, the aligned processes are
shifted together so that the smallest offset is 0: the rank whose capture holds the earliest step
keeps its count.  A process with too few matching anchors, or whose matches disagree, keeps its
numbers (docs/summary.md, "Steps").
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from neuron_explorer.analysis.events import collective_flow_ids

__all__ = ["ANCHORS_AT_MOST", "ANCHORS_PER_GROUP", "MIN_AGREEING", "aligned", "offsets", "pick_anchors",
           "process_anchors", "session_anchors"]

ANCHORS_PER_GROUP = 64  # about this many per (group, op) and process
ANCHORS_AT_MOST = 1024  # per process, whatever the number of groups
MIN_AGREEING = 2  # matched anchors that must agree on an offset (and at least two thirds of them)

_EMPTY = np.zeros(0, dtype=np.int64)


def pick_anchors(seq: np.ndarray, group: np.ndarray, op: np.ndarray, strings: list[str], start: np.ndarray,
                 step_number: np.ndarray, step_start: np.ndarray,
                 step_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, step numbers) of one process's anchors.  ``seq``, ``start``: the collectives'
    sequence numbers and starts; ``group``, ``op``: their group and op as ids into ``strings``
    (-1 or out of range: ""); ``step_*``: every step of the process (disjoint, in time order, on
    the collectives' clock).  A collective outside every step anchors nothing."""
    seq = np.asarray(seq, dtype=np.int64)
    if not len(seq) or not len(step_number) or int(seq.max()) < 0:
        return _EMPTY, _EMPTY
    stride = 1 << (int(seq.max()) // ANCHORS_PER_GROUP).bit_length()
    sel = np.flatnonzero((seq >= 0) & (seq % stride == 0))
    j = np.searchsorted(step_start, start[sel], side="right") - 1
    inside = (j >= 0) & (start[sel] < step_end[np.maximum(j, 0)])
    sel, j = sel[inside], j[inside]
    if not len(sel):
        return _EMPTY, _EMPTY
    order = np.argsort(seq[sel], kind="stable")[:ANCHORS_AT_MOST]
    sel, j = sel[order], j[order]
    n = len(strings)
    g = np.where((group[sel] >= 0) & (group[sel] < n), group[sel], n).astype(np.int64)
    o = np.where((op[sel] >= 0) & (op[sel] < n), op[sel], n).astype(np.int64)
    pairs, inv = np.unique(g * (n + 1) + o, return_inverse=True)
    keys = np.empty(len(sel), dtype=np.int64)
    for k, pair in enumerate(pairs.tolist()):  # (a few distinct groups and ops)
        m = inv.reshape(-1) == k
        gi, oi = divmod(pair, n + 1)
        keys[m] = collective_flow_ids(strings[gi] if gi < n else "", strings[oi] if oi < n else "", seq[sel][m])
    return keys, np.asarray(step_number, dtype=np.int64)[j]


def session_anchors(s: Any, typ: np.ndarray, start: np.ndarray, cc: int, strings: list[str], step_number: np.ndarray,
                    step_start: np.ndarray, step_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pick_anchors`` from the ``cc_running`` events (type id ``cc``, -1: none) of a loaded
    ``analysis.reader.Session`` (``typ``, ``start``: its type and start columns, ``strings``
    its string table) and its seq, group and op arguments."""
    cols = [s.arg("cc_running", a) for a in ("seq", "group_str", "op_str")]
    if cc < 0 or any(c is None for c in cols):
        return _EMPTY, _EMPTY
    idx = np.flatnonzero(typ == cc)
    seq, g, o = (s.events[c][idx].astype(np.int64, copy=False) for c in cols)
    return pick_anchors(seq, g, o, strings, start[idx].astype(np.int64, copy=False), step_number, step_start, step_end)


Spans = dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]


def process_anchors(collectives: Iterable[tuple[str, str, np.ndarray, np.ndarray, np.ndarray]],
                    spans: Spans) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``pick_anchors`` for each process of a profile read as items (``diff``): ``collectives``
    gives (group, op, seq, start, proc) arrays per group and op, ``spans`` each process's steps
    (numbers, starts, ends) on the same clock."""
    strings: list[str] = []
    seq, start, proc, g, o = [], [], [], [], []
    for group, op, q, s, p in collectives:
        strings += [group, op]
        seq.append(np.asarray(q, dtype=np.int64))
        start.append(np.asarray(s, dtype=np.int64))
        proc.append(np.asarray(p, dtype=np.int64))
        g.append(len(strings) - 2)
        o.append(len(strings) - 1)
    if not any(len(q) for q in seq):
        return {}
    out = {}
    if all(len(p) < 2 or bool((p[1:] >= p[:-1]).all()) for p in proc):
        # each group and op's rows by process already (read one process after another): a process's rows
        # are a slice of each, taken in turn, which is what the stable sort below gathers, without
        # gathering every row of the profile
        procs = np.unique(np.concatenate([p[np.r_[True, p[1:] != p[:-1]]] for p in proc if len(p)]))
        for pr in procs.tolist():
            span = spans.get(pr)
            if span is None:
                continue
            at = [(int(np.searchsorted(p, pr, "left")), int(np.searchsorted(p, pr, "right"))) for p in proc]
            n = [hi - lo for lo, hi in at]
            out[pr] = pick_anchors(np.concatenate([q[lo:hi] for q, (lo, hi) in zip(seq, at)]),
                                   np.repeat(np.asarray(g, dtype=np.int64), n),
                                   np.repeat(np.asarray(o, dtype=np.int64), n), strings,
                                   np.concatenate([s[lo:hi] for s, (lo, hi) in zip(start, at)]), *span)
        return out
    cols = [np.concatenate(c) for c in (seq, start, proc)]
    cols += [np.repeat(np.asarray(x, dtype=np.int64), [len(q) for q in seq]) for x in (g, o)]
    order = np.argsort(cols[2], kind="stable")
    q_, s_, p_, g_, o_ = (c[order] for c in cols)
    cut = np.flatnonzero(np.diff(p_)) + 1
    for lo, hi in zip(np.concatenate(([0], cut)).tolist(), np.concatenate((cut, [len(p_)])).tolist()):
        span = spans.get(int(p_[lo]))
        if span is not None:
            out[int(p_[lo])] = pick_anchors(q_[lo:hi], g_[lo:hi], o_[lo:hi], strings, s_[lo:hi], *span)
    return out


def offsets(numbered: list[str], anchors: list[tuple[np.ndarray, np.ndarray] | None]) -> list[int]:
    """The shift of each process's step numbers (``numbered[i]``: ``"count"``, ``"mark"`` or
    ``"region"``; ``anchors[i]``: its ``pick_anchors`` or None), by the rule of the module."""
    n = len(numbered)
    out = [0] * n
    fixed = [i for i in range(n) if numbered[i] != "count"]
    order = fixed + [i for i in range(n) if numbered[i] == "count"]
    known_k, known_n = _EMPTY, _EMPTY  # sorted keys and their numbers
    aligned_counted: list[int] = []
    for i in order:
        a = anchors[i]
        if a is None or not len(a[0]):
            continue
        keys, nums = a
        if numbered[i] == "count":
            pos = np.minimum(np.searchsorted(known_k, keys), max(len(known_k) - 1, 0))
            hit = known_k[pos] == keys if len(known_k) else np.zeros(len(keys), dtype=bool)
            if hit.any():
                d = known_n[pos[hit]] - nums[hit]
                vals, cnt = np.unique(d, return_counts=True)
                best = int(np.argmax(cnt))
                if cnt[best] < MIN_AGREEING or 3 * int(cnt[best]) < 2 * len(d):
                    continue  # too few, or they disagree: keep the count
                out[i] = int(vals[best])
                aligned_counted.append(i)
            elif not aligned_counted:
                aligned_counted.append(i)  # the first counted process: the others are matched against it
            # (a process sharing no collective with those before keeps its count and is matched
            # against by those after; it is not moved with the ones tied to the first)
        new = np.isin(keys, known_k, assume_unique=False, invert=True)
        known_k = np.concatenate([known_k, keys[new]])
        known_n = np.concatenate([known_n, nums[new] + out[i]])
        o = np.argsort(known_k, kind="stable")
        known_k, known_n = known_k[o], known_n[o]
    if not fixed and aligned_counted:
        low = min(out[i] for i in aligned_counted)
        for i in aligned_counted:
            out[i] -= low
    return out


def aligned(per_process: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``per_process`` (``analysis.steps.Steps.to_columns`` plus identity, in the order the
    caller keeps) with the step numbers of the processes ``offsets`` moves shifted: copies of
    those, the others as given."""
    rank = sorted(range(len(per_process)), key=lambda i: (per_process[i].get("rank", -1),
                                                          str(per_process[i].get("instance_id", "")),
                                                          per_process[i].get("pid", 0)))
    ps = [per_process[i] for i in rank]  # (the lowest rank is the reference when all are counted)
    numbered = [str(p.get("numbered", "count")) for p in ps]
    anchors = [(np.asarray(p["anchor_key"], dtype=np.int64), np.asarray(p["anchor_number"], dtype=np.int64))
               if "anchor_key" in p else None for p in ps]
    shift = dict(zip(rank, offsets(numbered, anchors)))
    out = []
    for i, p in enumerate(per_process):
        d = shift[i]
        if d:
            p = dict(p)
            for k in ("number", "every_number", "anchor_number"):
                if k in p:
                    p[k] = np.asarray(p[k], dtype=np.int64) + d
            p["renumbered_by"] = d
        out.append(p)
    return out
