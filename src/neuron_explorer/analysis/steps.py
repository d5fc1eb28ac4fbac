"""Training steps of one process, found without annotations, and where each step's time went.

**What a step is** (docs/summary.md, decision 0103).  One process's steps are found from its own
events, by the first rule that applies:

1. ``profiler_step``: PyTorch's ``ProfilerStep#N`` regions (``torch.profiler.profile`` with
   ``prof.step()``), two or more: each region is step ``N``, its span the step's span.
2. ``optimizer``: the executions of the process's optimizer step (the graph whose ``ModelInfo.kind``
   is ``optimizer``: ``opt.step()`` recorded as an execution; with several optimizers, the one
   stepped most often), else PyTorch's ``Optimizer.step#...`` regions: step ``k`` ends where the
   ``k``-th optimizer step ends.
3. ``cycle``: the repeating cycle of root executions: the graph executed most often (not a
   backward; ties: the longer total), one execution per step (a JAX ``train_step``).

For 2 and 3 a step runs from the end of the previous boundary to the end of its own boundary
(the data loading, forward and backward before an optimizer step belong to it); the first step
starts at the process's first recorded activity (execution, collective, region or wait), so it
holds the warm-up and compilation.  Activity after the last boundary is no step.

**Numbering.**  ``profiler_step``: ``N`` of the region.  Otherwise step numbers count boundaries:
the ``k``-th boundary the capture recorded (from 0) is step ``base + k``.  ``base`` is 0 unless the
capture holds a framework region labelled ``neuron_explorer.step#B`` (``STEP_MARK``): then the
first boundary that ends after that region starts is step ``B`` (a capture started mid-run records
the process's own count this way; any in-process counter that counts optimizer steps from the
process's start, ``opt.step()`` calls, agrees with it).  Every rank of a data-parallel job runs one
optimizer step per step, so captures that start with the processes are numbered alike on every
rank.

**Breakdown.**  Per step, the wall time is split by priority among the events below: with
``U_k`` the union of the first ``k`` categories, category ``k`` gets ``|U_k| - |U_(k-1)|`` of the
step (one sweep over the categories' intervals in start order, ``analysis._sweep`` in C, or its
numpy twin: merged sorted intervals and cumulative covered time; no per-event or per-step Python).
In order: compute (``nc_exec_running``, core busy), exposed collective (``cc_running``/``cc_exec_barrier`` not
overlapped by compute), synchronisation wait (``kbl_exec_wait``), compilation (``model_load`` widened over
the unrecorded gaps on either side: Dynamo traces a frame before it calls the backend we record,
and builds its guards after),
data loading (``enumerate(DataLoader)#...`` regions), host/framework (other framework regions,
``nrt_execute``) and idle (none of them).  These seven sum to the step's wall time.  Besides the
partition: ``collective_ns`` (all collective time), ``own_ns`` (time in neither a collective nor a
wait: what a rank spent on its own work, which the straggler rule compares across ranks) and
``compute_own_ns`` (compute outside collectives and waits), ``optimizer_ns`` (the optimizer's
executions), ``small_collective_call_ns`` (what one collective under 1 MiB cost: ``_paced``),
counts and the executions' recorded flops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neuron_explorer.analysis import stepalign

# (the covered time in one C pass; without it, or with NEURON_EXPLORER_PURE_PYTHON=1, its numpy twin)
from neuron_explorer.analysis.native import sweep as _sweep
from neuron_explorer.util.intervals import overlap_runs

__all__ = ["BREAKDOWN", "COUNTS", "DATALOADER_PREFIX", "FIGURE_AT_MOST", "STEP_MARK", "Steps", "figured_sample",
           "find_steps", "session_steps"]

STEP_MARK = "neuron_explorer.step#"
DATALOADER_PREFIX = "enumerate(DataLoader)#"
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d{1,15})$")
_OPT_REGION = "Optimizer.step#"

# the partition of a step's wall time, in priority order (docs/summary.md)
BREAKDOWN = ("compute_ns", "exposed_collective_ns", "sync_wait_ns", "compile_ns", "data_loading_ns", "host_ns",
             "idle_ns")
COUNTS = ("executions", "collectives", "collective_bytes", "small_collectives", "small_collective_bytes", "compiles",
          "sync_waits", "numerical_errors", "graphs")
SMALL_COLLECTIVE_BYTES = 1 << 20  # an all-reduce below 1 MiB pays its fixed cost for little data
FIGURE_AT_MOST = 2000  # steps figured per process by ``view`` (docs/summary.md, "Bounded work")

# category bits of an elementary segment
_C, _X, _W, _K, _D, _H = 1, 2, 4, 8, 16, 32


@dataclass
class Steps:
    """One process's steps: numbers, spans (ns on the clock of the times given) and per-step
    figures (``columns``: every name of ``BREAKDOWN`` and ``COUNTS`` plus ``wall_ns``,
    ``collective_ns``, ``own_ns``, ``compute_own_ns``, ``optimizer_ns``, ``small_collective_call_ns`` and
    ``flops``)."""

    method: str  # "profiler_step", "optimizer", "cycle" or "none"
    boundary: str  # what delimits the steps: a graph's name or a region label
    number: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    # when only some steps were figured (``find_steps(figure_at_most=...)``): the number and span
    # of every step found, the figured ones among them
    every: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    # where the numbers come from: "region" (ProfilerStep#N), "mark" (STEP_MARK) or "count"; and
    # the collectives that tie them to the other ranks' (``analysis.stepalign``: keys, numbers)
    numbered: str = "count"
    anchors: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.number)

    def shifted(self, offset_ns: int) -> "Steps":
        """The same steps on a clock ``offset_ns`` later (monotonic -> the events' wall clock)."""
        every = None if self.every is None else (self.every[0], self.every[1] + offset_ns, self.every[2] + offset_ns)
        return Steps(self.method, self.boundary, self.number, self.start_ns + offset_ns, self.end_ns + offset_ns,
                     self.columns, every, self.numbered, self.anchors)

    def to_columns(self) -> dict[str, Any]:
        """Method, boundary and every column (numpy arrays): what a conversion task hands back
        for ``analysis.insights`` (cheap to pickle, whatever the step count); with ``every_number``,
        ``every_start_ns`` and ``every_end_ns`` when only some steps were figured."""
        out = {"method": self.method, "boundary": self.boundary, "number": self.number,
               "start_ns": self.start_ns, "end_ns": self.end_ns, **self.columns}
        if self.every is not None:
            out.update(every_number=self.every[0], every_start_ns=self.every[1], every_end_ns=self.every[2])
        out["numbered"] = self.numbered
        if self.anchors is not None:
            out.update(anchor_key=self.anchors[0], anchor_number=self.anchors[1])
        return out

    def to_json(self) -> dict[str, Any]:
        """Columns as lists: a ``steps.per_process`` object of summary-json (docs/summary.md)."""
        return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in self.to_columns().items()
                if not k.startswith(("every_", "anchor_"))}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Steps":
        known = set(BREAKDOWN + COUNTS) | {"wall_ns", "collective_ns", "own_ns", "compute_own_ns", "optimizer_ns",
                                            "small_collective_call_ns", "flops"}
        cols = {k: np.asarray(v, dtype=np.float64 if k == "flops" else np.int64) for k, v in d.items()
                if k in known}
        return cls(d["method"], d["boundary"], np.asarray(d["number"], dtype=np.int64),
                   np.asarray(d["start_ns"], dtype=np.int64), np.asarray(d["end_ns"], dtype=np.int64), cols)


def _none() -> Steps:
    e = np.empty(0, dtype=np.int64)
    return Steps("none", "", e, e, e, _figures(e, e, {}, e, e, e, e, e, {}))


_TYPES = ("nc_exec_running", "cc_running", "cc_exec_barrier", "kbl_exec_wait", "model_load", "framework_op",
          "nrt_execute", "numerical_err")


def find_steps(typ: np.ndarray, start: np.ndarray, end: np.ndarray, model_id: np.ndarray, label: np.ndarray,
               nbytes: np.ndarray, names: dict[str, int], strings: list[str], models: list[tuple[int, str, str, float]],
               figure_at_most: int | None = None, counts: bool = True,
               by_type: tuple[np.ndarray, np.ndarray] | None = None) -> Steps:
    """Steps of one process from its event columns (any clock; one array per column, all the
    same length: type ids, spans, the ``model_id`` of executions and model loads, the label
    string id of framework regions, the ``bytes`` of collectives; -1 where a type has none).

    ``names``: type name -> id for the types used here (absent: none recorded); ``models``:
    (id, name, kind, flops per execution) of the process's graphs.  ``figure_at_most``: with more
    steps than that (and disjoint ones), only a sample is figured (``figured_sample``; the rest
    keep their number and span in ``Steps.every``) from the events that overlap it.  ``counts=False``:
    only the durations (``wall_ns``, ``BREAKDOWN``, ``collective_ns``, ``own_ns``, ``compute_own_ns``),
    the same values, without the counts, flops and per-call figures (what a diff compares).
    ``by_type``: the rows grouped by type when the caller has them (``order`` and ``bounds``: the
    rows of type t, ascending, are ``order[bounds[t]:bounds[t + 1]]``)."""
    tid = {k: names.get(k, -1) for k in _TYPES}
    by = _ByType(typ, by_type)
    ex, fw = by.rows(tid["nc_exec_running"]), by.rows(tid["framework_op"])
    lab_kind = _label_kinds(strings)  # per string id: 0 other, 1 data loader, 2 optimizer region, 3 mark
    first = int(start.min()) if len(start) else None
    taken = ((start[ex], end[ex], model_id[ex]), (start[fw], end[fw], label[fw]))
    st = _numbered(*taken[0], *taken[1], lab_kind, strings, models, first, figure_at_most)
    if st is None:
        return _none()
    if st.every is not None:  # only the events the figured steps need
        keep = _overlapping(start, end, st.start_ns, st.end_ns)
        typ, start, end, model_id, label, nbytes = typ[keep], start[keep], end[keep], model_id[keep], label[keep], \
            nbytes[keep]
        return _figure(st, typ, start, end, model_id, label, nbytes, tid, lab_kind, models, counts)
    return _figure(st, typ, start, end, model_id, label, nbytes, tid, lab_kind, models, counts, by, taken)


class _ByType:
    """Which rows hold each event type, ascending (what ``typ == t`` selects), found once per type
    asked for: a compare and ``flatnonzero`` per type costs less than the one stable sort of the
    type ids it replaced, for the eight types a step detector asks for (decision 0201)."""

    def __init__(self, typ: np.ndarray, groups: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.typ = np.asarray(typ)
        self._rows: dict[tuple[int, ...], np.ndarray] = {}
        self.groups = groups  # (order, bounds): the rows of each type already grouped (``find_steps``)

    def rows(self, *types: int) -> np.ndarray:
        """The rows whose type is one of ``types``, ascending."""
        key = tuple(sorted(set(types)))
        got = self._rows.get(key)
        if got is None and self.groups is not None and all(0 <= t < len(self.groups[1]) - 1 for t in key):
            order, bounds = self.groups
            parts = [order[bounds[t]:bounds[t + 1]] for t in key]
            got = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))  # (each part ascending)
            self._rows[key] = got
        if got is None:
            mask = self.typ == key[0]
            for t in key[1:]:
                mask |= self.typ == t
            got = self._rows[key] = np.flatnonzero(mask)
        return got


def _numbered(ex_s, ex_e, ex_m, fw_s, fw_e, fw_l, lab_kind, strings, models, first: int | None,
              figure_at_most: int | None) -> Steps | None:
    """The steps (numbers and spans, no figures yet; the figured sample when there are more than
    ``figure_at_most``) from the executions and framework regions alone; ``first``: the start of
    the process's first recorded activity."""
    fw_k = _kinds_of(lab_kind, fw_l)
    kind_of = {int(m[0]): m[2] for m in models}
    name_of = {int(m[0]): m[1] for m in models}
    method, boundary, number, b_start, b_end = _boundaries(strings, fw_s, fw_e, fw_l, fw_k, ex_s, ex_e, ex_m,
                                                           kind_of, name_of)
    if not len(b_end):
        return None
    if method != "profiler_step":
        order = np.argsort(b_end, kind="stable")
        b_end = b_end[order]
        first = int(b_end[0]) if first is None else first
        b_start = np.concatenate(([min(first, int(b_end[0]))], b_end[:-1]))
        base, numbered = 0, "count"
        marks = np.flatnonzero(fw_k == 3)
        if len(marks):  # neuron_explorer.step#B: the first boundary ending after it is step B
            m = marks[np.argmin(fw_s[marks])]
            k = int(np.searchsorted(b_end, fw_s[m], side="right"))
            base, numbered = _mark_number(strings[int(fw_l[m])]) - k, "mark"
        number = np.arange(len(b_end), dtype=np.int64) + base
    ok = b_end >= b_start  # (a damaged span is no step)
    if not ok.all():
        number, b_start, b_end = number[ok], b_start[ok], b_end[ok]
    if not len(number):
        return None
    if method == "profiler_step":
        numbered = "region"
    b_start, b_end = b_start.astype(np.int64, copy=False), b_end.astype(np.int64, copy=False)
    every = None
    if figure_at_most is not None and len(number) > figure_at_most and method != "profiler_step":
        every = (number, b_start, b_end)
        pick = figured_sample(number, b_end - b_start, figure_at_most)
        number, b_start, b_end = number[pick], b_start[pick], b_end[pick]
    return Steps(method, boundary, number, b_start, b_end, every=every, numbered=numbered)


def _figure(st: Steps, typ, start, end, model_id, label, nbytes, tid, lab_kind, models, counts: bool = True,
            by: _ByType | None = None, taken: tuple | None = None) -> Steps:
    """``st`` figured from the events; ``by`` and ``taken`` (the executions' start, end and
    model id, the framework regions' start, end and label) when ``find_steps`` has them already."""
    by = _ByType(typ) if by is None else by
    if taken is None:
        ex, fw = by.rows(tid["nc_exec_running"]), by.rows(tid["framework_op"])
        taken = ((start[ex], end[ex], model_id[ex]), (start[fw], end[fw], label[fw]))
    (ex_s, ex_e, ex_m), (fw_s, fw_e, fw_l) = taken
    fw_k = _kinds_of(lab_kind, fw_l)
    kind_of = {int(m[0]): m[2] for m in models}
    return _figures_for(st, by, start, end, nbytes, tid, fw_s, fw_e, fw_k, ex_s, ex_e, ex_m, kind_of, models, counts)


def _kinds_of(lab_kind: np.ndarray, fw_l: np.ndarray) -> np.ndarray:
    return lab_kind[np.clip(fw_l, 0, len(lab_kind) - 1)] if len(lab_kind) else np.zeros(len(fw_l), np.int8)


def figured_sample(number: np.ndarray, wall: np.ndarray, cap: int) -> np.ndarray:
    """Which of many steps are figured (indexes, in order): the first (warm-up), a quarter of
    ``cap`` for the process's slowest, and the numbers divisible by a stride that leaves about
    ``cap`` in all: every rank numbers its steps alike, so the even part is the same steps on
    every rank, which the cross-rank figures pair (docs/summary.md, "Bounded work")."""
    n = len(number)
    pick = np.zeros(n, dtype=bool)
    pick[int(np.argmin(number))] = True
    q = min(cap // 4, n)
    if q:
        pick[np.argpartition(-wall, q - 1)[:q]] = True
    stride = max(1, -(-n // max(cap - cap // 4 - 1, 1)))
    pick |= (number % stride) == 0
    return np.flatnonzero(pick)


def _overlapping(start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Which events ``[start, end)`` overlap one of the disjoint spans ``[lo, hi)`` (sorted): one
    that starts inside a span, or reaches the first span after its start (any later span it
    reaches, it reaches through that one's start)."""
    if not len(lo):
        return np.zeros(len(start), dtype=bool)
    k = np.searchsorted(lo, start, side="right") - 1  # the span at or before the start
    inside = (k >= 0) & (start < hi[np.maximum(k, 0)])
    nxt = np.minimum(k + 1, len(lo) - 1)  # reaching a later span means reaching the next one
    return inside | ((k + 1 < len(lo)) & (end > lo[nxt]))


def _label_kinds(strings: list[str]) -> np.ndarray:
    k = np.zeros(len(strings), dtype=np.int8)
    for i, s in enumerate(strings):
        if s.startswith(DATALOADER_PREFIX):
            k[i] = 1
        elif s.startswith(_OPT_REGION):
            k[i] = 2
        elif s.startswith(STEP_MARK) and _mark_number(s) >= 0:
            k[i] = 3
        elif _PROFILER_STEP.match(s):
            k[i] = 4
    return k


def _mark_number(s: str) -> int:
    tail = s[len(STEP_MARK):]
    return int(tail) if tail.isdigit() and len(tail) <= 15 else -1


def _boundaries(strings, fw_s, fw_e, fw_l, fw_k, ex_s, ex_e, ex_m, kind_of, name_of):
    """(method, boundary name, numbers or None, starts or None, ends) by the module's three rules."""
    ps = np.flatnonzero(fw_k == 4)
    if len(ps) >= 2:
        nums = np.asarray([int(_PROFILER_STEP.match(strings[int(fw_l[i])]).group(1)) for i in ps.tolist()],  # type: ignore[union-attr]
                          dtype=np.int64)
        order = np.lexsort((fw_s[ps], nums))
        ps, nums = ps[order], nums[order]
        keep = np.ones(len(ps), dtype=bool)  # one region per number (a nested repeat: the first)
        keep[1:] = nums[1:] != nums[:-1]
        ps, nums = ps[keep], nums[keep]
        return "profiler_step", "ProfilerStep#", nums, fw_s[ps], fw_e[ps]
    mids, counts = _id_counts(ex_m)
    if len(ex_m):
        opt = [(int(c), int(m)) for m, c in zip(mids.tolist(), counts.tolist()) if kind_of.get(m) == "optimizer"]
        if opt and max(opt)[0] >= 1:
            mid = max(opt)[1]
            return "optimizer", name_of.get(mid, f"model_{mid}"), None, None, ex_e[ex_m == mid]
    opt_r = np.flatnonzero(fw_k == 2)
    if len(opt_r):
        return "optimizer", strings[int(fw_l[opt_r[0]])], None, None, fw_e[opt_r]
    if len(ex_m):
        best = None
        _, durs = _id_counts(ex_m, ex_e - ex_s)
        for m, c, d in zip(mids.tolist(), counts.tolist(), durs.tolist()):
            if kind_of.get(m) == "backward":
                continue
            key = (int(c), int(d), -m)
            if best is None or key > best[0]:
                best = (key, m)
        if best is not None and best[0][0] >= 2:
            mid = best[1]
            return "cycle", name_of.get(mid, f"model_{mid}"), None, None, ex_e[ex_m == mid]
    return "none", "", None, None, np.empty(0, dtype=np.int64)


class _Locator:
    """Which step holds a time: the steps' starts sorted once, then one ``searchsorted`` per
    array of times (steps may overlap only under ``profiler_step``: a time goes to the step that
    started last before it, as long as that step has not ended)."""

    def __init__(self, steps: Steps) -> None:
        self.n = len(steps)
        self.order = np.argsort(steps.start_ns, kind="stable")
        self.starts = steps.start_ns[self.order]
        self.ends = steps.end_ns

    def __call__(self, t: np.ndarray) -> np.ndarray:
        if not self.n or not len(t):
            return np.full(len(t), -1, dtype=np.int64)
        i = np.searchsorted(self.starts, t, side="right") - 1
        j = self.order[np.maximum(i, 0)]
        return np.where((i >= 0) & (t < self.ends[j]), j, -1)


def _id_counts(ids: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ids and how many of each (or the sum of ``weights``): ``bincount`` over the
    small ids a capture numbers its graphs with (counted from the smallest: a diff's -1, a graph
    its dataset does not name, is one of them), a sort for anything else."""
    lo = int(ids.min()) if len(ids) else 0
    if len(ids) and int(ids.max()) - lo < (1 << 16):
        at = ids - lo if lo else ids
        c = np.bincount(at, minlength=1)
        present = np.flatnonzero(c)
        w = c if weights is None else np.bincount(at, weights=weights.astype(np.float64), minlength=1)
        return present + lo, w[present]
    u, inv = np.unique(ids, return_inverse=True)
    return u, np.bincount(inv.ravel(), weights=None if weights is None else weights.astype(np.float64),
                          minlength=len(u))


def _step_of(steps: Steps, t: np.ndarray) -> np.ndarray:
    """Per time ``t``, the index of the step holding it, or -1."""
    return _Locator(steps)(t)


def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``util.intervals.merge`` (the union as sorted, disjoint runs, a reversed interval empty), the
    same runs found by sorting the starts and the ends each on its own (``_runs``): no gather in start
    order and no running maximum."""
    if len(starts) == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    s, e = np.asarray(starts), np.asarray(ends)
    e = np.maximum(e, s)
    if not (s[1:] >= s[:-1]).all():  # (events come in time order: usually no sort)
        s = np.sort(s, kind="stable")
    return _runs(s, np.sort(e, kind="stable"))


def _runs(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals given as their starts and their ends each sorted on its own (``e[i]``
    need not be the end of ``s[i]``'s interval; none reversed).  A run ends at the ``i``-th smallest
    end exactly when the next start lies beyond it: the ``i + 1`` intervals that start first are
    then the ``i + 1`` that end first (and its end is the furthest of theirs), and otherwise at least
    two of the first ``i + 2`` reach that start.  So sorting each nearly sorted column (a merge of
    runs: linear) is enough, and two unions join by merging their starts and their ends."""
    cut = np.flatnonzero(s[1:] > e[:-1])
    return s[np.concatenate(([0], cut + 1))], e[np.concatenate((cut, [len(s) - 1]))]


def _join(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The union of two unions ``merge`` made: their starts merged, their ends merged (a stable sort
    of two sorted runs is one linear merge), then ``_runs``; the same runs as ``_merge`` of both."""
    (a_s, a_e), (b_s, b_e) = a, b
    if not len(b_s):
        return a
    if not len(a_s):
        return b
    return _runs(np.sort(np.concatenate((a_s, b_s)), kind="stable"), np.sort(np.concatenate((a_e, b_e)), kind="stable"))


class _Spans:
    """The steps' spans as indexes into their sorted distinct ends, so that the covered time of
    a union is looked up once per distinct boundary (contiguous steps share theirs)."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray) -> None:
        self.n = n = len(lo)
        # steps one after another (each starts where the one before ended, ends strictly later): the
        # distinct points are the first start and every end, in order (no sort); step i spans points
        # i and i + 1 (no index arrays made)
        self.chain = bool(n and lo[0] < hi[0] and (lo[1:] == hi[:-1]).all() and (hi[1:] > hi[:-1]).all())
        self._lo: np.ndarray | None = None
        self._hi: np.ndarray | None = None
        if self.chain:
            self.points = np.concatenate((lo[:1], hi))
            return
        self.points = _distinct(np.concatenate([lo, hi]))
        self._lo = np.searchsorted(self.points, lo)
        self._hi = np.searchsorted(self.points, hi)

    @property
    def ilo(self) -> np.ndarray:
        """Each step's first point (an index into ``points``)."""
        return np.arange(self.n) if self._lo is None else self._lo

    @property
    def ihi(self) -> np.ndarray:
        """Each step's last point (an index into ``points``)."""
        return np.arange(1, self.n + 1) if self._hi is None else self._hi

    def within(self, u: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Per span, the time the disjoint sorted intervals ``u`` cover in it: the difference of
        the cumulative covered time at both ends (one ``searchsorted`` of the boundaries)."""
        us, ue = u
        if not len(us):
            return np.zeros(self.n, dtype=np.int64)
        t = self.points
        length = ue - us
        before = np.empty(len(us) + 1, dtype=np.int64)
        before[0] = 0
        np.cumsum(length, out=before[1:])
        k = np.searchsorted(us, t, side="right")  # intervals starting at or before t
        km = np.maximum(k - 1, 0)
        part = np.minimum(t - us[km], length[km])
        return self.between(np.where(k > 0, before[km] + np.maximum(part, 0), 0))

    def between(self, upto: np.ndarray) -> np.ndarray:
        """Per span, the time covered in it, from the time covered before each point (``upto``)."""
        if self.chain:
            return np.maximum(np.diff(upto), 0)
        return np.maximum(upto[self.ihi] - upto[self.ilo], 0)


def _distinct(a: np.ndarray) -> np.ndarray:
    """``np.unique`` by a sort (numpy's hash-based unique is slower on large integer arrays)."""
    if not len(a):
        return a
    a = np.sort(a)
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    keep[1:] = a[1:] != a[:-1]
    return a[keep]


def _figures_for(steps: Steps, by: _ByType, start, end, nbytes, tid, fw_s, fw_e, fw_k, ex_s, ex_e, ex_m,
                 kind_of, models, counts: bool = True) -> Steps:
    cc = by.rows(tid["cc_running"], tid["cc_exec_barrier"])
    ml = by.rows(tid["model_load"])
    ml_s, ml_e = start[ml], end[ml]
    cc_s, cc_e = start[cc], end[cc]
    if len(ml_s):  # Dynamo traces before it calls the backend we record: the gaps around a load are compile
        is_ml = np.zeros(len(start), dtype=bool)
        is_ml[ml] = True
        others = np.sort(end[~is_ml])
        k = np.searchsorted(others, ml_s, side="right") - 1
        prev = np.where(k >= 0, others[np.maximum(k, 0)], ml_s)
        j = _step_of(steps, ml_s)
        floor = np.where(j >= 0, steps.start_ns[np.maximum(j, 0)], ml_s)
        ml_s = np.minimum(ml_s, np.maximum(prev, floor))
        firsts = np.sort(start[~is_ml])  # ... and builds guards after it, before the graph's first call
        k = np.searchsorted(firsts, ml_e, side="left")
        nxt = np.where(k < len(firsts), firsts[np.minimum(k, len(firsts) - 1)], ml_e)
        ceil = np.where(j >= 0, steps.end_ns[np.maximum(j, 0)], ml_e)
        ml_e = np.maximum(ml_e, np.minimum(nxt, ceil))
    w, h = by.rows(tid["kbl_exec_wait"]), by.rows(tid["nrt_execute"])
    w_s = start[w]
    cats = {
        _C: (ex_s, ex_e),
        _X: (cc_s, cc_e),
        _W: (w_s, end[w]),
        _K: (ml_s, ml_e),
        _D: (fw_s[fw_k == 1], fw_e[fw_k == 1]),
        _H: (np.concatenate([fw_s[(fw_k != 1) & (fw_k != 4)], start[h]]),
             np.concatenate([fw_e[(fw_k != 1) & (fw_k != 4)], end[h]])),
    }
    steps.columns = _figures(steps.start_ns, steps.end_ns, cats, cc_s, nbytes[cc], ex_s, ex_m,
                             start[ml], {"sync_waits": w_s,
                                         "numerical_errors": start[by.rows(tid["numerical_err"])]},
                             steps=steps, ex_e=ex_e, kind_of=kind_of, models=models, counts=counts)
    return steps


def _figures(b_start, b_end, cats, cc_s, cc_b, ex_s, ex_m, ml_s, counted, steps: Steps | None = None,
             ex_e=None, kind_of=None, models=None, counts: bool = True) -> dict[str, np.ndarray]:
    """The per-step columns.  The breakdown is a priority partition: with ``U_k`` the union of the
    first ``k`` categories (compute, collective, wait, compile, data, host), category ``k`` gets
    ``|U_k| - |U_(k-1)|`` of each step; every union is a merge of sorted disjoint intervals and
    each step's share of one a difference of its cumulative covered time (no per-step or
    per-event Python, no sort of all the events' ends together)."""
    n = len(b_start)
    cols: dict[str, np.ndarray] = {"wall_ns": (b_end - b_start).astype(np.int64)}
    if not n or steps is None:
        durations = ("collective_ns", "own_ns", "compute_own_ns", "optimizer_ns", "small_collective_call_ns")
        for name in BREAKDOWN + durations + COUNTS:
            cols[name] = np.zeros(n, dtype=np.int64)
        cols["flops"] = np.zeros(n, dtype=np.float64)
        return cols
    spans = _Spans(b_start.astype(np.int64), b_end.astype(np.int64))
    cols.update(_durations(spans, cats, cols["wall_ns"]))
    if not counts:  # (the durations only: ``find_steps(counts=False)``)
        return cols
    where = _Locator(steps)
    j_ex, j_cc = where(ex_s), where(cc_s)  # each event's step, found once per array

    def count(j: np.ndarray, weights: np.ndarray | None = None, sel: np.ndarray | None = None) -> np.ndarray:
        ok = j >= 0 if sel is None else (j >= 0) & sel
        return np.bincount(j[ok], weights=None if weights is None else weights[ok], minlength=n)[:n]

    cols["executions"] = count(j_ex).astype(np.int64)
    cols["collectives"] = count(j_cc).astype(np.int64)
    cols["collective_bytes"] = np.rint(count(j_cc, np.maximum(cc_b, 0).astype(np.float64))).astype(np.int64)
    small = (cc_b >= 0) & (cc_b < SMALL_COLLECTIVE_BYTES)
    cols["small_collectives"] = count(j_cc, sel=small).astype(np.int64)
    cols["small_collective_bytes"] = np.rint(count(j_cc, np.maximum(cc_b, 0).astype(np.float64), sel=small)
                                             ).astype(np.int64)
    cc_e = np.asarray(cats[_X][1], dtype=np.int64)
    p_start, p_ns, p_calls = _paced(np.asarray(cc_s, dtype=np.int64)[small], cc_e[small])
    j_p = where(p_start)
    paced_ns, paced = count(j_p, p_ns), count(j_p, p_calls)
    span_sum = count(j_cc, np.maximum(cc_e - cc_s, 0).astype(np.float64), sel=small)
    alone = span_sum / np.maximum(cols["small_collectives"], 1)  # (no call queued: each one's span)
    cols["small_collective_call_ns"] = np.rint(np.where(paced > 0, paced_ns / np.maximum(paced, 1), alone)
                                               ).astype(np.int64)
    cols["compiles"] = count(where(ml_s)).astype(np.int64)
    for name, t in counted.items():
        cols[name] = count(where(t)).astype(np.int64)
    flops_of = np.zeros(int(max([int(mm[0]) for mm in models] + [int(ex_m.max()) if len(ex_m) else 0, 0])) + 2)
    is_opt = np.zeros(len(flops_of), dtype=bool)
    for mid, _name, kind, fl in models:
        if 0 <= int(mid) < len(flops_of):
            flops_of[int(mid)] = fl if fl and np.isfinite(fl) and fl > 0 else 0.0
            is_opt[int(mid)] = kind == "optimizer"
    mi = np.clip(ex_m, 0, len(flops_of) - 1)
    cols["flops"] = count(j_ex, flops_of[mi])
    opt_sel = is_opt[mi] & (ex_m >= 0)
    cols["optimizer_ns"] = np.rint(count(j_ex, (ex_e - ex_s).astype(np.float64), sel=opt_sel)).astype(np.int64)
    ok = j_ex >= 0
    pairs = _distinct(j_ex[ok] * (len(flops_of) + 1) + mi[ok]) // (len(flops_of) + 1)
    cols["graphs"] = np.bincount(pairs, minlength=n)[:n].astype(np.int64)
    return cols


_BITS = (_C, _X, _W, _K, _D, _H)


# the durations ``_durations`` gives, in the order ``_sweep.durations`` writes them
_DURATIONS = BREAKDOWN + ("collective_ns", "own_ns", "compute_own_ns")


def _durations(spans: _Spans, cats: dict, wall: np.ndarray) -> dict[str, np.ndarray]:
    """Per step, the breakdown (``BREAKDOWN``: each category's growth of the union of the ones
    before it, idle what none covers), ``collective_ns``, ``own_ns`` and ``compute_own_ns`` from
    ``analysis._sweep.durations`` (one pass over the categories' intervals in start order, then
    the figures per step) where it is built, else ``_durations_numpy`` (its twin: the same
    integers, tests/analysis/test_steps.py)."""
    if _sweep is None:
        return _durations_numpy(spans, cats, wall)
    arrays = []
    for bit in _BITS:
        s, e = (np.ascontiguousarray(a, dtype=np.int64) for a in cats[bit])
        arrays += [s, e]
    lo, hi = (None, None) if spans.chain else (spans.ilo.astype(np.int64), spans.ihi.astype(np.int64))
    got = _sweep.durations(spans.points, tuple(arrays), lo, hi)
    if got is None:  # (some category not by start: those sorted, then again)
        for k in range(0, len(arrays), 2):
            s = arrays[k]
            if len(s) > 1 and not (s[1:] >= s[:-1]).all():
                o = np.argsort(s, kind="stable")
                arrays[k], arrays[k + 1] = s[o], arrays[k + 1][o]
        got = _sweep.durations(spans.points, tuple(arrays), lo, hi)
    assert got is not None  # (every category by start now)
    return {name: np.frombuffer(row, dtype=np.int64) for name, row in zip(_DURATIONS, got)}


def _durations_numpy(spans: _Spans, cats: dict, wall: np.ndarray) -> dict[str, np.ndarray]:
    """``_durations`` by numpy: the covered time of each union per step (``_covered_numpy``), then
    the partition in priority order."""
    *covered, collective, xw = _covered_numpy(spans, cats)
    cols = {}
    prev = np.zeros(len(wall), dtype=np.int64)
    for name, cov in zip(BREAKDOWN[:-1], covered):
        cols[name] = np.maximum(cov - prev, 0)
        prev = np.maximum(cov, prev)
    cols["idle_ns"] = np.maximum(wall - prev, 0)
    cols["collective_ns"] = collective
    cols["own_ns"] = np.maximum(wall - xw, 0)
    cols["compute_own_ns"] = np.maximum(covered[2] - xw, 0)
    return cols


def _covered_numpy(spans: _Spans, cats: dict) -> list[np.ndarray]:
    """Per step, the time covered by the union of the first k categories (k = 1..6, ``_BITS``' order),
    by the collectives and by the collectives or waits (``_sweep.covered``'s rows per step), by
    numpy: each category's union (``_merge``), the unions joined in priority order
    (``_join``), and each one's covered time per step (``_Spans.within``)."""
    u = {bit: _merge(np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64)) for bit, (s, e) in cats.items()}
    covered = [spans.within(u[_C])]
    acc = u[_C]
    for bit in _BITS[1:]:  # (an empty category adds nothing: the same union)
        if len(u[bit][0]):
            acc = _join(acc, u[bit])
            covered.append(spans.within(acc))
        else:
            covered.append(covered[-1])
    collective = spans.within(u[_X])
    xw = spans.within(_join(u[_X], u[_W])) if len(u[_W][0]) else collective
    return covered + [collective, xw]


def _paced(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The busy periods of collective calls ``[s, e)`` (runs of overlapping spans): per period its
    start, the time from its first call's end to its last end, and its calls but the first.
    Calls issued together are served one after another (gloo's threads, a NCCL stream): the
    first call's span holds the wait for the other ranks, which one bucket would pay as well,
    and each later call ends one call's cost after the one before (docs/summary.md,
    ``small_collective_call_ns``).  Floats (``bincount`` weights)."""
    if not len(s):
        z = np.zeros(0, dtype=np.float64)
        return s.astype(np.int64), z, z
    s, e, reach, first, last = overlap_runs(s, e)
    paced = (reach[last] - np.minimum.reduceat(e, first)).astype(np.float64)
    return s[first], paced, (last - first).astype(np.float64)


def session_steps(s, chunk: int = 1 << 20, figure_at_most: int | None = FIGURE_AT_MOST) -> Steps:
    """``find_steps`` on a loaded ``analysis.reader.Session`` (times on its monotonic clock: add
    ``reader.wall_offset_ns(s)`` and the instance's clock offset for the events' wall clock,
    ``Steps.shifted``).  The steps are found from the executions and framework regions; then
    only the events of the types used that overlap the figured steps are gathered (a slice per
    span when the events are in time order, as the capture writes them)."""
    n = s.num_events
    if not n:
        return _none()
    names = {k: i for k in _TYPES if (i := s.type_id(k)) is not None}
    tid = {k: names.get(k, -1) for k in _TYPES}
    nt = len(s.type_names)
    lut = np.zeros(nt + 1, dtype=bool)
    lut[list(names.values())] = True
    e = s.events
    tcol = e["type"]
    used = np.concatenate([lut[np.clip(tcol[lo:lo + chunk], 0, nt)] for lo in range(0, n, chunk)])
    if not used.any():
        return _none()
    start, end = e["start_ns"], e["end_ns"]
    strings = list(s.strings)
    lab_kind = _label_kinds(strings)
    models = [(int(m.id), m.name, m.kind, float(m.flops)) for m in s.models]

    def arg(idx: np.ndarray, tname: str, name: str) -> np.ndarray:
        col = s.arg(tname, name)
        return e[col][idx].astype(np.int64, copy=False) if col is not None else np.full(len(idx), -1, np.int64)

    i_ex = np.flatnonzero(tcol == tid["nc_exec_running"]) if "nc_exec_running" in names else np.zeros(0, np.int64)
    i_fw = np.flatnonzero(tcol == tid["framework_op"]) if "framework_op" in names else np.zeros(0, np.int64)
    ordered = n < 2 or bool((start[1:] >= start[:-1]).all())  # (as the capture writes them)
    first = int(start[int(np.argmax(used))]) if ordered else int(np.min(np.where(used, start, np.iinfo(np.int64).max)))
    st = _numbered(start[i_ex].astype(np.int64), end[i_ex].astype(np.int64), arg(i_ex, "nc_exec_running", "model_id"),
                   start[i_fw].astype(np.int64), end[i_fw].astype(np.int64), arg(i_fw, "framework_op", "name_str"),
                   lab_kind, strings, models, first, figure_at_most)
    if st is None:
        return _none()
    idx = np.flatnonzero(used) if st.every is None else _span_events(start, end, used, st.start_ns, st.end_ns,
                                                                     ordered)
    typ = tcol[idx].astype(np.int64)
    model_id = np.full(len(idx), -1, dtype=np.int64)
    label = np.full(len(idx), -1, dtype=np.int64)
    nbytes = np.full(len(idx), -1, dtype=np.int64)
    for tname, name, out in (("nc_exec_running", "model_id", model_id), ("model_load", "model_id", model_id),
                             ("framework_op", "name_str", label), ("cc_running", "bytes", nbytes)):
        if tname in names:
            sel = np.flatnonzero(typ == tid[tname])
            out[sel] = arg(idx[sel], tname, name)
    st.anchors = stepalign.session_anchors(s, tcol, start, tid["cc_running"], strings,
                                           *(st.every if st.every is not None else (st.number, st.start_ns, st.end_ns)))
    return _figure(st, typ, start[idx].astype(np.int64, copy=False), end[idx].astype(np.int64, copy=False), model_id,
                   label, nbytes, tid, lab_kind, models)


def _span_events(start: np.ndarray, end: np.ndarray, used: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 ordered: bool) -> np.ndarray:
    """Indexes of the used events that overlap one of the disjoint sorted spans.  Events in time
    order (``ordered``, the usual case): only those starting in ``[lo - longest, hi)`` of a span
    are tested, a slice per span found by two ``searchsorted``; otherwise every used event is."""
    if ordered and len(start):
        longest = max(int((end - start).max()), 0)
        a = np.searchsorted(start, lo - longest, side="left")
        b = np.searchsorted(start, hi, side="left")
        a = np.maximum(a, np.concatenate(([0], b[:-1])))  # (slices of neighbouring spans may overlap)
        size = np.maximum(b - a, 0)
        total = int(size.sum())
        cand = np.repeat(a - np.concatenate(([0], np.cumsum(size)[:-1])), size) + np.arange(total)
        cand = cand[used[cand]]
    else:
        cand = np.flatnonzero(used)
    return cand[_overlapping(start[cand], end[cand], lo, hi)]
