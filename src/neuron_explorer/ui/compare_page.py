"""The viewer's compare mode: ``neuron-explorer diff`` of two profiles of the workspace, on each
profile's time axis (issue 34, item 4; docs/diff.md "In the viewer").

Why a child process and not an import: the UI imports contracts and util only (docs/architecture.md),
and a diff reads both datasets whole (seconds of CPU and hundreds of MB at millions of events), which
the server's threads answering window queries should not share a heap with.  The child is the
command users run, so the table the viewer docks is the one ``diff --format json`` prints: the same
alignment, intervals and verdicts (decision 0154).

What the browser gets: the document's headline parts (``step``, ``noise``, ``changes``, ``warnings``)
and its rows, each side's ``at`` (the occurrence nearest the median, absolute nanoseconds) given
again relative to that side's profile origin (``t0``/``t1``) as every other answer of the API, so a
row can move both timelines to the item.  One run per pair of profile versions: the answer is kept
(a few pairs) until either profile is ingested again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections import OrderedDict
from typing import Any

from neuron_explorer.ui.params import BadRequest, one_line
from neuron_explorer.ui.profile import Profile, stamp
from neuron_explorer.util.files import read_regular

MAX_BYTES = 256 << 20  # the document of two 512-rank profiles stays far below this
TIMEOUT_S = 1800.0  # a diff of two 20M-event profiles takes tens of CPU-seconds, not half an hour
KEEP = 4  # pairs whose answers are kept

_lock = threading.Lock()
_answers: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
_running: dict[tuple, threading.Lock] = {}


def _rel(p: Profile, v: Any) -> float | None:
    return float(int(v) - p.origin) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _side(p: Profile, s: Any) -> dict[str, Any] | None:
    """One side of a row, its ``at`` with ``t0``/``t1`` on ``p``'s axis."""
    if not isinstance(s, dict):
        return None
    out = dict(s)
    at = s.get("at")
    if isinstance(at, dict):
        out["at"] = {**at, "t0": _rel(p, at.get("start_ts")), "t1": _rel(p, at.get("end_ts"))}
    return out


def _run(a: Profile, b: Profile) -> dict[str, Any]:
    """``diff --format json`` of the two profiles' directories in a child process."""
    with tempfile.TemporaryDirectory(prefix="ne-ui-diff-") as tmp:
        out = os.path.join(tmp, "diff.json")
        argv = [sys.executable, "-m", "neuron_explorer", "diff", str(a.dir), str(b.dir), "--format", "json",
                "--output-file", out]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return {"available": False, "reason": f"the diff did not finish in {TIMEOUT_S:.0f} s"}
        if p.returncode not in (0, 1) or not os.path.exists(out):  # 1: --fail-if-slower, not asked here
            last = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
            return {"available": False, "reason": f"the diff failed: {last[:300]}"}
        try:
            doc = json.loads(read_regular(out, MAX_BYTES))
        except (OSError, ValueError) as e:
            return {"available": False, "reason": f"the diff's answer cannot be read: {one_line(e)}"}
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        return {"available": False, "reason": "the diff's answer is not a diff document"}
    rows = []
    for r in doc["rows"]:
        if isinstance(r, dict):
            rows.append({**r, "baseline": _side(a, r.get("baseline")), "candidate": _side(b, r.get("candidate"))})
    return {"available": True, "baseline": a.name, "candidate": b.name, "schema": doc.get("schema"),
            "step": doc.get("step"), "noise": doc.get("noise"), "settings": doc.get("settings"),
            "changes": doc.get("changes") or [], "warnings": doc.get("warnings") or [],
            "new_graphs": doc.get("new_graphs") or [], "vanished_graphs": doc.get("vanished_graphs") or [],
            "rows": rows}


def diff_page(a: Profile, b: Profile) -> dict[str, Any]:
    """The diff of baseline ``a`` and candidate ``b`` for the viewer (see the module)."""
    if a.dir == b.dir:
        raise BadRequest("compare a profile with another one, not with itself")
    key = (str(a.dir), stamp(a.meta_file), str(b.dir), stamp(b.meta_file))
    with _lock:
        got = _answers.get(key)
        if got is not None:
            _answers.move_to_end(key)
            return got
        gate = _running.setdefault(key, threading.Lock())
    with gate:  # concurrent first requests of one pair wait for one run
        with _lock:
            got = _answers.get(key)
        if got is not None:
            return got
        try:
            got = _run(a, b)
        finally:
            with _lock:
                _running.pop(key, None)
        if got["available"]:  # a failure is asked again (the profile may be fixed meanwhile)
            with _lock:
                _answers[key] = got
                while len(_answers) > KEEP:
                    _answers.popitem(last=False)
    return got
