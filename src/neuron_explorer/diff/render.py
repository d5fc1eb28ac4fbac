"""The diff document for people: a terminal table and Markdown for a pull-request comment.  Both
show the headline (step time, the gate), the significant changes first, then every aligned row
(``--all``) or only those that changed; the numbers are the document's, nothing is recomputed.
"""

from __future__ import annotations

from typing import Any

ARROWS = {"slower": "▲ slower", "faster": "▼ faster", "larger": "▲ larger", "smaller": "▼ smaller",
          "more compiles": "▲ more compiles", "fewer compiles": "▼ fewer compiles",
          "new": "+ new", "vanished": "- vanished"}


def ms(ns: float | int | None) -> str:
    if ns is None:
        return "-"
    v = ns / 1e6
    return f"{v:.3f} ms" if abs(v) < 10 else f"{v:.1f} ms"


def signed_ms(ns: float | int | None) -> str:
    if ns is None:
        return "-"
    return ("+" if ns > 0 else "") + ms(ns)


def _pct(p: float | None) -> str:
    return "-" if p is None else f"{p:+.1f}%"


def _ci(row: dict) -> str:
    ci = row.get("ci_ns")
    return "-" if not ci else f"[{signed_ms(ci[0])}, {signed_ms(ci[1])}]"


def _side(s: dict | None, kind: str) -> tuple[str, str, str]:
    if s is None:
        return "-", "-", "-"
    if kind == "memory":
        return "1", f"{s['level_bytes'] / 2**20:.1f} MiB", f"peak {s['peak_bytes'] / 2**20:.1f} MiB"
    if kind == "compile":
        return f"{s['per_process']:g}/proc", ms(s["total_ns"]) + " total", "-"
    return str(s.get("count", "-")), ms(s.get("median_ns")), ms(s.get("p90_ns"))


def _delta(row: dict) -> str:
    if row["kind"] == "compile":
        return f"{row['delta_count']:+g}/proc"
    if row["kind"] == "memory":
        d = row.get("delta_bytes")
        return "-" if d is None else f"{d / 2**20:+.1f} MiB"
    return signed_ms(row.get("delta_ns"))


HEAD = ("kind", "item", "n base", "median base", "p90 base", "n cand", "median cand", "p90 cand",
        "change", "%", "95% interval", "verdict")


def _cells(row: dict) -> list[str]:
    nb, mb, pb = _side(row.get("baseline"), row["kind"])
    nc, mc, pc = _side(row.get("candidate"), row["kind"])
    return [row["kind"], row["label"], nb, mb, pb, nc, mc, pc, _delta(row), _pct(row.get("delta_pct")), _ci(row),
            ARROWS.get(row["verdict"], row["verdict"])]


def _shown(doc: dict, everything: bool) -> list[dict]:
    rows = doc["rows"]
    if everything:
        return rows
    return [r for r in rows if r["significant"] or r["kind"] == "step"]


def _headline(doc: dict) -> list[str]:
    out = [f"baseline  {doc['baseline']['path']}: {doc['baseline']['processes']} process(es), "
           f"{doc['baseline']['events']} events",
           f"candidate {doc['candidate']['path']}: {doc['candidate']['processes']} process(es), "
           f"{doc['candidate']['events']} events"]
    step = doc.get("step")
    if step and step.get("baseline_median_ns") is not None:
        out.append(f"step time: {ms(step['baseline_median_ns'])} -> {ms(step['candidate_median_ns'])} "
                   f"({_pct(step.get('delta_pct'))}, 95% interval {_pct_ci(step)}): {step['verdict']}")
    noise = doc.get("noise")
    if noise:
        shift = noise.get("item_shift_pct")
        out.append(f"verdicts need a change of at least {noise['bar_pct']:g}%"
                   + ("" if shift is None else f" (the pair's items moved {shift:g}% typically: its noise)"))
    ch = doc["changes"]
    out.append(f"{len(ch)} significant change(s)" + (": " + "; ".join(f"{c['label']} ({c['verdict']})"
                                                                       for c in ch[:5]) if ch else ""))
    for key, word in (("new_graphs", "new"), ("vanished_graphs", "vanished")):
        gs = doc.get(key) or []
        if gs:
            shown = ", ".join(g["graph"] + (f" {g['signature']}" if g.get("signature") else "") for g in gs[:4])
            more = f" and {len(gs) - 4} more" if len(gs) > 4 else ""
            out.append(f"{len(gs)} {word} graph version(s): {shown}{more}")
    gate = doc.get("gate")
    if gate:
        out.append(f"gate --fail-if-slower {gate['fail_if_slower_pct']}%: {'FAILED' if gate['failed'] else 'passed'}"
                   f" ({gate['reason']})")
    return out


def _pct_ci(step: dict) -> str:
    ci = step.get("ci_pct")
    return "-" if not ci else f"[{ci[0]:+.1f}%, {ci[1]:+.1f}%]"


def table(doc: dict[str, Any], everything: bool = False) -> str:
    """The terminal table."""
    lines = _headline(doc)
    rows = [list(HEAD)] + [_cells(r) for r in _shown(doc, everything)]
    if len(rows) > 1:
        widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD))]
        lines.append("")
        for r in rows:
            lines.append("  ".join(c.ljust(w) if i < 2 or i == len(HEAD) - 1 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    hidden = len(doc["rows"]) - len(_shown(doc, everything))
    if hidden:
        lines.append(f"({hidden} aligned row(s) with no detectable change not shown: --all shows them)")
    for w in doc.get("warnings", []):
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def markdown(doc: dict[str, Any], everything: bool = False) -> str:
    """Markdown for a pull-request comment."""
    out = ["### neuron-explorer diff", ""]
    out += [f"- {_md_escape(line)}" for line in _headline(doc)]
    rows = _shown(doc, everything)
    if rows:
        out += ["", "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        out += ["| " + " | ".join(_md_escape(c) for c in _cells(r)) + " |" for r in rows]
    hidden = len(doc["rows"]) - len(rows)
    if hidden:
        out += ["", f"{hidden} aligned row(s) with no detectable change not shown."]
    if doc.get("warnings"):
        out += ["", "Warnings:"] + [f"- {_md_escape(w)}" for w in doc["warnings"]]
    return "\n".join(out) + "\n"
