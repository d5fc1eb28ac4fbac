"""From steps to answers: the job's steps across ranks, its utilisation and ranked insights.

Input: one ``steps`` object per process (``analysis.steps.Steps.to_json`` plus ``instance_id``,
``pid``, ``rank``, ``device_kind``, ``cpu_process_pct``/``cpu_host_pct``/``cpu_main_pct``/
``cpu_wait_pct`` per step), made where each process is converted; ``analyse`` reduces them across
ranks (numpy over a few numbers per step: no event is read here).  The output is the ``steps``,
``utilisation``, ``insights``, ``verdict`` and ``noise_threshold`` keys of summary-json
(docs/summary.md).

Each insight estimates the time a step would save without its cause, from the figures of the
steady steps (every step but a process's first when it has three or more), and is reported only
above the noise threshold (``NOISE_SHARE`` of the median step, ``NOISE_MIN_NS``, and twice the
standard error of a steady step's time: ``_step_noise_ns``) and, for a rule whose per-step figure a
loaded host's scheduling can produce, only when it shows in more steps than chance would give
(``ALPHA``, a sign test: ``_sign_p``).  The memory rules (``memory_growth``,
``memory_near_limit``: the device memory at each step's end, ``memory_per_step``) and
``numerical_errors`` estimate no time: they say what would end the run or spoil it.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from neuron_explorer.analysis import stepalign
from neuron_explorer.analysis.steps import BREAKDOWN, FIGURE_AT_MOST

__all__ = ["ALPHA", "NOISE_MIN_NS", "NOISE_SHARE", "PEAKS", "analyse", "measure_peak_flops", "peak_for"]

NOISE_SHARE = 0.05
NOISE_MIN_NS = 200_000
# the chance of a finding from noise alone that a rule tested by its steps accepts (``_sign_p``)
ALPHA = 0.05
# the document's lists stay bounded whatever the step count (docs/summary.md, "Bounded lists")
MAX_LISTED_STEPS = 1000
MAX_PROCESS_VALUES = 500_000
MIN_PROCESS_STEPS = 20

# dense peak FLOP/s per device by dtype (vendors' data sheets; no sparsity); MFU uses bf16/fp16
# where the device has it, the conventional denominator, and says which entry it used
PEAKS: dict[str, dict[str, float]] = {
    "H100 SXM": {"bf16": 989e12, "fp16": 989e12, "tf32": 494e12, "fp32": 67e12},
    "H100 PCIe": {"bf16": 756e12, "fp16": 756e12, "tf32": 378e12, "fp32": 51e12},
    "A100": {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
    "A10G": {"bf16": 70e12, "fp16": 70e12, "fp32": 35e12},
    "L4": {"bf16": 121e12, "fp16": 121e12, "fp32": 30.3e12},
    "V100": {"fp16": 125e12, "fp32": 15.7e12},
    "T4": {"fp16": 65e12, "fp32": 8.1e12},
    "Trainium": {"bf16": 95e12, "fp16": 95e12, "fp32": 23.75e12},  # per NeuronCore-v2 (trn1)
}


def peak_for(device_kind: str, dtype: str = "bf16") -> tuple[float, str] | None:
    """(peak FLOP/s, which table entry) for a device kind such as ``cuda:NVIDIA A100-SXM4-80GB``."""
    name = device_kind.split(":", 1)[1] if ":" in device_kind else device_kind
    for key in sorted(PEAKS, key=len, reverse=True):
        if key.lower().replace(" ", "") in name.lower().replace(" ", "").replace("-", ""):
            table = PEAKS[key]
            dt = dtype if dtype in table else ("fp16" if "fp16" in table else "fp32")
            return table[dt], f"table: {key} {dt} dense"
    return None


def measure_peak_flops(seconds: float = 0.5, n: int = 512) -> float:
    """A float32 matrix multiply's best FLOP/s on the machine running this, over about ``seconds``
    (the explicit ``--peak-flops measure``: it measures where ``view`` runs)."""
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = a.T.copy()
    best = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        a @ b
        dt = time.perf_counter() - t0
        if dt > 0:
            best = max(best, 2.0 * n ** 3 / dt)
    return best


class _Proc(dict):
    """One process's steps with its columns as float arrays, its steady-step mask and the
    medians of the steady steps computed once (the rules ask for the same ones)."""

    def __init__(self, p: dict) -> None:
        super().__init__(p)
        self.cache: dict[Any, Any] = {}


def _cached(p: dict, key: Any, make: Callable[[], Any]) -> Any:
    if not isinstance(p, _Proc):
        return make()
    if key not in p.cache:
        p.cache[key] = make()
    return p.cache[key]


def _steady(p: dict) -> np.ndarray:
    def make() -> np.ndarray:
        n = len(p["number"])
        keep = np.ones(n, dtype=bool)
        if n >= 3:
            keep[int(np.argmin(p["number"]))] = False
        return keep
    return _cached(p, "steady", make)


def _after_warm_up(p: dict) -> np.ndarray:
    """The steady steps less the steps right after the first that compile, up to the first step
    that compiles nothing: the first iteration's graphs, registered across the step boundary the
    detector drew inside it (an eager backward, an optimizer's first step), are warm-up, not a
    recompile.  A process that compiles in every step has no such step and keeps its steady ones."""
    def make() -> np.ndarray:
        keep = _steady(p).copy()
        order = np.argsort(_arr(p, "number"), kind="stable")
        none = np.flatnonzero(_arr(p, "compile_ns")[order] <= 0)
        if len(keep) >= 3 and len(none):
            keep[order[:int(none[0])]] = False
        return keep
    return _cached(p, "after_warm_up", make)


def _arr(p: dict, k: str) -> np.ndarray:
    return _cached(p, k, lambda: np.asarray(p.get(k, []), dtype=np.float64))


def _smed(p: dict, k: str) -> float:
    """The median of column ``k`` over the steady steps."""
    return _cached(p, ("median", k), lambda: _med(_arr(p, k)[_steady(p)]))


def _nums(p: dict) -> np.ndarray:
    return _cached(p, "numbers", lambda: np.asarray(p["number"], dtype=np.int64))


def _pct(p: dict, k: str) -> np.ndarray:
    """A CPU % column's steady steps that had samples."""
    v = _arr(p, k)
    if len(v) != len(p["number"]):
        return v[:0]
    v = v[_steady(p)]
    return v[v >= 0]


def _med(a: Any) -> float:
    """The median (0 for none): one ``partition`` (``np.median`` partitions at two or three
    places and costs several times more over a long run's steps)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    n = len(a)
    if not n:
        return 0.0
    k = n // 2
    part = np.partition(a, k)
    return float(part[k]) if n % 2 else float((part[:k].max() + part[k]) / 2)


def _all_numbers(arrays: list[np.ndarray]) -> np.ndarray:
    """The distinct numbers of all ``arrays`` (each sorted and distinct): the first when every
    rank has the same steps (the usual case, no sort), else by one sort."""
    if not arrays:
        return np.zeros(0, dtype=np.int64)
    first = np.asarray(arrays[0], dtype=np.int64)
    if all(len(a) == len(first) for a in arrays) and all(np.array_equal(a, first) for a in arrays[1:]) and \
            (len(first) < 2 or bool((first[1:] > first[:-1]).all())):
        return first
    return _distinct(np.concatenate(arrays))


def _distinct(a: np.ndarray) -> np.ndarray:
    a = np.sort(np.asarray(a, dtype=np.int64))
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) else a


class _Grid:
    """Processes x step numbers ``nums`` (sorted, distinct): where each process's steps go is
    found once, then any column is laid out (NaN where a process has no such step)."""

    def __init__(self, procs: list[dict], nums: np.ndarray, whole: bool = False) -> None:
        self.procs, self.nums, self.whole = procs, nums, whole  # whole: every step, figured or not
        self.at: list[tuple[Any, Any]] = []
        for p in procs:
            pn = _every(p, "number") if whole else _nums(p)
            if not len(nums):
                self.at.append((pn[:0], np.zeros(len(pn), dtype=bool)))
                continue
            if len(pn) == len(nums) and np.array_equal(pn, nums):  # (the usual case: every step)
                self.at.append((slice(None), slice(None)))
                continue
            j = np.minimum(np.searchsorted(nums, pn), len(nums) - 1)
            ok = nums[j] == pn
            self.at.append((j[ok], ok))

    def __call__(self, col: str) -> np.ndarray:
        m = np.full((len(self.procs), len(self.nums)), np.nan)
        for i, (p, (j, ok)) in enumerate(zip(self.procs, self.at)):
            m[i, j] = (_every(p, col) if self.whole else _arr(p, col))[ok]
        return m


def _every(p: dict, k: str) -> np.ndarray:
    """``number``, ``start_ns``, ``end_ns`` or ``wall_ns`` of every step of the process, figured
    or not (``analysis.steps.Steps.every``)."""
    if "every_number" not in p:
        return _nums(p) if k == "number" else _arr(p, k)
    if k == "number":
        return _cached(p, ("every", k), lambda: np.asarray(p["every_number"], dtype=np.int64))
    if k == "wall_ns":
        return _cached(p, ("every", k), lambda: _every(p, "end_ns") - _every(p, "start_ns"))
    return _cached(p, ("every", k), lambda: np.asarray(p["every_" + k], dtype=np.float64))


def _every_steady(p: dict) -> np.ndarray:
    def make() -> np.ndarray:
        n = _every(p, "number")
        keep = np.ones(len(n), dtype=bool)
        if len(n) >= 3:
            keep[int(np.argmin(n))] = False
        return keep
    return _cached(p, "every_steady", make)


def _common(sets: list[np.ndarray]) -> np.ndarray:
    """The numbers present in every one of ``sets`` (each distinct), by one sort."""
    if not sets:
        return np.zeros(0, dtype=np.int64)
    a = np.sort(np.concatenate(sets))
    if not len(a):
        return a
    head = np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1])))
    runs = np.diff(np.append(head, len(a)))
    return a[head[runs == len(sets)]]


def _col_median(m: np.ndarray) -> np.ndarray:
    """The median of each column ignoring NaN (a sort per column; NaN sorts last)."""
    if not m.size:
        return np.zeros(m.shape[1])
    srt = np.sort(m, axis=0)
    cnt = np.sum(~np.isnan(m), axis=0)
    cols = np.arange(m.shape[1])
    lo, hi = srt[np.maximum(cnt - 1, 0) // 2, cols], srt[cnt // 2 - (cnt == 0), cols]
    return np.where(cnt > 0, (lo + hi) / 2, 0.0)


def analyse(per_process: list[dict], peak: float | None = None, peak_note: str = "",
            dtype: str = "bf16") -> dict[str, Any]:
    """The summary-json keys of docs/summary.md from the per-process steps (columns as numpy
    arrays or lists): numpy over processes x steps matrices, Python only per listed row."""
    per_process = stepalign.aligned(per_process)
    procs: list[dict] = sorted([_Proc(p) for p in per_process if len(p.get("number", []))],
                               key=lambda p: (p["rank"], p["instance_id"], p["pid"]))
    out: dict[str, Any] = {"steps": _steps(procs, per_process)}
    var = out["steps"]["variation"]
    noise = _step_noise_ns(var)
    out["noise_threshold"] = {"share": NOISE_SHARE, "min_ns": NOISE_MIN_NS, "step_noise_ns": noise, "alpha": ALPHA}
    out["utilisation"] = _utilisation(procs, per_process, peak, peak_note, dtype)
    wall = var.get("wall_ns_median") or 0
    memo: dict[str, Any] = {}
    found = [i for i in (rule(procs, memo) for rule in RULES) if i is not None]
    for i in found:
        imp = i["impact_ns_per_step"]
        i["impact_share"] = (imp / wall) if imp is not None and wall else None
    kept = [i for i in found if (i["confidence"]["p_value"] is None or i["confidence"]["p_value"] <= ALPHA) and (
        i["impact_ns_per_step"] is None
        or (i["impact_ns_per_step"] >= max(NOISE_MIN_NS, noise) and (i["impact_share"] or 0) >= NOISE_SHARE))]
    kept.sort(key=lambda i: (i["impact_ns_per_step"] is not None, -(i["impact_ns_per_step"] or 0)))
    out["insights"] = kept
    if not procs:
        out["verdict"] = "no training steps found: no insight (the steps rules are in docs/summary.md)"
    elif not kept:
        out["verdict"] = "no finding above the noise threshold"
    else:
        top = kept[0]
        imp = top["impact_ns_per_step"]
        how = f" (~{imp / 1e6:.1f} ms per step)" if imp is not None else ""
        out["verdict"] = f"{len(kept)} finding(s) above the noise threshold; the largest: {top['title']}{how}"
    return out


def _step_noise_ns(var: dict) -> int:
    """What the steady steps' own spread lets an estimate of a per-step cost claim: twice the
    standard error of a step time (1.4826 x the median absolute deviation of the steady steps'
    times, over the square root of their number). A few steps of a loaded machine give a high
    floor (a rank descheduled for a millisecond is no straggler); many steady steps a low one."""
    n = var.get("steady_steps") or 0
    return int(round(2 * var.get("wall_ns_sd_robust", 0) / np.sqrt(n))) if n else 0


def _listed(nums: np.ndarray, wall: np.ndarray, outlier: np.ndarray, cap: int, has: np.ndarray) -> np.ndarray:
    """Which steps the document lists (indexes into ``nums``, in step order): all of them up to
    ``cap``; beyond, the first and last, the outliers and the slowest (half the rows), and the
    rest evenly spaced over the run (docs/summary.md, "Bounded lists"); only steps figured on a
    rank (``has``)."""
    n = len(nums)
    if int(has.sum()) <= cap:
        return np.flatnonzero(has)
    pick = np.zeros(n, dtype=bool)
    ends = np.flatnonzero(has)[[0, -1]]
    pick[ends] = True
    slow = np.lexsort((-np.arange(n), wall, outlier, has))[::-1]  # outliers first, then by wall time
    pick[slow[:cap // 2]] = True
    pick &= has
    rest = np.flatnonzero(~pick & has)
    room = cap - int(pick.sum())
    if room > 0 and len(rest):
        pick[rest[np.linspace(0, len(rest) - 1, min(room, len(rest))).astype(np.int64)]] = True
    return np.flatnonzero(pick)


def _steps(procs: list[dict], every: list[dict]) -> dict[str, Any]:
    methods = sorted({p["method"] for p in procs})
    nums = _all_numbers([_every(p, "number") for p in procs])
    figured = _all_numbers([_nums(p) for p in procs])
    cols = ("wall_ns",) + BREAKDOWN
    grid = _Grid(procs, nums, whole=True)
    walls = grid("wall_ns")
    present = ~np.isnan(walls)
    wall_med = _col_median(walls)
    steady_nums = _all_numbers([_every(p, "number")[_every_steady(p)] for p in procs]) if procs else nums
    steady = np.isin(nums, steady_nums, assume_unique=True, kind="sort")
    w = wall_med[steady]
    var: dict[str, Any] = {"steady_steps": int(len(w)), "outliers": []}
    outlier = np.zeros(len(nums), dtype=bool)
    if len(w):
        med = _med(w)
        mad = _med(np.abs(w - med)) * 1.4826
        var.update(wall_ns_median=int(med), wall_ns_p90=int(np.percentile(w, 90)), wall_ns_max=int(w.max()),
                   cv=float(w.std() / w.mean()) if w.mean() else 0.0, wall_ns_sd_robust=int(mad))
        outlier = wall_med > med + max(3 * mad, 0.1 * med)
        var["outliers"] = nums[outlier][:MAX_LISTED_STEPS].tolist()
        var["outlier_count"] = int(outlier.sum())
    has = np.isin(nums, figured, assume_unique=True, kind="sort")  # (only figured steps have a breakdown)
    keep = _listed(nums, wall_med, outlier, MAX_LISTED_STEPS, has)
    rows = []
    if len(keep):
        few = _Grid(procs, nums[keep])
        sub = {c: _col_median(few(c)) for c in BREAKDOWN}
        sub["wall_ns"] = wall_med[keep]
        ws = walls[:, keep]
        spans = _Grid(procs, nums[keep], whole=True)
        starts = np.nanmin(spans("start_ns"), axis=0)
        ends = np.nanmax(spans("end_ns"), axis=0)
        slow = np.argmax(np.where(np.isnan(ws), -np.inf, ws), axis=0)
        ranks = np.asarray([int(p["rank"]) for p in procs])
        nrank = present[:, keep].sum(axis=0)
        for r, k in enumerate(keep.tolist()):
            row: dict[str, Any] = {"number": int(nums[k]), "ranks": int(nrank[r]), "start_ns": int(starts[r]),
                                   "end_ns": int(ends[r])}
            for c in cols:
                row[c] = int(sub[c][r])
            row["wall_ns_max"] = int(ws[slow[r], r])
            row["slowest_rank"] = int(ranks[slow[r]])
            if len(w):
                row["outlier"] = bool(outlier[k])
            rows.append(row)
    bd: dict[str, Any] = {}
    if procs:
        for c in cols:
            bd[c] = int(_med([_smed(p, c) for p in procs]))
        tot = sum(bd[c] for c in BREAKDOWN) or 1
        bd["shares"] = {c: bd[c] / tot for c in BREAKDOWN}
    out: dict[str, Any] = {"count": int(len(nums)), "method": methods[0] if len(methods) == 1 else ",".join(methods),
                           "per_process": _per_process_json(every, nums[keep], len(procs)),
                           "per_step": rows, "variation": var, "breakdown": bd}
    if len(figured) < len(nums):
        out["figured"] = {"steps": int(len(figured)), "per_process_at_most": FIGURE_AT_MOST,
                          "rule": "with more steps than that, a process figures its first, its slowest and the "
                                  "same even sample of step numbers as the other ranks (docs/summary.md)"}
    if len(keep) < len(nums):
        rest = np.ones(len(nums), dtype=bool)
        rest[keep] = False
        out["omitted"] = {"steps": int(rest.sum()), "wall_ns_median": int(_med(wall_med[rest])),
                          "wall_ns_total": int(wall_med[rest].sum()),
                          "rule": f"per_step lists {len(keep)} of {len(nums)} steps: the first and last, outliers "
                                  "and slowest, and an even sample (docs/summary.md)"}
    return out


def _per_process_json(every: list[dict], listed: np.ndarray, nprocs: int) -> list[dict]:
    """The ``per_process`` objects of the document: each process's columns as lists, only for the
    steps ``per_step`` lists and at most ``MAX_PROCESS_VALUES`` numbers over all processes."""
    cap = max(MIN_PROCESS_STEPS, MAX_PROCESS_VALUES // max(nprocs, 1) // 32)
    out = []
    for p in every:
        num = _nums(p)
        n = len(num)
        idx = np.flatnonzero(np.isin(num, listed, assume_unique=True, kind="sort"))
        if len(idx) > cap:  # the slowest of the listed steps, in step order
            w = _arr(p, "wall_ns")[idx]
            idx = np.sort(idx[np.argsort(-w, kind="stable")[:cap]])
        d: dict[str, Any] = {}
        for k, v in p.items():
            if k.startswith(("every_", "anchor_")):
                continue
            if isinstance(v, np.ndarray) or (isinstance(v, list) and len(v) == n and k not in ("instance_id",)):
                d[k] = np.asarray(v)[idx].tolist()
            else:
                d[k] = v
        total = len(p["every_number"]) if "every_number" in p else n
        if len(idx) < total:
            d["steps_total"] = total
        out.append(d)
    return out


def _utilisation(procs: list[dict], every: list[dict], peak: float | None, note: str, dtype: str) -> dict[str, Any]:
    u: dict[str, Any] = {"flops_per_step": None, "achieved_flops_per_s": None, "peak_flops_per_s": None,
                         "peak_source": None, "mfu": None, "reason": None}
    if not procs:
        u["reason"] = "no steps found"
        return u
    per_rank = []
    for p in procs:
        k = _steady(p)
        fl, wall = _arr(p, "flops")[k], _arr(p, "wall_ns")[k]
        if fl.sum() > 0 and wall.sum() > 0:
            per_rank.append((_med(fl), float(fl.sum() / (wall.sum() / 1e9))))
    if not per_rank:
        u["reason"] = "no execution recorded a flop count (ModelInfo.flops is 0 for every graph)"
        return u
    u["flops_per_step"] = sum(f for f, _ in per_rank)
    u["achieved_flops_per_s"] = sum(a for _, a in per_rank)
    kinds = sorted({p.get("device_kind", "") for p in procs})
    if peak:
        per_device, source = peak, note or "--peak-flops"
    else:
        found = [peak_for(k, dtype) for k in kinds if k]
        if not found or any(f is None for f in found) or len({f for f in found}) != 1:
            u["reason"] = (f"no peak known for device kind {', '.join(kinds) or '?'}: pass --peak-flops N, or "
                           "--peak-flops measure to measure this machine")
            return u
        per_device, source = found[0]  # type: ignore[misc]
    u["peak_flops_per_s"] = per_device * len(per_rank)
    u["peak_source"] = f"{source}, x{len(per_rank)} process(es)"
    u["mfu"] = u["achieved_flops_per_s"] / u["peak_flops_per_s"]
    return u


def _confidence(hit: int, total: int, ranks: int = 1, ranks_total: int = 1,
                p_value: float | None = None) -> dict[str, Any]:
    f = min(hit / total if total else 0.0, ranks / ranks_total if ranks_total else 0.0)
    return {"level": "high" if f >= 0.8 else "medium" if f >= 0.5 else "low", "steps": hit, "steps_total": total,
            "ranks": ranks, "ranks_total": ranks_total,
            "p_value": None if p_value is None else float(f"{p_value:.3g}")}


def _binomial_tail(n: int, h: int, p: float) -> float:
    """P(X >= h) for X ~ Binomial(n, p), summed in logs (n is a count of steps: up to a few
    thousand per process)."""
    if h <= 0:
        return 1.0
    if h > n:
        return 0.0
    lf = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))))
    k = np.arange(h, n + 1)
    logs = lf[n] - lf[k] - lf[n - k] + k * math.log(p) + (n - k) * math.log1p(-p)
    return float(min(1.0, np.exp(logs).sum()))


def _sign_p(hits: int, n: int, p0: float = 0.5, choices: int = 1) -> float:
    """The chance that noise alone shows a finding in ``hits`` of ``n`` steady steps or more: a
    step shows it by chance with probability ``p0`` (a coin: a noisy figure is as likely under
    the rule's bar as over it; ``1/R`` for which of R ranks is the slowest), times ``choices``
    when the rule picked the most striking of that many candidates (the straggler rank). Five
    steps that all show it give 1/32: a run needs at least five steady steps (six for a 2-rank
    straggler) before a rule tested so can report anything."""
    return min(1.0, choices * _binomial_tail(n, hits, p0))


def _job_p(per: list[tuple[int, int]]) -> float:
    """A job-wide rule's p-value from each process's (hits, steady steps): the median process's
    (the lower one of two): the finding must stand out of chance on at least half the processes,
    as its impact is the median over processes. Not pooled: the ranks of a job share their
    stalls, so their steps are not independent trials."""
    ps = sorted(_sign_p(h, n) for h, n in per)
    return ps[(len(ps) + 1) // 2 - 1] if ps else 1.0


def _evidence(p: dict, j: int, figures: dict | None = None, ranks: list[int] | None = None) -> dict[str, Any]:
    return {"ranks": ranks if ranks is not None else [int(p["rank"])], "steps": [int(p["number"][j])],
            "instance_id": p["instance_id"], "pid": int(p["pid"]), "start_ns": int(p["start_ns"][j]),
            "end_ns": int(p["end_ns"][j]), "figures": figures or {}}


def _insight(iid: str, title: str, impact: float | None, conf: dict, rec: str, ev: dict) -> dict[str, Any]:
    return {"id": iid, "title": title, "impact_ns_per_step": None if impact is None else int(impact),
            "confidence": conf, "recommendation": rec, "evidence": ev}


def _per_process_rule(col: str, iid: str, title: Callable[[float], str], rec: str, stat: str = "median",
                      minimum: float = 0.0, tested: bool = True,
                      steady: Callable[[dict], np.ndarray] = _steady) -> Callable[[list[dict], dict], dict | None]:
    """A job-wide rule on one column: the median over processes of each one's median (or mean)
    over its ``steady`` steps; evidence: the worst step of the worst process. ``tested``: the
    column is a duration a loaded host's scheduling can lengthen, so the finding must pass the
    sign test (``_job_p``); not for counts of discrete events that noise does not make (a compile)."""
    def rule(procs: list[dict], memo: dict) -> dict | None:
        if not procs:
            return None
        vals, hits, total, per = [], 0, 0, []
        for p in procs:
            v = _arr(p, col)[steady(p)]
            if stat == "mean":
                vals.append(float(v.mean()) if len(v) else 0.0)
            else:
                vals.append(_smed(p, col) if steady is _steady else _med(v))
            h = int((v > max(minimum, NOISE_MIN_NS)).sum())
            per.append((h, len(v)))
            hits += h
            total += len(v)
        impact = _med(vals)
        if impact <= minimum:
            return None
        worst = procs[int(np.argmax(vals))]
        k = steady(worst)
        j = int(np.flatnonzero(k)[np.argmax(_arr(worst, col)[k])])
        ranks_hit = sum(1 for v in vals if v > max(minimum, NOISE_MIN_NS))
        return _insight(iid, title(impact), impact,
                        _confidence(hits, total, ranks_hit, len(procs), _job_p(per) if tested else None), rec,
                        _evidence(worst, j, {col: int(worst[col][j])}))
    return rule


def _numerical(procs: list[dict], memo: dict) -> dict | None:
    bad = [(p, np.flatnonzero(_arr(p, "numerical_errors") > 0)) for p in procs]
    bad = [(p, j) for p, j in bad if len(j)]
    if not bad:
        return None
    p, j = min(((q, int(i[0])) for q, i in bad), key=lambda m: m[0]["start_ns"][m[1]])
    ranks = sorted({int(q["rank"]) for q, _ in bad})
    total = sum(len(q["number"]) for q in procs)
    return _insight("numerical_errors", f"NaN/Inf in graph outputs from step {int(p['number'][j])}", None,
                    _confidence(sum(len(i) for _, i in bad), total, len(ranks), len(procs)),
                    "find the first graph with NaN/Inf in this step (neuron-det names it); lower the learning rate, "
                    "add gradient clipping or loss scaling", _evidence(p, j, ranks=ranks))


_CAUSES = {"compute_own_ns": "its compute is slower", "data_loading_ns": "its data loading is slower",
           "host_ns": "its host/framework time is longer", "compile_ns": "it compiles graphs the others do not",
           "idle_ns": "its host runs longer between calls"}
_ADVICE = {"compute_own_ns": "check what rank {r} computes that the others do not (uneven shards or sequence "
                             "lengths, a slower device, thermal throttling)",
           "data_loading_ns": "give rank {r}'s DataLoader more workers or a faster input path (its shard may "
                              "sit on slower storage)",
           "host_ns": "look at rank {r}'s framework regions in the timeline: extra host work each step",
           "compile_ns": "make rank {r}'s input shapes match the others' (it recompiles)",
           "idle_ns": "rank {r}'s host runs unrecorded Python between calls: profile its host code"}


# a straggler's host CPU is named saturated when its main thread waited for a CPU, beyond what the
# others' waited, for at least this share of its excess own time (decision 0203)
CPU_WAIT_SHARE = 0.5


def _starved(p: dict, others: list[dict], figs: dict[str, Any]) -> bool:
    """Whether the process's main thread took longer than the others' because other threads of its
    process took its CPU: per step, its wait for a CPU beyond the others' is most of its excess own
    time, and its other threads (the process's CPU but the main thread's) ran at least as much as
    its main thread and at least twice as much, relative to it, as the others' did.  A rank with
    more to compute on a loaded host waits longer too, but its own threads do not outrun it; the
    ratio, unlike the shares, does not depend on how much of a CPU the host's load leaves the
    process.  Reads the steady steps with a sample (``cpu_process_pct``, ``cpu_main_pct``,
    ``cpu_wait_pct``: each the samples' mean share of the step's wall time); the medians go into
    ``figs``."""
    def per_step(q: dict) -> tuple[float, float, float, float] | None:
        cols = [_arr(q, k) for k in ("cpu_process_pct", "cpu_main_pct", "cpu_wait_pct")]
        if not len(q["number"]) or any(len(c) != len(q["number"]) for c in cols):
            return None
        keep = _steady(q) & (cols[0] >= 0) & (cols[1] >= 0) & (cols[2] >= 0)
        if not keep.any():
            return None
        proc, main, wait = (c[keep] for c in cols)
        return _med(main), _med(wait), _med(wait / 100.0 * _arr(q, "wall_ns")[keep]), _med(proc - main)
    mine = per_step(p)
    theirs = [t for t in (per_step(q) for q in others) if t is not None]
    if mine is None or not theirs:
        return False
    base = [_med([t[i] for t in theirs]) for i in range(4)]
    figs["cpu_main_pct"], figs["cpu_main_pct_others"] = mine[0], base[0]
    figs["cpu_wait_pct"], figs["cpu_wait_pct_others"] = mine[1], base[1]
    figs["cpu_other_threads_pct"], figs["cpu_other_threads_pct_others"] = mine[3], base[3]
    figs["cpu_wait_excess_ns"] = int(mine[2] - base[2])
    ratio = mine[3] / mine[0] if mine[0] > 0 else float("inf")
    theirs_ratio = _med([t[3] / t[0] for t in theirs if t[0] > 0])  # (0 for none)
    return figs["cpu_wait_excess_ns"] >= CPU_WAIT_SHARE * figs["own_excess_ns"] and \
        mine[3] > 0 and ratio >= max(1.0, 2 * theirs_ratio)


def _straggler(procs: list[dict], memo: dict) -> dict | None:
    if "straggler" not in memo:
        memo["straggler"] = _find_straggler(procs)
    return memo["straggler"]


def _find_straggler(procs: list[dict]) -> dict | None:
    ranked = [p for p in procs if p["rank"] >= 0]
    if len(ranked) < 2:
        return None
    nums = _common([_distinct(_nums(p)[_steady(p)]) for p in ranked])
    if len(nums) < 1:
        return None
    grid = _Grid(ranked, nums)
    own = grid("own_ns")
    slowest = np.argmax(own, axis=0)
    s = int(np.bincount(slowest, minlength=len(ranked)).argmax())
    others = np.delete(own, s, axis=0)
    excess = own[s] - _col_median(others)
    waits = grid("wall_ns") - own
    # what the others wait is the time saved: never more than their collective and wait time
    saved = np.minimum(np.maximum(excess, 0), _col_median(np.delete(waits, s, axis=0)))
    impact = _med(saved)
    if impact <= 0:
        return None
    p = ranked[s]
    diffs = {}
    for c in _CAUSES:
        g = grid(c)
        diffs[c] = _med(g[s] - _col_median(np.delete(g, s, axis=0)))
    cause = max(diffs, key=lambda c: diffs[c])
    rank = int(p["rank"])
    title = f"rank {rank} is a straggler: {_CAUSES[cause]}"
    rec = _ADVICE[cause].format(r=rank)
    figs: dict[str, Any] = {"own_ns_straggler": int(_med(own[s])), "own_ns_others": int(_med(others)),
                            "own_excess_ns": int(_med(excess)),
                            "cause": cause, "cause_excess_ns": {c: int(v) for c, v in diffs.items()}}
    cpu_mine = _pct(p, "cpu_process_pct")
    cpu_theirs = [_med(_pct(q, "cpu_process_pct")) for i, q in enumerate(ranked) if i != s]
    if len(cpu_mine) and cause in ("compute_own_ns", "idle_ns", "host_ns") and cpu_theirs:
        figs["cpu_process_pct"] = _med(cpu_mine)
        figs["cpu_process_pct_others"] = _med(cpu_theirs)
        host = _med(_pct(p, "cpu_host_pct"))
        hosts = [_med(_pct(q, "cpu_host_pct")) for i, q in enumerate(ranked)
                 if i != s and q["instance_id"] != p["instance_id"]]
        figs["cpu_host_pct"] = host
        starved = _starved(p, ranked[:s] + ranked[s + 1:], figs)
        # more than one busy thread (the step's own is one), or its host busy while the others' are not
        if figs["cpu_process_pct"] >= max(figs["cpu_process_pct_others"], 100.0) + 20 or \
                (hosts and host >= 95 and _med(hosts) < 80):
            title = f"rank {rank} is a straggler: its host CPU is saturated"
            rec = (f"rank {rank}'s process uses {figs['cpu_process_pct']:.0f}% CPU against "
                   f"{figs['cpu_process_pct_others']:.0f}% on the others: find the extra threads (another "
                   "workload, a busy background thread, too many intra-op threads for the cores it has)")
        elif starved:
            # its main thread waited for a CPU for most of what it took beyond the others (decision 0203)
            title = f"rank {rank} is a straggler: its host CPU is saturated"
            rec = (f"rank {rank}'s main thread waited for a CPU {figs['cpu_wait_pct']:.0f}% of each step "
                   f"against {figs['cpu_wait_pct_others']:.0f}% on the others, while its other threads ran "
                   f"{figs['cpu_other_threads_pct']:.0f}% of a CPU against "
                   f"{figs['cpu_other_threads_pct_others']:.0f}%: "
                   "find the threads that take its CPU (a busy background thread, more intra-op threads than "
                   "the cores it has, threads pinned to its core)")
    hit = int((slowest == s).sum())
    k = int(np.argsort(saved)[len(saved) // 2])
    j = int(np.searchsorted(_nums(p), nums[k])) if (np.diff(_nums(p)) > 0).all() else \
        int(np.flatnonzero(_nums(p) == nums[k])[0])
    # the same rank the slowest in more steps than chance would make it (one in R a step), the
    # rank being the one picked of R
    pv = _sign_p(hit, len(nums), 1.0 / len(ranked), choices=len(ranked))
    return _insight("straggler", title, impact,
                    _confidence(hit, len(nums), len(ranked) - 1, len(ranked) - 1, pv), rec, _evidence(p, j, figs))


# (percent) the gaps' and the executions' time per step that host-bound stepping is measured by,
# each the order statistic at or below this quantile (numpy's "lower"): what each takes when the
# scheduler does not preempt the step.  Lower than the optimizer's quartile: at 8 to 20 steady
# steps the sign test lets only 1 to 5 of them go without the finding, and when those are the
# steps a loaded host did not preempt, the statistic must be one of theirs (decision 0158)
HOST_BOUND_QUANTILE = 10


def _host_bound(procs: list[dict], memo: dict) -> dict | None:
    """The gaps between executions (idle + host/framework time) beyond the executions (compute),
    per process as the low order statistics of the steady steps' gap and compute
    (``HOST_BOUND_QUANTILE``): what each takes when not preempted.  A loaded host deschedules
    the stepping thread for whole time slices, which land mostly in the gaps of a step made of
    short executions; a fused or compiled step would not give that time back (decision 0158; 0141
    for the optimizer).  The steps that show it (gap > compute, two or more executions) are the
    sign test's."""
    if not procs:
        return None
    vals, hits, total, per = [], 0, 0, []
    for p in procs:
        k = _steady(p)
        gap = (_arr(p, "idle_ns") + _arr(p, "host_ns"))[k]
        comp = _arr(p, "compute_ns")[k]
        ex = _arr(p, "executions")[k]
        bound = (gap > comp) & (ex >= 2)
        per.append((int(bound.sum()), len(gap)))
        hits += int(bound.sum())
        total += len(gap)
        excess = float(np.percentile(gap, HOST_BOUND_QUANTILE, method="lower")
                       - np.percentile(comp, HOST_BOUND_QUANTILE, method="lower")) if len(gap) else 0.0
        vals.append(max(excess, 0.0))
    impact = _med(vals)
    if impact <= 0 or hits < total / 2:
        return None
    worst = procs[int(np.argmax(vals))]
    j = int(np.flatnonzero(_steady(worst))[0])
    return _insight("host_bound", "host-bound stepping: the gaps between executions exceed the executions",
                    impact, _confidence(hits, total, sum(1 for v in vals if v > 0), len(procs), _job_p(per)),
                    "batch more work per call (a larger batch, torch.compile or CUDA graphs to fuse small "
                    "executions) and move Python work out of the step", _evidence(worst, j))


# the bucket a larger bucket setting would give (DDP's default bucket_cap_mb) and the small calls a
# step needs to be worth a finding
SMALL_COLLECTIVES_BUCKET = 25 << 20
SMALL_COLLECTIVES_MIN = 8


def _small_collectives(procs: list[dict], memo: dict) -> dict | None:
    """Many collectives under 1 MiB per step: in buckets of ``SMALL_COLLECTIVES_BUCKET`` their
    bytes would take ``ceil(bytes / bucket)`` calls; each call saved saves its fixed cost, the
    step's ``small_collective_call_ns`` (the pace at which its queued small calls completed, the
    first call of each busy period aside, as one bucket pays that one too: decision 0174).  The
    impact is the interquartile mean over the steady steps of the step's calls saved x its per-call
    cost, on the median process.  Not a lower quantile as for the optimizer: each call waits for
    every rank to be scheduled, so on a loaded host the calls themselves cost the slices the load
    takes, which fewer calls would not wait for, and each step's estimate follows its own calls.
    Not the median: on a host loaded in bursts the steps' costs gather in two groups (calls
    unpreempted, calls waiting for slices) and the median jumps between them; the mean of the
    middle half moves smoothly, and a step a stall hit outside the calls' pace stays out of it."""
    vals, shown, hits, total = [], [], 0, 0
    for p in procs:
        k = _steady(p)
        small = _arr(p, "small_collectives")[k]
        call, nbytes = _arr(p, "small_collective_call_ns"), _arr(p, "small_collective_bytes")
        if not len(small) or len(call) != len(k) or len(nbytes) != len(k):
            continue
        many = small >= SMALL_COLLECTIVES_MIN
        hits += int(many.sum())
        total += len(small)
        saved = np.maximum(small - np.ceil(nbytes[k] / SMALL_COLLECTIVES_BUCKET), 0)
        vals.append(_interquartile_mean(np.where(many, call[k] * saved, 0.0)))
        shown.append(p)
    if not vals or hits < max(total / 2, 1):
        return None
    impact = _med(vals)
    worst = shown[int(np.argmax(vals))]
    j = int(np.flatnonzero(_steady(worst))[0])
    figs = {"small_collectives": int(worst["small_collectives"][j]),
            "small_collective_call_ns": int(worst["small_collective_call_ns"][j]),
            "small_collective_bytes": int(worst["small_collective_bytes"][j])}
    return _insight("small_collectives",
                    f"{int(_med(_arr(worst, 'small_collectives')))} collectives under 1 MiB per step",
                    impact, _confidence(hits, total, sum(1 for v in vals if v > 0), len(procs)),  # (counts)
                    "raise DDP's bucket_cap_mb (or the framework's bucket size) so gradients go in fewer, larger "
                    "all-reduces", _evidence(worst, j, figs))


def _interquartile_mean(a: np.ndarray) -> float:
    """The mean of the middle half of ``a`` (a quarter left out at each end, rounded down; the
    mean of all under four values)."""
    n = len(a)
    if not n:
        return 0.0
    q = n // 4
    return float(np.partition(a, (q, n - q - 1))[q:n - q].mean()) if q else float(a.mean())


def _exposed(procs: list[dict], memo: dict) -> dict | None:
    rule = _per_process_rule("exposed_collective_ns", "exposed_collectives",
                             lambda v: "collectives not overlapped by compute",
                             "overlap communication with compute (DDP's bucketed all-reduce during backward; "
                             "async collectives with a later wait), or communicate less often")
    found = rule(procs, memo)
    st = _straggler(procs, memo)
    if found is None:
        return None
    if st is not None and (st["confidence"]["p_value"] or 0) <= ALPHA:
        # the waits a straggler causes are its finding, not this one (one that chance could have
        # named is none: its waits stay exposed collective time)
        found["impact_ns_per_step"] = max(0, found["impact_ns_per_step"] - st["impact_ns_per_step"])
    return found


# the optimizer's share of a step that is worth a finding, and the share a fused or foreach optimizer
# typically keeps (the impact is the time above it: what such an optimizer would give back)
OPTIMIZER_SHARE_MIN = 0.25
OPTIMIZER_SHARE_TYPICAL = 0.10
OPTIMIZER_QUANTILE = 25  # (percent) the optimizer's and the step's time: what they take when nothing preempts them


def _optimizer_share(procs: list[dict], memo: dict) -> dict | None:
    """The optimizer's time and the step's are the lower quartiles of the steady steps'
    (``OPTIMIZER_QUANTILE``): what they take when the scheduler does not preempt them.  An
    optimizer without a foreach path is a Python loop of small ops, which a loaded host preempts
    in many steps for whole time slices, milliseconds that a fused optimizer would not give back
    (decision 0141)."""
    vals, shares, hits, total, per = [], [], 0, 0, []
    for p in procs:
        k = _steady(p)
        opt, wall = _arr(p, "optimizer_ns")[k], _arr(p, "wall_ns")[k]
        if not len(opt):
            continue
        share = np.divide(opt, wall, out=np.zeros(len(opt)), where=wall > 0)
        big = share >= OPTIMIZER_SHARE_MIN
        per.append((int(big.sum()), len(opt)))
        hits += int(big.sum())
        total += len(opt)
        cost, step = float(np.percentile(opt, OPTIMIZER_QUANTILE)), float(np.percentile(wall, OPTIMIZER_QUANTILE))
        shares.append(cost / step if step > 0 else 0.0)
        vals.append(max(cost - OPTIMIZER_SHARE_TYPICAL * step, 0.0))
    if not vals or _med(shares) < OPTIMIZER_SHARE_MIN:
        return None
    worst = int(np.argmax(vals))
    p = procs[worst]
    j = int(np.flatnonzero(_steady(p))[0])
    return _insight("optimizer_share", f"the optimizer step takes {_med(shares) * 100:.0f}% of each step",
                    _med(vals), _confidence(hits, total, sum(1 for s in shares if s >= OPTIMIZER_SHARE_MIN),
                                            len(procs), _job_p(per)),
                    "use a fused or foreach optimizer (e.g. torch.optim.AdamW(fused=True) or foreach=True), shard "
                    "the optimizer state across ranks (ZeroRedundancyOptimizer, FSDP), or step it less often "
                    "(a larger batch or gradient accumulation)",
                    _evidence(p, j, {"optimizer_ns": int(p["optimizer_ns"][j]), "wall_ns": int(p["wall_ns"][j])}))


# memory: a process's device memory grows by at least this much over its steady steps, and by this
# share of where it started, and keeps growing in their second half (decision 0159); near its
# limit: at least this share of the limit at some step
MEMORY_GROWTH_MIN_BYTES = 64 << 20
MEMORY_GROWTH_SHARE = 0.10
MEMORY_NEAR_LIMIT = 0.90
_MIB = float(1 << 20)
_GIB = float(1 << 30)


def _memory_steps(p: dict) -> tuple[np.ndarray, np.ndarray]:
    """(step numbers, device memory at their ends) of the process's steady steps that have a
    sample (``device_mem_bytes`` >= 0)."""
    m = _arr(p, "device_mem_bytes")
    if len(m) != len(p["number"]):
        return np.zeros(0, dtype=np.int64), m[:0]
    k = _steady(p) & (m >= 0)
    return _nums(p)[k], m[k]


def _memory_growth(procs: list[dict], memo: dict) -> dict | None:
    """Device memory that keeps growing over the steady steps (a leak: tensors kept from every
    step; on CUDA also the caching allocator's reserve growing): the process growing most per
    step among those that grew by ``MEMORY_GROWTH_MIN_BYTES`` and ``MEMORY_GROWTH_SHARE``, a
    quarter of it in the second half of their steps, with more rises than falls between steps
    than chance would give (a sign test on the changes, times the processes it was picked of)."""
    best, shown = None, 0
    for p in procs:
        nums, m = _memory_steps(p)
        if len(m) < 3:
            continue
        grow, mid = float(m[-1] - m[0]), len(m) // 2
        d = np.diff(m)
        rises, changes = int((d > 0).sum()), int((d != 0).sum())
        if grow < max(MEMORY_GROWTH_MIN_BYTES, MEMORY_GROWTH_SHARE * m[0]) or float(m[-1] - m[mid]) < grow / 4:
            continue
        shown += 1
        rate = grow / max(int(nums[-1] - nums[0]), 1)
        if best is None or rate > best[1]:
            best = (p, rate, nums, m, rises, changes)
    if best is None:
        return None
    p, rate, nums, m, rises, changes = best
    figs: dict[str, Any] = {"device_mem_bytes_first": int(m[0]), "device_mem_bytes_last": int(m[-1]),
                            "bytes_per_step": int(rate), "steps": [int(nums[0]), int(nums[-1])]}
    by_cat = p.get("device_mem_growth") or {}
    if by_cat:
        figs["growth_by_category"] = {str(k): int(v) for k, v in by_cat.items()}
    title = f"device memory grows by {rate / _MIB:.1f} MiB per step"
    limit = p.get("memory_limit_bytes")
    if limit and limit > m[-1]:
        figs["memory_limit_bytes"] = int(limit)
        figs["memory_limit_source"] = str(p.get("memory_limit_source", ""))
        figs["steps_to_limit"] = int((limit - m[-1]) // max(rate, 1.0))
        title += f" (its limit in ~{figs['steps_to_limit']} more steps)"
    grown = max(by_cat, key=lambda c: by_cat[c]) if by_cat else "tensors"
    rec = {"allocator_cache": "the caching allocator reserves more every step (fragmentation from changing shapes): "
                              "keep shapes stable, or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
           "optimizer_state": "optimizer state grows: parameters are added to the optimizer every step",
           "model_code": "compiled graphs pile up: shapes or guards change every step (see recompilation)"}.get(
        grown, "tensors outlive their step: look for a loss or output kept in a list without .item() or "
               ".detach() (it holds the whole autograd graph), a cache that never evicts, or retain_graph=True")
    j0, j1 = (int(np.flatnonzero(_nums(p) == n)[0]) for n in (nums[0], nums[-1]))
    ev = {"ranks": [int(p["rank"])], "steps": [int(nums[0]), int(nums[-1])], "instance_id": p["instance_id"],
          "pid": int(p["pid"]), "start_ns": int(p["start_ns"][j0]), "end_ns": int(p["end_ns"][j1]), "figures": figs}
    pv = _sign_p(rises, changes, choices=len(procs)) if changes else 1.0
    return _insight("memory_growth", title, None, _confidence(rises, changes, shown, len(procs), pv), rec, ev)


def _memory_near_limit(procs: list[dict], memo: dict) -> dict | None:
    """A process whose device memory reached ``MEMORY_NEAR_LIMIT`` of its limit at some step
    (``memory_limit_bytes``: on the CPU substrate the host's memory, decision 0159, or the
    process's cgroup limit where one is lower, decision 0182): the next
    larger batch or longer sequence fails to allocate.  The fullest process is named."""
    best = None
    for p in procs:
        m, limit = _arr(p, "device_mem_bytes"), p.get("memory_limit_bytes")
        if not limit or len(m) != len(p["number"]) or not (m >= 0).any():
            continue
        share = float(m.max()) / float(limit)
        if share >= MEMORY_NEAR_LIMIT and (best is None or share > best[1]):
            best = (p, share, m)
    if best is None:
        return None
    p, share, m = best
    j = int(np.argmax(m))
    over = int((m >= MEMORY_NEAR_LIMIT * p["memory_limit_bytes"]).sum())
    near = sum(1 for q in procs if q.get("memory_limit_bytes") and len(_arr(q, "device_mem_bytes")) and
               float(_arr(q, "device_mem_bytes").max()) >= MEMORY_NEAR_LIMIT * q["memory_limit_bytes"])
    limit = int(p["memory_limit_bytes"])
    figs = {"device_mem_bytes": int(m[j]), "memory_limit_bytes": limit,
            "memory_limit_source": p.get("memory_limit_source", "")}
    title = f"device memory reaches {share * 100:.0f}% of its limit"
    rec = ("lower the memory per step before it fails to allocate: a smaller micro-batch with gradient "
           "accumulation, activation checkpointing, bf16/fp16 weights and activations, or shard the "
           "optimizer state (ZeRO/FSDP)")
    if str(figs["memory_limit_source"]).startswith("cgroup"):  # the container's limit (decision 0182)
        figs["memory_limit_cgroup"] = str(p.get("memory_limit_cgroup", ""))
        title = f"device memory reaches {share * 100:.0f}% of its cgroup's memory limit ({limit / _GIB:.2f} GiB)"
        rec += "; or give its container (cgroup) more memory: the kernel ends the process at the limit"
    return _insight("memory_near_limit", title, None, _confidence(over, len(m), near, len(procs)), rec,
                    _evidence(p, j, figs))


RULES: list[Callable[[list[dict], dict], dict | None]] = [
    _numerical,
    _straggler,
    _per_process_rule("data_loading_ns", "data_loading",
                      lambda v: "data loading stalls the step",
                      "use DataLoader(num_workers>0, pin_memory=True, persistent_workers=True) and prefetch; "
                      "move decoding and augmentation off the training loop"),
    _per_process_rule("compile_ns", "recompilation",
                      lambda v: "graphs are recompiled during training",
                      "keep input shapes and guards stable (pad to fixed sizes, torch.compile(dynamic=True), "
                      "mark_dynamic), and look for graph breaks with TORCH_LOGS=graph_breaks,recompiles",
                      stat="mean", tested=False, steady=_after_warm_up),
    _host_bound,
    _exposed,
    _small_collectives,
    _per_process_rule("sync_wait_ns", "sync_waits",
                      lambda v: "the host blocks on synchronisation inside the step",
                      "remove .item(), .cpu() and synchronize() calls from the step (log every N steps; keep "
                      "metrics on the device)"),
    _optimizer_share,
    _memory_near_limit,
    _memory_growth,
]


def memory_per_step(series: dict[str, tuple[np.ndarray, np.ndarray]],
                    end: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """The process's device memory at each step's end: over its ``device_mem.nc<N>.<category>``
    series (name -> (ts, bytes), the events' clock), the sum of each one's latest sample at or
    before the end (-1: no sample yet); and each category's growth from the first step's end to
    the last's (the steady steps' growth, by what grew)."""
    n = len(end)
    total = np.zeros(n, dtype=np.int64)
    seen = np.zeros(n, dtype=bool)
    growth: dict[str, int] = {}
    for name, (ts, v) in series.items():
        if not len(ts):
            continue
        order = np.argsort(ts, kind="stable")
        ts, v = np.asarray(ts)[order], np.asarray(v, dtype=np.int64)[order]
        i = np.searchsorted(ts, end, side="right") - 1
        has = i >= 0
        at = np.where(has, v[np.maximum(i, 0)], 0)
        total += at
        seen |= has
        if n >= 2:
            cat = name.rsplit(".", 1)[-1]
            growth[cat] = growth.get(cat, 0) + int(at[-1] - at[0])
    return np.where(seen, total, -1), growth


def cpu_per_step(start: np.ndarray, end: np.ndarray, *series: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """For each CPU % series ``(ts, values)`` (``analysis.counters``: read samples only): the mean
    of its samples inside each step (-1: none)."""
    n = len(start)
    order = np.argsort(start, kind="stable")
    starts = start[order]
    out = []
    for ts, v in series:
        if not len(ts) or not n:
            out.append(np.full(n, -1.0))
            continue
        i = np.searchsorted(starts, ts, side="right") - 1
        j = order[np.maximum(i, 0)]
        ok = (i >= 0) & (ts < end[j])
        cnt = np.bincount(j[ok], minlength=n)[:n]
        tot = np.bincount(j[ok], weights=np.asarray(v, dtype=np.float64)[ok], minlength=n)[:n]
        out.append(np.where(cnt > 0, tot / np.maximum(cnt, 1), -1.0).round(1))
    return out

