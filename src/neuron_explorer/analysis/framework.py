"""Framework events in the ``view`` model: named by their label, linked to the calls they issued
(docs/decisions/0026-framework-regions.md).

* **Names.**  A framework event (source ``framework``, its label in a ``name_str`` argument:
  ``record_function`` regions, JAX ``TraceAnnotation``) is named by its label.  Each string of the
  capture's table gets a type id of its own after the file's types (``len(type_names) + string
  id``), so the model's one name per type holds, and the ids are the same in every chunk of a
  process that exporters read piece by piece.
* **framework_stream_id.**  A framework event's is its own event id; an ``nrt_execute`` (and the
  ``nc_exec_running`` of the same execution) issued inside a region on the same thread carries
  the id of the innermost such region.
* **Flows.**  ``flow_id2`` gives a region and each ``nrt_execute`` it issued one more flow, so the
  chain region -> ``nrt_execute`` -> ``nc_exec_running`` is two flows joined at the host call
  (the execution's own flow links the call to the core).
* **Regions inside an execution.**  PyTorch opens its own regions inside the execution they
  belong to (``Optimizer.step#SGD.step`` inside the optimizer step we record around
  ``opt.step()``, ``DistributedDataParallel.forward`` inside the root module's call).  Such a
  region (the innermost ``nrt_execute`` around it, same thread) takes that execution's flow as its
  ``flow_id``: it, the host call and the core execution are one flow.  ``framework_stream_id``
  keeps its meaning (a call's is the region around it), so the two links never compete for one
  value: a user's region around ``opt.step()`` still owns the call, and PyTorch's region inside it
  is linked too (docs/decisions/0084-regions-inside-executions.md).
* **Before the filters.**  The links are found once per process on all its events, before a
  processing-time filter drops any (``RegionLinks``), and each event carries them by its index in
  the capture: a filter that keeps regions and core executions but drops the ``nrt_execute``
  between them keeps them linked, and a region and its calls in different chunks of a large
  process are linked too (docs/decisions/0090-links-and-clocks-before-filters.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_explorer.contracts.events import SOURCE_FRAMEWORK

__all__ = ["FRAMEWORK_FLOW_BIT", "RegionLinks", "find_links", "framework_flow_ids", "label_types"]

# framework flows: bit 61 set (executions' flows have neither 61 nor 62, collectives have 62)
FRAMEWORK_FLOW_BIT = 1 << 61
_LOW40 = (1 << 40) - 1


def label_types(type_names: list[str], type_args: list, type_sources: list[str]) -> list[int]:
    """The type ids whose events are named by their label (framework types with a ``name_str``)."""
    return [t for t, (args, src) in enumerate(zip(type_args, type_sources))
            if src == SOURCE_FRAMEWORK and args and args[0] == "name_str"]


def framework_flow_ids(index: int, event_ids: np.ndarray) -> np.ndarray:
    """The flow joining a region to the calls it issued: process index and the region's event id."""
    return (FRAMEWORK_FLOW_BIT | ((index + 1) << 40) | (event_ids & _LOW40)).astype(np.int64)


@dataclass
class RegionLinks:
    """The region links of one process, found on all its events before any filter (so a filter
    that drops the calls between a region and its core executions keeps them linked), by event
    index in the capture (``events.build`` turns the indices into the run's ids).

    ``events`` lists, ascending, the events that carry a link; for each: the region its
    ``framework_stream_id`` names (-1: none), the region whose framework flow it shares
    (``flow_id2``; -1: none), and for a region that runs inside an execution, that execution's
    flow (0: none)."""

    events: np.ndarray
    stream: np.ndarray
    flow2: np.ndarray
    flow: np.ndarray

    @classmethod
    def none(cls) -> "RegionLinks":
        e = np.empty(0, dtype=np.int64)
        return cls(e, e, e, e)

    def restrict(self, keep: np.ndarray) -> "RegionLinks":
        """The links that remain when only the events where ``keep`` (per event index) are
        written: a link to a region that is not written is dropped (no dangling stream id)."""
        if not len(self.events):
            return self
        ev = keep[self.events]
        stream = np.where(self.stream >= 0, np.where(keep[np.maximum(self.stream, 0)], self.stream, -1), -1)[ev]
        flow2 = np.where(self.flow2 >= 0, np.where(keep[np.maximum(self.flow2, 0)], self.flow2, -1), -1)[ev]
        return RegionLinks(self.events[ev], stream, flow2, self.flow[ev])

    def lookup(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(stream, flow2, flow) of each event index of ``index`` (-1, -1, 0 where it has none)."""
        n = len(index)
        stream, flow2, flow = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64), np.zeros(n, np.int64)
        if not len(self.events) or not n:
            return stream, flow2, flow
        k = np.minimum(np.searchsorted(self.events, index), len(self.events) - 1)
        hit = self.events[k] == index
        if hit.any():
            stream[hit], flow2[hit], flow[hit] = self.stream[k[hit]], self.flow2[k[hit]], self.flow[k[hit]]
        return stream, flow2, flow


def find_links(start: np.ndarray, end: np.ndarray, tid: np.ndarray, nc: np.ndarray, exec_id: np.ndarray,
               is_fw: np.ndarray, is_call: np.ndarray, is_core: np.ndarray, exec_flow: np.ndarray,
               index: np.ndarray | None = None) -> RegionLinks:
    """The links among some events of one process (see the module): per event its span, thread,
    core, execution id, whether it is a framework region, an ``nrt_execute`` or an
    ``nc_exec_running``, and its execution flow (``flow_id`` of a call); ``index``: the events'
    indices in the capture (default: their positions)."""
    n = len(is_fw)
    pos = np.arange(n, dtype=np.int64) if index is None else np.asarray(index, dtype=np.int64)
    fw = np.flatnonzero(is_fw)
    calls = np.flatnonzero(is_call)
    if not len(fw) or not len(calls):
        return RegionLinks.none()
    span = {"start_ts": start, "end_ts": end, "thread_id": tid}
    stream = np.full(n, -1, dtype=np.int64)
    flow2 = np.full(n, -1, dtype=np.int64)
    flow = np.zeros(n, dtype=np.int64)
    # a region inside an execution (PyTorch's own ``Optimizer.step#SGD.step`` inside the optimizer
    # step, ``DistributedDataParallel.forward`` inside the module call) joins the flow the host
    # call shares with its core execution: region -> nrt_execute -> nc_exec_running is one flow
    host = _innermost(span, calls, fw)
    inside = host >= 0
    flow[fw[inside]] = exec_flow[host[inside]]
    owner = _innermost(span, fw, calls)
    linked = owner >= 0
    c_idx, r_idx = calls[linked], owner[linked]
    stream[c_idx] = pos[r_idx]
    flow2[c_idx] = pos[r_idx]
    flow2[r_idx] = pos[r_idx]
    core = np.flatnonzero(is_core)
    if len(core) and len(c_idx):  # the core execution of a linked call: same core, same execution id
        def key(i: np.ndarray) -> np.ndarray:
            return (nc[i] << 40) | (exec_id[i] & _LOW40)

        ck = key(c_idx)
        order = np.argsort(ck, kind="stable")
        k = np.minimum(np.searchsorted(ck[order], key(core)), len(order) - 1)
        hit = ck[order[k]] == key(core)
        stream[core[hit]] = stream[c_idx[order[k[hit]]]]
    keep = np.flatnonzero((stream >= 0) | (flow2 >= 0) | (flow != 0))
    order = np.argsort(pos[keep], kind="stable")
    keep = keep[order]
    return RegionLinks(pos[keep], stream[keep], flow2[keep], flow[keep])


def _innermost(cols: dict[str, np.ndarray], outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """For each event of ``inner``: the innermost event of ``outer`` on the same thread whose span
    contains it (its event index), or -1.  Spans on one thread nest: the last ``outer`` event
    started by then, climbed to the enclosing ones until one ends no earlier (vectorised)."""
    start, end, tid = cols["start_ts"], cols["end_ts"], cols["thread_id"]
    found = np.full(len(inner), -1, dtype=np.int64)
    for t in np.intersect1d(tid[outer], tid[inner]).tolist():
        outs = outer[tid[outer] == t]
        outs = outs[np.lexsort((-end[outs], start[outs]))]  # by start, the longer first
        parent = _parents(end[outs])
        sel = np.flatnonzero(tid[inner] == t)
        s_in, e_in = start[inner[sel]], end[inner[sel]]
        r = np.searchsorted(start[outs], s_in, side="right") - 1  # the last one started by then
        for _ in range(len(outs) + 1):  # climb to the innermost one that contains the event
            out = (r >= 0) & (end[outs[np.maximum(r, 0)]] < e_in)
            if not out.any():
                break
            r = np.where(out, parent[np.maximum(r, 0)], r)
        found[sel] = np.where(r >= 0, outs[np.maximum(r, 0)], -1)
    return found


def _parents(ends: np.ndarray) -> np.ndarray:
    """For regions sorted by start (longer first on ties): the innermost earlier region that
    contains each one, or -1.  A stack walk: regions on one thread nest."""
    parent = np.full(len(ends), -1, dtype=np.int64)
    stack: list[int] = []
    e_l = ends.tolist()
    for i in range(len(e_l)):
        while stack and e_l[stack[-1]] < e_l[i]:  # started earlier but ends first: not around i
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent
