"""The cross-rank verdict: who caused what went wrong, one function per rule.

The second stage of ``neuron-det``'s analysis (``analysis.scan`` is the first).  Each rule looks at
the job's log summaries and collective index and returns its culprits:

* per process group (``GROUP_RULES``, in group order): ranks whose op/size/dtype differ at the
  first disagreeing sequence number; ranks missing from a collective others entered; every rank
  stuck in the same collective (a transport hang); a collective that failed;
* per job (``JOB_RULES``, after the group rules, which name some dead ranks themselves): ranks
  whose log stops early (crashed or killed); the first numerical error; the first failed
  execution.

``verdict`` runs them in that order and sorts the culprits by time (a stable sort, so culprits of
the same instant keep the rule order).

A log whose process ended by a signal makes the job unclean, with one exception
(``ended_by_its_parent``): an idle ``multiprocessing`` child, not a rank, that got SIGTERM while its
parent lived -- what ``Pool.__exit__`` does to its workers (docs/decisions/0094-ndet-process-roles.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from neuron_explorer.contracts import ndet_log as fmt

from .analysis import (
    CCProblem,
    CollectiveIndex,
    GroupIndex,
    LogSummary,
    RankGroup,
    group_ranks,
    group_str,
    status_name,
    wall_str,
)

__all__ = ["Culprit", "GROUP_RULES", "JOB_RULES", "ended_by_its_parent", "is_clean", "verdict"]


@dataclass
class Culprit:
    """One cause the verdict names: when it happened, the ranks to blame (none for a hang) and the
    line printed under "root cause"."""

    t_wall: int
    ranks: list[int]
    text: str


@dataclass
class Evidence:
    """What every rule of one job reads, and the dead ranks the group rules have named."""

    summaries: list[LogSummary]
    names: dict[int, str]  # the index's string hash -> string
    by_rank: dict[tuple[str, int], LogSummary] = field(default_factory=dict)
    early: dict[int, LogSummary] = field(default_factory=dict)  # id(summary) -> logs that stopped early
    named_dead: set[int] = field(default_factory=set)  # id(summary) of early stops a culprit already names

    def __post_init__(self) -> None:
        for s in self.summaries:
            self.by_rank[(s.log.source, s.log.rank)] = s
        self.early = _stopped_early(self.summaries)

    def dead(self, source: str, rank: int) -> LogSummary | None:
        """The summary of a rank whose log stopped early (and note that it is now named), or None."""
        s = self.by_rank.get((source, rank))
        if s is None or id(s) not in self.early:
            return None
        self.named_dead.add(id(s))
        return s


class GroupEvidence:
    """One process group's collectives as the group rules see them: which member ranks have a log,
    how far each got, and who is behind the furthest."""

    def __init__(self, ev: Evidence, source: str, group: str, gi: GroupIndex) -> None:
        self.source, self.group, self.gi = source, group, gi
        self.desc = group_str(group)
        members = group_ranks(group) or sorted(gi.ranks)
        self.present: dict[int, RankGroup | None] = {r: gi.ranks.get(r) for r in members if (source, r) in ev.by_rank}
        groups = [rg for rg in self.present.values() if rg is not None]
        self.top = max(rg.max_seq for rg in groups) if groups else -1
        self.behind: dict[int, list[int]] = {}  # first sequence number not entered -> ranks
        for r, rg in self.present.items():
            mx = rg.max_seq if rg is not None else -1
            if mx < self.top:
                self.behind.setdefault(mx + 1, []).append(r)
        # ranks still inside their last collective
        self.stuck: list[tuple[int, CCProblem]] = [
            (r, rg.problems[rg.max_seq]) for r, rg in self.present.items()
            if rg is not None and rg.max_seq in rg.problems and rg.problems[rg.max_seq].state != fmt.STATE_COMPLETE]


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


def _plural(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


# ---------------------------------------------------------------------------------------------
# group rules


def mismatched_signature(ev: Evidence, g: GroupEvidence) -> list[Culprit]:
    """Op/size/dtype disagreements: the first sequence number where ranks disagree.  The
    signature most ranks share is the reference; the others are the culprits."""
    gi, names = g.gi, ev.names
    if not gi.mismatches:
        return []
    seq = min(gi.mismatches)
    i = gi.lookup(seq)
    sigs = _signatures(gi, seq, i)
    sizes = {k: len(v) for k, v in sigs.items()}
    best = max(sigs, key=lambda k: (sizes[k], -min(sigs[k])))
    bad = sorted(r for k, v in sigs.items() if k != best for r in v)
    desc = "; ".join(f"{_plural(sorted(v))}: {names.get(k[0], '?')} {k[1]} B {names.get(k[2], '') or '-'}"
                     for k, v in sorted(sigs.items(), key=lambda kv: min(kv[1]) if kv[1] else -1))
    tie = " (tie: the group of the lowest rank is taken as the reference)" if \
        sum(1 for k in sigs if sizes[k] == sizes[best]) > 1 else ""
    kinds = set()
    for k in sigs:
        if k == best:
            continue
        for part, what in enumerate(("op", "size", "dtype")):
            if k[part] != best[part]:
                kinds.add(what)
    dead = []
    for r in sorted({r for v in sigs.values() for r in v}):
        sr = ev.dead(g.source, r)
        if sr is not None:
            dead.append(f"rank {r}'s log stops at {wall_str(sr.log.last_wall_ns)} with no final write "
                        f"(it crashed or was killed, e.g. aborted by the transport on the mismatch)")
    return [Culprit(int(gi.max_t0[i]), bad, (
        f"culprit: {_plural(bad)}: mismatched "
        f"{'/'.join(sorted(kinds)) or 'signature'} in {names.get(best[0], '?')} #{seq} of group {g.desc}: "
        f"{desc}{tie}" + "".join("; " + d for d in dead)))]


def _signatures(gi: GroupIndex, seq: int, i: int) -> dict[tuple[int, int, int], list[int]]:
    """(op, bytes, dtype) -> ranks at ``seq``: the mismatching rows, and the reference row with
    the ranks that reached ``seq`` without a mismatch."""
    entries = gi.mismatches[seq]
    odd = {r for r, *_ in entries}
    sigs: dict[tuple[int, int, int], list[int]] = {}
    for r, o, nb, dt in entries:
        sigs.setdefault((o, nb, dt), []).append(r)
    ref_key = (int(gi.op[i]), int(gi.nbytes[i]), int(gi.dtype[i]))
    ref_ranks = [r for r in gi.ranks if r not in odd and gi.ranks[r].min_seq <= seq <= gi.ranks[r].max_seq]
    sigs.setdefault(ref_key, [])
    sigs[ref_key] = sorted(set(sigs[ref_key]) | set(ref_ranks)) if ref_ranks else sigs[ref_key] or [int(gi.ref_rank[i])]
    return sigs


def missing_ranks(ev: Evidence, g: GroupEvidence) -> list[Culprit]:
    """Ranks missing from a collective that others entered (the first such sequence number; later
    ones other ranks are missing are consequences and not listed)."""
    if not g.present or not g.behind:
        return []
    gi = g.gi
    seq = min(g.behind)
    i = gi.lookup(seq)
    op = ev.names.get(int(gi.op[i]), "collective") if i >= 0 else "collective"
    entered = {r: rg for r, rg in g.present.items() if rg is not None and rg.max_seq >= seq}
    waits = []
    t_event = int(gi.max_t0[i]) if i >= 0 else 0
    for r in sorted(entered):
        p = entered[r].problems.get(seq)
        if p is None:
            continue
        t_event = min(t_event, p.t0) if t_event else p.t0
        if p.state != fmt.STATE_COMPLETE:
            last = ev.by_rank[(g.source, r)].log.last_wall_ns
            waits.append(f"rank {r} stuck in it since {wall_str(p.t0)} "
                         f"({(last - p.t0) / 1e9:.1f} s at its last write)")
        else:
            waits.append(f"rank {r} waited {(p.t1 - p.t0) / 1e9:.1f} s (ret {p.ret} {status_name(p.ret)})")
    missing = sorted(g.behind[seq])
    parts = []
    for r in missing:
        s = ev.dead(g.source, r)
        if s is not None:
            parts.append(f"rank {r} never entered {op} #{seq} of group {g.desc}: its log stops at "
                         f"{wall_str(s.log.last_wall_ns)} with no final write (crashed or killed)")
        else:
            parts.append(f"rank {r} never entered {op} #{seq} of group {g.desc}")
    tail = "; " + "; ".join(waits) if waits else f"; {_plural(sorted(entered))} entered it"
    return [Culprit(t_event, missing, "culprit: " + "; ".join(parts) + tail)]


def all_stuck(ev: Evidence, g: GroupEvidence) -> list[Culprit]:
    """No rank is behind, and every rank is inside the same last collective: a transport hang."""
    if not g.present or g.behind or not g.stuck or len(g.stuck) != len(g.present):
        return []
    p0 = min(p.t0 for _, p in g.stuck)
    return [Culprit(p0, [], (
        f"hang: every rank of group {g.desc} is in {g.stuck[0][1].op} #{g.top} and none finished "
        f"(since {wall_str(p0)}); no rank is missing: suspect the transport or the network"))]


def failed_collective(ev: Evidence, g: GroupEvidence) -> list[Culprit]:
    """No rank is behind or stuck, and a collective ended with an error: the earliest one."""
    if not g.present or g.behind or g.stuck:
        return []
    failed = [(r, rg.problems[s2]) for r, rg in g.present.items() if rg is not None
              for s2 in rg.problems if rg.problems[s2].state == fmt.STATE_COMPLETE and rg.problems[s2].ret]
    if not failed:
        return []
    r, p = min(failed, key=lambda x: x[1].t0)
    return [Culprit(p.t0, [r], (
        f"culprit: rank {r}: {p.op} of group {g.desc} failed with ret {p.ret} {status_name(p.ret)} "
        f"after {(p.t1 - p.t0) / 1e9:.1f} s"))]


# ---------------------------------------------------------------------------------------------
# job rules


def unnamed_early_stops(ev: Evidence) -> list[Culprit]:
    """Logs that stop early which no group rule has named already."""
    return [Culprit(s.log.last_wall_ns, [s.log.rank], (
        f"culprit: {s.log.label}: its log stops at {wall_str(s.log.last_wall_ns)} with no final write "
        f"while other ranks went on (crashed or killed)"))
        for s in ev.summaries if id(s) in ev.early and id(s) not in ev.named_dead]


def _earliest(ev: Evidence, attr: str) -> tuple[int, LogSummary, dict, list[LogSummary]] | None:
    """The earliest of the logs' first records of one kind (``attr``: ``first_nan`` or
    ``first_exec_error``): (wall time, its log's summary, its details, every log that has one)."""
    found = [(getattr(s, attr)[0], s) for s in ev.summaries if getattr(s, attr)]
    if not found:
        return None
    t, s = min(found, key=lambda x: x[0])
    return t, s, getattr(s, attr)[1], [x for _, x in found]


def first_numerical_error(ev: Evidence) -> list[Culprit]:
    """The first NaN/Inf of the job: the rank and graph that produced it."""
    first = _earliest(ev, "first_nan")
    if first is None:
        return []
    t, s, d, having = first
    others = sorted({x.log.rank for x in having if x is not s})
    also = f"; later also on {_plural(others)}" if others else ""
    return [Culprit(t, [s.log.rank], (
        f"culprit: {s.log.label}: first numerical error (NaN {d['nan']}, Inf {d['inf']}) in graph {d['graph']} "
        f"({d['neff']}) on NC {d['nc']}, exec_id {d['exec_id']}, at {wall_str(t)} "
        f"(ret 1003 {status_name(1003)}){also}"))]


def first_execution_error(ev: Evidence) -> list[Culprit]:
    """The first failed graph execution of the job."""
    first = _earliest(ev, "first_exec_error")
    if first is None:
        return []
    t, s, d, _ = first
    return [Culprit(t, [s.log.rank], (
        f"culprit: {s.log.label}: execution of graph {d['graph']} ({d['neff']}) on NC {d['nc']} failed, "
        f"exec_id {d['exec_id']}, at {wall_str(t)} (ret {d['ret']} {status_name(d['ret'])})"))]


GROUP_RULES: tuple[Callable[[Evidence, GroupEvidence], list[Culprit]], ...] = (
    mismatched_signature, missing_ranks, all_stuck, failed_collective)
JOB_RULES: tuple[Callable[[Evidence], list[Culprit]], ...] = (
    unnamed_early_stops, first_numerical_error, first_execution_error)


# ---------------------------------------------------------------------------------------------
# the verdict


def verdict(summaries: list[LogSummary], index: CollectiveIndex) -> tuple[list[Culprit], list[str]]:
    """The culprits (earliest first) and notes about how each process ended."""
    ev = Evidence(summaries, index.names)
    culprits: list[Culprit] = []
    for (source, group), gi in sorted(index.groups.items()):
        g = GroupEvidence(ev, source, group, gi)
        for rule in GROUP_RULES:
            culprits += rule(ev, g)
    for job_rule in JOB_RULES:
        culprits += job_rule(ev)
    culprits.sort(key=lambda c: c.t_wall)
    return culprits, ending_notes(ev)


# what ``multiprocessing``'s ``Process.terminate`` sends (``Pool.terminate`` and ``Pool.__exit__`` call it)
PARENT_END = "signal:SIGTERM"


def ended_by_its_parent(s: LogSummary) -> bool:
    """Did this process end the way a pool ends an idle worker, so that its signal is no error?

    All of: its log's final write is for SIGTERM; its process was a ``multiprocessing`` child and
    not a rank (it made no process group; a rank killed by its launcher, e.g. on a hang, stays an
    error); nothing was in flight (no execution or collective cut short); and its parent was still
    alive when it wrote.  Logs that do not record the role (header version 1) never qualify."""
    lg = s.log
    return (lg.source == "ndet" and lg.final and lg.reason == PARENT_END and lg.role == fmt.ROLE_CHILD
            and lg.parent_alive and s.num_in_flight == 0)


def ending_notes(ev: Evidence) -> list[str]:
    """How each NDET log ended, where that was not a normal exit."""
    notes = []
    for s in ev.summaries:
        lg = s.log
        if lg.source != "ndet":
            continue
        if not lg.final:
            what = "no final write (crashed or killed)" if id(s) in ev.early else \
                "no final write yet (still running, or killed with the rest of the job)"
            notes.append(f"{lg.label} ({lg.name}): {what}; last write at {wall_str(lg.last_wall_ns)}")
        elif ended_by_its_parent(s):
            notes.append(f"{lg.label} ({lg.name}): {lg.process_name or 'a multiprocessing child'} of pid {lg.ppid}, "
                         f"ended idle by {lg.reason} while its parent ran (as a pool ends its workers: not an "
                         f"error) at {wall_str(lg.last_wall_ns)}")
        elif lg.reason != "exit":
            notes.append(f"{lg.label} ({lg.name}): ended by {lg.reason} at {wall_str(lg.last_wall_ns)}")
    return notes


def is_clean(summaries: list[LogSummary], culprits: list[Culprit]) -> bool:
    """No culprit, no error record and no log ended by anything but a normal exit (or, for an idle
    pool worker, by its parent: ``ended_by_its_parent``)."""
    if culprits:
        return False
    for s in summaries:
        if s.num_errors:
            return False
        if s.log.source == "ndet" and s.log.final and s.log.reason != "exit" and not ended_by_its_parent(s):
            return False
    return True
