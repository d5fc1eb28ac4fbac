"""The Chrome trace (chrome://tracing, Perfetto's legacy JSON importer) that ``neuron-det`` writes.

One process per log, named from its file name (start date and time, instance id, group ids) and its
rank; one thread (track) per NeuronCore.  An execution record becomes ``nrt_execute`` (the host
request), ``sync_exec`` (the NEFF being run, coloured per graph) and ``nc_exec`` (the core); a
collective becomes ``cc_op_exec`` or ``cc_exec_barrier``, nested under the ``nc_exec`` it ran
inside when a graph ran it (``in_exec`` names that execution); each graph's load is a
``model_load`` (with the backend's ``nrt_load`` inside it) on its core's row.  Errors are red (``cname: terrible``) with
``ret`` in their args; work still in flight is a begin (``B``) event with no end, which the viewer
draws to the end of the trace -- the hang.  ``--show-dependencies`` adds flow arrows from each
execution to the collectives it issued and, for every collective, from the rank that arrived last
(everyone waited for it) to each other rank's copy.

The file is written log by log, so memory holds one log's events at a time.  Each log contributes
its last ``max_events`` records plus every error and in-flight record.
"""

from __future__ import annotations

import json
from typing import IO

import numpy as np

from neuron_explorer.contracts import ndet_log as fmt
from neuron_explorer.exporters.chrome_trace import ChromeTraceWriter

from .analysis import CollectiveIndex, group_ranks
from .sources import RankLog

ERROR_COLOR = "terrible"
PALETTE = ("thread_state_running", "rail_response", "cq_build_passed", "rail_animation", "good", "yellow",
           "olive", "rail_load", "thread_state_iowait", "generic_work", "background_memory_dump",
           "cq_build_attempt_passed", "light_memory_dump", "detailed_memory_dump", "startup", "grey")


class TraceWriter:
    """Streams ``{"traceEvents": [...]}`` to a binary file, one log at a time (one event a line)."""

    def __init__(self, f: IO[bytes], base_wall_ns: int, show_dependencies: bool, index: CollectiveIndex,
                 max_events: int = 20000) -> None:
        self.out = ChromeTraceWriter(f, lines=True)
        self.base = base_wall_ns
        self.deps = show_dependencies
        self.index = index
        self.max_events = max_events
        self.events = 0
        self.ranks_present: set[tuple[str, int]] = set()
        self.flow_prefix = ""  # per job when the trace holds several jobs: arrows never cross jobs
        self.process_prefix = ""

    def _emit(self, evs: list[dict]) -> None:
        self.out.add(evs)
        self.events += len(evs)

    def add_log(self, pid: int, log: RankLog) -> None:
        """One log as one process: its last ``max_events`` records plus every error and in-flight one."""
        rec = log.records if log.records is not None else np.zeros(0, fmt.RECORD_DTYPE)
        n = len(rec)
        keep = np.zeros(n, bool)
        keep[max(0, n - self.max_events):] = True
        keep |= (rec["state"] != fmt.STATE_COMPLETE) | (rec["ret"] != 0) | (rec["kind"] == fmt.KIND_NUMERICAL_ERROR)
        sub = rec[np.nonzero(keep)[0]]
        pname = f"{self.process_prefix}{log.name} ({log.label}, {log.source})"
        evs: list[dict] = [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": pname}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": max(log.rank, 0)}},
        ]
        off = log.offset_ns - self.base
        loads = _load_events(pid, log, off)
        for nc in sorted(set(sub["nc"].tolist()) | {ev["tid"] for ev in loads}):
            evs.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": int(nc), "args": {"name": f"NC {nc}"}})
        evs += loads
        S = log.strings
        cols = [sub[c].tolist() for c in ("kind", "state", "nc", "ret", "t0", "t1", "a", "b", "c", "d", "e")]
        cols += [v.tolist() for v in enclosing_executions(sub)]
        exec_marks: dict[int, list[int]] = {}  # nc -> starts of its executions, for deps
        flow_n = 0
        fast = _Templates(pid, log)  # the common case (successful complete records) pre-rendered
        for kind, state, nc, ret, t0, t1, a, b, c, d, e, in_exec, exec_end in zip(*cols):
            ts = (t0 + off) / 1000.0
            complete = state == fmt.STATE_COMPLETE
            dur = (t1 - t0) / 1000.0 if complete else 0.0
            over = t1 - exec_end if complete and in_exec >= 0 and exec_end and t1 > exec_end else 0
            if over:  # drawn inside its execution (the viewer nests by time); the overrun is in args
                dur = (exec_end - t0) / 1000.0
            if complete and ret == 0 and not over and not self.deps and \
                    fast.add(kind, ts, dur, nc, a, b, c, d, e, in_exec):
                continue
            if kind == fmt.KIND_EXEC:
                evs += _exec_events(pid, log, ts, dur, complete, nc, ret, a, b)
                if self.deps:
                    exec_marks.setdefault(nc, []).append(t0)
            elif kind == fmt.KIND_NUMERICAL_ERROR:
                m = log.models.get(a) or {}
                evs.append({"name": "numerical_error", "cat": "error", "ph": "X", "ts": ts, "dur": dur, "pid": pid,
                            "tid": nc, "cname": ERROR_COLOR,
                            "args": {"nd": log.nd, "nc": nc, "exec_id": b, "ret": ret, "graph": m.get("name", ""),
                                     "neff": m.get("neff_name", ""), "nan_count": c, "inf_count": d, "rank": log.rank}})
            else:
                group = S[e] if 0 <= e < len(S) else ""
                ev = _cc_event(pid, log, ts, dur, complete, kind, nc, ret, a, b, c, d, group)
                ev["args"]["in_exec"] = in_exec if in_exec >= 0 else None
                if over:
                    ev["args"]["ended_after_its_execution_us"] = over / 1000.0
                evs.append(ev)
                if self.deps:
                    flow_n = self._cc_flows(evs, pid, log, nc, t0, ts, group, b, exec_marks, off, flow_n)
        self._emit(evs)
        if fast.rendered:
            self.out.add_encoded(fast.rendered)
            self.events += fast.events

    def _cc_flows(self, evs: list[dict], pid: int, log: RankLog, nc: int, t0: int, ts: float, group: str,
                  seq: int, exec_marks: dict, off: int, flow_n: int) -> int:
        marks = exec_marks.get(nc)
        if marks and marks[-1] <= t0:
            # the latest execution begun on this core before the collective issued it
            fid = f"x{pid}.{flow_n}"
            flow_n += 1
            evs.append({"ph": "s", "id": fid, "name": "issues", "cat": "dependency", "pid": pid, "tid": nc,
                        "ts": (marks[-1] + off) / 1000.0})
            evs.append({"ph": "f", "bp": "e", "id": fid, "name": "issues", "cat": "dependency", "pid": pid,
                        "tid": nc, "ts": ts})
        gi = self.index.groups.get((log.source, group))
        if gi is None:
            return flow_n
        i = gi.lookup(seq)
        if i < 0 or int(gi.count[i]) < 2:
            return flow_n
        last = int(gi.max_rank[i])
        gkey = abs(hash(group)) % 1_000_000_007
        if last == log.rank:
            for r in group_ranks(group):
                if r != last and (log.source, r) in self.ranks_present:
                    evs.append({"ph": "s", "id": f"{self.flow_prefix}c{gkey}.{seq}.{r}", "name": "waited for",
                                "cat": "dependency", "pid": pid, "tid": nc, "ts": ts})
        elif (log.source, last) in self.ranks_present:
            evs.append({"ph": "f", "bp": "e", "id": f"{self.flow_prefix}c{gkey}.{seq}.{log.rank}", "name": "waited for",
                        "cat": "dependency", "pid": pid, "tid": nc, "ts": ts})
        return flow_n

    def close(self, metadata: dict) -> None:
        self.out.close(metadata)


class _Templates:
    """Successful complete executions and collectives rendered from per-graph (per-collective)
    templates: JSON encoding one event at a time is most of the trace's cost, and these records
    differ only in times, core and a few numbers."""

    def __init__(self, pid: int, log: RankLog) -> None:
        self.pid = pid
        self.log = log
        self.rendered: list[bytes] = []
        self.events = 0
        self.exec_tpl: dict[int, str] = {}
        self.cc_tpl: dict[tuple[int, int, int, int], str] = {}

    def add(self, kind: int, ts: float, dur: float, nc: int, a: int, b: int, c: int, d: int, e: int,
            in_exec: int = -1) -> bool:
        """Render the record if it is of a templated kind; False when it is not."""
        if kind == fmt.KIND_EXEC:
            tpl = self.exec_tpl.get(a)
            if tpl is None:
                tpl = self.exec_tpl[a] = self._exec(a)
            v = (ts, dur, nc, nc, b)
            self.rendered.append((tpl % (v + v + v)).encode())
            self.events += 3
            return True
        if kind in fmt.CC_KINDS:
            key = (kind, a, d, e)
            tpl = self.cc_tpl.get(key)
            if tpl is None:
                tpl = self.cc_tpl[key] = self._cc(kind, a, d, e)
            self.rendered.append((tpl % (ts, dur, nc, b, c, nc, in_exec if in_exec >= 0 else "null")).encode())
            self.events += 1
            return True
        return False

    def _exec(self, a: int) -> str:
        """nrt_execute, sync_exec and nc_exec of graph ``a`` (ts, dur, tid, nc, exec_id each)."""
        log = self.log
        m = log.models.get(a) or {}
        neff = m.get("neff_name", f"model_{a}")
        common = (f'"ph":"X","ts":%.3f,"dur":%.3f,"pid":{self.pid},"tid":%d,"args":{{"nd":{log.nd},'
                  f'"nc":%d,"exec_id":%d,"model_id":{a},"graph":{json.dumps(m.get("name", ""))},'
                  f'"neff":{json.dumps(neff)},"rank":{log.rank},"ret":0}}}}')
        return ",\n".join((
            '{"name":"nrt_execute","cat":"exec",' + common,
            '{"name":' + json.dumps(f"sync_exec {neff}") + ',"cat":"exec","cname":"'
            + PALETTE[a % len(PALETTE)] + '",' + common,
            '{"name":"nc_exec","cat":"exec",' + common))

    def _cc(self, kind: int, a: int, d: int, e: int) -> str:
        """A collective of one kind, op, dtype and group (ts, dur, tid, seq, bytes, nc, in_exec)."""
        log, S = self.log, self.log.strings
        gr = group_ranks(S[e] if 0 <= e < len(S) else "")
        op = S[a] if 0 <= a < len(S) else "?"
        return ('{"name":"' + fmt.KINDS.get(kind, {}).get("name", "cc_op_exec") + '","cat":"cc","ph":"X",'
                f'"ts":%.3f,"dur":%.3f,"pid":{self.pid},"tid":%d,"args":{{"op":{json.dumps(op)},'
                f'"seq":%d,"group":{json.dumps(gr)},"peers":{json.dumps([r for r in gr if r != log.rank])},'
                f'"bytes":%d,"dtype":{json.dumps(S[d] if 0 <= d < len(S) else "")},"nd":{log.nd},"nc":%d,'
                f'"rank":{log.rank},"ret":0,"in_exec":%s}}}}')


def enclosing_executions(rec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each record, the execution of its core it started inside (a collective run by a graph,
    as compiled collectives are): that execution's id and end (0: still in flight), -1 and 0 when
    none.  Executions of one core do not overlap, so the latest one started at or before the
    record's start is the only candidate."""
    n = len(rec)
    in_exec, exec_end = np.full(n, -1, np.int64), np.zeros(n, np.int64)
    is_exec = rec["kind"] == fmt.KIND_EXEC
    cc = np.isin(rec["kind"], fmt.CC_KINDS)
    if not (is_exec.any() and cc.any()):
        return in_exec, exec_end
    for nc in np.unique(rec["nc"][cc]).tolist():
        ex = np.flatnonzero(is_exec & (rec["nc"] == nc))
        if not len(ex):
            continue
        ex = ex[np.argsort(rec["t0"][ex], kind="stable")]
        mine = np.flatnonzero(cc & (rec["nc"] == nc))
        j = np.searchsorted(rec["t0"][ex], rec["t0"][mine], side="right") - 1
        ok = j >= 0
        cand = ex[np.maximum(j, 0)]
        end = rec["t1"][cand]
        ok &= (rec["state"][cand] != fmt.STATE_COMPLETE) | (rec["t0"][mine] < end)
        in_exec[mine[ok]] = rec["b"][cand[ok]]
        exec_end[mine[ok]] = np.where(rec["state"][cand[ok]] == fmt.STATE_COMPLETE, end[ok], 0)
    return in_exec, exec_end


def _load_events(pid: int, log: RankLog, off: int) -> list[dict]:
    """Each graph's load on its core's row: ``model_load`` (the whole compile and load) with the
    backend's ``nrt_load`` nested in it, from the load times the log's models carry."""
    evs = []
    for mid, m in sorted(log.models.items()):
        load = m.get("load") or []
        if len(load) != 3:
            continue
        nc = int(m.get("nc", 0))
        args = {"nd": log.nd, "nc": nc, "model_id": mid, "graph": m.get("name", ""),
                "neff": m.get("neff_name", ""), "backend": m.get("backend", ""), "rank": log.rank}
        for name, t0 in (("model_load", load[0]), ("nrt_load", load[1])):
            evs.append({"name": name, "cat": "load", "ph": "X", "ts": (t0 + off) / 1000.0,
                        "dur": (load[2] - t0) / 1000.0, "pid": pid, "tid": nc, "args": args})
    return evs


def _exec_events(pid: int, log: RankLog, ts: float, dur: float, complete: bool, nc: int, ret: int, a: int,
                 b: int) -> list[dict]:
    """An execution record that failed or never ended: nrt_execute, sync_exec and nc_exec."""
    m = log.models.get(a) or {}
    neff = m.get("neff_name", f"model_{a}")
    args = {"nd": log.nd, "nc": nc, "exec_id": b, "model_id": a, "graph": m.get("name", ""), "neff": neff,
            "rank": log.rank}
    if complete:
        args["ret"] = ret
    evs = []
    for name in ("nrt_execute", "sync_exec", "nc_exec"):
        ev = {"name": name, "cat": "exec", "ph": "X" if complete else "B", "ts": ts, "pid": pid, "tid": nc,
              "args": args}
        if complete:
            ev["dur"] = dur
        if ret != 0:
            ev["cname"] = ERROR_COLOR
        elif name == "sync_exec":
            ev["cname"] = PALETTE[a % len(PALETTE)]
            ev["name"] = f"sync_exec {neff}"
        if not complete:
            ev["args"] = {**args, "state": "in flight at the last write (never ended)"}
        evs.append(ev)
    return evs


def _cc_event(pid: int, log: RankLog, ts: float, dur: float, complete: bool, kind: int, nc: int, ret: int, a: int,
              b: int, c: int, d: int, group: str) -> dict:
    """A collective record that failed or never ended (or any, with dependencies shown)."""
    S = log.strings
    op = S[a] if 0 <= a < len(S) else "?"
    peers = [r for r in group_ranks(group) if r != log.rank]
    args = {"op": op, "seq": b, "group": group_ranks(group), "peers": peers, "bytes": c,
            "dtype": S[d] if 0 <= d < len(S) else "", "nd": log.nd, "nc": nc, "rank": log.rank}
    ev = {"name": fmt.KINDS.get(kind, {}).get("name", "cc_op_exec"), "cat": "cc",
          "ph": "X" if complete else "B", "ts": ts, "pid": pid, "tid": nc, "args": args}
    if complete:
        ev["dur"] = dur
        args["ret"] = ret
    else:
        args["state"] = "in flight at the last write (never ended)"
    if ret != 0:
        ev["cname"] = ERROR_COLOR
    return ev
