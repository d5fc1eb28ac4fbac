"""Every rank expanded on a 512-rank profile, in real Debian Chromium (decision 0181): scrolled from the
first rank to the last, each rank's event tracks are painted on the screen, while the page reads its
packed answers into a few buffers it reuses and the browser keeps none of the API's answers in its
HTTP cache.

Decision 0181 changed how the timeline holds a window answer (its columns, not one object per event),
how it draws tracks of events and summary strips (one clip for all, not a save() per track), and how
packed answers are read (a BYOB reader into reused buffers). What the user sees must not change: the
same tracks, painted. Pixels come from real screenshots (``helpers.screen_pixels``); the test waits on
page state (``Timeline.pending``), never on time. A screenshot of the last page goes to
test-artifacts/ui/expanded-512-last.png (1600x3200: fewer screens to scroll through).
"""

from __future__ import annotations

import pytest

from tests.conftest import REPO, clean_env, free_port

from .helpers import (
    FIRST_TL,
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
NAME = "synth-512r"
TL = FIRST_TL
LABEL_W = 230
STRIP_W = 400  # CSS pixels of the track area read per page
RANKS = 512


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("starlette")
    from bench.ui_bench import write_store

    ws = tmp_path_factory.mktemp("synth-512")
    write_store(ws / NAME, 64, 8, 600_000, seed=5)  # ~1,170 events per rank
    env = clean_env(XDG_CACHE_HOME=str(tmp_path_factory.mktemp("xdg-cache-512")))
    p, url = start_server(ws, free_port(), env)
    yield url
    stop_server(p)


@pytest.fixture(scope="module")
def browser():
    yield from chromium(ARTIFACTS)


def test_scrolling_through_512_expanded_ranks_paints_every_rank(browser, served: str) -> None:
    # a tall window: fewer screens to scroll through (the tracks are the same at any height)
    pg = browser.new_page(viewport={"width": 1600, "height": 3200})
    watch_errors(pg)
    answers: list[tuple[str, str | None]] = []  # (url, Cache-Control) of every API answer
    pg.on("response", lambda r: answers.append((r.url, r.headers.get("cache-control")))
          if "/api/" in r.url else None)
    pg.goto(f"{served}#/p/{NAME}")
    ready_coarse(pg)
    pg.wait_for_function(f"() => {TL}.host.dataset.detail !== 'coarse'", timeout=120000)
    settle(pg)
    # every rank expanded, the whole profile in view (what bench/ui_bench.py measures; the counter
    # tracks hidden: this test is about the event tracks, and they are half the height)
    pg.evaluate(f"""() => {{ const t = {TL}; t.collapsed.clear(); t.showCounters = false; t.relayout(); t.t0 = 0;
                   t.t1 = t.source.duration; t.scrollY = 0; t.refresh(); }}""")
    settle(pg)
    box = pg.locator("[data-testid=system-timeline] canvas").bounding_box()
    geo = pg.evaluate(f"() => {{ const t = {TL}; return {{top: t.top, h: t.h, w: t.w, height: t.height}}; }}")
    vis = geo["h"] - geo["top"]
    assert geo["height"] > 5 * vis  # 512 expanded ranks: many screens of tracks
    painted: dict[int, int] = {}  # event track -> the most non-white pixels seen in its band
    rank_of: dict[int, str] = {}
    y = 0
    pages = 0
    while True:
        pg.evaluate(f"(y) => {{ const t = {TL}; t.scrollY = y; t.clampScroll(); t.refresh(); }}", y)
        settle(pg)
        # the event tracks fully on screen, under the sticky group headers
        rows = pg.evaluate(f"""() => {{ const t = {TL}; const top = t.top + (t.stickyH || 0), bot = t.h;
            return t.layout.filter((e) => e.type === 'row' && e.row.kind === 'events').map((e) =>
              [e.row.idx, t.top + e.y - t.scrollY, e.h, e.path.slice(0, 2).join('/'),
               t.events.get(e.row.idx)?.length || 0]).filter(([, ty, h]) => ty >= top && ty + h <= bot); }}""")
        # a strip of the track area, as tall as the window (every rank's events cover the whole span:
        # a third of its width holds hundreds of them; a quarter of the pixels to pass around)
        px = screen_pixels(pg, {"x": box["x"] + LABEL_W, "y": box["y"], "width": STRIP_W, "height": geo["h"]})
        for idx, ty, h, rank, n in rows:
            assert n > 0, f"track {idx} ({rank}) on screen without events"
            band = px[int(ty) + 2:int(ty + h) - 2, 2:STRIP_W - 2]
            ink = int((band.min(axis=2) < 225).sum())
            painted[idx] = max(painted.get(idx, 0), ink)
            rank_of[idx] = rank
        pages += 1
        # (the whole height grows while scrolling: a track takes the lanes its events need)
        at, height = pg.evaluate(f"() => [{TL}.scrollY, {TL}.height]")
        if at + vis >= height or pages > 200:
            break
        y = at + vis - 120  # overlapping pages: every track of up to 120 px is whole on one of them
    pg.screenshot(path=str(ARTIFACTS / "expanded-512-last.png"))
    every = pg.evaluate(f"() => {TL}.layout.filter((e) => e.type === 'row' && e.row.kind === 'events')"
                        ".map((e) => e.row.idx)")
    missing = sorted(set(every) - set(painted))
    assert not missing, f"{len(missing)} event tracks never whole on screen: {missing[:10]}"
    blank = sorted(i for i, ink in painted.items() if ink < 30)
    assert not blank, f"{len(blank)} event tracks drawn without events: {[rank_of[i] for i in blank[:10]]}"
    assert len(set(rank_of.values())) == RANKS
    # the packed answers (one /window per page, more while it moved) were read into a few reused
    # buffers, not one new buffer per answer
    asked = sum("/window?" in u for u, _ in answers)
    made = pg.evaluate("window.__nxStats.packedBuffers")
    assert asked >= pages and made is not None and made <= 8, (asked, made)
    # and the browser kept none of the API's answers in its HTTP cache
    kept = [u for u, cc in answers if "no-store" not in (cc or "")]
    assert not kept, kept[:3]
    assert not pg.console_errors, pg.console_errors
    pg.close()
