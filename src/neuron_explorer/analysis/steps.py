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

**Breakdown.**  Per step, the wall time is cut into elementary segments at every start and end of
the events below (numpy, no per-event Python), and each segment goes to the first of: compute
(``nc_exec_running``, core busy), exposed collective (``cc_running``/``cc_exec_barrier`` not
overlapped by compute), synchronisation wait (``kbl_exec_wait``), compilation (``model_load``),
data loading (``enumerate(DataLoader)#...`` regions), host/framework (other framework regions,
``nrt_execute``) and idle (none of them).  These seven sum to the step's wall time.  Besides the
partition: ``collective_ns`` (all collective time), ``own_ns`` (time in neither a collective nor a
wait: what a rank spent on its own work, which the straggler rule compares across ranks) and
``compute_own_ns`` (compute outside collectives and waits), ``optimizer_ns`` (the optimizer's
executions), counts and the executions' recorded flops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["BREAKDOWN", "COUNTS", "DATALOADER_PREFIX", "STEP_MARK", "Steps", "find_steps", "session_steps"]

STEP_MARK = "neuron_explorer.step#"
DATALOADER_PREFIX = "enumerate(DataLoader)#"
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d{1,15})$")
_OPT_REGION = "Optimizer.step#"

# the partition of a step's wall time, in priority order (docs/summary.md)
BREAKDOWN = ("compute_ns", "exposed_collective_ns", "sync_wait_ns", "compile_ns", "data_loading_ns", "host_ns",
             "idle_ns")
COUNTS = ("executions", "collectives", "collective_bytes", "small_collectives", "compiles", "sync_waits",
          "numerical_errors", "graphs")
SMALL_COLLECTIVE_BYTES = 1 << 20  # an all-reduce below 1 MiB pays its fixed cost for little data

# category bits of an elementary segment
_C, _X, _W, _K, _D, _H = 1, 2, 4, 8, 16, 32


@dataclass
class Steps:
    """One process's steps: numbers, spans (ns on the clock of the times given) and per-step
    figures (``columns``: every name of ``BREAKDOWN`` and ``COUNTS`` plus ``wall_ns``,
    ``collective_ns``, ``own_ns``, ``compute_own_ns``, ``optimizer_ns`` and ``flops``)."""

    method: str  # "profiler_step", "optimizer", "cycle" or "none"
    boundary: str  # what delimits the steps: a graph's name or a region label
    number: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.number)

    def shifted(self, offset_ns: int) -> "Steps":
        """The same steps on a clock ``offset_ns`` later (monotonic -> the events' wall clock)."""
        return Steps(self.method, self.boundary, self.number, self.start_ns + offset_ns, self.end_ns + offset_ns,
                     self.columns)

    def to_json(self) -> dict[str, Any]:
        """Columns as lists: the ``steps`` object of summary-json (docs/summary.md)."""
        out: dict[str, Any] = {"method": self.method, "boundary": self.boundary,
                               "number": self.number.tolist(), "start_ns": self.start_ns.tolist(),
                               "end_ns": self.end_ns.tolist()}
        for k, v in self.columns.items():
            out[k] = v.tolist()
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Steps":
        cols = {k: np.asarray(v, dtype=np.float64 if k == "flops" else np.int64) for k, v in d.items()
                if k not in ("method", "boundary", "number", "start_ns", "end_ns")}
        return cls(d["method"], d["boundary"], np.asarray(d["number"], dtype=np.int64),
                   np.asarray(d["start_ns"], dtype=np.int64), np.asarray(d["end_ns"], dtype=np.int64), cols)


def _none() -> Steps:
    e = np.empty(0, dtype=np.int64)
    return Steps("none", "", e, e, e, _figures(e, e, {}, e, e, e, e, e, {}))


def find_steps(typ: np.ndarray, start: np.ndarray, end: np.ndarray, model_id: np.ndarray, label: np.ndarray,
               nbytes: np.ndarray, names: dict[str, int], strings: list[str], models: list[tuple[int, str, str, float]]
               ) -> Steps:
    """Steps of one process from its event columns (any clock; one array per column, all the
    same length: type ids, spans, the ``model_id`` of executions and model loads, the label
    string id of framework regions, the ``bytes`` of collectives; -1 where a type has none).

    ``names``: type name -> id for the types used here (absent: none recorded); ``models``:
    (id, name, kind, flops per execution) of the process's graphs."""
    tid = {k: names.get(k, -1) for k in ("nc_exec_running", "cc_running", "cc_exec_barrier", "kbl_exec_wait",
                                        "model_load", "framework_op", "nrt_execute", "numerical_err")}
    is_ex = typ == tid["nc_exec_running"]
    is_fw = typ == tid["framework_op"]
    ex_s, ex_e, ex_m = start[is_ex], end[is_ex], model_id[is_ex]
    fw_s, fw_e, fw_l = start[is_fw], end[is_fw], label[is_fw]
    lab_kind = _label_kinds(strings)  # per string id: 0 other, 1 data loader, 2 optimizer region, 3 mark
    fw_k = lab_kind[np.clip(fw_l, 0, len(lab_kind) - 1)] if len(lab_kind) else np.zeros(len(fw_l), np.int8)
    kind_of = {int(m[0]): m[2] for m in models}
    name_of = {int(m[0]): m[1] for m in models}

    method, boundary, number, b_start, b_end = _boundaries(strings, fw_s, fw_e, fw_l, fw_k, ex_s, ex_e, ex_m,
                                                           kind_of, name_of)
    if not len(b_end):
        return _none()
    if method != "profiler_step":
        order = np.argsort(b_end, kind="stable")
        b_end = b_end[order]
        first = int(start.min()) if len(start) else int(b_end[0])
        b_start = np.concatenate(([min(first, int(b_end[0]))], b_end[:-1]))
        base = 0
        marks = np.flatnonzero(fw_k == 3)
        if len(marks):  # neuron_explorer.step#B: the first boundary ending after it is step B
            m = marks[np.argmin(fw_s[marks])]
            k = int(np.searchsorted(b_end, fw_s[m], side="right"))
            base = _mark_number(strings[int(fw_l[m])]) - k
        number = np.arange(len(b_end), dtype=np.int64) + base
    return _figures_for(Steps(method, boundary, number, b_start.astype(np.int64), b_end.astype(np.int64)),
                        typ, start, end, model_id, nbytes, tid, is_ex, fw_s, fw_e, fw_k, ex_s, ex_e, ex_m,
                        kind_of, models)


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
    if len(ex_m):
        mids, counts = np.unique(ex_m, return_counts=True)
        opt = [(int(c), int(m)) for m, c in zip(mids.tolist(), counts.tolist()) if kind_of.get(m) == "optimizer"]
        if opt and max(opt)[0] >= 1:
            mid = max(opt)[1]
            return "optimizer", name_of.get(mid, f"model_{mid}"), None, None, ex_e[ex_m == mid]
    opt_r = np.flatnonzero(fw_k == 2)
    if len(opt_r):
        return "optimizer", strings[int(fw_l[opt_r[0]])], None, None, fw_e[opt_r]
    if len(ex_m):
        best = None
        for m in np.unique(ex_m).tolist():
            if kind_of.get(m) == "backward":
                continue
            sel = ex_m == m
            key = (int(sel.sum()), int((ex_e[sel] - ex_s[sel]).sum()), -m)
            if best is None or key > best[0]:
                best = (key, m)
        if best is not None and best[0][0] >= 2:
            mid = best[1]
            return "cycle", name_of.get(mid, f"model_{mid}"), None, None, ex_e[ex_m == mid]
    return "none", "", None, None, np.empty(0, dtype=np.int64)


def _step_of(steps: Steps, t: np.ndarray) -> np.ndarray:
    """Per time ``t``, the index of the step holding it, or -1."""
    if not len(steps) or not len(t):
        return np.full(len(t), -1, dtype=np.int64)
    order = np.argsort(steps.start_ns, kind="stable")
    i = np.searchsorted(steps.start_ns[order], t, side="right") - 1
    ok = i >= 0
    j = order[np.maximum(i, 0)]
    ok &= t < steps.end_ns[j]
    return np.where(ok, j, -1)


def _coverage(points: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per elementary segment ``[points[i], points[i+1])``, whether an interval covers it."""
    n = len(points)
    if not len(s):
        return np.zeros(n - 1, dtype=bool)
    ds = np.bincount(np.searchsorted(points, s), minlength=n + 1)
    de = np.bincount(np.searchsorted(points, e), minlength=n + 1)
    return (np.cumsum(ds[:n] - de[:n])[:-1]) > 0


def _figures_for(steps: Steps, typ, start, end, model_id, nbytes, tid, is_ex, fw_s, fw_e, fw_k, ex_s, ex_e, ex_m,
                 kind_of, models) -> Steps:
    cc = (typ == tid["cc_running"]) | (typ == tid["cc_exec_barrier"])
    cats = {
        _C: (ex_s, ex_e),
        _X: (start[cc], end[cc]),
        _W: (start[typ == tid["kbl_exec_wait"]], end[typ == tid["kbl_exec_wait"]]),
        _K: (start[typ == tid["model_load"]], end[typ == tid["model_load"]]),
        _D: (fw_s[fw_k == 1], fw_e[fw_k == 1]),
        _H: (np.concatenate([fw_s[(fw_k != 1) & (fw_k != 4)], start[typ == tid["nrt_execute"]]]),
             np.concatenate([fw_e[(fw_k != 1) & (fw_k != 4)], end[typ == tid["nrt_execute"]]])),
    }
    steps.columns = _figures(steps.start_ns, steps.end_ns, cats, start[cc], nbytes[cc], ex_s, ex_m,
                             start[typ == tid["model_load"]], {
                                 "sync_waits": start[typ == tid["kbl_exec_wait"]],
                                 "numerical_errors": start[typ == tid["numerical_err"]]},
                             steps=steps, ex_e=ex_e, kind_of=kind_of, models=models)
    return steps


def _figures(b_start, b_end, cats, cc_s, cc_b, ex_s, ex_m, ml_s, counted, steps: Steps | None = None,
             ex_e=None, kind_of=None, models=None) -> dict[str, np.ndarray]:
    n = len(b_start)
    cols: dict[str, np.ndarray] = {"wall_ns": (b_end - b_start).astype(np.int64)}
    if not n or steps is None:
        for name in BREAKDOWN + ("collective_ns", "own_ns", "compute_own_ns", "optimizer_ns") + COUNTS:
            cols[name] = np.zeros(n, dtype=np.int64)
        cols["flops"] = np.zeros(n, dtype=np.float64)
        return cols
    pts = [b_start, b_end] + [a for se in cats.values() for a in se]
    lo, hi = int(b_start.min()), int(b_end.max())
    points = np.unique(np.clip(np.concatenate(pts).astype(np.int64), lo, hi))
    mask = np.zeros(len(points) - 1, dtype=np.int64)
    for bit, (s, e) in cats.items():
        mask |= _coverage(points, np.clip(s, lo, hi), np.clip(e, lo, hi)).astype(np.int64) * bit
    seg = _step_of(steps, points[:-1])
    ok = seg >= 0
    by = np.bincount(seg[ok] * 64 + mask[ok], weights=np.diff(points)[ok].astype(np.float64),
                     minlength=n * 64).reshape(n, 64)
    m = np.arange(64)

    def total(sel: np.ndarray) -> np.ndarray:
        return np.rint(by[:, sel].sum(axis=1)).astype(np.int64)

    c, x, w, k, d, h = (m & _C) > 0, (m & _X) > 0, (m & _W) > 0, (m & _K) > 0, (m & _D) > 0, (m & _H) > 0
    cols["compute_ns"] = total(c)
    cols["exposed_collective_ns"] = total(x & ~c)
    cols["sync_wait_ns"] = total(w & ~c & ~x)
    cols["compile_ns"] = total(k & ~c & ~x & ~w)
    cols["data_loading_ns"] = total(d & ~c & ~x & ~w & ~k)
    cols["host_ns"] = total(h & ~c & ~x & ~w & ~k & ~d)
    covered = cols["compute_ns"] + cols["exposed_collective_ns"] + cols["sync_wait_ns"] + cols["compile_ns"] \
        + cols["data_loading_ns"] + cols["host_ns"]
    cols["idle_ns"] = np.maximum(cols["wall_ns"] - covered, 0)
    cols["collective_ns"] = total(x)
    cols["own_ns"] = np.maximum(cols["wall_ns"] - total(x | w), 0)
    cols["compute_own_ns"] = total(c & ~x & ~w)

    def count(t: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        j = _step_of(steps, t)
        ok = j >= 0
        return np.bincount(j[ok], weights=None if weights is None else weights[ok], minlength=n)[:n]

    cols["executions"] = count(ex_s).astype(np.int64)
    cols["collectives"] = count(cc_s).astype(np.int64)
    b = np.maximum(cc_b, 0)
    cols["collective_bytes"] = np.rint(count(cc_s, b.astype(np.float64))).astype(np.int64)
    cols["small_collectives"] = count(cc_s[(cc_b >= 0) & (cc_b < SMALL_COLLECTIVE_BYTES)]).astype(np.int64)
    cols["compiles"] = count(ml_s).astype(np.int64)
    for name, t in counted.items():
        cols[name] = count(t).astype(np.int64)
    flops_of = np.zeros(int(max([int(mm[0]) for mm in models] + [int(ex_m.max()) if len(ex_m) else 0, 0])) + 2)
    is_opt = np.zeros(len(flops_of), dtype=bool)
    for mid, _name, kind, fl in models:
        if 0 <= int(mid) < len(flops_of):
            flops_of[int(mid)] = fl if fl and np.isfinite(fl) and fl > 0 else 0.0
            is_opt[int(mid)] = kind == "optimizer"
    mi = np.clip(ex_m, 0, len(flops_of) - 1)
    cols["flops"] = count(ex_s, flops_of[mi])
    opt_sel = is_opt[mi] & (ex_m >= 0)
    cols["optimizer_ns"] = np.rint(count(ex_s[opt_sel], (ex_e[opt_sel] - ex_s[opt_sel]).astype(np.float64))
                                   ).astype(np.int64)
    j = _step_of(steps, ex_s)
    ok = j >= 0
    pairs = np.unique(j[ok] * (len(flops_of) + 1) + mi[ok]) // (len(flops_of) + 1) if ok.any() else j[:0]
    cols["graphs"] = np.bincount(pairs, minlength=n)[:n].astype(np.int64)
    return cols


def session_steps(s, chunk: int = 1 << 20) -> Steps:
    """``find_steps`` on a loaded ``analysis.reader.Session`` (times on its monotonic clock: add
    ``reader.wall_offset_ns(s)`` and the instance's clock offset for the events' wall clock,
    ``Steps.shifted``).  Only the events of the types used are gathered, a chunk of the type
    column at a time."""
    n = s.num_events
    if not n:
        return _none()
    wanted = ("nc_exec_running", "cc_running", "cc_exec_barrier", "kbl_exec_wait", "model_load", "framework_op",
              "nrt_execute", "numerical_err")
    names = {k: i for k in wanted if (i := s.type_id(k)) is not None}
    nt = len(s.type_names)
    lut = np.zeros(nt + 1, dtype=bool)
    lut[list(names.values())] = True
    e = s.events
    parts = []
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        parts.append(np.flatnonzero(lut[np.clip(e["type"][lo:hi], 0, nt)]) + lo)
    idx = np.concatenate(parts)
    typ = e["type"][idx].astype(np.int64)
    model_id = np.full(len(idx), -1, dtype=np.int64)
    label = np.full(len(idx), -1, dtype=np.int64)
    nbytes = np.full(len(idx), -1, dtype=np.int64)
    for tname, arg, out in (("nc_exec_running", "model_id", model_id), ("model_load", "model_id", model_id),
                            ("framework_op", "name_str", label), ("cc_running", "bytes", nbytes)):
        col, t = s.arg(tname, arg), names.get(tname)
        if col is not None and t is not None:
            sel = typ == t
            out[sel] = e[col][idx[sel]]
    models = [(int(m.id), m.name, m.kind, float(m.flops)) for m in s.models]
    return find_steps(typ, e["start_ns"][idx].astype(np.int64), e["end_ns"][idx].astype(np.int64), model_id,
                      label, nbytes, names, list(s.strings), models)
