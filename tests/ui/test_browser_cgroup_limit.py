"""The Summary page shows ``memory_near_limit`` against a cgroup's limit and opens the timeline at
its range, in real Chromium (decision 0182): the capture of ``tests/programs/memory_fill.py`` run
in a child cgroup limited to 4 GiB (tests/cgroups.py), which holds 92% of it.  Skipped, with the
reason, where no cgroup can be made."""

from __future__ import annotations

import os

import pytest

from tests.cgroups import LIMIT, fill_capture
from tests.conftest import REPO, clean_env, cli, free_port

from .helpers import FIRST_TL, chromium, ready, start_server, stop_server, watch_errors

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "test-artifacts" / "ui"
NAME = "cgroup"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    cap, info = fill_capture(tmp_path_factory)
    if "skip" in info:
        pytest.skip(info["skip"])
    base = tmp_path_factory.mktemp("cgroup-ui")
    ws = base / "workspace"
    path = os.environ.get("PYTHONPATH", "")
    cli("view", "-d", str(cap), "--ingest-only", "--data-path", str(ws), "--display-name", NAME,
        "--no-progress", env=clean_env(PYTHONPATH=path), check=True)
    p, url = start_server(ws, free_port(), clean_env(XDG_CACHE_HOME=str(base / "cache"), PYTHONPATH=path))
    yield url
    stop_server(p)


@pytest.fixture(scope="module")
def browser():
    yield from chromium(ARTIFACTS)


def test_summary_page_shows_the_cgroup_limit_finding_and_opens_its_range(browser, served: str) -> None:
    pg = browser.new_page(viewport={"width": 1600, "height": 1000})
    watch_errors(pg)
    try:
        pg.goto(served + f"#/s/{NAME}")
        pg.wait_for_selector("[data-testid=summary-page] [data-testid=insight]", timeout=60000)
        si = pg.evaluate(f"() => fetch('/api/profiles/{NAME}/insights').then((r) => r.json())")
        ins = next((x for x in si["insights"] if x["id"] == "memory_near_limit"), None)
        assert ins is not None, [x["id"] for x in si["insights"]]
        figs = ins["evidence"]["figures"]
        assert figs["memory_limit_bytes"] == LIMIT and figs["memory_limit_source"].startswith("cgroup "), figs
        assert ins["t0"] is not None and ins["t1"] is not None and ins["t1"] > ins["t0"]
        item = pg.locator("[data-testid=summary-page] [data-testid=insight]", has_text=ins["title"])
        assert item.count() == 1
        text = item.inner_text()
        assert "of its cgroup's memory limit (4.00 GiB)" in text and "memory (no time estimate)" in text, text
        assert "container (cgroup)" in text, text
        assert item.is_visible()
        pg.screenshot(path=str(ARTIFACTS / "cgroup-limit-summary.png"))
        # following it opens the System Trace Viewer at its range (the fullest step)
        item.locator("[data-testid=insight-open]").click()
        ready(pg)
        t0, t1 = pg.evaluate(f"() => [{FIRST_TL}.t0, {FIRST_TL}.t1]")
        assert t0 <= ins["t0"] and ins["t1"] <= t1 and (t1 - t0) < 1.2 * (ins["t1"] - ins["t0"]), (t0, t1, ins)
        pg.screenshot(path=str(ARTIFACTS / "cgroup-limit-timeline.png"))
        assert pg.console_errors == [], pg.console_errors
    finally:
        pg.close()
