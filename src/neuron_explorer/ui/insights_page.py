"""The Summary page's data: the ``summary.json`` document ``view`` writes beside a profile's tables
(steps, utilisation, ranked insights; docs/summary.md), on the viewer's time axis.

Why here and not in the browser: the document's times are absolute nanoseconds (``start_ts``), which a
browser's doubles would round to hundreds of nanoseconds; every range the page opens is given again
relative to the profile's origin (``t0``, ``t1``), as every other answer of the API. The file is read
with a size bound and only from the profile's own directory; a profile written by an older ``view``
(no file) or a damaged file answers ``available: false`` with the reason, never an error page.
"""

from __future__ import annotations

import json
from typing import Any

from neuron_explorer.contracts.dataset import SUMMARY_FILE
from neuron_explorer.ui import paths
from neuron_explorer.ui.profile import Profile
from neuron_explorer.util.files import read_regular

MAX_BYTES = 64 << 20  # a 512-rank job's per-step lists stay far below this
STEP_COLUMNS = ("compute_ns", "exposed_collective_ns", "sync_wait_ns", "compile_ns", "data_loading_ns", "host_ns",
                "idle_ns")


def _rel(p: Profile, v: Any) -> float | None:
    return float(int(v) - p.origin) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def summary_page(p: Profile) -> dict[str, Any]:
    """The verdict, utilisation, insights (each with ``t0``/``t1`` to open) and the per-step table
    (each row with ``t0``/``t1``) of ``p``; ``available`` false with ``reason`` when there is none."""
    path = paths.single_file(p.workspace, p.dir, SUMMARY_FILE)
    if path is None:
        return {"available": False, "reason": f"no {SUMMARY_FILE} in this profile (written by `view` since the "
                "summary-json schema 2; ingest the capture again to get one)"}
    try:
        doc = json.loads(read_regular(path, MAX_BYTES))
    except (OSError, ValueError) as e:
        return {"available": False, "reason": f"{SUMMARY_FILE} cannot be read: {str(e).splitlines()[0][:200]}"}
    if not isinstance(doc, dict):
        return {"available": False, "reason": f"{SUMMARY_FILE} is not a JSON object"}
    got = doc.get("steps")
    steps: dict[str, Any] = got if isinstance(got, dict) else {}
    rows = []
    for r in steps.get("per_step") or []:
        if not isinstance(r, dict):
            continue
        t0, t1 = _rel(p, r.get("start_ns")), _rel(p, r.get("end_ns"))
        rows.append({**{k: v for k, v in r.items() if k not in ("start_ns", "end_ns")}, "t0": t0, "t1": t1})
    insights = []
    for i, x in enumerate(doc.get("insights") or []):
        if not isinstance(x, dict):
            continue
        raw = x.get("evidence")
        evd: dict[str, Any] = raw if isinstance(raw, dict) else {}
        t0, t1 = _rel(p, evd.get("start_ns")), _rel(p, evd.get("end_ns"))
        ev = {k: v for k, v in evd.items() if k not in ("start_ns", "end_ns")}
        insights.append({**{k: v for k, v in x.items() if k != "evidence"}, "evidence": ev, "rank_order": i + 1,
                         "t0": t0, "t1": t1})
    span = [r for r in rows if r["t0"] is not None and r["t1"] is not None]
    return {"available": True, "verdict": doc.get("verdict"), "utilisation": doc.get("utilisation"),
            "noise_threshold": doc.get("noise_threshold"), "insights": insights,
            "steps": {"count": steps.get("count"), "method": steps.get("method"), "variation": steps.get("variation"),
                      "breakdown": steps.get("breakdown"), "per_step": rows, "columns": list(STEP_COLUMNS),
                      "t0": min((r["t0"] for r in span), default=None),
                      "t1": max((r["t1"] for r in span), default=None)}}
