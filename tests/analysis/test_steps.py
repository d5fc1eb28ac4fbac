"""``analysis.steps`` on hand-made event columns: the three rules, numbering and the breakdown."""

from __future__ import annotations

import numpy as np

from neuron_explorer.analysis.steps import BREAKDOWN, Steps, find_steps

NAMES = {"nc_exec_running": 0, "cc_running": 1, "kbl_exec_wait": 2, "model_load": 3, "framework_op": 4,
         "nrt_execute": 5}
STRINGS = ["", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "ProfilerStep#7",
           "ProfilerStep#8", "neuron_explorer.step#40", "Optimizer.zero_grad#SGD.zero_grad"]
MODELS = [(0, "Net_fwd", "forward", 100.0), (1, "Net_fwd_bwd", "backward", 200.0), (2, "SGD_x", "optimizer", 0.0)]


def cols(rows):
    """rows: (type, start, end, model_id, label, bytes)."""
    a = np.asarray(rows, dtype=np.int64).reshape(-1, 6)
    return dict(typ=a[:, 0], start=a[:, 1], end=a[:, 2], model_id=a[:, 3], label=a[:, 4], nbytes=a[:, 5])


def one_step(t: int) -> list:
    """data 10, forward 20, backward 30 (a 10-long all-reduce inside, 5 sticking out), optimizer 5."""
    return [(4, t, t + 10, -1, 1, -1),
            (0, t + 10, t + 30, 0, -1, -1),
            (0, t + 30, t + 60, 1, -1, -1), (1, t + 55, t + 65, -1, -1, 4096),
            (0, t + 65, t + 70, 2, -1, -1)]


def run(rows, strings=STRINGS) -> Steps:
    c = cols(rows)
    return find_steps(c["typ"], c["start"], c["end"], c["model_id"], c["label"], c["nbytes"], NAMES, strings, MODELS)


def test_optimizer_steps_partition_the_wall_time():
    rows = [r for k in range(4) for r in one_step(1000 + 100 * k)]
    st = run(rows)
    assert st.method == "optimizer" and st.boundary == "SGD_x"
    assert st.number.tolist() == [0, 1, 2, 3]
    assert st.end_ns.tolist() == [1070, 1170, 1270, 1370]
    assert st.start_ns.tolist() == [1000, 1070, 1170, 1270]
    c = st.columns
    total = sum(c[k] for k in BREAKDOWN)
    assert (total == c["wall_ns"]).all()
    assert c["compute_ns"][1] == 55 and c["exposed_collective_ns"][1] == 5
    assert c["data_loading_ns"][1] == 10 and c["idle_ns"][1] == 30  # 1070..1100 is nothing
    assert c["collective_ns"][1] == 10 and c["own_ns"][1] == 90 and c["compute_own_ns"][1] == 50
    assert c["optimizer_ns"][1] == 5 and c["executions"][1] == 3 and c["graphs"][1] == 3
    assert c["flops"][1] == 300.0 and c["small_collectives"][1] == 1 and c["collective_bytes"][1] == 4096


def test_mark_sets_the_base_and_profiler_steps_win():
    rows = [r for k in range(3) for r in one_step(1000 + 100 * k)] + [(4, 1075, 1076, -1, 4, -1)]
    assert run(rows).number.tolist() == [39, 40, 41]  # the boundary ending after the mark is 40
    rows += [(4, 1000, 1070, -1, 2, -1), (4, 1070, 1170, -1, 3, -1)]
    st = run(rows)
    assert st.method == "profiler_step" and st.number.tolist() == [7, 8]
    assert st.start_ns.tolist() == [1000, 1070] and st.end_ns.tolist() == [1070, 1170]


def test_cycle_without_optimizer_and_none():
    rows = [(0, t, t + 5, 0, -1, -1) for t in range(0, 50, 10)]
    rows += [(0, t + 5, t + 7, 1, -1, -1) for t in range(0, 50, 10)]
    st = find_steps(*cols(rows).values(), NAMES, STRINGS, MODELS[:2])
    assert st.method == "cycle" and st.boundary == "Net_fwd" and len(st) == 5
    empty = cols([])
    none = find_steps(*empty.values(), NAMES, STRINGS, MODELS)
    assert none.method == "none" and len(none) == 0 and Steps.from_json(none.to_json()).method == "none"


def test_json_round_trip():
    st = run([r for k in range(2) for r in one_step(100 * k)])
    back = Steps.from_json(st.to_json())
    assert back.number.tolist() == st.number.tolist() and back.columns["flops"].tolist() == st.columns["flops"].tolist()
    assert back.shifted(5).start_ns.tolist() == (st.start_ns + 5).tolist()


def test_random_columns_never_fail_and_partition_holds():
    """Damaged or odd columns (negative and huge ids, zero-length and reversed spans, labels
    outside the table): steps are found or not, never an exception, and the breakdown sums to the
    wall time."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(0, 60))
        typ = rng.integers(-2, 9, n)
        start = rng.integers(0, 10_000, n)
        end = start + rng.integers(-50, 500, n)
        model = rng.integers(-3, 5, n)
        label = rng.integers(-3, len(STRINGS) + 3, n)
        st = find_steps(typ, start, end, model, label, rng.integers(-5, 1 << 22, n), NAMES, STRINGS, MODELS)
        c = st.columns
        assert len(c["wall_ns"]) == len(st)
        assert (sum(c[k] for k in BREAKDOWN) <= c["wall_ns"] + 1).all()
        assert (np.asarray([c[k] for k in BREAKDOWN]) >= 0).all()


def _brute(st: Steps, rows) -> dict[str, list[int]]:
    """The partition by walking every time unit of every step (the definition, slowly)."""
    prio = {0: "compute_ns", 1: "exposed_collective_ns", 2: "sync_wait_ns", 3: "compile_ns"}
    out: dict[str, list[int]] = {k: [] for k in BREAKDOWN + ("collective_ns", "own_ns")}
    for lo, hi in zip(st.start_ns.tolist(), st.end_ns.tolist()):
        got = dict.fromkeys(out, 0)
        for t in range(lo, hi):
            on = [r for r in rows if r[1] <= t < r[2]]
            kinds = {r[0] for r in on} | {"data" if r[4] == 1 else "host" for r in on if r[0] == 4}
            kinds |= {"host" for r in on if r[0] == 5}
            first = next((prio[k] for k in (0, 1, 2, 3) if k in kinds), None)
            first = first or ("data_loading_ns" if "data" in kinds else "host_ns" if "host" in kinds else "idle_ns")
            got[first] += 1
            got["collective_ns"] += 1 in kinds
            got["own_ns"] += not ({1, 2} & kinds)
        for k in out:
            out[k].append(got[k])
    return out


def test_partition_matches_the_definition_on_random_timelines():
    """Overlapping executions, collectives, waits and regions in any order: each figure equals a
    unit-by-unit walk of the step (the union merge and cumulative covered time; model loads are
    left out: they are widened over the gaps around them)."""
    rng = np.random.default_rng(11)
    for _ in range(40):
        rows = []
        for _k in range(int(rng.integers(1, 40))):
            typ = int(rng.choice([0, 1, 2, 4, 5]))
            s = int(rng.integers(0, 300))
            rows.append((typ, s, s + int(rng.integers(0, 40)), int(rng.integers(0, 2)) if typ in (0, 3) else -1,
                         int(rng.choice([1, 5])) if typ == 4 else -1, 100 if typ == 1 else -1))
        rows += [(0, t, t + 3, 2, -1, -1) for t in sorted(rng.integers(0, 320, 4).tolist())]  # the steps
        st = run(rows)
        want = _brute(st, [r for r in rows])
        for k, v in want.items():
            assert st.columns[k].tolist() == v, k


def test_a_sample_of_many_steps_is_figured_as_all_of_them_are():
    """With more steps than ``figure_at_most``, the figured ones (the first, the slowest, every
    stride-th number) have exactly the figures a full run gives them; ``every`` keeps all spans."""
    rows = [r for k in range(60) for r in one_step(1000 + 100 * k + (200 if k >= 17 else 0))]  # 17 is slow
    c = cols(rows)
    full = find_steps(*c.values(), NAMES, STRINGS, MODELS)
    part = find_steps(*c.values(), NAMES, STRINGS, MODELS, figure_at_most=12)
    assert part.every is not None and part.every[0].tolist() == full.number.tolist()
    assert len(part) < len(full) and 0 in part.number.tolist() and 17 in part.number.tolist()
    at = np.searchsorted(full.number, part.number)
    for k, v in part.columns.items():
        assert v.tolist() == full.columns[k][at].tolist(), k
    assert "every_number" not in part.to_json() and "every_number" in part.to_columns()


def test_overlapping_events_of_disjoint_spans():
    from neuron_explorer.analysis.steps import _overlapping

    rng = np.random.default_rng(3)
    for _ in range(100):
        cuts = np.sort(rng.choice(200, 8, replace=False))
        lo, hi = cuts[0::2], cuts[1::2]
        s = rng.integers(0, 220, 50)
        e = s + rng.integers(0, 60, 50)
        want = [any((a < h and b > l) or (a == b and l <= a < h) for l, h in zip(lo, hi)) for a, b in zip(s, e)]
        assert _overlapping(s, e, lo, hi).tolist() == want


def test_session_sample_matches_figuring_every_step(tmp_path):
    """A capture with 5000 steps a process: the session path gathers only the sampled spans'
    events (one slice each) and figures them exactly as figuring every step does."""
    import glob
    import sys

    from neuron_explorer.analysis.reader import load_session
    from neuron_explorer.analysis.steps import session_steps
    from tests.conftest import REPO

    sys.path.insert(0, str(REPO))
    from bench.synth_capture import generate

    generate(str(tmp_path), instances=1, processes=1, events=25_000)
    s = load_session(sorted(glob.glob(str(tmp_path / "*" / "*")))[0])
    part, full = session_steps(s), session_steps(s, figure_at_most=None)
    assert part.every is not None and len(full) == 5000 and len(part) < 2100
    assert part.every[0].tolist() == full.number.tolist()
    at = np.searchsorted(full.number, part.number)
    for k, v in part.columns.items():
        assert v.tolist() == full.columns[k][at].tolist(), k


def test_small_collectives_cost_the_pace_of_their_queue():
    """A queue of small calls issued together costs, per call, the time from its first call's end
    to its last end over the calls after the first (the first one's span holds the wait for the
    other ranks); a call alone costs its span; a call of 1 MiB or more is not small."""
    rows = [r for k in range(3) for r in one_step(1000 + 100 * k)]
    rows += [(1, 1210 + i, 1220 + 5 * i, -1, -1, 100) for i in range(4)]  # ends 1220, 1225, 1230, 1235
    rows += [(1, 1236, 1250, -1, -1, 1 << 20)]
    c = run(rows).columns
    assert c["small_collectives"].tolist() == [1, 1, 5] and c["collectives"][2] == 6
    assert c["small_collective_bytes"].tolist() == [4096, 4096, 4 * 100 + 4096]
    assert c["small_collective_call_ns"].tolist() == [10, 10, 5]  # (1235 - 1220) / 3; the lone call's 10 apart


def _random_columns(rng, sort: bool) -> tuple:
    """(type, start, end, model, label, bytes) of up to 80 random events: unknown types and labels,
    reversed and empty intervals, starts in time order when ``sort``."""
    n = int(rng.integers(0, 80))
    typ = rng.integers(-1, 7, n)
    start = rng.integers(0, 2_000, n)
    if sort:
        start = np.sort(start)
    return (typ, start, start + rng.integers(-5, 200, n), rng.integers(-1, 3, n),
            rng.integers(-1, len(STRINGS), n), rng.integers(-1, 1 << 22, n))


def test_durations_only_are_the_same_durations():
    """``find_steps(counts=False)`` (what a diff compares) gives exactly the durations a full run
    gives, and no more; type ids far apart (no small-integer sort) give the same steps as small ones."""
    rng = np.random.default_rng(184)
    durations = {"wall_ns", "collective_ns", "own_ns", "compute_own_ns", *BREAKDOWN}
    far = {k: v * 1_000_003 - 7 for k, v in NAMES.items()}
    for i in range(200):
        typ, start, end, model, label, nbytes = _random_columns(rng, sort=bool(i % 2))
        full = find_steps(typ, start, end, model, label, nbytes, NAMES, STRINGS, MODELS)
        short = find_steps(typ, start, end, model, label, nbytes, NAMES, STRINGS, MODELS, counts=False)
        assert short.number.tolist() == full.number.tolist()
        assert set(short.columns) == durations if len(full) else durations <= set(short.columns)  # (none: zeros)
        for k in durations:
            assert short.columns[k].tolist() == full.columns[k].tolist(), k
        typ_far = np.where(typ >= 0, typ * 1_000_003 - 7, -1)
        moved = find_steps(typ_far, start, end, model, label, nbytes, far, STRINGS, MODELS)
        assert moved.number.tolist() == full.number.tolist()
        for k, v in full.columns.items():
            assert moved.columns[k].tolist() == v.tolist(), k


def test_merge_sorts_starts_and_ends_apart_and_gives_the_running_maximum_runs():
    """``steps._merge`` sorts the starts and the ends each on its own (``_runs``), and ``_join`` joins
    two unions by merging theirs: the same runs as ``util.intervals.merge`` (the running maximum over
    the intervals in start order), on random intervals (unsorted, nested, touching, empty and reversed
    ones, repeats)."""
    from neuron_explorer.analysis.steps import _join, _merge
    from neuron_explorer.util import intervals

    rng = np.random.default_rng(184)
    for _ in range(500):
        n = int(rng.integers(0, 40))
        s = rng.integers(0, 200, n)
        if rng.random() < 0.5:
            s = np.sort(s)
        e = s + rng.integers(-10, 30, n)
        assert [x.tolist() for x in _merge(s, e)] == [x.tolist() for x in intervals.merge(s, e)]
        m = int(rng.integers(0, 40))
        s2 = rng.integers(0, 200, m)
        e2 = s2 + rng.integers(0, 30, m)
        joined = _join(_merge(s, e), _merge(s2, e2))
        both = intervals.merge(np.concatenate([s, s2]), np.concatenate([e, e2]))
        assert [x.tolist() for x in joined] == [x.tolist() for x in both]


def _random_cats(rng, n_max: int) -> dict:
    """Six categories of random intervals (by start or not, nested, touching, empty, reversed,
    repeated, negative times), keyed by their bits as ``steps._figures`` keys them."""
    from neuron_explorer.analysis.steps import _BITS

    cats = {}
    for bit in _BITS:
        n = int(rng.integers(0, n_max)) if rng.random() < 0.85 else 0
        s = rng.integers(-50, 400, n)
        if rng.random() < 0.6:
            s = np.sort(s)
        e = s + rng.integers(-10, 60, n)
        if rng.random() < 0.2 and n:  # repeats
            s, e = np.repeat(s, 2), np.repeat(e, 2)
        cats[bit] = (s, e)
    return cats


def _random_spans(rng):
    from neuron_explorer.analysis.steps import _Spans

    m = int(rng.integers(1, 12))
    if rng.random() < 0.5:  # steps one after another (the distinct points without a sort)
        b = np.cumsum(rng.integers(1, 80, m + 1)) - 100
        return _Spans(b[:-1].astype(np.int64), b[1:].astype(np.int64))
    lo = rng.integers(-100, 450, m)
    return _Spans(lo.astype(np.int64), (lo + rng.integers(0, 120, m)).astype(np.int64))


def test_covered_time_in_one_c_pass_is_the_numpy_twins():
    """``_sweep.covered`` (one pass over the six categories by start), per step, gives
    exactly what ``_covered_numpy`` (each union merged, joined in priority order, cumulative covered
    time per step) gives: the unions of the first k categories, the collectives, the collectives or
    waits, per step, on random intervals and steps (chained or overlapping)."""
    from neuron_explorer.analysis import steps

    assert steps._sweep is not None, "the C extension analysis._sweep is not built (make ext)"
    rng = np.random.default_rng(192)
    for i in range(3000):
        cats = _random_cats(rng, 40 if i % 3 else 4)
        spans = _random_spans(rng)
        got = _covered_in_c(steps, spans, cats)
        want = steps._covered_numpy(spans, cats)
        assert len(got) == len(want) == 8
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == np.int64 and g.tolist() == w.tolist(), (i, k)


def _covered_in_c(steps, spans, cats) -> list[np.ndarray]:
    """``_sweep.covered``'s rows per step (each category sorted by start first, as ``_durations``
    does for one that is not)."""
    arrays = []
    for bit in steps._BITS:
        s, e = (np.asarray(a, dtype=np.int64) for a in cats[bit])
        o = np.argsort(s, kind="stable")
        arrays += [s[o], e[o]]
    upto = np.frombuffer(steps._sweep.covered(spans.points, tuple(arrays)), dtype=np.int64)
    return [spans.between(row) for row in upto.reshape(8, len(spans.points))]


def test_durations_in_c_are_the_numpy_twins():
    """``steps._durations`` (``analysis._sweep.durations``: the covered time and the figures per
    step in C) gives exactly what ``_durations_numpy`` gives, on random intervals (some categories
    not by start) and steps (chained or overlapping), and writable int64 columns."""
    from neuron_explorer.analysis import steps

    assert steps._sweep is not None, "the C extension analysis._sweep is not built (make ext)"
    rng = np.random.default_rng(195)
    for i in range(3000):
        cats = _random_cats(rng, 40 if i % 3 else 4)
        spans = _random_spans(rng)
        wall = spans.points[spans.ihi] - spans.points[spans.ilo]
        got = steps._durations(spans, cats, wall)
        want = steps._durations_numpy(spans, cats, wall)
        assert list(got) == list(want) == list(steps._DURATIONS)
        for k in want:
            assert got[k].dtype == np.int64 and got[k].flags.writeable, (i, k)
            assert got[k].tolist() == want[k].tolist(), (i, k)


def test_sweep_refuses_what_it_cannot_do():
    """The C pass answers None for a category not listed by start (``_durations`` sorts it), and
    refuses points out of order, a wrong count of arrays or arrays of another type."""
    import pytest

    from neuron_explorer.analysis import _sweep

    z = np.zeros(0, dtype=np.int64)
    pts = np.array([0, 10], dtype=np.int64)
    ok = (np.array([1, 2], dtype=np.int64), np.array([5, 3], dtype=np.int64)) + (z,) * 10
    assert np.frombuffer(_sweep.covered(pts, ok), dtype=np.int64).reshape(8, 2)[:, 1].tolist() == [4] * 6 + [0, 0]
    assert _sweep.covered(pts, (np.array([2, 1], dtype=np.int64), np.array([5, 3], dtype=np.int64)) + (z,) * 10) \
        is None
    with pytest.raises(ValueError):
        _sweep.covered(pts[::-1].copy(), ok)
    with pytest.raises(ValueError):
        _sweep.covered(pts, ok[:4])
    with pytest.raises(ValueError):
        _sweep.covered(pts, (np.array([1], dtype=np.int64), z) + (z,) * 10)
    with pytest.raises(TypeError):
        _sweep.covered(pts.astype(np.int32), ok)
    lo, hi = np.array([0], dtype=np.int64), np.array([1], dtype=np.int64)
    assert _sweep.durations(pts, (np.array([2, 1], dtype=np.int64), np.array([5, 3], dtype=np.int64)) + (z,) * 10,
                            lo, hi) is None
    def rows(got):  # (a bytearray a figure)
        return [np.frombuffer(r, dtype=np.int64).tolist() for r in got]

    assert rows(_sweep.durations(pts, ok, lo, hi)) == rows(_sweep.durations(pts, ok, None, None)) == \
        [[4], [0], [0], [0], [0], [0], [6], [0], [10], [4]]
    with pytest.raises(ValueError):
        _sweep.durations(pts, ok, lo, np.array([2], dtype=np.int64))
    with pytest.raises(ValueError):
        _sweep.durations(pts, ok, lo, np.array([1, 1], dtype=np.int64))
    with pytest.raises(TypeError):
        _sweep.durations(pts, ok, lo, hi.astype(np.int32))


def test_steps_found_with_and_without_the_c_pass_are_the_same(monkeypatch):
    """``find_steps`` gives the same figures (counts and durations) whether the covered time comes
    from the C pass or its numpy twin."""
    from neuron_explorer.analysis import steps

    rng = np.random.default_rng(1920)
    runs = []
    for i in range(150):
        runs.append(_random_columns(rng, sort=bool(i % 2)))
    with_c = [find_steps(*r, NAMES, STRINGS, MODELS) for r in runs]
    monkeypatch.setattr(steps, "_sweep", None)
    for r, a in zip(runs, with_c):
        b = find_steps(*r, NAMES, STRINGS, MODELS)
        assert a.number.tolist() == b.number.tolist()
        assert {k: v.tolist() for k, v in a.columns.items()} == {k: v.tolist() for k, v in b.columns.items()}
