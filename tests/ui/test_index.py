"""The window index (sorted per-leaf arrays + pyramid) against brute force on synthetic events."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer.ui import index
from neuron_explorer.ui.server import listen_socket

BASE = 1_790_000_000_000_000_000


def make_events(seed: int, long_dur: int = 5_000_000_000) -> dict:
    """Three leaves: a dense one with one very long event among short ones, a sparse one, an empty one."""
    rng = np.random.default_rng(seed)
    leaves = []
    n0 = 5000
    s0 = np.sort(rng.integers(0, 10_000_000_000, n0))
    d0 = rng.integers(0, 200_000, n0)
    d0[n0 // 3] = long_dur  # one event far longer than all others: the block bound must still be tight
    leaves.append((s0, d0))
    n1 = 300
    s1 = np.sort(rng.integers(0, 10_000_000_000, n1))
    s1[10:20] = s1[10]  # equal starts
    leaves.append((s1, rng.integers(1_000, 50_000_000, n1)))
    leaves.append((np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
    ids, nxt = [], 0
    for s, _ in leaves:
        ids.append(np.arange(nxt, nxt + len(s), dtype=np.int64) * 7 + 3)
        nxt += len(s)
    return {"leaves": leaves, "ids": ids}


def chunks_of(ev: dict, split: bool):
    """(leaf, start_abs, dur, id[, flow]) chunks sorted by (leaf, start); with ``split`` leaf 0 comes in
    two interleaved parts (as when one leaf's events sit in two Parquet parts)."""
    out = []
    flows = ev.get("flows")
    extra = ev.get("extra")
    for lf, ((s, d), ids) in enumerate(zip(ev["leaves"], ev["ids"])):
        sels = (slice(0, None, 2), slice(1, None, 2)) if split and lf == 0 else (slice(None),)
        for sel in sels:
            ch = (np.full(len(s[sel]), lf, dtype=np.int32), s[sel] + BASE, d[sel], ids[sel])
            if flows is not None:
                ch += (flows[lf][sel],)
            if extra is not None:  # (row in this chunk, further flow id) of the chunk's events
                rows = np.arange(len(s))[sel]
                xr, xf = extra[lf]
                inside = np.isin(xr, rows)
                ch += (np.searchsorted(rows, xr[inside]), xf[inside])
            out.append(ch)
    return out


def build(ev: dict, out_dir: Path | None, split: bool = False, levels: list[int] | None = None) -> index.EventIndex:
    counts = [len(s) for s, _ in ev["leaves"]]
    maxdur = [int(d.max()) if len(d) else 0 for _, d in ev["leaves"]]
    return index.EventIndex.build(counts, maxdur, BASE, levels if levels is not None else [1 << 20, 1 << 22],
                                  chunks_of(ev, split), out_dir)


def brute_overlap(ev: dict, lf: int, t0: float, t1: float) -> set[int]:
    s, d = ev["leaves"][lf]
    e = s + d
    return set(ev["ids"][lf][(s < t1) & (e >= t0)].tolist())


@pytest.mark.parametrize("split", [False, True])
def test_raw_windows_match_brute_force(tmp_path: Path, split: bool) -> None:
    ev = make_events(1)
    out = None
    if split:  # also through memory-mapped files
        out = tmp_path / "idx"
        out.mkdir()
    idx = build(ev, out, split=split)
    rng = np.random.default_rng(2)
    windows = [(-1e9, 2e10), (0, 1), (3.3e9, 3.3e9 + 1e6)]
    windows += [(float(a), float(a + w))
                for a, w in zip(rng.uniform(-1e8, 1e10, 60), rng.choice([1e3, 1e6, 1e8, 2e9], 60))]
    for t0, t1 in windows:
        got = idx.gather_raw([0, 1, 2], [5, 6, 7], t0, t1)
        for lf, row in ((0, 5), (1, 6), (2, 7)):
            sel = got["leaf"] == lf
            assert set(got["id"][sel].tolist()) == brute_overlap(ev, lf, t0, t1), (lf, t0, t1)
            assert (got["row"][sel] == row).all()
        assert len(got["id"]) == len(set(got["id"].tolist())), "an event returned twice"
        # candidate slices stay tight despite the 5 s event (unless the window is inside it): at most a
        # block plus the window's events, where a bound by the longest duration would take ~2500
        s0, d0 = ev["leaves"][0]
        j = int(np.argmax(d0))
        if t1 - t0 <= 1e6 and not (s0[j] < t1 and s0[j] + d0[j] >= t0):
            for _lf, lo, hi in idx.raw_slices([0], t0, t1):
                assert hi - lo <= index.BLOCK + len(brute_overlap(ev, 0, t0, t1)) + 1


def test_cached_index_roundtrip_and_durations_over_32_bits(tmp_path: Path) -> None:
    ev = with_flows(make_events(3, long_dur=(1 << 33) + 5), 4)  # longer than uint32 ns: int64 durations
    d = tmp_path / "p.idx"
    idx = index.EventIndex.cached(d, lambda out: build(ev, out, split=True))
    assert idx.d.dtype == np.int64 and (d / "meta.json").is_file()
    assert not list(d.glob("*.tmp.npy")), "the build's scratch flow ids are removed"
    again = index.EventIndex.load(d)
    assert again is not None and again.n == idx.n == sum(len(s) for s, _ in ev["leaves"])
    for name, arr in idx.a.items():
        assert np.array_equal(arr, again.a[name]), name
    assert len(again.fx_id) and again.flow_leaves == idx.flow_leaves == [0, 1]
    got = again.gather_raw([0], [0], 8.5e9, 8.5e9 + 10)
    assert set(got["id"].tolist()) == brute_overlap(ev, 0, 8.5e9, 8.5e9 + 10)
    # a cache of another format is ignored, not misread
    meta = (d / "meta.json").read_text().replace(f'"format": {index.FORMAT}', '"format": -1')
    (d / "meta.json").write_text(meta)
    assert index.EventIndex.load(d) is None
    assert build(make_events(4, long_dur=4_000_000_000), None).d.dtype == np.uint32
    # a damaged cache is rebuilt rather than making the profile unopenable
    (d / "s.npy").unlink()
    rebuilt = index.EventIndex.cached(d, lambda out: build(ev, out))
    assert np.array_equal(rebuilt.s, idx.s) and (d / "s.npy").is_file()


def test_pyramid_levels_match_brute_force() -> None:
    ev = make_events(5)
    levels = [1 << 20, 1 << 22, 1 << 24]
    idx = build(ev, None, split=True, levels=levels)
    for k, w in enumerate(levels):
        for lf, ((s, d), ids) in enumerate(zip(ev["leaves"], ev["ids"])):
            a, b = int(idx.a[f"p{k}_off"][lf]), int(idx.a[f"p{k}_off"][lf + 1])
            want: dict[int, list[int]] = {}
            for si, di, ii in zip(s.tolist(), d.tolist(), ids.tolist()):
                x = want.setdefault(si // w, [0, 0, si, si + di, ii])
                x[0] += 1
                x[1] += di
                x[2] = min(x[2], si)
                x[3] = max(x[3], si + di)
                x[4] = min(x[4], ii)
            got = {int(sv) // w: [int(c), int(dd), int(sv), int(e), int(i)] for sv, e, c, dd, i in zip(
                idx.a[f"p{k}_s"][a:b], idx.a[f"p{k}_e"][a:b], idx.a[f"p{k}_c"][a:b], idx.a[f"p{k}_d"][a:b],
                idx.a[f"p{k}_id"][a:b])}
            assert got == want, (k, lf)
    # a window over level 1 counts every event starting in it exactly once
    got = idx.gather_level(1, [0, 1], [0, 1], -1, 2e10)
    assert int(got["c"].sum()) == sum(len(s) for s, _ in ev["leaves"])


def test_aggregate_matches_grouping_by_row_and_pixel() -> None:
    rng = np.random.default_rng(7)
    n = 2000
    items = {"row": rng.integers(0, 4, n), "s": rng.integers(0, 1_000_000, n), "leaf": rng.integers(0, 9, n),
             "id": rng.permutation(n).astype(np.int64), "c": rng.integers(1, 5, n)}
    items["d"] = rng.integers(0, 3000, n)
    items["e"] = items["s"] + items["d"]
    t0, npp = 1000.5, 2500.0
    single = items["d"] >= npp - 500
    out = index.aggregate(items, t0, npp, single, 10**6)
    want: dict[tuple, list[int]] = {}
    for i in range(n):
        key = (int(items["row"][i]), ("single", i) if single[i] else int(np.floor((items["s"][i] - t0) / npp)))
        x = want.setdefault(key, [0, 0, 1 << 62, -(1 << 62), 1 << 62, 1 << 62])
        x[0] += int(items["c"][i])
        x[1] += int(items["d"][i])
        x[2] = min(x[2], int(items["s"][i]))
        x[3] = max(x[3], int(items["e"][i]))
        x[4] = min(x[4], int(items["id"][i]))
        x[5] = min(x[5], int(items["leaf"][i]))
    got = sorted(zip(*(out[x].tolist() for x in ("row", "c", "d", "s", "e", "id", "leaf"))))
    assert got == sorted((k[0], *v) for k, v in want.items())
    order = list(zip(out["row"].tolist(), out["s"].tolist()))
    assert order == sorted(order), "answers are ordered by row, then start"
    assert len(index.aggregate(items, t0, npp, single, 5)["s"]) == 5


def test_next_and_count_starting() -> None:
    ev = make_events(9)
    idx = build(ev, None)
    starts = sorted((int(s), lf, i) for lf, (ss, _) in enumerate(ev["leaves"]) for i, s in enumerate(ss))
    for after in (-5.0, 0.0, 1e9 + 0.5, 5e9, 9.99e9, 2e10):
        fwd = [x for x in starts if x[0] > after]
        hit = idx.next_start([0, 1, 2], after, True)
        assert (hit is None) == (not fwd)
        if hit:
            assert int(idx.s[hit[1]]) == fwd[0][0]
        bwd = [x for x in starts if x[0] < after]
        hit = idx.next_start([0, 1, 2], after, False)
        assert (hit is None) == (not bwd)
        if hit:
            assert int(idx.s[hit[1]]) == bwd[-1][0]
        n = sum(hi - lo for _, lo, hi in idx.count_starting([0, 1, 2], after, after + 3e9))
        assert n == sum(1 for x in starts if after <= x[0] < after + 3e9)


def with_flows(ev: dict, seed: int) -> dict:
    """Flow ids over the events: 0 (none) for about a third, else drawn from a pool (negative ids too),
    so flows join events of one leaf or of both, and some ids occur once in the whole profile."""
    rng = np.random.default_rng(seed)
    pool = np.concatenate([rng.integers(1, 1 << 62, 700), -rng.integers(1, 1 << 40, 50)])
    flows = []
    for s, _ in ev["leaves"]:
        f = pool[rng.integers(0, len(pool), len(s))]
        f[rng.random(len(s)) < 0.35] = 0
        flows.append(f.astype(np.int64))
    flows[0][:5] = [11, 12, 13, 14, 15]  # ids seen once: never a flow
    return {**ev, "flows": flows}


def with_more_flows(ev: dict, seed: int) -> dict:
    """Besides its first flow id, about a quarter of the events get one or two further ids (as a host
    call is in its framework region's flow and its execution's), some repeating the first or 0."""
    rng = np.random.default_rng(seed)
    pool = np.concatenate([rng.integers(1, 1 << 62, 400), [0]])
    extra = []
    for (s, _), f in zip(ev["leaves"], ev["flows"]):
        rows = np.flatnonzero(rng.random(len(s)) < 0.25)
        rows = np.sort(np.concatenate([rows, rows[::3]]))  # every third of them twice
        ids = pool[rng.integers(0, len(pool), len(rows))]
        ids[::7] = f[rows[::7]]  # the event's first id again: still one flow
        extra.append((rows.astype(np.int64), ids.astype(np.int64)))
    return {**ev, "extra": extra}


def flow_sets(ev: dict, lf: int) -> list[set[int]]:
    """Every flow id of each event of leaf ``lf`` (0: none)."""
    got = [{int(f)} - {0} for f in ev["flows"][lf]]
    for r, f in zip(*ev.get("extra", [(np.zeros(0, dtype=np.int64),) * 2] * len(ev["leaves"]))[lf]):
        if f:
            got[int(r)].add(int(f))
    return got


def brute_flows(ev: dict, t0: float, t1: float, limit: int) -> tuple[list, bool]:
    by: dict[int, list[tuple[int, int, int]]] = {}
    for lf, ((s, d), ids) in enumerate(zip(ev["leaves"], ev["ids"])):
        for si, di, ii, fs in zip(s.tolist(), d.tolist(), ids.tolist(), flow_sets(ev, lf)):
            for fi in fs:
                if si < t1 and si + di >= t0:
                    by.setdefault(fi, []).append((si, ii, lf))
    multi = sorted(k for k, v in by.items() if len(v) >= 2)
    return [(k, sorted(by[k])) for k in multi[:limit]], len(multi) > limit


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("more", [False, True])
def test_flows_match_brute_force(tmp_path: Path, split: bool, more: bool) -> None:
    """Both ways of answering a flow query (gather the window's ids / walk flows in id order) are exact,
    with every flow of an event counted (``more``: events in two or three flows)."""
    ev = with_flows(make_events(11), 12)
    if more:
        ev = with_more_flows(ev, 14)
    out = None
    if split:
        out = tmp_path / "idx"
        out.mkdir()
    idx = build(ev, out, split=split)
    assert len(idx.fx_id) and np.all(np.diff(idx.fx_id) > 0) and 11 not in idx.fx_id.tolist()
    assert idx.flow_leaves == [0, 1]
    rng = np.random.default_rng(13)
    windows = [(-1e9, 2e10), (0, 1), (3.3e9, 3.3e9 + 1e6), (2e10, 3e10)]
    windows += [(float(a), float(a + w))
                for a, w in zip(rng.uniform(-1e8, 1e10, 30), rng.choice([1e6, 1e8, 2e9, 1e10], 30))]
    # windows starting where events end / ending where they start: the bounds are end >= t0, start < t1
    # (wide, so that the boundary event's flow has other events inside)
    s1, d1 = ev["leaves"][1]
    for i in rng.choice(np.flatnonzero(ev["flows"][1]), 8).tolist():
        windows += [(float(s1[i] + d1[i]), float(s1[i] + d1[i] + 3e9)), (float(s1[i] - 3e9), float(s1[i]))]
    seen_truncated = seen_flows = 0
    for t0, t1 in windows:
        for limit in (0, 1, 7, 100_000):
            want, trunc = brute_flows(ev, t0, t1, limit)
            for how in ("gather", "walk", "auto"):
                r = idx.flows(t0 - 0, t1 - 0, limit, how)
                got = []
                for j, fid in enumerate(r["fid"].tolist()):
                    pos = r["pos"][r["off"][j]:r["off"][j + 1]]
                    got.append((fid, list(zip(idx.s[pos].tolist(), idx.id[pos].tolist(), idx.leaf_of(pos).tolist()))))
                assert got == want, (t0, t1, limit, how)
                assert r["truncated"] == trunc, (t0, t1, limit, how)
            seen_truncated += trunc
            seen_flows += len(want)
    assert seen_truncated > 10 and seen_flows > 1000
    # each event's flow numbers name exactly its flows with >= 2 events in the profile
    members: dict[int, int] = {}
    for lf in range(len(ev["leaves"])):
        for fs in flow_sets(ev, lf):
            for f in fs:
                members[f] = members.get(f, 0) + 1
    multi_events = 0
    for lf in range(len(ev["leaves"])):
        a = int(idx.off[lf])
        by_id = {int(i): a + j for j, i in enumerate(idx.id[a:int(idx.off[lf + 1])].tolist())}
        for i, fs in zip(ev["ids"][lf].tolist(), flow_sets(ev, lf)):
            got = [int(idx.fx_id[x]) for x in idx.flow_numbers(by_id[i])]
            assert got == sorted(f for f in fs if members[f] >= 2), (lf, i)
            multi_events += len(got) >= 2
    assert (multi_events > 100) == more
    # without flow ids in the chunks, no flows
    assert len(build(make_events(11), None).flows(-1e9, 2e10, 10)["fid"]) == 0


def test_listening_socket_disables_nagle_for_accepted_connections() -> None:
    """Without TCP_NODELAY every kept-alive answer waits ~40 ms for a delayed ACK (headers, then body)."""
    srv = listen_socket("127.0.0.1")
    try:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        cl = socket.create_connection(srv.getsockname())
        conn, _ = srv.accept()
        try:
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            conn.close()
            cl.close()
    finally:
        srv.close()


def test_split_flows_matches_a_python_reference_on_random_lists() -> None:
    """Fuzz: flow-id list columns with null lists, null and 0 ids, slices and several chunks."""
    import pyarrow as pa

    from neuron_explorer.ui.index_build import split_flows

    rng = np.random.default_rng(21)
    for trial in range(200):
        rows = []
        for _ in range(int(rng.integers(0, 40))):
            k = rng.random()
            if k < 0.1:
                rows.append(None)
            else:
                n = int(rng.integers(0, 5))
                rows.append([None if rng.random() < 0.1 else int(rng.integers(-3, 1 << 62)) * int(rng.random() > 0.1)
                             for _ in range(n)])
        arr = pa.array(rows, type=pa.list_(pa.int64()))
        if len(rows) > 2 and trial % 3 == 0:
            arr = arr.slice(1, len(rows) - 2)
            rows = rows[1:-1]
        col = pa.chunked_array([arr[: len(rows) // 2], arr[len(rows) // 2:]], type=arr.type) if trial % 2 else arr
        first, xrow, xflow = split_flows(col)
        want_first = [(r[0] or 0) if r else 0 for r in rows]
        want_x = [(i, f) for i, r in enumerate(rows) if r for f in r[1:] if f]
        assert first.tolist() == want_first, rows
        assert list(zip(xrow.tolist(), xflow.tolist())) == want_x, rows
