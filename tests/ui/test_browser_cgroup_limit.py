"""The Summary page shows ``memory_near_limit`` against a cgroup's limit and opens the timeline at
its range, in real Chromium (decision 0182): the capture of ``tests/programs/memory_fill.py`` run
in a child cgroup limited to 4 GiB (tests/cgroups.py), which holds 92% of it.  Skipped, with the
reason, where no cgroup can be made."""

from __future__ import annotations

import pytest

from tests.cgroups import LIMIT, fill_capture
from tests.conftest import REPO

from .helpers import chromium, follow_insight, serve_capture, summary_insight, watch_errors

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
