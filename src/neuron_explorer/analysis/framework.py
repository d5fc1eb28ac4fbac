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
"""

from __future__ import annotations

import numpy as np

from neuron_explorer.contracts.events import SOURCE_FRAMEWORK

__all__ = ["FRAMEWORK_FLOW_BIT", "framework_flow_ids", "label_types", "link_regions"]

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


def link_regions(cols: dict[str, np.ndarray], is_fw: np.ndarray, is_call: np.ndarray, is_core: np.ndarray,
                 index: int) -> None:
    """Fill ``cols["framework_stream_id"]`` and ``cols["flow_id2"]``, and put each region that runs
    inside an execution into that execution's flow (``cols["flow_id"]``; see the module).

    ``is_fw``/``is_call``/``is_core``: per event, a framework region, an ``nrt_execute``, an
    ``nc_exec_running``."""
    n = len(is_fw)
    fsid = cols["framework_stream_id"] = np.full(n, -1, dtype=np.int64)
    flow2 = cols["flow_id2"] = np.zeros(n, dtype=np.int64)
    fw = np.flatnonzero(is_fw)
    if not len(fw):
        return
    fsid[fw] = cols["id"][fw]
    calls = np.flatnonzero(is_call)
    if not len(calls):
        return
    # a region inside an execution (PyTorch's own ``Optimizer.step#SGD.step`` inside the optimizer
    # step, ``DistributedDataParallel.forward`` inside the module call) joins the flow the host
    # call shares with its core execution: region -> nrt_execute -> nc_exec_running is one flow
    host = _innermost(cols, calls, fw)
    inside = host >= 0
    if inside.any():
        cols["flow_id"][fw[inside]] = cols["flow_id"][host[inside]]
    owner = _innermost(cols, fw, calls)
    linked = owner >= 0
    if not linked.any():
        return
    c_idx, r_idx = calls[linked], owner[linked]
    fsid[c_idx] = cols["id"][r_idx]
    flows = framework_flow_ids(index, cols["id"][r_idx])
    flow2[c_idx] = flows
    flow2[r_idx] = flows
    core = np.flatnonzero(is_core)
    if len(core):  # the core execution of a linked call: same core, same execution id
        def key(i: np.ndarray) -> np.ndarray:
            return (cols["nc_idx"][i] << 40) | (cols["exec_id"][i] & _LOW40)

        ck = key(c_idx)
        order = np.argsort(ck, kind="stable")
        k = np.minimum(np.searchsorted(ck[order], key(core)), len(order) - 1)
        hit = ck[order[k]] == key(core)
        fsid[core[hit]] = fsid[c_idx[order[k[hit]]]]


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
