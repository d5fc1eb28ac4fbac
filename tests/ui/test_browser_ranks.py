"""Rank filter, folding device lanes and device lanes past 256 profiles (issue 35's remainder), in real
Debian Chromium on the 64-rank synthetic capture (rank 37 the straggler) with one device profile per
execution for the first 150 executions of ranks 0 and 1: 300 device profiles, more than the 256 the
viewer once laned.

What the user sees is checked on the screen (``helpers.screen_pixels``) and in the DOM; which windows
the page asks is read from its real requests. Each test opens its own page and waits on page state
(``Timeline.pending``), never on time. Screenshots go to test-artifacts/ui/ranks-*.png at 1600x1000.
"""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlparse

import numpy as np
import pytest

from tests.conftest import REPO, clean_env, free_port

from .helpers import (
    FIRST_TL,
    add_device_profiles_per_execution,
    canvas_origin,
    chromium,
    ready as ready_coarse,
    screen_pixels,
    settle,
    start_server,
    stop_server,
    watch_errors,
)

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "test-artifacts" / "ui"
NAME = "synth-64r"
TL = FIRST_TL
ROW_H = 18
LABEL_W = 230


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("starlette")
    from bench.ui_bench import write_store

    ws = tmp_path_factory.mktemp("synth-ranks")
    write_store(ws / NAME, 8, 8, 200_000, seed=3, straggler=37)
    made = add_device_profiles_per_execution(ws / NAME, [0, 1], 150)
    env = clean_env(XDG_CACHE_HOME=str(tmp_path_factory.mktemp("xdg-cache-ranks")))
    p, url = start_server(ws, free_port(), env)
    yield url, made, ws
    stop_server(p)


@pytest.fixture(scope="module")
def browser():
    yield from chromium(ARTIFACTS)


def ready(pg) -> None:
    """The page is painted and its detail loaded: a cold open first paints from the coarse level and
    asks every window again once the event index is built, which would land among the requests a
    test counts after it changed the view (``app.js`` ``detailLoading``)."""
    ready_coarse(pg)
    pg.wait_for_function(f"() => {TL}.host.dataset.detail !== 'coarse'", timeout=120000)
    settle(pg)


def open_page(browser, url: str, routes: dict | None = None):
    pg = browser.new_page(viewport={"width": 1600, "height": 1000})
    for pattern, handler in (routes or {}).items():
        pg.route(pattern, handler)
    watch_errors(pg)
    pg.asked = []  # every window, busy and device-window request the page makes
    pg.on("request", lambda r: pg.asked.append(r.url) if "/window" in r.url or "/busy" in r.url else None)
    pg.goto(url)
    return pg


def shot(pg, name: str) -> None:
    pg.screenshot(path=str(ARTIFACTS / f"ranks-{name}.png"))




def origin_of(pg) -> int:
    return int(pg.evaluate(f"() => fetch('/api/profiles/{NAME}?wait=0').then((r) => r.json())"
                           ".then((o) => o.origin_ns)"))


def url_state(pg, key: str) -> str | None:
    return pg.evaluate("(k) => new URLSearchParams(location.hash.split('?')[1] || '').get(k)", key)


def wait_url(pg, key: str, want: str | None) -> None:
    pg.wait_for_function("([k, v]) => new URLSearchParams(location.hash.split('?')[1] || '').get(k) === v",
                         arg=[key, want], timeout=10000)


def decode_rows(s: str) -> set[int]:
    out: set[int] = set()
    for part in s.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def shown_ranks(pg) -> list[int]:
    """The ranks whose process groups are laid out, top to bottom."""
    return pg.evaluate(f"""() => {{ const out = [];
        for (const e of {TL}.layout) if (e.type === 'group') {{ const m = / rank (\\d+)$/.exec(e.text);
          if (m && !out.includes(Number(m[1]))) out.push(Number(m[1])); }}
        return out; }}""")


def apply_list(pg, text: str) -> None:
    pg.click("[data-testid=settings]")
    pg.fill("[data-testid=rank-filter-input]", text)
    pg.press("[data-testid=rank-filter-input]", "Enter")
    pg.wait_for_selector("[data-testid=settings-popover]", state="detached")
    settle(pg)


# ---------------------------------------------------------------- the rank filter
def test_rank_filter_keeps_a_list_asks_only_its_windows_survives_reload_and_undoes(browser, synth) -> None:
    url, _, _ = synth
    pg = open_page(browser, url + f"#/p/{NAME}")
    try:
        ready(pg)
        assert len(shown_ranks(pg)) == 64 and pg.inner_text("[data-testid=rank-filter-status]") == ""
        pg.asked.clear()
        apply_list(pg, "0-3, 37")
        assert shown_ranks(pg) == [0, 1, 2, 3, 37]
        status = pg.inner_text("[data-testid=rank-filter-status]")
        assert "showing 5 of 64 ranks" in status and "0-3,37" in status, status
        # only the kept ranks' tracks were asked for (windows and busy shading)
        kept = set(pg.evaluate(f"() => {TL}.rows.filter((r) => !{TL}.filtered.has(r.idx)).map((r) => r.idx)"))
        assert pg.asked
        for u in pg.asked:
            q = parse_qs(urlparse(u).query)
            for key in ("rows", "groups"):
                for spec in (q[key][0].split(";") if key in q else []):
                    assert decode_rows(spec) <= kept, (key, spec)
        # 5 ranks: the compact view is left (it is for many ranks): 22 px summary tracks, drawn below
        # each other and nothing under the last one
        groups = pg.evaluate(f"""() => {{ const t = {TL};
            return t.layout.filter((e) => e.type === 'group' && e.collapsed && e.rows.length)
            .map((e) => [e.text, t.top + e.y - t.scrollY, e.h]); }}""")
        assert [g[2] for g in groups] == [22] * 5, groups
        ox, oy = canvas_origin(pg)
        screen = screen_pixels(pg)
        for text, y, h in groups:
            strip = screen[int(oy + y + 1):int(oy + y + h - 7), int(ox + 240):int(ox + 1500)].astype(int)
            assert (strip[:, :, 2] - strip[:, :, 0] > 40).mean() > 0.05, text  # its busy shading is on screen
        below = screen[int(oy + groups[-1][1] + 30):int(oy + groups[-1][1] + 200), int(ox + 240):int(ox + 1500)]
        assert (below >= 250).all(axis=2).mean() > 0.99  # no 6th rank drawn
        shot(pg, "01-filter-list")
        # the filter is in the URL and survives a reload
        wait_url(pg, "ranks", "0-3,37")
        pg.reload()
        ready(pg)
        assert shown_ranks(pg) == [0, 1, 2, 3, 37]
        assert "showing 5 of 64 ranks" in pg.inner_text("[data-testid=rank-filter-status]")
        # a time range over every track summarizes the shown ranks only
        ox, oy = canvas_origin(pg)
        pg.mouse.move(ox + 300, oy + 10)
        pg.mouse.down()
        pg.mouse.move(ox + 1400, oy + 10, steps=4)
        pg.mouse.up()
        pg.wait_for_selector("[data-testid=area-ranks] tbody tr")
        ranks = pg.evaluate("() => [...document.querySelectorAll('[data-testid=area-ranks] tbody tr')]"
                            ".map((tr) => Number(tr.cells[0].dataset.v))")
        assert sorted(ranks) == [0, 1, 2, 3, 37], ranks
        # one click undoes it: every rank again, and the URL forgets it
        pg.click("[data-testid=rank-filter-clear]")
        settle(pg)
        assert len(shown_ranks(pg)) == 64
        assert pg.inner_text("[data-testid=rank-filter-status]") == ""
        wait_url(pg, "ranks", None)
        assert pg.evaluate(f"() => {TL}.compact")  # 64 ranks: compact again
        # a list naming nothing the profile has is refused with a note, the view unchanged
        pg.click("[data-testid=settings]")
        pg.fill("[data-testid=rank-filter-input]", "5-x")
        pg.click("[data-testid=rank-filter-apply]")
        pg.wait_for_selector("#toast.error:has-text('not a rank or a range')")
        assert len(shown_ranks(pg)) == 64
        assert pg.console_errors == []
    finally:
        pg.close()


def test_k_worst_by_lateness_with_grouping_compact_and_reload(browser, synth) -> None:
    url, _, _ = synth
    pg = open_page(browser, url + f"#/p/{NAME}")
    try:
        ready(pg)
        pg.click("[data-testid=settings]")
        pg.click("[data-testid=order-late]")
        pg.wait_for_function(f"() => {TL}.host.dataset.order === 'late'", timeout=60000)
        settle(pg)
        order = shown_ranks(pg)
        assert order[0] == 37
        # the k worst by the current order: the first 3 ranks shown, the straggler first
        pg.fill("[data-testid=rank-filter-k]", "3")
        pg.click("[data-testid=rank-filter-worst]")
        settle(pg)
        kept = shown_ranks(pg)
        assert kept[0] == 37 and sorted(kept) == sorted(order[:3]), (kept, order[:3])
        status = pg.inner_text("[data-testid=rank-filter-status]")
        assert "showing 3 of 64 ranks" in status and "3 worst by lateness in collectives" in status, status
        # and on the screen: the first summary track's name reads rank 37 (dark label pixels in the gutter)
        first = pg.evaluate(f"""() => {{ const t = {TL};
            const e = t.layout.find((x) => x.type === 'group' && x.collapsed && x.rows.length);
            return [e.text, t.top + e.y - t.scrollY, e.h]; }}""")
        assert first[0].endswith("rank 37")
        ox, oy = canvas_origin(pg)
        label = screen_pixels(pg, {"x": ox + 20, "y": oy + first[1] + 3, "width": 150, "height": first[2] - 6})
        assert (label.astype(int).sum(axis=2) < 200).mean() > 0.02
        shot(pg, "02-three-worst-by-lateness")
        # order and filter are in the URL; a reload shows the same ranks in the same order
        wait_url(pg, "order", "late")
        pg.wait_for_function("() => location.hash.includes('ranks=')")
        assert decode_rows(url_state(pg, "ranks")) == set(kept)
        pg.reload()
        ready(pg)
        pg.wait_for_function(f"() => {TL}.host.dataset.order === 'late'", timeout=60000)
        settle(pg)
        assert shown_ranks(pg) == kept
        # another grouping keeps the filter (it names ranks): NeuronCore tracks of the kept ranks only
        pg.click("[data-testid=settings]")
        pg.click("[data-testid=mode-neuroncore]")
        pg.wait_for_function("() => document.querySelector('[data-testid=widget]').dataset.mode === 'neuroncore'")
        pg.keyboard.press("Escape")
        settle(pg)
        leaf_ranks = pg.evaluate(f"""() => {{ const w = window.__nx.state.widgets[0], t = {TL}; const out = new Set();
            for (const e of t.layout) if (e.type === 'row' && e.row.kind === 'events')
              for (const lf of e.row.leaves) out.add(w.tracks.leaf_rank[lf]);
            for (const e of t.layout) if (e.type === 'group' && e.collapsed) for (const r of e.rows)
              for (const lf of t.rows.find((x) => x.idx === r).leaves) out.add(w.tracks.leaf_rank[lf]);
            return [...out]; }}""")
        assert leaf_ranks and set(leaf_ranks) <= set(kept), leaf_ranks
        assert "showing 3 of 64 ranks" in pg.inner_text("[data-testid=rank-filter-status]")
        # compact chosen in Settings holds under the filter: 7 px per collapsed process
        pg.click("[data-testid=settings]")
        pg.click("[data-testid=mode-cpu_device]")
        pg.wait_for_function("() => document.querySelector('[data-testid=widget]').dataset.mode === 'cpu_device'")
        pg.keyboard.press("Escape")
        settle(pg)
        assert not pg.evaluate(f"() => {TL}.compact")
        pg.click("[data-testid=settings]")
        pg.check("[data-testid=compact-ranks]")
        pg.keyboard.press("Escape")
        settle(pg)
        hs = pg.evaluate(f"() => {TL}.layout.filter((e) => e.type === 'group' && e.collapsed && e.rows.length)"
                         ".map((e) => e.h)")
        assert hs == [7, 7, 7], hs
        assert pg.console_errors == []
    finally:
        pg.close()


def test_rank_filter_side_by_side(browser, synth) -> None:
    import shutil

    url, _, ws = synth
    if not (ws / "synth-b").exists():  # a second profile for a second System Trace Viewer
        shutil.copytree(ws / NAME, ws / "synth-b")
    pg = open_page(browser, url + f"#/p/{NAME}?w=system-trace~h,system-trace@synth-b~h&ranks=37")
    try:
        pg.wait_for_function("() => document.querySelectorAll(`[data-testid=system-timeline][data-ready='1']`)"
                             ".length === 2", timeout=60000)
        settle(pg)
        assert shown_ranks(pg) == [37]  # the first (the page's profile) keeps the link's filter
        sts = pg.locator("[data-testid=rank-filter-status]")
        assert "showing 1 of 64 ranks" in sts.nth(0).inner_text() and sts.nth(1).inner_text() == ""
        # at half width the status bar says it in full, on one line, and its undo is on screen
        box, bar = sts.nth(0).bounding_box(), pg.locator(".statusbar").first.bounding_box()
        assert bar["width"] < 820 and box["x"] + box["width"] <= bar["x"] + bar["width"] + 1, (box, bar)
        assert box["height"] < 20, box
        clear = pg.locator("[data-testid=rank-filter-clear]")
        assert clear.is_visible()
        px = screen_pixels(pg, box).astype(int)
        assert (px.sum(axis=2) < 200).mean() > 0.03  # its text is drawn
        shot(pg, "03-filter-side-by-side")
        clear.click()
        settle(pg)
        assert len(shown_ranks(pg)) == 64
        assert pg.console_errors == []
    finally:
        pg.close()


# ---------------------------------------------------------------- device lanes: folded per track
def dev_rows(pg) -> list[dict]:
    return pg.evaluate(f"""() => {{ const t = {TL};
        return t.layout.filter((e) => e.type === 'row' && t.devLanes.has(e.row.idx))
        .map((e) => ({{ idx: e.row.idx, y: t.top + e.y - t.scrollY, h: e.h, shown: t.devShown(e.row.idx),
                        engines: t.devLanes.get(e.row.idx).engines.length, group: e.path.join('>') }})); }}""")


def test_device_lanes_fold_per_track_without_moving_the_others(browser, synth) -> None:
    url, made, _ = synth
    # ranks 0 and 1 (each with device profiles) over their first executions, processes expanded
    a = min(m["start_ts"] for m in made)
    pg = open_page(browser, url + f"#/p/{NAME}?ranks=0-1")
    try:
        ready(pg)
        origin = origin_of(pg)
        pg.evaluate(f"(t) => {{ const tl = {TL}; tl.showCounters = false; tl.collapsed.clear(); tl.relayout(); "
                    "tl.setView(t, t + 700000); }", a - origin)
        settle(pg)
        rows = dev_rows(pg)
        assert len(rows) == 2 and all(r["shown"] and r["engines"] == 3 for r in rows), rows
        first = rows[0]
        ox, oy = canvas_origin(pg)
        layout0 = pg.evaluate(f"() => {TL}.layout.map((e) => [e.type, e.y, e.h])")
        pg.mouse.move(ox + 800, oy + 5)  # off the tracks (no hover line, no tooltip)
        settle(pg)
        gutter = {"x": ox, "y": oy + 26, "width": 160, "height": 560}
        before = screen_pixels(pg, gutter)
        # device ops are drawn in the first track's lanes (coloured pixels right of the gutter)
        lanes = {"x": ox + LABEL_W + 2, "y": oy + first["y"] + first["h"] - 3 * ROW_H, "width": 1300,
                 "height": 3 * ROW_H}
        coloured = lambda px: (np.abs(px.astype(int) - 255).sum(axis=2) > 90).mean()  # noqa: E731
        assert coloured(screen_pixels(pg, lanes)) > 0.01
        # the toggle in the label gutter folds them: a real click
        pg.mouse.click(ox + LABEL_W - 40, oy + first["y"] + ROW_H / 2)
        settle(pg)
        pg.mouse.move(ox + 800, oy + 5)
        settle(pg)
        layout1 = pg.evaluate(f"() => {TL}.layout.map((e) => [e.type, e.y, e.h])")
        idxs = pg.evaluate(f"() => {TL}.layout.map((e) => e.type === 'row' ? e.row.idx : -1)")
        k = idxs.index(first["idx"])
        drop = 3 * ROW_H
        assert layout1[:k] == layout0[:k]  # the tracks above do not move
        assert layout1[k][2] == layout0[k][2] - drop  # the track loses its three lanes
        assert [e[1] for e in layout1[k + 1:]] == [e[1] - drop for e in layout0[k + 1:]]  # below: the expected shift
        # on the screen: the gutter above the track is the same pixels, below it the same pixels moved up
        after = screen_pixels(pg, gutter)
        top_y = int(first["y"]) - 26
        assert (before[:top_y] != after[:top_y]).any(axis=2).mean() < 0.002
        low = int(first["y"] + first["h"]) - 26
        n = min(200, before.shape[0] - low)
        assert (before[low:low + n] != after[low - drop:low - drop + n]).any(axis=2).mean() < 0.002
        # folded: the toggle reads "dev ▸" on purple; the lanes are gone from the screen
        tog = screen_pixels(pg, {"x": ox + LABEL_W - 66, "y": oy + first["y"] + 5, "width": 40,
                                 "height": 8}).astype(int)
        assert ((tog[:, :, 2] - tog[:, :, 1] > 80) & (tog[:, :, 0] > 90)).mean() > 0.4
        assert pg.evaluate(f"(i) => !{TL}.devShown(i) && !{TL}.devEvents.has(i)", first["idx"])
        shot(pg, "04-device-lanes-folded")
        # its device ops are no longer asked; the other track's still are
        pg.asked.clear()
        pg.evaluate(f"() => {TL}.pan(0.1)")
        settle(pg)
        dev_asked = [u for u in pg.asked if "/device/" in u]
        assert dev_asked and not any("dp-r0-" in u for u in dev_asked) and any("dp-r1-" in u for u in dev_asked)
        # in the URL; a reload keeps it folded
        fold = url_state(pg, "devfold")
        assert fold and unquote(fold).split("|")[1:] == ["10000", "0"], fold
        pg.reload()
        ready(pg)
        pg.evaluate(f"(t) => {{ const tl = {TL}; tl.collapsed.clear(); tl.relayout(); tl.refresh(); }}", 0)
        settle(pg)
        rows = dev_rows(pg)
        assert [r["shown"] for r in rows] == [False, True], rows
        # and the toggle unfolds it again
        pg.mouse.click(ox + LABEL_W - 40, oy + rows[0]["y"] + ROW_H / 2)
        settle(pg)
        assert [r["shown"] for r in dev_rows(pg)] == [True, True]
        wait_url(pg, "devfold", None)
        assert pg.console_errors == []
    finally:
        pg.close()


# ---------------------------------------------------------------- device lanes past 256 profiles
def test_every_device_profile_is_laned_and_what_is_not_is_said(browser, synth) -> None:
    url, made, _ = synth
    last = max(made, key=lambda m: m["start_ts"])  # the 300th profile by start: past the old cap of 256
    pg = open_page(browser, url + f"#/p/{NAME}?ranks={last['rank']}")
    try:
        ready(pg)
        pg.wait_for_function(f"() => {TL}.host.dataset.devicesLaned === '300'", timeout=30000)
        info = pg.inner_text("[data-testid=device-lanes-info]")
        assert "300 device profiles under 2 tracks" in info and "not laned" not in info, info
        origin = origin_of(pg)
        s, e = last["start_ts"] - origin, last["end_ts"] - origin
        pg.evaluate(f"(r) => {{ const tl = {TL}; tl.collapsed.clear(); tl.relayout(); "
                    "tl.setView(r[0] - (r[1] - r[0]), r[1] + (r[1] - r[0])); }",
                    [s, e])
        settle(pg)
        got = pg.evaluate(f"""(pid) => {{ const t = {TL};
            for (const [row, items] of t.devEvents) for (const it of items)
            if (it.dp.pid === pid && it.c === 1) {{ const en = t.rowY.get(row);
              return [t.xOf(it.s), t.xOf(it.e), t.top + en.y - t.scrollY + (t.devBase(row) + it.lane) * 18]; }}
            return null; }}""",
                          last["profile_id"])
        assert got is not None, "the 300th device profile's ops are not on the timeline"
        ox, oy = canvas_origin(pg)
        x0, x1, y = got
        px = screen_pixels(pg, {"x": ox + x0 + 1, "y": oy + y + 5, "width": max(2, x1 - x0 - 2),
                                "height": 8}).astype(int)
        assert (np.abs(px - 255).sum(axis=2) > 90).mean() > 0.8  # its op is coloured on the screen
        shot(pg, "05-300th-device-profile")
        # zoomed out over 150 profiles per track: the lanes say so instead of asking 300 windows
        pg.asked.clear()
        pg.evaluate(f"() => {TL}.setView(0, 60000000)")
        settle(pg)
        crowded = pg.evaluate(f"() => [...{TL}.devCrowded.values()]")
        assert crowded == [150], crowded
        assert not [u for u in pg.asked if "/device/" in u]
        row = dev_rows(pg)[0]
        note = screen_pixels(pg, {"x": ox + LABEL_W + 8, "y": oy + row["y"] + row["h"] - 3 * ROW_H + 4,
                                  "width": 250, "height": 10}).astype(int)
        assert ((note[:, :, 2] - note[:, :, 1] > 60) & (note[:, :, 0] > 60)).mean() > 0.05  # purple text on white
        shot(pg, "06-device-profiles-crowded")
        assert pg.console_errors == []
    finally:
        pg.close()


def test_device_profiles_past_the_answer_bound_are_said_on_screen(browser, synth) -> None:
    url, _, _ = synth
    # the real answer, with a total past its bound (as a workspace of 25,300 device profiles gives)
    def bigger(route):
        r = route.fetch()
        body = r.json()
        body["total"] = body["total"] + 25_000
        route.fulfill(response=r, json=body)

    pg = open_page(browser, url + f"#/p/{NAME}?ranks=0-1", {"**/device-spans": bigger})
    try:
        ready(pg)
        pg.wait_for_function(f"() => {TL}.host.dataset.devicesLaned === '300'", timeout=30000)
        info = pg.locator("[data-testid=device-lanes-info]")
        assert "25,000 not laned (more than 20,000)" in info.inner_text(), info.inner_text()
        assert info.is_visible()
        px = screen_pixels(pg, info.bounding_box()).astype(int)
        assert ((px[:, :, 0] - px[:, :, 2] > 80)).mean() > 0.03  # in the warning colour, on the screen
        assert pg.console_errors == []
    finally:
        pg.close()


def test_fuzz_rank_lists(browser, synth) -> None:
    """The rank list parser (what a user types, what a link carries) never throws, keeps only ranks the
    profile has, and never expands a range (a billion-wide one costs nothing)."""
    import random

    from tests.fuzzing import seed

    url, _, _ = synth
    s = seed(35)
    rnd = random.Random(s)
    known = sorted(rnd.sample(range(0, 600), 64))
    texts = ["0-999999999", "999999999-0", "", ",", "-", "1--2", "01-03", "3-3", "0-3,37", " 5 , 7-9 ", "1e3", "٣"]
    for _ in range(400):
        base = rnd.choice(["0-3,37", "5,7-9", "12-600", "1,2,3"])
        chars = list(base)
        for _ in range(rnd.randint(1, 4)):
            op = rnd.random()
            if op < 0.4 and chars:
                chars[rnd.randrange(len(chars))] = rnd.choice("0123456789-, \tx;")
            elif op < 0.7:
                chars.insert(rnd.randrange(len(chars) + 1), rnd.choice("0123456789-,"))
            elif chars:
                del chars[rnd.randrange(len(chars))]
        texts.append("".join(chars))
    pg = open_page(browser, url)
    try:
        pg.wait_for_function("() => window.__nx && window.__nx.parseRankList")
        got = pg.evaluate("""([texts, known]) => texts.map((t) => {
            try { const r = window.__nx.parseRankList(t, known); return [r.error || null, r.ranks, r.missing]; }
            catch (e) { return ['THREW ' + e.message, [], []]; } })""", [texts, known])
        for t, (err, ranks, missing) in zip(texts, got):
            assert not (err or "").startswith("THREW"), (s, t, err)
            assert set(ranks) <= set(known) and ranks == sorted(set(ranks)), (s, t, ranks)
            assert all(isinstance(m, str) and m in t for m in missing), (s, t, missing)
            if err:
                assert ranks == [], (s, t)
        assert got[0][1] == known  # 0-999999999: every rank the profile has
        assert got[8][1] == [r for r in known if r <= 3 or r == 37]
        assert pg.console_errors == []
    finally:
        pg.close()
