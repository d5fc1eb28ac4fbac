"""The Summary page shows ``memory_near_limit`` against a cgroup's limit and opens the timeline at
its range, in real Chromium (decision 0182): the capture of ``tests/programs/memory_fill.py`` run
in a child cgroup limited to 4 GiB (tests/cgroups.py), which holds 92% of it.  Skipped, with the
reason, where no cgroup can be made."""

from __future__ import annotations

import pytest

from tests.cgroups import LIMIT, fill_capture
from tests.conftest import REPO

from .helpers import (
    FIRST_TL,
    canvas_origin,
    chromium,
    follow_insight,
    screen_pixels,
    serve_capture,
    settle,
    summary_insight,
    watch_errors,
)

LABEL_W = 230  # the timeline's label column (timeline.js)

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "test-artifacts" / "ui"
NAME = "cgroup"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    cap, info = fill_capture(tmp_path_factory)
    if "skip" in info:
        pytest.skip(info["skip"])
    yield from serve_capture(cap, tmp_path_factory.mktemp("cgroup-ui"), NAME)


@pytest.fixture(scope="module")
def browser():
    yield from chromium(ARTIFACTS)


def test_summary_page_shows_the_cgroup_limit_finding_and_opens_its_range(browser, served: str) -> None:
    pg = browser.new_page(viewport={"width": 1600, "height": 1000})
    watch_errors(pg)
    try:
        ins, item = summary_insight(pg, served, NAME, "memory_near_limit")
        figs = ins["evidence"]["figures"]
        assert figs["memory_limit_bytes"] == LIMIT and figs["memory_limit_source"].startswith("cgroup "), figs
        text = item.inner_text()
        assert "of its cgroup's memory limit (4.00 GiB)" in text and "memory (no time estimate)" in text, text
        assert "container (cgroup)" in text, text
        assert item.is_visible()
        pg.screenshot(path=str(ARTIFACTS / "cgroup-limit-summary.png"))
        # following it opens the System Trace Viewer at its range (the fullest step)
        follow_insight(pg, item, ins)
        pg.screenshot(path=str(ARTIFACTS / "cgroup-limit-timeline.png"))
        assert pg.console_errors == [], pg.console_errors
    finally:
        pg.close()


def _magenta_rows(px) -> list[int]:
    """Pixel rows of a screenshot strip where most pixels are the limit line's colour (#d4148c)."""
    r, g, b = (px[:, :, i].astype(int) for i in range(3))
    hit = (abs(r - 0xD4) < 40) & (g < 80) & (abs(b - 0x8C) < 50)
    return [int(y) for y in range(px.shape[0]) if hit[y].mean() > 0.8]


def test_memory_tracks_draw_the_cgroup_limit_at_its_height_and_name_it_on_hover(browser, served: str) -> None:
    """On the timeline, each memory track of the process (its RSS / VMS, its core's device memory)
    draws the cgroup's 4 GiB limit as a line at the height the track's scale gives it (the scale takes
    the limit in), read from the screen's pixels; hovering the track names the limit and its cgroup."""
    pg = browser.new_page(viewport={"width": 1600, "height": 1000})
    watch_errors(pg)
    try:
        ins, item = summary_insight(pg, served, NAME, "memory_near_limit")
        follow_insight(pg, item, ins)
        cgroup = ins["evidence"]["figures"]["memory_limit_cgroup"]
        rows = pg.evaluate(f"() => {FIRST_TL}.rows.filter((r) => r.limit)"
                           ".map((r) => [r.idx, r.label, r.style, r.limit])")
        styles = {style for _, _, style, _ in rows}
        assert {"line", "stack"} <= styles, rows  # the process's RSS / VMS and its core's device memory
        ox, oy = canvas_origin(pg)
        for idx, label, style, limit in rows:
            assert limit == {"bytes": LIMIT, "source": ins["evidence"]["figures"]["memory_limit_source"],
                             "cgroup": cgroup}, (label, limit)
            pg.evaluate(f"(i) => {FIRST_TL}.scrollToRow(i)", idx)
            settle(pg)
            y0, h, data = pg.evaluate(f"""(i) => {{ const t = {FIRST_TL}; const e = t.rowY.get(i);
                return [t.top + e.y - t.scrollY, e.h, t.counterData.get(i)]; }}""", idx)
            # the track's scale, from the values it shows: the stack's highest total, or the highest
            # value of any line; and the limit
            if style == "stack":
                sums: dict[float, float] = {}
                for s in data.values():
                    for t, v in zip(s["t"], s["v"]):
                        sums[t] = sums.get(t, 0) + v
                top_v = max(sums.values())
            else:
                top_v = max(v for s in data.values() for v in s["v"])
            scale = max(top_v, LIMIT)
            top, bot = y0 + 16, y0 + h - 3
            want = bot - LIMIT / scale * (bot - top)
            strip = screen_pixels(pg, {"x": ox + LABEL_W + 40, "y": oy + y0, "width": 600, "height": h})
            got = _magenta_rows(strip)
            assert got and all(abs(y - (want - y0)) <= 1.5 for y in got), (label, got, want - y0, top_v, scale)
            if style == "line":
                assert top_v > LIMIT * 1.05, (label, top_v)  # (its VMS: the line sits below the track's top)
            # hovering the track names the limit and the cgroup that set it
            pg.mouse.move(ox + LABEL_W + 300, oy + y0 + h / 2)
            tip = pg.locator("#tooltip")
            tip.wait_for(state="visible", timeout=10000)
            text = tip.inner_text()
            assert f"cgroup limit: 4.0 GiB ({limit['source']} of {cgroup})" in text, text
        pg.screenshot(path=str(ARTIFACTS / "cgroup-limit-tracks.png"))
        assert pg.console_errors == [], pg.console_errors
    finally:
        pg.close()
