"""How busy tracks are over time: summary tracks of collapsed groups, the activity histogram behind
"zoom to activity", and which rows have any event in view.

Why summary tracks show utilization: zoomed out, every rank's row is a solid band of merged buckets
and all 64 look alike, so an idle gap or a straggler cannot be seen. A collapsed group (an instance,
a process, a CPU / Device group) instead draws, per pixel, the share of the pixel's time its busiest
track is running (``busy``) and, apart, the share spent in collectives (``cc``): a rank that computes
longer while the others wait for it in collectives is darker on the first and lighter on the second.

Per track (leaf) the share is exact when the groups asked for hold few events in the window (the
union of their intervals, as ``util.intervals``), and from the finest pyramid level no wider than a
pixel otherwise (each bucket's total duration spread over its extent); one answer uses one estimate
for every group, so ranks are compared like for like. A group takes the largest share among its
tracks, so a host call and the core execution it waits for are not counted twice; the two estimates
agree to within a bucket's width at the switch. Every leaf of every group is covered in one
vectorized pass (``coverage``): 40 collapsed ranks at whole-profile zoom of a 100M-event profile
answer in ~80 ms.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

from neuron_explorer.ui.params import BadRequest, parse_rows, window_args
from neuron_explorer.ui.profile import Profile
from neuron_explorer.ui.queries import pick_rows, source_level
from neuron_explorer.ui.wire import Packed
from neuron_explorer.util.intervals import merge

MAX_GROUPS = 4096
ACTIVITY_BINS = 1024


def parse_groups(s: str | None) -> list[list[int]]:
    """Groups as row lists separated by ``;`` (``0-5;6-11``): a collapsed node's rows are contiguous."""
    groups = [parse_rows(g) for g in (s or "").split(";") if g.strip()]
    if len(groups) > MAX_GROUPS:
        raise BadRequest(f"at most {MAX_GROUPS} groups")
    return groups


def coverage(s: np.ndarray, e: np.ndarray, rho: np.ndarray, key: np.ndarray, n: int, t0: float, t1: float,
             px: int) -> np.ndarray:
    """Share of each pixel's time covered, per key: an (n, px) array from intervals (s, e) of weight
    ``rho`` (1 for exact intervals; a bucket's duration / extent for pyramid buckets) keyed 0..n-1.

    One pass over every interval of every key (no per-key loop): a partly covered first and last
    pixel each, and a difference array for the pixels in between. Times stay local to the window, so
    the sums keep their precision at any zoom."""
    out = np.zeros((n, px + 2))
    if not len(s):
        return out[:, :px]
    npp = (t1 - t0) / px
    a = (np.clip(s.astype(np.float64), t0, t1) - t0) / npp  # in pixels
    b = (np.clip(e.astype(np.float64), t0, t1) - t0) / npp
    keep = b > a
    a, b, rho, key = a[keep], b[keep], rho[keep].astype(np.float64), key[keep].astype(np.int64)
    p0 = np.minimum(np.floor(a).astype(np.int64), px - 1)
    p1 = np.minimum(np.floor(b).astype(np.int64), px - 1)
    w = px + 2
    size = n * w
    same = p0 == p1
    m = ~same
    k, q0, q1, ra = key[m], p0[m], p1[m], rho[m]
    # partly covered pixels: a whole interval inside one pixel; the first and last pixel of the others
    idx = np.concatenate([key[same] * w + p0[same], k * w + q0, k * w + q1])
    val = np.concatenate([rho[same] * (b[same] - a[same]), ra * (q0 + 1 - a[m]), ra * (b[m] - q1)])
    out += np.bincount(idx, val, minlength=size).reshape(n, w)
    # whole pixels q0+1 .. q1-1: a difference array
    diff = np.bincount(np.concatenate([k * w + q0 + 1, k * w + q1]), np.concatenate([ra, -ra]),
                       minlength=size).reshape(n, w)
    out += np.cumsum(diff, axis=1)
    return np.clip(out[:, :px], 0.0, 1.0)


def leaves_coverage(p: Profile, leaves: list[int], t0: float, t1: float, px: int) -> tuple[np.ndarray, Any]:
    """Share of each pixel's time (relative [t0, t1), ``px`` pixels) each of ``leaves`` is busy, and the
    level it came from: exact (the union of its events' intervals) when few events are in view, else
    from a pyramid level or, while the index builds, the coarse level (each bucket's total duration
    spread over its extent). The level is chosen as for windows (``queries.source_level``)."""
    n = len(leaves)
    src, level = source_level(p, leaves, t0, t1, (t1 - t0) / px)
    if src is None or not n:
        return np.zeros((n, px)), level
    sh = src.base - p.origin
    t0i, t1i = t0 - sh, t1 - sh
    if level is None:
        idx = p.index
        assert idx is not None  # (no level: the events themselves, from the index; source_level)
        ss, es, ks = [], [], []
        for k, (_lf, a, b) in enumerate(idx.raw_slices(leaves, t0i, t1i)):
            st = idx.s[a:b].astype(np.int64)
            rs, re_ = merge(st, st + idx.d[a:b].astype(np.int64))
            ss.append(rs)
            es.append(re_)
            ks.append(np.full(len(rs), k, dtype=np.int64))
        if not ss:
            return np.zeros((n, px)), level
        s, e, key = np.concatenate(ss), np.concatenate(es), np.concatenate(ks)
        return coverage(s, e, np.ones(len(s)), key, n, t0i, t1i, px), level
    g = src.gather_level(level, leaves, list(range(n)), t0i, t1i)
    s, e = g["s"], g["e"]
    rho = g["d"] / np.maximum(e - s, 1)
    return coverage(s, e, rho, g["row"], n, t0i, t1i, px), level if src is p.index else "coarse"


def _bytes(v: np.ndarray) -> np.ndarray:
    """Shares 0..1 as bytes 0..255: 1.3 kB per group at 1300 px."""
    return np.round(v * 255).astype(np.uint8)


def _b64(v: np.ndarray) -> str:
    return base64.b64encode(v.tobytes()).decode()


def is_collective(name: str) -> bool:
    return name.startswith("cc_")


# What a track's time counts as (decision 0123). Only the core's executions are compute; collectives
# are counted where no execution overlaps them (exposed); host calls (runtime) and framework regions
# (``record_function``, module and optimizer calls) are shown apart and never counted as busy: a
# region spans the whole step, so counting it made every rank "100% busy".
COMPUTE, COLLECTIVE, HOST, REGION, MARKER = "compute", "collective", "host", "region", "marker"
ROLES = (COMPUTE, COLLECTIVE, HOST, REGION, MARKER)
EXECUTIONS = ("nc_exec_running", "device_exec")  # a core running a graph


def leaf_role(lf: Any) -> str:
    """The role of a leaf (``rows.Leaf``): compute (the core's executions), collective, marker (the
    core's other events: model switches, sync points, notifications), region (source ``framework``)
    or host (every other host-side call)."""
    if is_collective(lf.name):
        return COLLECTIVE
    if lf.on_device:
        return COMPUTE if lf.name in EXECUTIONS else MARKER
    return REGION if lf.src == "framework" else HOST


def shares(p: Profile, mode: str, layout: str, groups: list[list[int]], t0: float, t1: float,
           px: int) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """Per group (a list of rows), per pixel: the ``busy`` share (largest share of any compute track:
    the busiest core's executions) and the ``cc`` share (the collective share not overlapped by that
    compute, exposed), as two (groups, px) arrays of bytes 0..255, and the answer's other fields: per
    group ``mean_busy``, ``mean_cc`` and ``mean_host`` (largest share of a host-call track, shown
    apart). A group with no compute track (a CPU group, a profile without device work) has ``basis``
    "host": its ``busy`` is then its host calls' share, framework regions never."""
    t0, t1, px = window_args(t0, t1, px)
    head: dict[str, Any] = {"t0": t0, "t1": t1, "px": px, "groups": [], "coarse": not p.index_ready}
    per_group = [[lf for _, r in pick_rows(p, mode, rows, layout) if r.kind == "events" for lf in r.leaves]
                 for rows in groups]
    every = sorted({lf for g in per_group for lf in g})
    cov, level = leaves_coverage(p, every, t0, t1, px)
    where = {lf: k for k, lf in enumerate(every)}
    busy_b = np.zeros((len(groups), px), dtype=np.uint8)
    cc_b = np.zeros((len(groups), px), dtype=np.uint8)
    for gi, leaves in enumerate(per_group):
        share = {r: np.zeros(px) for r in ROLES}
        for lf in leaves:
            tgt = share[leaf_role(p.leaves[lf])]
            np.maximum(tgt, cov[where[lf]], out=tgt)
        basis = COMPUTE if any(leaf_role(p.leaves[lf]) == COMPUTE for lf in leaves) else HOST
        work = share[basis]
        # exposed: the collective time no compute overlaps (per pixel, at most what compute leaves free)
        cc = np.minimum(share[COLLECTIVE], 1.0 - share[COMPUTE])
        busy_b[gi] = _bytes(work)
        cc_b[gi] = _bytes(cc)
        head["groups"].append({"mean_busy": round(float(work.mean()), 4), "mean_cc": round(float(cc.mean()), 4),
                               "mean_host": round(float(share[HOST].mean()), 4), "basis": basis,
                               "level": "raw" if level is None else level})
    if level == "coarse":
        p.first_paint.set()  # the index build may start (see Profile._build_in_background)
    return head, busy_b, cc_b


def busy(p: Profile, mode: str, layout: str, groups: list[list[int]], t0: float, t1: float,
         px: int) -> dict[str, Any]:
    """``shares`` as JSON: each group's ``busy`` and ``cc`` bytes as base64 strings (the answer's JSON
    form, for scripts and tests; the browser asks the packed form, ``busy_packed``)."""
    head, b, c = shares(p, mode, layout, groups, t0, t1, px)
    for g, bb, cc in zip(head["groups"], b, c):
        g["busy"], g["cc"] = _b64(bb), _b64(cc)
    return head


def busy_packed(p: Profile, mode: str, layout: str, groups: list[list[int]], t0: float, t1: float,
                px: int) -> Packed:
    """``shares`` as bytes (decision 0165): the same header, and ``busy`` and ``cc`` as two
    (groups, px) uint8 arrays, group i's pixels at ``i * px``."""
    head, b, c = shares(p, mode, layout, groups, t0, t1, px)
    return Packed(head, {"busy": b, "cc": c})


def _starts_hist(p: Profile, leaves: list[int], bounds: np.ndarray) -> np.ndarray:
    hist = np.zeros(len(bounds) - 1, dtype=np.int64)
    idx = p.index
    if idx is not None:
        bi = np.ceil(bounds - p.shift).astype(np.int64)
        for lf in leaves:
            a, b = int(idx.off[lf]), int(idx.off[lf + 1])
            hist += np.diff(np.searchsorted(idx.s[a:b], bi, "left"))
    return hist


def _trimmed(hist: np.ndarray, bounds: np.ndarray, dur: float) -> tuple[float, float]:
    """The range holding all but the first and last 0.5% of the starts counted in ``hist``, padded 2%."""
    total = int(hist.sum())
    if not total:
        return 0.0, float(dur)
    cum = np.cumsum(hist)
    lo = int(np.searchsorted(cum, total * 0.005, "left"))
    hi = int(np.searchsorted(cum, total * 0.995, "left"))
    t0, t1 = float(bounds[lo]), float(bounds[min(hi + 1, len(bounds) - 1)])
    pad = (t1 - t0) * 0.02
    return max(0.0, t0 - pad), min(float(dur), t1 + pad)


def activity(p: Profile) -> dict[str, Any]:
    """Event starts per bin over the profile, and the range holding all but the first and last 0.5% of
    them (``t0``, ``t1``, relative ns): "zoom to activity" for captures that are mostly start-up.

    ``work`` is where the viewer opens (decision 0124): the same rule over the starts of the core's
    executions and collectives only (``basis`` "device"), so the seconds of imports, compiles and clock
    sync points around a short job's steps are one click away instead of on the first screen; a
    profile without device work opens on the activity (``basis`` "events")."""
    got = getattr(p, "_activity", None)
    if got is not None:
        return got
    dur = max(p.duration, 1)
    bounds = np.linspace(0, dur, ACTIVITY_BINS + 1)
    hist = _starts_hist(p, list(range(len(p.leaves))), bounds)
    t0, t1 = _trimmed(hist, bounds, dur)
    work = [lf for lf in range(len(p.leaves)) if leaf_role(p.leaves[lf]) in (COMPUTE, COLLECTIVE)]
    basis = "events"
    w0, w1 = t0, t1
    if work:
        # finer bins for the work: a short job's steps may fill a few of the coarse bins
        wb = np.linspace(0, dur, ACTIVITY_BINS * 16 + 1)
        wh = _starts_hist(p, work, wb)
        if wh.sum():
            w0, w1 = _trimmed(wh, wb, dur)
            basis = "device"
    got = {"bins": hist.tolist(), "bin_ns": dur / ACTIVITY_BINS, "t0": t0, "t1": max(t1, t0 + 1),
           "events": int(hist.sum()), "work": {"t0": w0, "t1": max(w1, w0 + 1), "basis": basis}}
    p._activity = got  # type: ignore[attr-defined]
    return got


def rows_with_events(p: Profile, mode: str, layout: str, t0: float, t1: float) -> list[int]:
    """The event rows with at least one event overlapping [t0, t1) (the others can be hidden)."""
    t0, t1, _ = window_args(t0, t1, 1)
    idx = p.index
    if idx is None:
        return []
    t0i, t1i = t0 - p.shift, t1 - p.shift
    lo_t = math.ceil(t0i)
    out = []
    for i, r in enumerate(p.rows(mode, layout)):
        if r.kind != "events":
            continue
        if any(hi > lo for _, lo, hi in idx.count_starting(r.leaves, t0i, t1i)):
            out.append(i)
            continue
        # nothing starts inside: an event starting earlier may still cover the window
        for _lf, a, b in idx.raw_slices(r.leaves, t0i, t0i + 1):
            if bool((idx.s[a:b] + idx.d[a:b].astype(np.int64) >= lo_t).any()):
                out.append(i)
                break
    return out
