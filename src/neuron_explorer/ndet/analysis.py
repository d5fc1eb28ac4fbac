"""What went wrong, and who caused it.

Two stages, so memory holds one log's records at a time:

1. ``scan(log)`` (per log, vectorized): the spec-form findings of that log (errors, numerical errors,
   work still in flight) and its contribution to the ``CollectiveIndex``.
2. ``verdict(...)`` (across logs): match collectives across ranks by process group and sequence
   number and name the culprits -- ranks missing from a collective others are waiting in, ranks
   whose op/size/dtype differ, ranks whose log stops early (crashed or killed), the first rank and
   graph that produced a NaN.

The collective index keeps, per group, one reference row per sequence number (op, bytes, dtype,
how many ranks reached it, the latest arrival) rather than one row per rank, plus a small per-rank
summary (sequence range, in-flight and failed collectives).  Disagreements are recorded when a
rank's row differs from the reference, which is all the verdict needs.
"""

from __future__ import annotations

import datetime as _dt
import zlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from neuron_explorer.contracts.events import STATUS_CODES
from . import format as fmt
from .sources import RankLog

MAX_MISMATCHES = 10000
MAX_PROBLEMS_PER_RANK = 1000


def status_name(ret: int) -> str:
    return STATUS_CODES.get(int(ret), "unknown status")


def wall_str(wall_ns: int) -> str:
    try:
        t = _dt.datetime.fromtimestamp(wall_ns / 1e9, tz=_dt.timezone.utc)
    except (OverflowError, OSError, ValueError):  # a crafted record's time; say it as it is
        return f"{wall_ns} ns (out of the calendar's range)"
    return t.strftime("%H:%M:%S.") + f"{t.microsecond // 1000:03d} UTC"


def group_ranks(group: str) -> list[int]:
    try:
        # "0,1" for the default group, "0,1#<name>" for other groups over the same ranks
        return [int(x) for x in group.split("#")[0].split(",") if x.strip() != ""]
    except ValueError:
        return []


def group_str(group: str) -> str:
    r = group_ranks(group)
    return f"[{', '.join(map(str, r))}]" if r or not group else group


@dataclass
class Finding:
    """One console line in the spec's form, e.g. ``numerical_error (X) NC 0 @ a - b: {...}``."""

    name: str
    phase: str  # "X" complete, "B" begun and never ended
    nc: int
    t0_wall: int
    t1_wall: int
    details: dict
    rank: int

    def line(self, base_wall: int) -> str:
        t0 = (self.t0_wall - base_wall) / 1000.0
        if self.phase == "X":
            span = f"{t0:.1f} - {(self.t1_wall - base_wall) / 1000.0:.1f}"
        else:
            span = f"{t0:.1f} - (no end: not complete, likely hang)"
        return f"{self.name} ({self.phase}) NC {self.nc} @ {span}: {self.details!r}"


@dataclass
class CCProblem:
    kind: str
    state: int
    ret: int
    t0: int
    t1: int
    op: str
    nbytes: int
    dtype: str


@dataclass
class RankGroup:
    min_seq: int
    max_seq: int
    count: int
    problems: dict[int, CCProblem] = field(default_factory=dict)  # seq -> in-flight or failed record


@dataclass
class GroupIndex:
    group: str
    source: str
    seqs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sig: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    op: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # string hash
    nbytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    dtype: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ref_rank: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    max_t0: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    max_rank: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ranks: dict[int, RankGroup] = field(default_factory=dict)
    mismatches: dict[int, list[tuple[int, int, int, int]]] = field(default_factory=dict)  # seq -> (rank, op, bytes, dtype)
    n_mismatch: int = 0

    def lookup(self, seq: int) -> int:
        i = int(np.searchsorted(self.seqs, seq))
        return i if i < len(self.seqs) and self.seqs[i] == seq else -1


class CollectiveIndex:
    """Collectives of every rank, keyed by (source, group) and sequence number."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], GroupIndex] = {}
        self.names: dict[int, str] = {0: ""}  # string hash -> string

    def _h(self, strings: list[str]) -> np.ndarray:
        out = np.empty(len(strings), np.int64)
        for i, s in enumerate(strings):
            h = zlib.crc32(s.encode("utf-8", "replace")) + 1 if s else 0
            self.names[h] = s
            out[i] = h
        return out

    def add(self, log: RankLog, cc: np.ndarray) -> None:
        if not len(cc):
            return
        hashes = self._h(log.strings)
        nstr = len(hashes)
        gids = cc["e"]
        off = log.offset_ns
        for g in np.unique(gids):
            if not 0 <= g < nstr:
                continue
            sub = cc[gids == g]
            key = (log.source, log.strings[g])
            gi = self.groups.get(key)
            if gi is None:
                gi = self.groups[key] = GroupIndex(group=log.strings[g], source=log.source)
            self._add_group(gi, log, sub, hashes, off)

    def _add_group(self, gi: GroupIndex, log: RankLog, sub: np.ndarray, hashes: np.ndarray, off: int) -> None:
        rank = log.rank
        # one row per sequence number; a later row for the same seq (e.g. in-flight begin) wins
        order = np.argsort(sub["b"], kind="stable")
        sub = sub[order]
        seqs = sub["b"].astype(np.int64)
        last = np.r_[seqs[1:] != seqs[:-1], True]
        sub, seqs = sub[last], seqs[last]
        ops = hashes[np.clip(sub["a"], 0, len(hashes) - 1)]
        dts = hashes[np.clip(sub["d"], 0, len(hashes) - 1)]
        nb = sub["c"].astype(np.int64)
        sig = (ops * 1_000_003 + nb * 7919 + dts) & 0x7FFFFFFFFFFFFFFF
        t0w = sub["t0"].astype(np.int64) + off
        rg = gi.ranks.get(rank)
        if rg is None:
            rg = gi.ranks[rank] = RankGroup(int(seqs[0]), int(seqs[-1]), 0)
        rg.min_seq = min(rg.min_seq, int(seqs[0]))
        rg.max_seq = max(rg.max_seq, int(seqs[-1]))
        rg.count += len(seqs)
        bad = np.nonzero((sub["state"] != fmt.STATE_COMPLETE) | (sub["ret"] != 0))[0]
        for i in bad[-MAX_PROBLEMS_PER_RANK:]:
            r = sub[i]
            rg.problems[int(r["b"])] = CCProblem(
                kind=fmt.KINDS.get(int(r["kind"]), {}).get("name", "cc"), state=int(r["state"]), ret=int(r["ret"]),
                t0=int(r["t0"]) + off, t1=(int(r["t1"]) + off) if r["state"] == fmt.STATE_COMPLETE else 0,
                op=log.strings[int(r["a"])] if 0 <= r["a"] < len(log.strings) else "?", nbytes=int(r["c"]),
                dtype=log.strings[int(r["d"])] if 0 <= r["d"] < len(log.strings) else "?")
        # compare with the reference rows, then merge the new sequence numbers in
        idx = np.searchsorted(gi.seqs, seqs)
        idxc = np.minimum(idx, max(len(gi.seqs) - 1, 0))
        present = (idx < len(gi.seqs)) & (gi.seqs[idxc] == seqs) if len(gi.seqs) else np.zeros(len(seqs), bool)
        pi = idx[present]
        if len(pi):
            gi.count[pi] += 1
            later = t0w[present] > gi.max_t0[pi]
            gi.max_t0[pi[later]] = t0w[present][later]
            gi.max_rank[pi[later]] = rank
            diff = np.nonzero(gi.sig[pi] != sig[present])[0]
            pos = np.nonzero(present)[0][diff]
            for j in pos[: max(0, MAX_MISMATCHES - gi.n_mismatch)]:
                gi.mismatches.setdefault(int(seqs[j]), []).append((rank, int(ops[j]), int(nb[j]), int(dts[j])))
                gi.n_mismatch += 1
        new = ~present
        if new.any():
            n = int(new.sum())
            cat = lambda a, b: np.concatenate([a, b])  # noqa: E731
            seq_all = cat(gi.seqs, seqs[new])
            order = np.argsort(seq_all, kind="stable")
            gi.seqs = seq_all[order]
            gi.sig = cat(gi.sig, sig[new])[order]
            gi.op = cat(gi.op, ops[new])[order]
            gi.nbytes = cat(gi.nbytes, nb[new])[order]
            gi.dtype = cat(gi.dtype, dts[new])[order]
            gi.count = cat(gi.count, np.ones(n, np.int64))[order]
            gi.ref_rank = cat(gi.ref_rank, np.full(n, rank, np.int64))[order]
            gi.max_t0 = cat(gi.max_t0, t0w[new])[order]
            gi.max_rank = cat(gi.max_rank, np.full(n, rank, np.int64))[order]


@dataclass
class LogSummary:
    """What the verdict needs of a log after its records are gone."""

    log: RankLog
    findings: list[Finding]
    num_errors: int
    first_nan: tuple[int, dict] | None  # (wall ns, details)
    first_exec_error: tuple[int, dict] | None
    num_records: int


def _model_desc(log: RankLog, mid: int) -> tuple[str, str]:
    m = log.models.get(int(mid))
    if not m:
        return f"model {mid}", ""
    return str(m.get("name", f"model {mid}")), str(m.get("neff_name", ""))


def scan(log: RankLog, index: CollectiveIndex, max_findings: int = 50) -> LogSummary:
    """The findings of one log, and its collectives added to ``index``."""
    rec = log.records if log.records is not None else np.zeros(0, fmt.RECORD_DTYPE)
    off = log.offset_ns
    kind, state, ret = rec["kind"], rec["state"], rec["ret"]
    is_cc = np.isin(kind, fmt.CC_KINDS)
    index.add(log, rec[is_cc])
    err = (state != fmt.STATE_COMPLETE) | ((ret != 0) & ~((kind == fmt.KIND_EXEC) & (ret == 1003))) | \
        (kind == fmt.KIND_NUMERICAL_ERROR)
    bad = np.nonzero(err)[0]
    findings: list[Finding] = []
    first_nan = first_exec = None
    S = log.strings

    def s(i: int) -> str:
        return S[i] if 0 <= i < len(S) else "?"

    nan_idx = np.nonzero(kind == fmt.KIND_NUMERICAL_ERROR)[0]
    if len(nan_idx):
        i = nan_idx[np.argmin(rec["t0"][nan_idx])]
        r = rec[i]
        name, neff = _model_desc(log, int(r["a"]))
        first_nan = (int(r["t0"]) + off, {"nc": int(r["nc"]), "exec_id": int(r["b"]), "graph": name, "neff": neff,
                                           "nan": int(r["c"]), "inf": int(r["d"])})
    ex_idx = np.nonzero((kind == fmt.KIND_EXEC) & (ret != 0) & (ret != 1003) & (state == fmt.STATE_COMPLETE))[0]
    if len(ex_idx):
        r = rec[ex_idx[0]]
        name, neff = _model_desc(log, int(r["a"]))
        first_exec = (int(r["t0"]) + off, {"nc": int(r["nc"]), "exec_id": int(r["b"]), "graph": name, "neff": neff,
                                           "ret": int(r["ret"])})
    for i in bad[:max_findings]:
        r = rec[i]
        k = int(r["kind"])
        nc = int(r["nc"])
        base = {"nd": log.nd, "nc": nc}
        if k in (fmt.KIND_EXEC, fmt.KIND_NUMERICAL_ERROR):
            name, neff = _model_desc(log, int(r["a"]))
            d = {**base, "exec_id": int(r["b"]), "ret": int(r["ret"]), "graph": name, "neff": neff}
            if k == fmt.KIND_NUMERICAL_ERROR:
                d["nan_count"], d["inf_count"] = int(r["c"]), int(r["d"])
        else:
            d = {**base, "op": s(int(r["a"])), "seq": int(r["b"]), "group": group_ranks(s(int(r["e"]))),
                 "bytes": int(r["c"]), "dtype": s(int(r["d"])), "ret": int(r["ret"])}
        if r["state"] != fmt.STATE_COMPLETE:
            d.pop("ret", None)
        d["rank"] = log.rank
        ename = fmt.KINDS.get(k, {}).get("name", f"kind{k}")
        complete = r["state"] == fmt.STATE_COMPLETE
        findings.append(Finding(ename, "X" if complete else "B", nc, int(r["t0"]) + off,
                                (int(r["t1"]) + off) if complete else 0, d, log.rank))
    return LogSummary(log=log, findings=findings, num_errors=int(len(bad)), first_nan=first_nan,
                      first_exec_error=first_exec, num_records=int(len(rec)))


# ---------------------------------------------------------------------------------------------
# jobs: which logs belong together


@dataclass
class Job:
    """The logs of one run of one job: analysed together, never with another job's logs."""

    key: tuple
    logs: list[RankLog]

    @property
    def start_wall_ns(self) -> int:
        return min(lg.start_wall_ns for lg in self.logs)

    @property
    def last_wall_ns(self) -> int:
        return max(lg.last_wall_ns for lg in self.logs)

    def duplicate_ranks(self) -> list[int]:
        """Ranks claimed by more than one log: jobs the logs could not tell apart."""
        c = Counter(lg.rank for lg in self.logs if lg.rank >= 0)
        return sorted(r for r, n in c.items() if n > 1)

    def describe(self) -> str:
        source, job = self.key
        if job is None:
            what = "Flight Recorder dumps" if source == "flight_recorder" else "logs without a job id (older format)"
        elif not job[0]:
            what = "no rendezvous address (not started by torchrun or tcp:// init)"
        else:
            what = job[0] + (f" run {job[1]}" if job[1] and job[1] != "none" else "") + \
                (f" restart {job[2]}" if job[2] else "")
        ranks = sorted({lg.rank for lg in self.logs if lg.rank >= 0})
        rk = f" (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})" if ranks else ""
        n = len(self.logs)
        return f"{what}, {n} log{'s' if n != 1 else ''}{rk}, {wall_str(self.start_wall_ns)} - {wall_str(self.last_wall_ns)}"


def group_jobs(logs: list[RankLog]) -> list[Job]:
    """Sort logs into jobs: the same job identity (rendezvous address, run id, restart; see
    ``ndet.recorder.job_identity``), then time.  Two jobs can share an address (torchrun's default
    port 29500) only one after the other, so a log that starts after every log of the current job
    has ended, and whose rank that job already has, starts the next job.  (A rank seen once more
    while the job still runs cannot be told apart: ``Job.duplicate_ranks`` reports it.)  Jobs are
    returned in start order."""
    by_key: dict[tuple, list[RankLog]] = {}
    for lg in logs:
        by_key.setdefault((lg.source, lg.job), []).append(lg)
    jobs: list[Job] = []
    for key, group in by_key.items():
        group.sort(key=lambda lg: (lg.start_wall_ns, lg.rank))
        end, ranks = -1, set()
        for lg in group:
            if not ranks or (lg.start_wall_ns > end and lg.rank in ranks):
                jobs.append(Job(key, []))
                end, ranks = -1, set()
            jobs[-1].logs.append(lg)
            end = max(end, lg.last_wall_ns)
            ranks.add(lg.rank)
    jobs.sort(key=lambda j: (j.start_wall_ns, str(j.key)))
    return jobs


# ---------------------------------------------------------------------------------------------
# the cross-rank verdict


@dataclass
class Culprit:
    t_wall: int
    ranks: list[int]
    text: str


def _stopped_early(summaries: list[LogSummary]) -> dict[int, LogSummary]:
    """Logs with no final write while the job went on: their process crashed or was killed."""
    ndet = [s for s in summaries if s.log.source == "ndet"]
    out: dict[int, LogSummary] = {}
    any_final = any(s.log.final for s in ndet)
    latest = max((s.log.last_wall_ns for s in ndet), default=0)
    for s in ndet:
        if s.log.final:
            continue
        margin = max(2 * s.log.flush_period_ns, 1_000_000_000)
        if any_final or latest - s.log.last_wall_ns > margin:
            out[id(s)] = s
    return out


def verdict(summaries: list[LogSummary], index: CollectiveIndex) -> tuple[list[Culprit], list[str]]:
    """The culprits (earliest first) and notes about how each process ended."""
    culprits: list[Culprit] = []
    notes: list[str] = []
    by_rank: dict[tuple[str, int], LogSummary] = {}
    for s in summaries:
        by_rank[(s.log.source, s.log.rank)] = s
    early = _stopped_early(summaries)
    named_dead: set[int] = set()
    names = index.names

    for (source, group), gi in sorted(index.groups.items()):
        gdesc = group_str(group)
        # 1. op/size/dtype disagreements: the first sequence number where ranks disagree
        if gi.mismatches:
            seq = min(gi.mismatches)
            i = gi.lookup(seq)
            entries = gi.mismatches[seq]
            odd = {r for r, *_ in entries}
            n_ref = int(gi.count[i]) - len(entries)
            sigs: dict[tuple[int, int, int], list[int]] = {}
            for r, o, nb, dt in entries:
                sigs.setdefault((o, nb, dt), []).append(r)
            ref_key = (int(gi.op[i]), int(gi.nbytes[i]), int(gi.dtype[i]))
            ref_ranks = [r for r in gi.ranks if r not in odd and gi.ranks[r].min_seq <= seq <= gi.ranks[r].max_seq]
            sigs.setdefault(ref_key, [])
            sigs[ref_key] = sorted(set(sigs[ref_key]) | set(ref_ranks)) if ref_ranks else sigs[ref_key] or [int(gi.ref_rank[i])]
            sizes = {k: len(v) for k, v in sigs.items()}
            best = max(sigs, key=lambda k: (sizes[k], -min(sigs[k])))
            bad = sorted(r for k, v in sigs.items() if k != best for r in v)
            desc = "; ".join(f"rank{'s' if len(v) > 1 else ''} {', '.join(map(str, sorted(v)))}: "
                             f"{names.get(k[0], '?')} {k[1]} B {names.get(k[2], '') or '-'}"
                             for k, v in sorted(sigs.items(), key=lambda kv: min(kv[1]) if kv[1] else -1))
            tie = " (tie: the group of the lowest rank is taken as the reference)" if \
                sum(1 for k in sigs if sizes[k] == sizes[best]) > 1 else ""
            kinds = set()
            for k in sigs:
                if k == best:
                    continue
                if k[0] != best[0]:
                    kinds.add("op")
                if k[1] != best[1]:
                    kinds.add("size")
                if k[2] != best[2]:
                    kinds.add("dtype")
            dead = []
            for r in sorted({r for v in sigs.values() for r in v}):
                sr = by_rank.get((source, r))
                if sr is not None and id(sr) in early:
                    named_dead.add(id(sr))
                    dead.append(f"rank {r}'s log stops at {wall_str(sr.log.last_wall_ns)} with no final write "
                                f"(it crashed or was killed, e.g. aborted by the transport on the mismatch)")
            culprits.append(Culprit(int(gi.max_t0[i]), bad, (
                f"culprit: rank{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))}: mismatched "
                f"{'/'.join(sorted(kinds)) or 'signature'} in {names.get(best[0], '?')} #{seq} of group {gdesc}: "
                f"{desc}{tie}" + "".join("; " + d for d in dead))))
        # 2. ranks missing from a collective that others entered
        members = group_ranks(group) or sorted(gi.ranks)
        present = {r: gi.ranks.get(r) for r in members if (source, r) in by_rank}
        if not present:
            continue
        top = max(rg.max_seq for rg in present.values() if rg is not None) if any(present.values()) else -1
        behind: dict[int, list[int]] = {}
        for r, rg in present.items():
            mx = rg.max_seq if rg is not None else -1
            if mx < top:
                behind.setdefault(mx + 1, []).append(r)
        if behind:
            seq = min(behind)
            i = gi.lookup(seq)
            op = names.get(int(gi.op[i]), "collective") if i >= 0 else "collective"
            entered = [r for r, rg in present.items() if rg is not None and rg.max_seq >= seq]
            waits = []
            t_event = int(gi.max_t0[i]) if i >= 0 else 0
            for r in sorted(entered):
                p = present[r].problems.get(seq)
                if p is None:
                    continue
                t_event = min(t_event, p.t0) if t_event else p.t0
                if p.state != fmt.STATE_COMPLETE:
                    last = by_rank[(source, r)].log.last_wall_ns
                    waits.append(f"rank {r} stuck in it since {wall_str(p.t0)} "
                                 f"({(last - p.t0) / 1e9:.1f} s at its last write)")
                else:
                    waits.append(f"rank {r} waited {(p.t1 - p.t0) / 1e9:.1f} s (ret {p.ret} {status_name(p.ret)})")
            missing = sorted(behind[seq])
            parts = []
            for r in missing:
                s = by_rank[(source, r)]
                if id(s) in early:
                    named_dead.add(id(s))
                    parts.append(f"rank {r} never entered {op} #{seq} of group {gdesc}: its log stops at "
                                 f"{wall_str(s.log.last_wall_ns)} with no final write (crashed or killed)")
                else:
                    parts.append(f"rank {r} never entered {op} #{seq} of group {gdesc}")
            tail = "; " + "; ".join(waits) if waits else (
                f"; rank{'s' if len(entered) > 1 else ''} {', '.join(map(str, sorted(entered)))} entered it")
            culprits.append(Culprit(t_event, missing, "culprit: " + "; ".join(parts) + tail))
            # later sequence numbers that other ranks are missing are consequences; not listed
        else:
            stuck = [(r, rg.problems[rg.max_seq]) for r, rg in present.items()
                     if rg is not None and rg.max_seq in rg.problems and rg.problems[rg.max_seq].state != fmt.STATE_COMPLETE]
            if stuck and len(stuck) == len(present):
                seq = top
                p0 = min(p.t0 for _, p in stuck)
                culprits.append(Culprit(p0, [], (
                    f"hang: every rank of group {gdesc} is in {stuck[0][1].op} #{seq} and none finished "
                    f"(since {wall_str(p0)}); no rank is missing: suspect the transport or the network")))
            failed = [(r, rg.problems[s2]) for r, rg in present.items() if rg is not None
                      for s2 in rg.problems if rg.problems[s2].state == fmt.STATE_COMPLETE and rg.problems[s2].ret]
            if failed and not stuck:
                r, p = min(failed, key=lambda x: x[1].t0)
                culprits.append(Culprit(p.t0, [r], (
                    f"culprit: rank {r}: {p.op} of group {gdesc} failed with ret {p.ret} {status_name(p.ret)} "
                    f"after {(p.t1 - p.t0) / 1e9:.1f} s")))

    for s in summaries:
        if id(s) in early and id(s) not in named_dead:
            culprits.append(Culprit(s.log.last_wall_ns, [s.log.rank], (
                f"culprit: {s.log.label}: its log stops at {wall_str(s.log.last_wall_ns)} with no final write "
                f"while other ranks went on (crashed or killed)")))
    nans = [(s.first_nan[0], s) for s in summaries if s.first_nan]
    if nans:
        t, s = min(nans, key=lambda x: x[0])
        d = s.first_nan[1]
        others = sorted({x.log.rank for _, x in nans if x is not s})
        also = f"; later also on rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}" if others else ""
        culprits.append(Culprit(t, [s.log.rank], (
            f"culprit: {s.log.label}: first numerical error (NaN {d['nan']}, Inf {d['inf']}) in graph {d['graph']} "
            f"({d['neff']}) on NC {d['nc']}, exec_id {d['exec_id']}, at {wall_str(t)} "
            f"(ret 1003 {status_name(1003)}){also}")))
    execs = [(s.first_exec_error[0], s) for s in summaries if s.first_exec_error]
    if execs:
        t, s = min(execs, key=lambda x: x[0])
        d = s.first_exec_error[1]
        culprits.append(Culprit(t, [s.log.rank], (
            f"culprit: {s.log.label}: execution of graph {d['graph']} ({d['neff']}) on NC {d['nc']} failed, "
            f"exec_id {d['exec_id']}, at {wall_str(t)} (ret {d['ret']} {status_name(d['ret'])})")))
    culprits.sort(key=lambda c: c.t_wall)
    for s in summaries:
        lg = s.log
        if lg.source != "ndet":
            continue
        if not lg.final:
            what = "no final write (crashed or killed)" if id(s) in early else "no final write yet (still running, or killed with the rest of the job)"
            notes.append(f"{lg.label} ({lg.name}): {what}; last write at {wall_str(lg.last_wall_ns)}")
        elif lg.reason != "exit":
            notes.append(f"{lg.label} ({lg.name}): ended by {lg.reason} at {wall_str(lg.last_wall_ns)}")
    return culprits, notes


def is_clean(summaries: list[LogSummary], culprits: list[Culprit]) -> bool:
    if culprits:
        return False
    for s in summaries:
        if s.num_errors:
            return False
        if s.log.source == "ndet" and s.log.final and s.log.reason != "exit":
            return False
    return True


def rank_counter(summaries: list[LogSummary]) -> Counter:
    return Counter(s.log.rank for s in summaries)
