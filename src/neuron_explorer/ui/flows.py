"""Flow arrows: every flow in a window (``/flows``), or the flows of one selected event (``/event/flows``).

Why two questions: drawing every flow in view buries the data (each host call -> core execution pair
becomes a loop, and at mid zoom a cap of 2000 paints an opaque band over a few ranks while the others
get none). So the viewer draws, by default, only what the user asked about: the selected event's own
flow (its host call <-> core execution pair, or its collective across every rank, in arrival order)
and its *framework chain* (the framework and runtime events on the same thread that enclose it, or
enclose its host call). "All flows in view" stays available as an option, answered as before.

Both come from the event index (each event's flow number and the flow table, see
``docs/decisions/0018-ui-flows.md``); an endpoint is ``[event id, leaf, start, end]`` with times
relative to the profile's origin.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neuron_explorer.ui import wire
from neuron_explorer.ui.params import NotFound, window_args
from neuron_explorer.ui.profile import Profile
from neuron_explorer.ui.rows import check_mode

CHAIN_MAX = 16  # enclosing events listed per endpoint (deeper nesting is cut, outermost kept)
FLOW_ENDS_MAX = 4096  # endpoints of one flow sent (a collective over more ranks is cut, flagged)


def ends(p: Profile, pos: np.ndarray) -> list[list[Any]]:
    """``[event id, leaf, start, end]`` of index positions ``pos`` (relative ns; ids by ``wire.ids``)."""
    idx = p.index
    assert idx is not None
    pos = np.asarray(pos, dtype=np.int64)
    s = idx.s[pos] + p.shift
    e = s + idx.d[pos].astype(np.int64)
    ids = wire.ids(idx.id[pos])
    ids = ids.tolist() if isinstance(ids, np.ndarray) else ids
    return [[i, lf, a, b] for i, lf, a, b in zip(ids, idx.leaf_of(pos).tolist(), s.tolist(), e.tolist())]


def flows(p: Profile, mode: str, t0: float, t1: float, limit: int = 2000) -> dict[str, Any]:
    """Flows (events sharing a ``SystemProfileEvents.flow_id``) with at least two events overlapping
    [t0, t1) (relative ns: the events a window shows), the ``limit`` smallest flow ids.

    Per flow: its id (a string: 64-bit) and its endpoints ordered by start (then event id). ``leaf``
    is the profile's leaf number, the same in every grouping mode and layout: the browser maps leaves
    to the rows it shows (each row lists its leaves) and draws an arrow between consecutive
    endpoints. A ``SystemProfileFlows`` table of older stores is ignored.
    """
    check_mode(mode)
    t0, t1, _ = window_args(t0, t1, 1)
    out: dict[str, Any] = {"flows": [], "truncated": False}
    idx = p.index
    if idx is None:
        return out
    r = idx.flows(t0 - p.shift, t1 - p.shift, limit, p.flow_strategy)
    out["truncated"] = r["truncated"]
    pos = r["pos"]
    if not len(pos):
        return out
    all_ends = ends(p, pos)
    off = r["off"].tolist()
    out["flows"] = [{"flow_id": str(fid), "ends": all_ends[off[j]:off[j + 1]]}
                    for j, fid in enumerate(r["fid"].tolist())]
    return out


def locate(p: Profile, event_id: int, leaf: int, start: float | None = None) -> int:
    """The index position of event ``event_id`` of ``leaf`` (its start, relative ns, narrows the search
    to a binary search; without it the leaf's ids are scanned)."""
    idx = p.index
    if idx is None or not 0 <= leaf < len(p.leaves):
        raise NotFound(f"event {event_id}")
    a, b = int(idx.off[leaf]), int(idx.off[leaf + 1])
    if start is not None:
        si = int(round(start - p.shift))
        lo = a + int(np.searchsorted(idx.s[a:b], si, "left"))
        hi = a + int(np.searchsorted(idx.s[a:b], si, "right"))
        hit = np.flatnonzero(idx.id[lo:hi] == event_id)
        if len(hit):
            return lo + int(hit[0])
    hit = np.flatnonzero(idx.id[a:b] == event_id)
    if not len(hit):
        raise NotFound(f"event {event_id}")
    return a + int(hit[0])


def _kind(p: Profile, leaves: list[int]) -> str:
    names = {p.leaves[lf].name for lf in leaves}
    if any(n.startswith("cc_") for n in names):
        return "collective"
    if names & {"nrt_execute", "nc_exec_running"}:
        return "execution"
    return "flow"


def _enclosing(p: Profile, pos: int) -> list[int]:
    """Positions of the events on the same thread of the same process that enclose event ``pos``
    (start at or before it, end at or after it), outermost first: its framework / runtime chain."""
    idx = p.index
    assert idx is not None
    me = p.leaves[int(idx.leaf_of(np.array([pos]))[0])]
    s0 = int(idx.s[pos])
    e0 = s0 + int(idx.d[pos])
    same = [lf.leaf for lf in p.leaves if (lf.inst, lf.pid, lf.tid) == (me.inst, me.pid, me.tid)]
    found: list[tuple[int, int, int]] = []
    for _lf, a, b in idx.raw_slices(same, s0, s0 + 1):  # events overlapping the start instant
        s = idx.s[a:b]
        e = s + idx.d[a:b].astype(np.int64)
        for j in np.flatnonzero((s <= s0) & (e >= e0)).tolist():
            q = a + j
            if q != pos:
                found.append((int(s[j]), -int(e[j]), q))
    found.sort()
    return [q for _, _, q in found[:CHAIN_MAX]]


def event_flows(p: Profile, event_id: int, leaf: int, start: float | None = None) -> dict[str, Any]:
    """The flows of one event and its framework chain (see the module docstring).

    ``flows``: the event's flows, by flow id (``kind`` execution, collective or flow; a host call issued
    inside a framework region is in that region's flow and in its core execution's), each with every
    endpoint in start order; ``chain``: the events enclosing the selected event on its thread, and those enclosing the
    flow's endpoints of the same process (its host call's framework regions), outermost first."""
    pos = locate(p, event_id, leaf, start)
    idx = p.index
    assert idx is not None
    out: dict[str, Any] = {"event": ends(p, np.array([pos]))[0], "flows": [], "chain": []}
    members = [pos]
    me = p.leaves[leaf]
    for f in idx.flow_numbers(pos):  # every flow of the event: a host call is in two
        a, b = int(idx.fx_off[f]), int(idx.fx_off[f + 1])
        fpos = np.asarray(idx.fx_pos[a:b], dtype=np.int64)
        fpos = fpos[np.lexsort((idx.id[fpos], idx.s[fpos]))]
        truncated = len(fpos) > FLOW_ENDS_MAX
        fl = ends(p, fpos[:FLOW_ENDS_MAX])
        out["flows"].append({"flow_id": str(int(idx.fx_id[f])), "kind": _kind(p, [e[1] for e in fl]),
                             "ends": fl, "truncated": truncated})
        members += [int(q) for q, e in zip(fpos.tolist(), fl)
                    if (p.leaves[e[1]].inst, p.leaves[e[1]].pid) == (me.inst, me.pid) and int(q) not in members]
    chain: list[int] = []
    for q in members:
        for c in _enclosing(p, q):
            if c not in chain and c not in members:
                chain.append(c)
    if chain:
        cs = np.array(chain, dtype=np.int64)
        cs = cs[np.lexsort((-(idx.s[cs] + idx.d[cs].astype(np.int64)), idx.s[cs]))]
        out["chain"] = ends(p, cs)
    return out
