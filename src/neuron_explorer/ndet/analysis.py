"""What went wrong, and who caused it.

Two stages, so memory holds one log's records at a time:

1. ``scan(log)`` (per log, vectorized): the spec-form findings of that log (errors, numerical errors,
   work still in flight) and its contribution to the ``CollectiveIndex``.
2. ``verdict.verdict(...)`` (across logs): match collectives across ranks by process group and
   sequence number and name the culprits -- ranks missing from a collective others are waiting in,
   ranks whose op/size/dtype differ, ranks whose log stops early (crashed or killed), the first
   rank and graph that produced a NaN.  One function per rule, in ``verdict.py``.

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

from neuron_explorer.contracts import ndet_log as fmt
from neuron_explorer.contracts.events import STATUS_CODES

from .sources import RankLog

__all__ = ["CCProblem", "CollectiveIndex", "Finding", "GroupIndex", "Job", "LogSummary", "RankGroup", "group_jobs",
           "group_ranks", "group_str", "scan", "status_name", "wall_str"]

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


MAX_RANK = 2**31 - 1  # ranks are C ints in torch.distributed; a log's group string is untrusted


def group_ranks(group: str) -> list[int]:
    """The ranks of a group string ("0,1" for the default group, "0,1#<name>" for other groups over
    the same ranks); [] when it is not one (a damaged log: a rank beyond MAX_RANK, e.g. 60 digits,
    would reach the JSON writer as an integer it cannot encode)."""
    try:
        ranks = [int(x) for x in group.split("#")[0].split(",") if x.strip() != ""]
    except ValueError:
        return []
    return ranks if all(0 <= r <= MAX_RANK for r in ranks) else []


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
    # seq -> (rank, op, bytes, dtype)
    mismatches: dict[int, list[tuple[int, int, int, int]]] = field(default_factory=dict)
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
    num_in_flight: int = 0  # begin records of work still running at the last write


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
                      first_exec_error=first_exec, num_records=int(len(rec)),
                      num_in_flight=int((state != fmt.STATE_COMPLETE).sum()))


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
        span = f"{wall_str(self.start_wall_ns)} - {wall_str(self.last_wall_ns)}"
        return f"{what}, {n} log{'s' if n != 1 else ''}{rk}, {span}"


def group_jobs(logs: list[RankLog]) -> list[Job]:
    """Sort logs into jobs: the same job identity (rendezvous address, run id, restart; see
    ``recorders.ndet.job_identity``), then time.  Two jobs can share an address (torchrun's default
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
        end, ranks = -1, set[int]()
        for lg in group:
            if not ranks or (lg.start_wall_ns > end and lg.rank in ranks):
                jobs.append(Job(key, []))
                end, ranks = -1, set()
            jobs[-1].logs.append(lg)
            end = max(end, lg.last_wall_ns)
            ranks.add(lg.rank)
    jobs.sort(key=lambda j: (j.start_wall_ns, str(j.key)))
    return jobs
