"""Clock alignment.

Within a process, monotonic timestamps become wall-clock time through the process's anchors
(pairs of monotonic and wall readings; the median offset is used).  Processes on one instance
share the monotonic clock, but their wall clocks can still disagree with other instances' by
milliseconds or more.  A collective (same group, same sequence number, same op) completes at
nearly the same instant on every rank, so for each instance the differences between its
collective end times and a reference instance's are a sample of the clock offset between them:
we take the median after rejecting outliers (beyond 3 scaled MADs), and report the spread as the
uncertainty.  Instances that share no collective with the reference are aligned through any
instance already aligned; those that share none at all are left unshifted and say so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .reader import Session, wall_offset_ns

MIN_SAMPLES = 1


@dataclass
class InstanceOffset:
    instance_id: str
    offset_ns: int  # added to this instance's wall-clock times
    uncertainty_ns: int
    samples: int
    reference: str
    method: str  # "reference", "collectives", "none"


def collective_times(s: Session) -> dict[tuple[str, int, str], tuple[int, int]]:
    """{(group, seq, op): (start, end) wall-clock ns} for the collectives of one session."""
    out: dict[tuple[str, int, str], tuple[int, int]] = {}
    if not s.num_events:
        return out
    off = wall_offset_ns(s)
    e = s.events
    for tname in ("cc_running", "cc_exec_barrier"):
        tid = s.type_id(tname)
        if tid is None:
            continue
        m = e["type"] == tid
        if not m.any():
            continue
        seq = e[s.arg(tname, "seq")][m]
        grp = e[s.arg(tname, "group_str")][m]
        op = e[s.arg(tname, "op_str")][m]
        start = e["start_ns"][m] + off
        end = e["end_ns"][m] + off
        strings = s.strings
        for g, q, o, t0, t1 in zip(grp.tolist(), seq.tolist(), op.tolist(), start.tolist(), end.tolist()):
            out[(strings[g], q, strings[o])] = (t0, t1)
    return out


def _robust(diffs: np.ndarray) -> tuple[int, int, int]:
    med = float(np.median(diffs))
    mad = float(np.median(np.abs(diffs - med))) * 1.4826
    keep = diffs if mad == 0 else diffs[np.abs(diffs - med) <= 3 * mad]
    med = float(np.median(keep))
    spread = float(np.median(np.abs(keep - med))) * 1.4826 if len(keep) > 1 else 0.0
    return int(round(med)), int(round(spread)), len(keep)


def estimate_offsets(times_by_instance: dict[str, list[dict[tuple[str, int, str], tuple[int, int]]]]
                     ) -> dict[str, InstanceOffset]:
    """Per-instance offsets from collective end times (one dict per process of each instance).

    Ranks of one instance that took part in the same collective are averaged first."""
    merged: dict[str, dict[tuple[str, int, str], float]] = {}
    for inst, dicts in times_by_instance.items():
        acc: dict[tuple[str, int, str], list[int]] = {}
        for d in dicts:
            for k, (_t0, t1) in d.items():
                acc.setdefault(k, []).append(t1)
        merged[inst] = {k: float(np.median(v)) for k, v in acc.items()}
    instances = sorted(merged)
    if not instances:
        return {}
    ref = instances[0]
    result = {ref: InstanceOffset(ref, 0, 0, 0, ref, "reference")}
    pending = instances[1:]
    progress = True
    while pending and progress:
        progress = False
        for inst in list(pending):
            best = None
            for anchor, a_off in result.items():
                if a_off.method == "none":
                    continue
                common = merged[inst].keys() & merged[anchor].keys()
                if len(common) < MIN_SAMPLES:
                    continue
                diffs = np.array([merged[anchor][k] - merged[inst][k] for k in common], dtype=np.float64)
                off, unc, n = _robust(diffs)
                cand = InstanceOffset(inst, off + a_off.offset_ns, unc + a_off.uncertainty_ns, n, anchor,
                                      "collectives")
                if best is None or cand.samples > best.samples:
                    best = cand
            if best is not None:
                result[inst] = best
                pending.remove(inst)
                progress = True
    for inst in pending:
        result[inst] = InstanceOffset(inst, 0, 0, 0, ref, "none")
    return result


def stragglers(entries: list[tuple[int, str, dict[tuple[str, int, str], tuple[int, int]]]],
               offsets: dict[str, InstanceOffset]) -> dict:
    """Which rank entered each collective last (the others waited for it), and the spread.

    ``entries`` holds (rank, instance, collective times) per process."""
    by_key: dict[tuple[str, int, str], list[tuple[int, int]]] = {}
    for rank, inst, times in entries:
        if rank < 0:
            continue
        off = offsets[inst].offset_ns if inst in offsets else 0
        for k, (t0, _t1) in times.items():
            by_key.setdefault(k, []).append((t0 + off, rank))
    last_counts: dict[int, int] = {}
    spreads = []
    worst = None
    for k, lst in by_key.items():
        if len(lst) < 2:
            continue
        lst.sort()
        spread = lst[-1][0] - lst[0][0]
        last = lst[-1][1]
        last_counts[last] = last_counts.get(last, 0) + 1
        spreads.append(spread)
        if worst is None or spread > worst["spread_ns"]:
            worst = {"group": k[0], "seq": k[1], "op": k[2], "last_rank": last, "spread_ns": int(spread)}
    return {
        "collectives_compared": len(spreads),
        "last_to_enter": {str(r): c for r, c in sorted(last_counts.items())},
        "slowest_rank": max(last_counts, key=lambda r: (last_counts[r], -r)) if last_counts else None,
        "spread_ns_median": float(np.median(spreads)) if spreads else None,
        "spread_ns_max": int(max(spreads)) if spreads else None,
        "worst": worst,
    }
