"""Per instance / process / core summary of system profiles (summary-text and summary-json)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from neuron_explorer.analysis.align import clock_groups
from neuron_explorer.analysis.reader import Session
from neuron_explorer.contracts.columns import EVENT_COLUMNS
from neuron_explorer.util.intervals import union_length


def _pct(a: np.ndarray, q: float) -> float | None:
    return float(np.percentile(a, q)) if len(a) else None


_EMPTY = {c.name: np.empty(0, dtype=np.int64) for c in EVENT_COLUMNS}


def core_summary(s: Session, nc: int, top: int = 5) -> dict[str, Any]:
    e = s.events if s.num_events else _EMPTY  # a capture with the system profile off has no events
    on = e["nc_idx"] == nc
    types = e["type"][on]
    start, end = e["start_ns"][on], e["end_ns"][on]
    info = s.info
    t0 = int(start.min()) if len(start) else 0
    t1 = int(end.max()) if len(end) else 0
    if info is not None and len(info.anchors) >= 2:
        t0 = min(t0 or info.anchors[0].monotonic_ns, info.anchors[0].monotonic_ns)
        t1 = max(t1, info.anchors[-1].monotonic_ns)
    total = max(t1 - t0, 0)

    ex = types == (s.type_id("nc_exec_running") if s.type_id("nc_exec_running") is not None else -1)
    ex_dur = (end[ex] - start[ex]).astype(np.int64)
    busy = union_length(start[ex], end[ex])
    cc_ids = [i for i in (s.type_id("cc_running"), s.type_id("cc_exec_barrier")) if i is not None]
    cc = np.isin(types, cc_ids) if cc_ids else np.zeros(len(types), dtype=bool)
    cc_busy = union_length(start[cc], end[cc])

    graphs = []
    col = s.arg("nc_exec_running", "model_id")
    if col is not None and ex.any():
        mids = e[col][on][ex]
        names = {m.id: m.name for m in s.models}
        for mid in np.unique(mids):
            d = ex_dur[mids == mid]
            graphs.append({"model_id": int(mid), "model_name": names.get(int(mid), f"model_{int(mid)}"),
                           "executions": int(len(d)), "time_ns": int(d.sum()),
                           "mean_ns": float(d.mean())})
        graphs.sort(key=lambda g: (-g["time_ns"], g["model_id"]))

    # idle gaps between consecutive executions on the core
    gaps = np.empty(0, dtype=np.int64)
    if ex.sum() > 1:
        order = np.argsort(start[ex], kind="stable")
        st, en = start[ex][order], np.maximum.accumulate(end[ex][order])
        gaps = np.clip(st[1:] - en[:-1], 0, None)
    errors = 0
    nerr = s.type_id("numerical_err")
    if nerr is not None:
        errors = int((types == nerr).sum())
    return {
        "nc_idx": int(nc),
        "nd_idx": int(info.nd_idx) if info is not None else 0,
        "total_time": total / 1e9,
        "executions": int(ex.sum()),
        "busy_pct": 100.0 * busy / total if total else 0.0,
        "latency_ns": {"p50": _pct(ex_dur, 50), "p90": _pct(ex_dur, 90), "p99": _pct(ex_dur, 99),
                       "max": float(ex_dur.max()) if len(ex_dur) else None},
        "collectives": int(cc.sum()),
        "collective_time": cc_busy / 1e9,
        "collective_pct": 100.0 * cc_busy / total if total else 0.0,
        "numerical_errors": errors,
        "idle_gaps": {"total_s": float(gaps.sum()) / 1e9, "max_ns": int(gaps.max()) if len(gaps) else None,
                      "median_ns": float(np.median(gaps)) if len(gaps) else None},
        "events": int(on.sum()),
        "top_graphs": graphs[:top],
    }


def session_summary(s: Session, offset=None) -> dict[str, Any]:
    info = s.info
    ncs = sorted(set(np.unique(s.events["nc_idx"]).tolist())) if s.num_events else []
    if not ncs and info is not None:
        ncs = list(info.nc_indices)
    drops = {int(c.nc_idx): int(c.dropped) for c in info.cores} if info is not None else {}
    return {
        "instance_id": s.instance_id,
        "pid": s.pid,
        "process_tag": info.process_tag if info is not None else "",
        "rank": int(info.rank) if info is not None else -1,
        "world_size": int(info.world_size) if info is not None else 1,
        "device_kind": info.device_kind if info is not None else "",
        "end_reason": info.end_reason if info is not None else "",
        "runtime_events_seen": bool(info.runtime_events_seen) if info is not None else s.num_events > 0,
        "note": info.note if info is not None else "",
        "path": s.path,
        "dropped_events": drops,
        "clock_offset_ns": offset.offset_ns if offset is not None else 0,
        "cores": [core_summary(s, nc) for nc in ncs],
    }


def build(procs: list[dict[str, Any]], warnings: list[str], offsets: dict | None = None,
          stragglers: dict | None = None) -> dict[str, Any]:
    """The whole summary from per-process summaries (``session_summary``)."""
    procs = sorted(procs, key=lambda p: (p["instance_id"], p["rank"], p["pid"], p["path"]))
    return {"profiles": procs, "num_profiles": len(procs),
            "instances": sorted({p["instance_id"] for p in procs}),
            "clock_offsets": {k: {"offset_ns": v.offset_ns, "uncertainty_ns": v.uncertainty_ns,
                                  "samples": v.samples, "reference": v.reference, "method": v.method}
                              for k, v in sorted((offsets or {}).items())},
            "clock_groups": clock_groups(offsets or {}),
            "stragglers": stragglers or {}, "warnings": warnings}


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f} ms"


def _flops(v: float | None) -> str:
    if not v:
        return "-"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{v:.0f} "


# the per-core table: (heading, width); the order is the README's and never changes
_CORE_COLUMNS = (("nc_idx", 6), ("nd_idx", 6), ("total_time", 11), ("executions", 10), ("busy %", 7),
                 ("p50", 11), ("p99", 11), ("collectives", 11), ("cc_time", 10), ("cc %", 6),
                 ("idle_time", 10), ("idle_max", 11), ("num_err", 7))


def _core_row(c: dict[str, Any]) -> str:
    gaps = c["idle_gaps"]
    cells = (c["nc_idx"], c["nd_idx"], f"{c['total_time']:.3f} s", c["executions"], f"{c['busy_pct']:.2f}",
             _ms(c["latency_ns"]["p50"]), _ms(c["latency_ns"]["p99"]), c["collectives"],
             f"{c['collective_time']:.3f} s", f"{c['collective_pct']:.2f}", f"{gaps['total_s']:.3f} s",
             _ms(gaps["max_ns"]), c["numerical_errors"])
    return "  " + " ".join(f"{v!s:>{w}}" for v, (_, w) in zip(cells, _CORE_COLUMNS))


def _device_line(d: dict[str, Any]) -> str:
    """One device profile's figures: what summary-json lists under ``device_profiles``."""
    mfu = f"{100 * d['mfu']:.1f}%" if d.get("mfu") else "- (peak unknown)"
    return (f"         device profile {d['profile_id']} ({d['mode']}, {d['model_name']}): "
            f"{d['executions']} executions, {d['ops']} ops, {d['total_time_ns'] / 1e6:.3f} ms, "
            f"{_flops(d['flops'])}FLOP, {_flops(d['achieved_flops_per_s'])}FLOP/s, MFU {mfu}")


def render_text(summary: dict[str, Any]) -> str:
    """The summary as text: per process, one row per core in the README's fixed order (then its
    dropped events, top graphs and device profiles), then clock offsets, stragglers, warnings."""
    lines = [f"neuron-explorer summary: {summary['num_profiles']} profile(s) on "
             f"{len(summary['instances'])} instance(s)"]
    for p in summary["profiles"]:
        rank = f"rank {p['rank']}/{p['world_size']}" if p["rank"] >= 0 else "not distributed"
        lines.append("")
        lines.append(f"instance {p['instance_id']}  pid {p['pid']}  {rank}  tag {p['process_tag']}  "
                     f"device {p['device_kind'] or '?'}  ended: {p['end_reason'] or '?'}")
        if p["note"]:
            lines.append(f"  note: {p['note']}")
        if not p["cores"]:
            lines.append("  no runtime events were recorded")
        else:
            lines.append("  " + " ".join(f"{h:>{w}}" for h, w in _CORE_COLUMNS))
        devs = p.get("device_profiles") or []
        for c in p["cores"]:
            lines.append(_core_row(c))
            dropped = p["dropped_events"].get(c["nc_idx"], 0)
            if dropped:
                lines.append(f"         {dropped} oldest event(s) were overwritten (per-core limit)")
            for g in c["top_graphs"]:
                lines.append(f"         top graph {g['model_name']}: {g['executions']} executions, "
                             f"{g['time_ns'] / 1e6:.3f} ms total, {g['mean_ns'] / 1e6:.3f} ms mean")
            lines.extend(_device_line(d) for d in devs if d["nc_idx"] == c["nc_idx"])
        cores = {c["nc_idx"] for c in p["cores"]}
        lines.extend(_device_line(d) for d in devs if d["nc_idx"] not in cores)
    offs = summary.get("clock_offsets") or {}
    if len(offs) > 1:
        lines.append("")
        lines.append("clock offsets applied (from collective completion times):")
        for inst, o in offs.items():
            how = {"reference": "reference clock", "none": "no shared collectives: not shifted"}.get(
                o["method"], f"{o['samples']} collectives vs {o['reference']}")
            lines.append(f"  {inst}: {o['offset_ns'] / 1e6:+.3f} ms ± {o['uncertainty_ns'] / 1e6:.3f} ms ({how})")
        if summary.get("clock_groups"):
            lines.append(f"  {groups_note(summary['clock_groups'])}")
    st = summary.get("stragglers") or {}
    if st.get("collectives_compared"):
        lines.append("")
        lines.append(f"stragglers across ranks ({st['collectives_compared']} collectives compared): "
                     f"slowest rank {st['slowest_rank']} (last to enter {st['last_to_enter'][str(st['slowest_rank'])]} "
                     f"times); entry spread median {st['spread_ns_median'] / 1e6:.3f} ms, "
                     f"max {st['spread_ns_max'] / 1e6:.3f} ms")
        w = st["worst"]
        lines.append(f"  worst: {w['op']} #{w['seq']} of group [{w['group']}], rank {w['last_rank']} entered "
                     f"{w['spread_ns'] / 1e6:.3f} ms after the first")
    lines.extend(_analysis_lines(summary))
    if summary["warnings"]:
        lines.append("")
        lines.append(f"warnings ({len(summary['warnings'])}):")
        lines.extend(f"  {w}" for w in summary["warnings"])
    return "\n".join(lines) + "\n"


_BREAKDOWN_HEADS = (("compute_ns", "compute"), ("exposed_collective_ns", "exposed cc"), ("sync_wait_ns", "sync wait"),
                    ("compile_ns", "compile"), ("data_loading_ns", "data"), ("host_ns", "host"), ("idle_ns", "idle"))


def _analysis_lines(summary: dict[str, Any]) -> list[str]:
    """Steps, utilisation and the ranked insights (docs/summary.md), when the summary has them."""
    st = summary.get("steps")
    if st is None:
        return []
    lines = ["", f"steps: {st['count']} found ({st['method'] or 'none'})"]
    moved = [(p.get("rank", -1), p["renumbered_by"]) for p in st.get("per_process") or [] if p.get("renumbered_by")]
    if moved:
        lines.append("  numbered by their collectives (a capture that lost its first steps): "
                     + ", ".join(f"rank {r} {d:+d}" for r, d in moved[:8]) + (" ..." if len(moved) > 8 else ""))
    var, bd = st.get("variation") or {}, st.get("breakdown") or {}
    if var.get("wall_ns_median") is not None:
        lines.append(f"  steady steps {var['steady_steps']}: median {_ms(var['wall_ns_median'])}, p90 "
                     f"{_ms(var['wall_ns_p90'])}, max {_ms(var['wall_ns_max'])}, cv {var['cv']:.2f}; outliers: "
                     f"{', '.join(map(str, var['outliers'][:10])) or 'none'}")
    if bd.get("shares"):
        lines.append("  median step: " + ", ".join(f"{h} {_ms(bd[k])} ({100 * bd['shares'][k]:.0f}%)"
                                                   for k, h in _BREAKDOWN_HEADS))
    u = summary.get("utilisation") or {}
    if u:
        if u.get("achieved_flops_per_s"):
            mfu = f"MFU {100 * u['mfu']:.1f}% of {_flops(u['peak_flops_per_s'])}FLOP/s ({u['peak_source']})" \
                if u.get("mfu") is not None else f"MFU - ({u['reason']})"
            lines.append(f"utilisation: {_flops(u['flops_per_step'])}FLOP per step, "
                         f"{_flops(u['achieved_flops_per_s'])}FLOP/s achieved; {mfu}")
        else:
            lines.append(f"utilisation: - ({u.get('reason')})")
    lines.append("")
    lines.append(f"insights: {summary.get('verdict', '')}")
    for n, i in enumerate(summary.get("insights") or [], 1):
        imp = i["impact_ns_per_step"]
        c, ev = i["confidence"], i["evidence"]
        share = f" ({100 * i['impact_share']:.0f}% of a step)" if i.get("impact_share") is not None else ""
        lines.append(f"  {n}. {i['title']}: saves ~{_ms(imp)} per step{share}" if imp is not None
                     else f"  {n}. {i['title']}")
        chance = f", p={c['p_value']:.2g}" if c.get("p_value") is not None else ""
        lines.append(f"     confidence {c['level']}: {c['steps']}/{c['steps_total']} steps, "
                     f"{c['ranks']}/{c['ranks_total']} ranks{chance}")
        at = f"steps {ev['steps'][0]}..{ev['steps'][-1]}" if len(ev["steps"]) > 1 else f"step {ev['steps'][0]}"
        lines.append(f"     evidence: rank(s) {', '.join(map(str, ev['ranks']))}, {at}, "
                     f"{ev['instance_id']} pid {ev['pid']}, {ev['start_ns']}..{ev['end_ns']} ns")
        lines.append(f"     do: {i['recommendation']}")
    return lines


def groups_note(groups: list[list[str]]) -> str:
    """One line saying that the groups of instances were aligned apart (``align.clock_groups``)."""
    shown = "; ".join(", ".join(g) for g in groups)
    return (f"{len(groups)} groups of instances share no collective (other jobs, or hosts captured apart): "
            f"each is aligned to its first instance, not to the others: {shown}")


def render_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2, sort_keys=False) + "\n"
