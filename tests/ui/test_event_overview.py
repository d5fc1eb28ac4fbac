"""The events overview `view` writes once per dataset, and a cold open that reads it instead of one
summary per process: the same tracks and coarse answers as from the summaries and from the events;
a stale, foreign, truncated or damaged overview gives one warning line and the summaries' picture,
never another one."""

from __future__ import annotations

import json
import random
import shutil
import sys
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

import pyarrow.parquet as pq  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.contracts.dataset import (  # noqa: E402
    EVENT_OVERVIEW,
    EVENT_SUMMARY,
    EVENTS,
    OVERVIEW_KEY,
    table_file,
)
from neuron_explorer.exporters import event_overview  # noqa: E402
from neuron_explorer.ui import overview  # noqa: E402
from neuron_explorer.ui.app import create_app  # noqa: E402

from ..fuzzing import damage_file, examples, run_capped, seed  # noqa: E402
from .test_cold_open import P, _queries, _until  # noqa: E402

OV = table_file(EVENT_OVERVIEW)


def _copy(src: Path, dst_ws: Path, drop: tuple[str, ...] = ()) -> Path:
    shutil.copytree(src, dst_ws / P, ignore=shutil.ignore_patterns(*drop) if drop else None)
    return dst_ws


def _open(ws: Path, cache: Path):
    """The workspace's profile prepared up to the first paint (its index build held)."""
    wsp = create_app(ws, cache_dir=cache).state.workspace
    wsp.index_gate, wsp.coarse_min_events = threading.Event(), 0
    return wsp, wsp.profile(P, wait=False)


def _picture(p) -> tuple:
    """What a first paint draws from: the leaves and the coarse level."""
    return ([lf.to_list() for lf in p.leaves], p.coarse.base, list(p.coarse.levels),
            {k: v.tolist() for k, v in p.coarse.a.items()}, p.coarse.maxdur.tolist())


def _done(wsp) -> None:
    wsp.index_gate.set()
    wsp.profile(P)  # the background build over before its files go


@pytest.fixture(scope="module")
def reference(ui_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The first picture from the per-process summaries (no overview) and from the events alone."""
    tmp = tmp_path_factory.mktemp("ov-ref")
    wsp, p = _open(_copy(ui_workspace / P, tmp / "sum", (OV,)), tmp / "c1")
    assert p.first_paint_from == "summary"
    got = _picture(p)
    _done(wsp)
    wsp, p = _open(_copy(ui_workspace / P, tmp / "ev", (OV, EVENT_SUMMARY)), tmp / "c2")
    assert p.first_paint_from == "events" and _picture(p) == got
    _done(wsp)
    return got


def test_view_writes_an_overview_naming_every_events_file(ui_workspace: Path) -> None:
    """One file at the top of the dataset: its footer names each events file with its size and rows,
    its buckets add up to the events of each track, and its CRC covers the header."""
    root = ui_workspace / P
    md = pq.read_metadata(root / OV)
    body, crc = md.metadata[OVERVIEW_KEY.encode()].decode().rsplit("\n", 1)
    assert int(crc, 16) == zlib.crc32(body.encode())
    h = json.loads(body)
    named = {f"{d}/{f[0]}": f[1:3] for d, fs in h["parts"] for f in fs}
    on_disk = {str(f.relative_to(root / EVENTS)): [f.stat().st_size, pq.read_metadata(f).num_rows]
               for f in (root / EVENTS).rglob("*.parquet")}
    assert named == on_disk and named
    t = pq.read_table(root / OV)
    assert sum(t.column("events").to_pylist()) == sum(r for _, r in on_disk.values()) and t.num_rows == h["rows"]
    assert h["width"] & (h["width"] - 1) == 0 and h["base"] % h["width"] == 0


def test_a_cold_open_reads_the_overview_and_paints_what_the_summaries_paint(ui_workspace: Path, tmp_path: Path,
                                                                           reference: tuple) -> None:
    """From the overview: the same leaves and coarse level as from the summaries and the events, the
    same HTTP answers, and after the index build the same indexed answers."""
    wsp, p = _open(_copy(ui_workspace / P, tmp_path / "ws"), tmp_path / "c")
    assert p.first_paint_from == "overview" and p.overview_problem is None
    assert _picture(p) == reference
    _done(wsp)
    ref = TestClient(create_app(_copy(ui_workspace / P, tmp_path / "ref", (OV,)), cache_dir=tmp_path / "c2"))
    c = TestClient(create_app(tmp_path / "ws", cache_dir=tmp_path / "c3"))
    for x in (ref, c):
        _until(x, lambda s: s["state"] == "ready", "the index")
    assert _queries(c)[1:] == _queries(ref)[1:]


def test_a_stale_or_foreign_overview_is_said_once_and_not_used(ui_workspace: Path, tmp_path: Path,
                                                                reference: tuple, caplog) -> None:
    """An events file rewritten after the overview (size and rows differ) or removed: one warning line
    naming the problem, and the summaries' or events' picture. (Another profile's overview of the same
    capture names files of the same sizes, rows and extents: it is this profile's picture too.)"""
    ws = _copy(ui_workspace / P, tmp_path / "twin")
    shutil.copyfile(ui_workspace / "run-b" / OV, ws / P / OV)
    wsp, p = _open(ws, tmp_path / "c1")
    assert p.first_paint_from == "overview" and _picture(p) == reference
    _done(wsp)
    # one events file rewritten with fewer events: the overview is stale; that process's summary is too
    ws = _copy(ui_workspace / P, tmp_path / "rewritten")
    f = sorted((ws / P / EVENTS).rglob("*.parquet"))[0]
    t = pq.read_table(f)
    pq.write_table(t.slice(0, t.num_rows - 3), f)
    caplog.clear()
    wsp, p = _open(ws, tmp_path / "c2")
    assert "stale" in p.overview_problem and p.first_paint_from != "overview"
    assert "\n" not in p.overview_problem
    assert [r.message for r in caplog.records if "overview" in r.message] == [f"neuron-explorer: {p.overview_problem}"]
    assert p.total_events == sum(lf[6] for lf in reference[0]) - 3
    _done(wsp)
    # one events file removed (a process dropped by hand): stale, and the rest still opens
    ws = _copy(ui_workspace / P, tmp_path / "removed")
    files = sorted((ws / P / EVENTS).rglob("*.parquet"))
    if len(files) > 1:
        files[-1].unlink()
        wsp, p = _open(ws, tmp_path / "c3")
        assert "stale" in p.overview_problem and p.first_paint_from == "summary"
        _done(wsp)


def test_a_header_that_adds_up_wrong_is_refused(ui_workspace: Path, tmp_path: Path) -> None:
    """A header rewritten with a valid CRC but numbers that disagree (a bucket width doubled, a row
    count larger than the events) is refused by its own checks, before any row is read."""
    root = ui_workspace / P
    parts = []
    for f in sorted((root / EVENTS).rglob("*.parquet")):
        parts.append(((f.parent.parent.name, int(f.parent.name.split("=")[1])), [str(f.resolve())]))
    t = pq.read_table(root / OV)
    h = json.loads(t.schema.metadata[OVERVIEW_KEY.encode()].decode().rsplit("\n", 1)[0])
    for change, why in (({"width": h["width"] * 2}, "bucket width"), ({"rows": 10**12}, "row count"),
                        ({"format": 99}, "format"), ({"parts": h["parts"][:-1] or [["x", []]]}, "stale|damaged")):
        bad = tmp_path / f"bad-{why.split()[0].replace('|', '-')}.parquet"
        pq.write_table(t.replace_schema_metadata({OVERVIEW_KEY.encode(): event_overview.header_text(
            {**h, **change}).encode()}), bad)
        with pytest.raises(overview.Unusable, match=why):
            overview.read(str(bad), str((root / EVENTS).resolve()), parts)
    rows, ext = overview.read(str(root / OV), str((root / EVENTS).resolve()), parts)
    assert sum(int(r["c"].sum()) for r in rows) == sum(t.column("events").to_pylist())


def _fuzzed(src: Path, dst_ws: Path, rnd: random.Random, truncate: bool) -> Path:
    ws = _copy(src, dst_ws)
    damage_file(ws / P / OV, rnd, truncate)
    return ws


@pytest.mark.slow
def test_fuzzed_overviews_never_paint_a_wrong_picture(ui_workspace: Path, tmp_path: Path, reference: tuple) -> None:
    """Random byte changes and truncations of the overview: every open succeeds and paints the
    reference picture, from the overview when it survived intact, else after one warning line."""
    rnd = random.Random(seed(142))
    used = refused = 0
    for i in range(examples(40)):  # a fixed count, not seconds (decision 0151)
        ws = _fuzzed(ui_workspace / P, tmp_path / f"fz{i}", rnd, truncate=i % 4 == 3)
        wsp, p = _open(ws, tmp_path / f"c{i}")
        try:
            assert _picture(p) == reference, (i, p.first_paint_from, p.overview_problem)
            if p.first_paint_from == "overview":
                used += 1
            else:
                assert p.overview_problem and "\n" not in p.overview_problem, i
                refused += 1
        finally:
            _done(wsp)
        shutil.rmtree(ws)
    assert refused  # (a flip in a page's padding or an unused statistic may leave it usable)


def test_the_overview_merges_buckets_when_summaries_are_finer(tmp_path: Path) -> None:
    """Summaries whose buckets are narrower than the whole-profile width (a short row group in a long
    profile) merge into it: the rows per (process, key, bucket) equal a brute-force merge."""
    from neuron_explorer.exporters import event_summary

    rng = np.random.default_rng(7)
    root = tmp_path / "ds"
    want: dict[tuple, list[int]] = {}
    for proc in range(3):
        d = f"instance=i-0/process={100 + proc}"
        (root / EVENTS / d).mkdir(parents=True)
        (root / EVENT_SUMMARY / d).mkdir(parents=True)
        n = 4000
        # one long row group (coarse buckets) and one short burst (fine buckets)
        s = np.sort(np.concatenate([rng.integers(0, 10**10, n // 2), 5 * 10**9 + rng.integers(0, 10**6, n // 2)]))
        s += 1_700_000_000_000_000_000
        e = s + rng.integers(0, 10**5, n)
        tid = rng.choice([1, 2], n)
        typ = rng.integers(0, 3, n).astype(np.int32)
        import pyarrow as pa

        ev = root / EVENTS / d / "part-0.parquet"
        pq.write_table(pa.table({"start_ts": s, "end_ts": e}), ev, row_group_size=n // 2)
        chunks = [event_summary.chunk(tid[a:b], np.zeros(b - a, dtype=np.int32), typ[a:b], s[a:b], e[a:b],
                                      ["a", "b", "c"], ["src"] * 3, ["g"] * 3) for a, b in ((0, n // 2), (n // 2, n))]
        event_summary.write(str(root / EVENT_SUMMARY / d / "part-0.parquet"), chunks, ev.stat().st_size, n)
        for t_, y, a, b in zip(tid.tolist(), typ.tolist(), s.tolist(), e.tolist()):
            want.setdefault((proc, t_, "abc"[y]), []).append((a, b))
    t, h = event_overview.build(str(root))
    assert h["width"] == 1 << (h["width"].bit_length() - 1) and h["width"] >= 1 << h["shift"]
    got: dict[tuple, list] = {}
    for r in t.to_pylist():
        got.setdefault((r["part"], r["thread_id"], r["name"]), []).append(
            (r["bucket"], r["events"], r["first_start"], r["last_end"], r["total_ns"]))
    brute: dict[tuple, list] = {}
    for k, evs in want.items():
        by: dict[int, list] = {}
        for a, b in evs:
            by.setdefault((a - h["base"]) // h["width"], []).append((a, b))
        brute[k] = [(bk, len(v), min(a for a, _ in v), max(b for _, b in v), sum(b - a for a, b in v))
                    for bk, v in sorted(by.items())]
    assert got == brute


_CAPPED_READ = """
import sys
from pathlib import Path
from neuron_explorer.ui import overview, paths
root = Path(sys.argv[2])
parts = {}
for inst, pid, f in paths.table_files(root.parent, root, "SystemProfileEvents"):
    parts.setdefault((inst, pid), []).append(f)
try:
    rows, _ = overview.read(sys.argv[1], str(root / "SystemProfileEvents"), list(parts.items()))
    print("used", sum(int(r["c"].sum()) for r in rows))
except overview.Unusable as e:
    print("refused", e)
"""


@pytest.mark.slow
def test_the_overview_reader_under_a_memory_cap(ui_workspace: Path, tmp_path: Path) -> None:
    """Mutated overviews read in a subprocess whose address space is capped at 1.5 GB: the reader
    never sizes memory by a number from the file (it ends with an answer, not a MemoryError or a
    crash), and says "used" only with every event of the profile counted."""
    root = (ui_workspace / P).resolve()
    want = sum(pq.read_metadata(f).num_rows for f in (root / EVENTS).rglob("*.parquet"))
    data0 = (root / OV).read_bytes()
    rnd = random.Random(seed(1420))
    for i in range(examples(16)):  # a fixed count, not seconds (decision 0151)
        data = bytearray(data0)
        if i % 4 == 3:
            data = data[: rnd.randrange(len(data))]
        elif i:
            for _ in range(rnd.randint(1, 8)):
                data[rnd.randrange(len(data))] = rnd.randrange(256)
        f = tmp_path / "ov.parquet"
        f.write_bytes(bytes(data))
        r = run_capped([sys.executable, "-c", _CAPPED_READ, str(f), str(root)], 1_500_000_000)
        assert r.returncode == 0 and r.stdout.split()[0] in ("used", "refused"), (i, r.stdout, r.stderr[-800:])
        if r.stdout.startswith("used"):
            assert int(r.stdout.split()[1]) == want, i
        assert i or r.stdout.startswith("used")  # the file as written is used
