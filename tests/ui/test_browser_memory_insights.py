"""The Summary page shows a memory finding and opens the timeline at its range, in real Chromium on a
real capture: ``tests/programs/pathologies.py leak`` keeps each step's loss (its autograd graph
with it), so device memory (the host's, on the CPU substrate) grows every step and ``view`` writes a
``memory_growth`` insight into the profile's summary.json (decision 0159, docs/summary.md).

``memory_near_limit`` is not reachable this way: without a cgroup limit, the CPU substrate's limit
is the host's memory (used + available), which no test may fill. tests/ui/test_browser_cgroup_limit.py
reaches it under a cgroup limit (decision 0182)."""

from __future__ import annotations

import pytest

from tests.analysis.test_insights_memory import leak_capture
from tests.conftest import REPO

from .helpers import (
    FIRST_TL,
    canvas_origin,
    chromium,
    follow_insight,
    screen_pixels,
    serve_capture,
    summary_insight,
    watch_errors,
)

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "test-artifacts" / "ui"
NAME = "leak"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("leak")
    # the memory insights' own capture of the program (one launch per test run for both files)
    cap, _ = leak_capture(tmp_path_factory)
    yield from serve_capture(cap, base, NAME)


@pytest.fixture(scope="module")
def browser():
    yield from chromium(ARTIFACTS)


def test_summary_page_shows_memory_growth_and_opens_its_range(browser, served: str) -> None:
    pg = browser.new_page(viewport={"width": 1600, "height": 1000})
    watch_errors(pg)
    try:
        ins, item = summary_insight(pg, served, NAME, "memory_growth")
        text = item.inner_text()
        assert "device memory grows by" in text and "memory (no time estimate)" in text, text
        assert ins["recommendation"][:40] in text
        # the finding is on the screen, not only in the DOM: its title's line is drawn (dark text
        # pixels inside the item's box)
        box = item.bounding_box()
        px = screen_pixels(pg, {"x": box["x"], "y": box["y"], "width": box["width"], "height": min(box["height"], 20)})
        assert (px.max(axis=2) < 100).mean() > 0.01
        pg.screenshot(path=str(ARTIFACTS / "memory-insight-summary.png"))
        # following it opens the System Trace Viewer at its range (the steps that grew)
        follow_insight(pg, item, ins)
        # its mark on the time axis: red pixels at the ruler's foot over the range
        ox, oy = canvas_origin(pg)
        x0 = pg.evaluate(f"(t) => {FIRST_TL}.xOf(t)", ins["t0"])
        x1 = pg.evaluate(f"(t) => {FIRST_TL}.xOf(t)", ins["t1"])
        px = screen_pixels(pg, {"x": ox + x0 + 20, "y": oy + 21, "width": max(10, x1 - x0 - 40), "height": 4})
        red = (px[:, :, 0] > 150) & (px[:, :, 1] < 90) & (px[:, :, 2] < 90)
        assert red.mean() > 0.8, red.mean()
        pg.screenshot(path=str(ARTIFACTS / "memory-insight-timeline.png"))
        assert pg.console_errors == [], pg.console_errors
    finally:
        pg.close()
