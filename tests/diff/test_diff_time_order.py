"""The diff's sides kept as they were read (decision 0168): a step table in process order with its
time order beside it, collectives matched by one sort, occurrences sorted only where they are not
in order.  Each gives the rows the previous code gave (``reference``), to the bit, on made-up
sides built to break them: ties in start and in value, a rank of two processes with the same step
numbers, a process whose steps are out of start order, more steps than the bootstrap keeps."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pyarrow as pa
import pytest

from neuron_explorer.analysis import compare as cmp, packed as packing, steps as steps_mod
from neuron_explorer.diff import dataset, report
from neuron_explorer.util import alloc

from . import reference

PROCS = [(0, 0), (1, 1), (2, 1), (3, 2)]  # (process index, rank): rank 1 runs two processes


def _side(seed: int, n: int, slower_rank: int | None = None) -> dataset.Side:
    rng = np.random.default_rng(seed)
    side = dataset.Side(f"side-{seed}")
    steps = {}
    for ix, rank in PROCS:
        side.processes[ix] = dataset.Process("i-0", 100 + ix, rank)
        start = rng.integers(0, 3, n).cumsum() * 1_000_000  # repeated starts, within and across processes
        if ix == 3:
            start = start[rng.permutation(n)]
        wall = rng.integers(1, 6, n) * 1_000_000 + (3_000_000 if rank == slower_rank else 0)  # ties at the median
        cols = {c: rng.integers(0, 4, n) * 250_000 for c in dataset.STEP_COLUMNS}
        cols["wall_ns"] = wall
        cols["own_ns"] = wall // 2
        cols["compile_ns"] = np.zeros(n, dtype=np.int64)  # (a part never seen: one value, every row as near)
        steps[ix] = steps_mod.Steps("cycle", "g", np.arange(n), start, start + wall, cols)
    side.step_table = dataset._step_table(side, steps)
    side.step_methods = {"cycle"}
    return side


@pytest.mark.parametrize("n", [3, 700])
def test_step_rows_are_those_of_the_table_gathered_into_time_order(n):
    th = cmp.Thresholds()
    base, cand = _side(1, n), _side(2, n, slower_rank=2)
    with mock.patch.object(report, "PER_STEP_LIMIT", 50):  # (the table cut, on both)
        rows, info = report.step_section(base, cand, th, th)
        want_rows, want = reference.step_rows(base, cand, th)
    assert [r["key"] for r in rows] == [r["key"] for r in want_rows]
    for got, exp in zip(rows, want_rows):
        assert got == exp, got["key"]
    assert info["per_step"] == want["per_step"] and info["per_step"]["truncated"] == (n > 12)
    assert (info["baseline_steps"], info["candidate_steps"]) == (want["baseline_steps"], want["candidate_steps"])
    if n > 512:  # the bootstrap saw a thinned sample, and the slower rank stands out
        assert any(r["verdict"] == cmp.SLOWER for r in rows if r["kind"] == "straggler")


def test_each_ranks_rows_are_in_time_order_whatever_its_processes():
    t = _side(3, 40).step_table
    rows = t.rank_rows()
    assert isinstance(rows[0], slice)  # one process in start order: its own rows, no copy
    for rank in (1, 2):  # two processes; one process out of order
        in_time = t.order[t.cols["rank"][t.order] == rank]
        assert np.array_equal(np.arange(len(t))[rows[rank]], in_time)
    assert np.array_equal(t.order, np.argsort(t.cols["start_ns"], kind="stable"))


def _colls(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for key, neg in ((("all_reduce", "0,1,2,3"), False), (("all_gather", "0,1"), False), (("send", "0,1"), True)):
        cols = []
        for rank in range(4):
            m = 60
            seq = np.repeat(np.arange(m // 2), 2) if not neg else np.full(m, -1)  # (a sequence number twice)
            start = np.sort(rng.integers(0, 40, m)) * 1000  # ties between ranks
            cols.append((rng.choice([1024, 4096], m), seq, np.full(m, rank), start,
                         start + rng.integers(0, 5, m) * 1000, np.full(m, rank), (rank << 32) + np.arange(m)))
        out[key] = [np.concatenate([c[i] for c in cols]).astype(np.int64) for i in range(7)]
    return out


def test_collectives_matched_by_one_sort_are_the_previous_instances():
    for seed in range(4):
        colls = _colls(seed)
        side = dataset.Side("s")
        acc = dataset.Acc()
        acc.parts = {k: [tuple(v)] for k, v in colls.items()}
        acc.parts[("broadcast", "0")] = [tuple(np.zeros(0, dtype=np.int64) for _ in range(7))]  # (empty: skipped)
        dataset._collectives(side, acc)
        want = reference.collectives(colls)
        assert side.collectives.keys() == want.keys()
        for k, occ in side.collectives.items():
            for f in ("value", "start", "end", "proc", "ids"):
                assert np.array_equal(_in_time(occ, f), getattr(want[k], f)), (k, f)


def _in_time(occ: dataset.Occurrences, f: str) -> np.ndarray:
    a = getattr(occ, f)
    return a if occ.order is None else a[occ.order]


def test_spans_are_the_stable_sort_by_start():
    """``Occurrences.spans`` keeps the rows as given, with their stable sort by start beside them
    where they are not in order (no gather, decision 0192): in time order they are ``build``'s."""
    rng = np.random.default_rng(5)
    for start in (np.sort(rng.integers(0, 9, 200)), rng.integers(0, 9, 200), np.zeros(0, dtype=np.int64)):
        end = start + rng.integers(0, 5, len(start))
        proc, ids = rng.integers(0, 3, len(start)), np.arange(len(start))
        got, want = dataset.Occurrences.spans(start, end, proc, ids), \
            dataset.Occurrences.build(end - start, start, end, proc, ids)
        assert (got.order is None) == bool((start[1:] >= start[:-1]).all())
        for f in ("value", "start", "end", "proc", "ids"):
            assert np.array_equal(_in_time(got, f), getattr(want, f)) and getattr(got, f).dtype == np.int64


@pytest.mark.parametrize("n", [3, 40, 700])
def test_rows_of_items_as_read_are_those_of_items_in_time_order(n):
    """An item's rows (graph, collective, region, new and vanished) from occurrences kept as read
    with their time order beside them are those of the same occurrences gathered into time order
    (``build``): statistics, interval, verdict and the occurrence a viewer jumps to, with ties in
    start and in value, one process or several, starts in order or not."""
    th = cmp.Thresholds()
    base, cand = _side(1, 4), _side(2, 4)
    rng = np.random.default_rng(n)
    for case in range(12):
        occs = []
        for side_seed in (0, 1):
            start = rng.integers(0, 5, n).cumsum() * 1000
            if case % 3:  # (one process after another: each in order, the whole not)
                start = np.concatenate([start[: n // 2], start[n // 2:] - 40_000])
            if case % 4 == 3:
                start = start[rng.permutation(n)]
            end = start + rng.integers(1, 4, n) * 1_000_000 + side_seed * (case % 2) * 2_000_000
            proc = np.where(np.arange(n) < n // 2, 0, 3) if case % 2 else np.full(n, 1)
            occs.append((start, end, proc, np.arange(n) + 10 * side_seed))
        (sb, eb, pb, ib), (sc, ec, pc, ic) = occs
        got = report._row("graph", "g", "g", base, cand, dataset.Occurrences.spans(sb, eb, pb, ib),
                          dataset.Occurrences.spans(sc, ec, pc, ic), th)
        want = report._row("graph", "g", "g", base, cand, dataset.Occurrences.build(eb - sb, sb, eb, pb, ib),
                           dataset.Occurrences.build(ec - sc, sc, ec, pc, ic), th)
        assert got == want, case
        for o in (dataset.Occurrences.spans(sb, eb, pb, ib), dataset.Occurrences.build(eb - sb, sb, eb, pb, ib)):
            assert report._row("graph", "g", "g", base, cand, None, o, th) == \
                report._row("graph", "g", "g", base, cand, None, dataset.Occurrences.build(eb - sb, sb, eb, pb, ib), th)


def test_small_pages_restores_numpys_and_arrows_allocators():
    from numpy._core.multiarray import _set_madvise_hugepage as switch

    before_pool = pa.default_memory_pool().backend_name
    before = switch(True)
    try:
        with alloc.small_pages():
            assert pa.default_memory_pool().backend_name == pa.system_memory_pool().backend_name
            assert switch(False) is False
            kept = pa.array(np.arange(10))  # (freed later by the pool that made it)
        assert switch(True) is True and pa.default_memory_pool().backend_name == before_pool
        assert kept.to_pylist() == list(range(10))
    finally:
        switch(before)


def test_the_items_runs_check_is_the_expected_column_compared():
    """``diff_items._runs_are`` (no expected column made) answers what comparing the ``piece``
    column with the runs the header lists answered, on runs that are right, empty, or damaged."""
    from neuron_explorer.exporters import diff_items

    rng = np.random.default_rng(9)
    for trial in range(300):
        lengths = rng.integers(0, 4, rng.integers(0, 6)).tolist()
        k0 = int(rng.integers(0, 3))
        v = np.repeat(np.arange(k0, k0 + len(lengths)), lengths).astype(np.int32)
        if len(v) and trial % 3:  # damage a row: another run's number, or a swap of two rows
            i = int(rng.integers(0, len(v)))
            if trial % 3 == 1:
                v[i] += int(rng.choice([-1, 1]))
            else:
                j = int(rng.integers(0, len(v)))
                v[i], v[j] = v[j], v[i]
        if trial % 7 == 0:
            lengths = lengths + [1]  # the header lists more rows than there are
        want = sum(lengths) == len(v) and np.array_equal(v, np.repeat(np.arange(k0, k0 + len(lengths)), lengths))
        got = diff_items._runs_are(pa.chunked_array([pa.array(v, pa.int32())]), k0, lengths)
        assert got == want, (lengths, k0, v)


def test_an_items_processes_are_its_ids_high_bits_not_a_held_column():
    """Graphs', loads' and regions' occurrences hold no process column (decision 0199): each row's
    process index is its id's high 32 bits, and the distinct indices are found per piece; the rows'
    figures, ranks and the occurrence a viewer jumps to are those of the process column held."""
    rng = np.random.default_rng(9)
    th = cmp.Thresholds()
    base, cand = _side(1, 4), _side(2, 4)
    for packed in (False, True):
        pieces, plain = [], []
        for ix in (3, 0, 2, 2):  # (one file two processes, a process in two files)
            m = int(rng.integers(0, 50))
            start = rng.integers(0, 9, m).cumsum() * 1000 - 20_000 * ix
            ids = (np.int64(ix) << 32) + rng.permutation(1000)[:m]
            proc = np.full(m, ix, dtype=np.int64)
            if ix == 2 and m > 1:  # (rows of two processes in one piece)
                proc[m // 2:] = 1
                ids[m // 2:] = (np.int64(1) << 32) + np.arange(m - m // 2)
            piece = (start, start + rng.integers(1, 9, m) * 1000, proc, ids)
            pieces.append((packing.pack(piece[0], delta=True), packing.pack(piece[1], piece[0], 0),
                           *(packing.pack(c) for c in piece[2:])) if packed else piece)
            plain.append(piece)
        acc = dataset.Acc()
        acc.parts = {"g": pieces}
        [(key, (start, end, ids, value), distinct)] = list(dataset._spans(acc))
        proc = np.concatenate([p[2] for p in plain])
        got = dataset.Occurrences.spans(start, end, None, ids, distinct, value)
        want = dataset.Occurrences.spans(start, np.concatenate([p[1] for p in plain]), proc,
                                         np.concatenate([p[3] for p in plain]))
        assert isinstance(got.ids, dataset.PieceColumn) != packed  # (plain pieces: ends and ids kept as pieces)
        for f in ("value", "start", "end", "ids"):
            whole = np.asarray(getattr(got, f))
            assert np.array_equal(whole, getattr(want, f)) and whole.dtype == np.int64, f
            assert [int(getattr(got, f)[i]) for i in range(-len(whole), len(whole))] == \
                whole.tolist() + whole.tolist(), f
        assert got.held_proc is None and np.array_equal(got.proc, proc)
        assert np.array_equal(distinct, np.unique(proc)) and distinct.dtype == np.int64
        assert all(got.proc_at(i) == int(proc[i]) for i in range(len(proc)))
        for occ_b, occ_c in ((got, want), (want, got)):
            r_got = report._row("graph", "g", "g", base, cand, occ_b, occ_c, th)
            r_want = report._row("graph", "g", "g", base, cand, want, want, th)
            assert r_got == r_want


@pytest.mark.parametrize("packed", [False, True])
def test_step_table_columns_are_the_processes_figures_one_after_another(packed):
    """``_step_table`` (decision 0199): a figure no step of any process has is fresh zeros, one some
    process lacks is zeros there, and every column holds the processes' values one after another
    (int64 figures; rank and process index int32, the same values), packed pieces or not."""
    rng = np.random.default_rng(4)
    side = dataset.Side("s")
    steps, want = {}, {k: [] for k in ("number", "rank", "proc", "start_ns", "end_ns") + dataset.STEP_COLUMNS}
    for ix, rank in PROCS:
        side.processes[ix] = dataset.Process("i-0", 100 + ix, rank)
        n = int(rng.integers(1, 30))
        start = rng.integers(0, 3, n).cumsum() * 1000
        cols = {c: rng.integers(0, 4, n) * 250 for c in dataset.STEP_COLUMNS}
        cols["compile_ns"] = np.zeros(n, dtype=np.int64)  # (zero everywhere)
        del cols["host_ns"]  # (lacking everywhere)
        if ix != 2:  # (zero here, lacking there)
            cols["sync_wait_ns"] = np.zeros(n, dtype=np.int64)
        if ix == 1:  # (zero but in one process)
            del cols["data_loading_ns"]
        elif ix == 3:
            cols["idle_ns"] = np.zeros(n, dtype=np.int64)
        st = steps_mod.Steps("cycle", "g", np.arange(n) + ix, start, start + 500, dict(cols))
        for k in want:
            want[k].append(np.full(n, rank) if k == "rank" else np.full(n, ix) if k == "proc" else
                           st.number if k == "number" else st.start_ns if k == "start_ns" else
                           st.end_ns if k == "end_ns" else cols.get(k, np.zeros(n, dtype=np.int64)))
        if packed:
            st.columns = {k: packing.pack(np.asarray(v, dtype=np.int64)) for k, v in st.columns.items()}
        steps[ix] = st
    t = dataset._step_table(side, steps)
    for k, pieces in want.items():
        assert np.array_equal(t.cols[k], np.concatenate(pieces)), k
        assert t.cols[k].dtype == (np.int32 if k in ("rank", "proc") else np.int64), k
    assert not t.cols["compile_ns"].any() and not t.cols["host_ns"].any()


@pytest.mark.parametrize("runs", [2, 3, 64])
def test_time_order_read_at_positions_is_the_stable_sort(runs):
    """``dataset.TimeOrder`` (decision 0201): the stable sort by start read at the bootstrap's
    positions and at the first, on runs each in start order with starts repeated within and
    across runs, is the whole sort's, to the row."""
    rng = np.random.default_rng(runs)
    n = 3 * dataset.TimeOrder.SMALL + 17
    cuts = np.sort(rng.choice(np.arange(1, n), runs - 1, replace=False))
    start = np.concatenate([np.sort(rng.integers(0, n // 8, len(p))) for p in np.split(np.arange(n), cuts)])
    want = np.argsort(start, kind="stable")
    order = dataset.time_order(start)
    assert order is not None and len(order) == n and 1 < len(order.bounds) - 1 <= runs
    at = np.linspace(0, n - 1, cmp.BOOTSTRAP_CAP).astype(np.int64)
    assert np.array_equal(order[at], want[at]) and np.array_equal(order[at[::-3]], want[at[::-3]])
    assert np.array_equal(order[:1], want[:1]) and np.array_equal(order[-3:], want[-3:])
    assert order[5] == want[5] and np.array_equal(order[np.array([-1, 0, 0, n // 2])], want[[-1, 0, 0, n // 2]])
    assert order._whole is None  # (read without the whole sort)
    assert np.array_equal(np.asarray(order), want)


@pytest.mark.parametrize("spread", [1, 3, 1 << 40])
def test_time_order_by_buckets_and_by_runs_give_the_stable_sort(spread):
    """Both ways ``TimeOrder`` reads positions (decision 0209): by buckets of start, and by a
    partition and a binary search of each run, give the whole stable sort's rows; starts bunched on
    a few values (``spread`` 1 and 3: most rows in the buckets read) leave the buckets to the
    partition."""
    rng = np.random.default_rng(spread)
    n = 2 * dataset.TimeOrder.SMALL + 5
    cuts = np.sort(rng.choice(np.arange(1, n), 63, replace=False))
    start = np.concatenate([np.sort(rng.integers(0, n // 8, len(p)) * spread + 7) for p in np.split(np.arange(n),
                                                                                                     cuts)])
    want = np.argsort(start, kind="stable")
    order = dataset.time_order(start)
    assert order is not None
    for at in (np.unique(np.linspace(0, n - 1, cmp.BOOTSTRAP_CAP).astype(np.int64)), np.array([0]),
               np.array([n - 1]), np.arange(0, n, 997)):
        assert np.array_equal(order._by_runs(at), want[at])
        got = order._by_buckets(at)
        if spread > 1 << 20:
            assert got is not None
        if got is not None:
            assert np.array_equal(got, want[at])
    if spread == 1:  # (n // 8 distinct starts over 2 ** 16 rows: every bucket holds ~8 rows, so it is read)
        assert order._by_buckets(np.array([5])) is not None
    equal = np.concatenate([np.full(n // 2, 9), np.full(n - n // 2, 5)]).astype(np.int64)
    o = dataset.time_order(equal)
    at = np.array([0, n // 2, n - 1])
    assert o._by_buckets(at) is None and np.array_equal(o[at], np.argsort(equal, kind="stable")[at])


def test_time_order_is_none_for_rows_in_start_order():
    assert dataset.time_order(np.array([1, 1, 2, 5], dtype=np.int64)) is None
    assert dataset.time_order(np.zeros(0, dtype=np.int64)) is None


def test_piece_column_reads_a_slice_and_rows_as_the_whole_column():
    """``PieceColumn`` (decision 0205): a slice within one piece is a view of it, an index array is
    gathered piece by piece; both give what the concatenated column gives, errors included."""
    rng = np.random.default_rng(5)
    pieces = [rng.integers(-50, 50, n) for n in (5, 1, 7, 3)]
    whole = np.concatenate(pieces)
    col = dataset.PieceColumn(pieces)
    for s in (slice(0, 5), slice(6, 9), slice(13, 16), slice(2, 11), slice(None), slice(3, 3), slice(6, 12, 2),
              slice(-4, None), slice(-20, 4)):
        assert np.array_equal(col[s], whole[s]), s
    assert np.shares_memory(col[6:9], pieces[2])
    for idx in (np.array([0, 15, 5, 6, 6, -1, -16]), np.arange(16)[::-1], np.zeros(0, dtype=np.int64),
                np.array([3], dtype=np.int32)):
        got = col[idx]
        assert np.array_equal(got, whole[idx]) and got.dtype == np.int64, idx
    for bad in (np.array([16]), np.array([-17])):
        with pytest.raises(IndexError):
            col[bad]


def test_step_columns_read_in_places_are_kept_as_the_processes_pieces():
    """The step columns a diff reads only at rows (a step's end, a rank's own work, the collectives'
    time) are not concatenated: the table holds each process's piece (decision 0205)."""
    side = dataset.Side("s")
    steps = {}
    for ix, rank in PROCS:
        side.processes[ix] = dataset.Process("i-0", 100 + ix, rank)
        n = 4 + ix
        start = np.arange(n, dtype=np.int64) * 1000
        cols = {c: np.full(n, 7 + ix, dtype=np.int64) for c in dataset.STEP_COLUMNS}
        steps[ix] = steps_mod.Steps("cycle", "g", np.arange(n), start, start + 500, cols)
    t = dataset._step_table(side, steps)
    for k in ("end_ns", "own_ns", "collective_ns"):
        assert isinstance(t.cols[k], dataset.PieceColumn), k
        assert len(t.cols[k].pieces) == len(PROCS)
    assert isinstance(t.cols["wall_ns"], np.ndarray) and isinstance(t.cols["start_ns"], np.ndarray)


def _ranged_side(seed: int, ranks: list[int], gap: bool = False) -> dataset.Side:
    rng = np.random.default_rng(seed)
    side = dataset.Side(f"ranged-{seed}")
    steps = {}
    for ix, rank in enumerate(ranks):
        side.processes[ix] = dataset.Process("i-0", 100 + ix, rank)
        n = int(rng.integers(4 if gap else 1, 40))
        number = np.arange(n, dtype=np.int64) + int(rng.integers(-3, 12))
        if gap and ix == 1:
            number[n // 2:] += 2  # (a process that skipped two numbers: not consecutive)
        start = np.cumsum(rng.integers(1, 4, n)) * 1000
        cols = {c: rng.integers(0, 9, n) * 1000 for c in dataset.STEP_COLUMNS}
        steps[ix] = steps_mod.Steps("cycle", "g", number, start, start + 500, cols)
    side.step_table = dataset._step_table(side, steps)
    return side


@pytest.mark.parametrize("limit", [1, 7, 50, 10_000])
def test_the_per_step_table_from_ranges_is_the_one_from_sorted_keys(limit):
    """``report._per_step`` where each rank is one process numbering its steps consecutively (decision
    0209: the common keys from each rank's range) gives the table the sorted keys give: ranks on one
    side only, ranges that do not meet, negative step numbers, an unknown rank (-1), the table cut
    at ``limit``; a rank of two processes or numbers with a gap take the sorted keys."""
    cases = [([0, 1, 2, 3], [0, 1, 2, 3]), ([-1, 0, 2, 5], [0, 2, 3, 5, -1]), ([4], [4]), ([0, 1], [2, 3]),
             ([0, 0, 1], [0, 1]), ([0, 1, 2], [0, 1, 2])]
    for i, (rb, rc) in enumerate(cases):
        for seed in range(6):
            tb = _ranged_side(10 * i + seed, rb, gap=i == 5).step_table
            tc = _ranged_side(100 + 10 * i + seed, rc).step_table
            with mock.patch.object(report, "PER_STEP_LIMIT", limit):
                got = report._per_step(tb, tc)
                with mock.patch.object(report, "_consecutive", lambda t: None):
                    want = report._per_step(tb, tc)
            assert got == want, (i, seed)
            if i < 4:
                assert report._consecutive(tb) is not None
            else:
                assert report._consecutive(tb) is None
