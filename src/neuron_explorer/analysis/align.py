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

from neuron_explorer.analysis.pbfile import ProfileError
from neuron_explorer.analysis.reader import CLOCK_OFFSET_LIMIT_NS, Session, check_times, wall_offset_ns
from neuron_explorer.contracts.stragglers import arrivals, summarize

MIN_SAMPLES = 1


@dataclass
class InstanceOffset:
    instance_id: str
    offset_ns: int  # added to this instance's wall-clock times
    uncertainty_ns: int
    samples: int
    reference: str
    method: str  # "reference", "collectives", "none"


class CollectiveIndex:
    """Collective timings as arrays keyed by one int64 per collective.

    A key packs (group, op) -- numbered in this index, so the same pair gets the same number for
    every process -- with the per-group sequence number: ``pair << 40 | seq``.  The run's index
    numbers (group, op, job) instead (``analysis.jobs``): the k-th all_reduce of two jobs is two
    collectives."""

    def __init__(self) -> None:
        self.pairs: dict[tuple, int] = {}

    def pair_id(self, group: str, op: str, job: str | None = None) -> int:
        k = (group, op) if job is None else (group, op, job)
        i = self.pairs.get(k)
        if i is None:
            i = self.pairs[k] = len(self.pairs)
        return i

    def describe(self, key: int) -> tuple[str, int, str]:
        pair = key >> 40
        for k, i in self.pairs.items():
            if i == pair:
                return k[0], key & ((1 << 40) - 1), k[1]
        return "?", key & ((1 << 40) - 1), "?"

    def times(self, s: Session, chunk: int = 1 << 20) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys, start, end) in wall-clock ns for the collectives of one session.

        Reads the events a chunk at a time and drops each chunk's mapped pages afterwards, so a
        large process costs its collectives' timings, not its whole event columns.  The rows read
        are checked here (their string ids inside the file's table, their times on the wall
        clock): a run that writes no system events maps ntrace.pb unchecked
        (``load_session(events="unchecked")``); ProfileError when one is damaged."""
        empty = np.empty(0, dtype=np.int64)
        n = s.num_events
        if not n:
            return empty, empty, empty
        off = wall_offset_ns(s)
        e = s.events
        kinds = []
        for tname in ("cc_running", "cc_exec_barrier"):
            tid = s.type_id(tname)
            g, o, q = s.arg(tname, "group_str"), s.arg(tname, "op_str"), s.arg(tname, "seq")
            if tid is not None and g is not None and o is not None and q is not None:
                kinds.append((tid, g, o, q))  # (a damaged type table may lack an argument)
        ks, ss, es = [], [], []
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            typ = e["type"][lo:hi]
            for tid, g_col, o_col, q_col in kinds:
                idx = np.flatnonzero(typ == tid)
                if not len(idx):
                    continue
                idx += lo
                g_ids, o_ids = e[g_col][idx], e[o_col][idx]
                _check_rows(s, g_ids, o_ids, e["start_ns"][idx], e["end_ns"][idx], off)
                pairs = (g_ids << 32) | o_ids  # (string ids: inside the file's table, so below 2**31)
                uniq, inv = np.unique(pairs, return_inverse=True)
                lut = np.array([self.pair_id(s.strings[int(u) >> 32], s.strings[int(u) & 0xFFFF_FFFF])
                                for u in uniq], dtype=np.int64)
                # a sequence number is kept to its 40 bits: a damaged one must not reach the pair's bits
                ks.append((lut[inv] << 40) | (e[q_col][idx] & _LOW40))
                ss.append(e["start_ns"][idx] + off)
                es.append(e["end_ns"][idx] + off)
            s.release(hi)
        if not ks:
            return empty, empty, empty
        return np.concatenate(ks), np.concatenate(ss), np.concatenate(es)


_LOW40 = (1 << 40) - 1


def _check_rows(s: Session, g_ids: np.ndarray, o_ids: np.ndarray, start: np.ndarray, end: np.ndarray,
                off: int) -> None:
    """The checks ``load_session`` makes on every event, made on the collectives read."""
    ns = len(s.strings)
    for ids, what in ((g_ids, "group_str"), (o_ids, "op_str")):
        if int(ids.min()) < 0 or int(ids.max()) >= ns:
            raise ProfileError(f"{s.path}/ntrace.pb: argument {what} of a collective refers to a string outside "
                               f"the file's table of {ns} strings")
    check_times(f"{s.path}/ntrace.pb", "collective timestamps", min(int(start.min()), int(end.min())),
                max(int(start.max()), int(end.max())), off)


def no_times() -> "Times":
    empty = np.empty(0, dtype=np.int64)
    return empty, empty, empty


ALIGN_SAMPLES = 1 << 16  # collectives per process kept for clock alignment (file outputs)
ALIGN_SAMPLES_TOTAL = 1 << 22  # ... and across all processes (~100 MB of timings)


def sample_cap(processes: int) -> int:
    """Per-process sample size such that the whole index stays bounded as processes grow."""
    return max(1024, min(ALIGN_SAMPLES, ALIGN_SAMPLES_TOTAL // max(processes, 1)))



def sample(times: Times, cap: int = ALIGN_SAMPLES, ids: np.ndarray | None = None) -> Times:
    """At most about ``cap`` of a process's collectives, chosen by key so that every process keeps
    the same ones: a key is kept when its mixed bits are 0 under a power-of-two mask sized for this
    process. A process with a coarser mask keeps a subset of a finer one's keys, so matched pairs
    across processes survive.  Bounds the index pass's memory by processes, not by events.

    ``ids`` (default: the keys) must name a collective the same way in every process."""
    keys = times[0]
    if len(keys) <= cap:
        return times
    stride = 1 << int(np.ceil(np.log2(len(keys) / cap)))
    ids = keys if ids is None else ids
    mixed = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    keep = (mixed & np.uint64(stride - 1)) == 0
    return keys[keep], times[1][keep], times[2][keep]


def _robust(diffs: np.ndarray) -> tuple[int, int, int]:
    med = float(np.median(diffs))
    mad = float(np.median(np.abs(diffs - med))) * 1.4826
    keep = diffs if mad == 0 else diffs[np.abs(diffs - med) <= 3 * mad]
    med = float(np.median(keep))
    spread = float(np.median(np.abs(keep - med))) * 1.4826 if len(keep) > 1 else 0.0
    return int(round(med)), int(round(spread)), len(keep)


Times = tuple[np.ndarray, np.ndarray, np.ndarray]


def _per_key_mean_end(parts: list[Times]) -> tuple[np.ndarray, np.ndarray]:
    keys = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, dtype=np.int64)
    ends = np.concatenate([p[2] for p in parts]).astype(np.float64) if parts else np.empty(0)
    uk, inv = np.unique(keys, return_inverse=True)
    sums = np.bincount(inv, weights=ends, minlength=len(uk))
    counts = np.bincount(inv, minlength=len(uk))
    return uk, sums / np.maximum(counts, 1)


def estimate_offsets(times_by_instance: dict[str, list[Times]]) -> dict[str, InstanceOffset]:
    """Per-instance offsets from collective end times (one (keys, start, end) per process).

    Ranks of one instance that took part in the same collective are averaged first.  Instances
    linked by shared collectives (directly or through others) are aligned together, to the first
    of them in name order (``reference``); a group that shares nothing with another keeps its own
    clock (two jobs on different hosts: each is aligned within itself, neither moves onto the
    other); an instance that shares no collective with any other is not shifted (``none``)."""
    merged = {inst: _per_key_mean_end(parts) for inst, parts in times_by_instance.items()}
    instances = sorted(merged)
    result: dict[str, InstanceOffset] = {}
    pending = list(instances)
    while pending:
        ref = pending.pop(0)  # the first instance not aligned yet: the reference of its group
        result[ref] = InstanceOffset(ref, 0, 0, 0, ref, "reference")
        group = [ref]
        progress = True
        while pending and progress:
            progress = False
            for inst in list(pending):
                best = _best_anchor(inst, group, merged, result)
                if best is not None:
                    result[inst] = best
                    pending.remove(inst)
                    group.append(inst)
                    progress = True
        if len(group) == 1 and len(instances) > 1:
            result[ref] = InstanceOffset(ref, 0, 0, 0, ref, "none")
    return result


def _best_anchor(inst: str, group: list[str], merged: dict, result: dict[str, InstanceOffset]) -> InstanceOffset | None:
    """``inst``'s offset through the aligned instance of ``group`` it shares most collectives with."""
    best = None
    ki, ei = merged[inst]
    for anchor in group:
        a_off = result[anchor]
        ka, ea = merged[anchor]
        _, ia, ib = np.intersect1d(ka, ki, assume_unique=True, return_indices=True)
        if len(ia) < MIN_SAMPLES:
            continue
        off, unc, n = _robust(ea[ia] - ei[ib])
        if abs(off + a_off.offset_ns) > CLOCK_OFFSET_LIMIT_NS:  # not a clock error: damaged times
            continue
        cand = InstanceOffset(inst, off + a_off.offset_ns, unc + a_off.uncertainty_ns, n, anchor, "collectives")
        if best is None or cand.samples > best.samples:
            best = cand
    return best


def clock_groups(offsets: dict[str, InstanceOffset]) -> list[list[str]]:
    """The instances aligned together, one list per group (its reference first), when there is
    more than one: their times are not aligned with each other's."""
    ref_of: dict[str, str] = {}

    def root(i: str) -> str:
        seen = set()
        while offsets[i].method == "collectives" and offsets[i].reference in offsets and i not in seen:
            seen.add(i)
            i = offsets[i].reference
        return i

    for i in offsets:
        ref_of[i] = root(i)
    groups: dict[str, list[str]] = {}
    for i in sorted(offsets, key=lambda i: (ref_of[i] != i, i)):
        groups.setdefault(ref_of[i], []).append(i)
    out = [groups[r] for r in sorted(groups)]
    return out if len(out) > 1 else []


def stragglers(entries: list[tuple[int, str, Times]], offsets: dict[str, InstanceOffset],
               index: CollectiveIndex) -> dict:
    """Which rank entered each collective last (the others waited for it), and the spread.

    ``entries`` holds (rank, instance, collective times) per process."""
    ks, st, rk = [], [], []
    for rank, inst, (keys, start, _end) in entries:
        if rank < 0 or not len(keys):
            continue
        off = offsets[inst].offset_ns if inst in offsets else 0
        ks.append(keys)
        st.append(start + off)
        rk.append(np.full(len(keys), rank, dtype=np.int64))
    if not ks:
        return summarize(arrivals(np.zeros(0), np.zeros(0), np.zeros(0)))

    def describe(key: int) -> dict:
        g, q, o = index.describe(key)
        return {"group": g, "seq": int(q), "op": o}

    return summarize(arrivals(np.concatenate(ks), np.concatenate(st), np.concatenate(rk)), describe)
