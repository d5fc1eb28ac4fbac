"""Compare mode (issue 34, item 4): the Diff widget docked under two System Trace Viewers, in real
Debian Chromium, over two real captures of ``tests/programs/diff_pair.py`` (the candidate's one
change: ``Head.forward`` sleeps 20 ms a step) ingested into one workspace.

The API is checked first (what ``diff --format json`` says, on each profile's axis; refusals as one
line), then what a user does: open the widget, read the changed row, click it, and see both
timelines at that item; reload, and the same widgets come back. Screenshots go to
test-artifacts/ui/diff-*.png at 1600x1000.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO, clean_env, cli, free_port, shared_dir

from .helpers import chromium, settle, start_server, stop_server, watch_errors

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "test-artifacts" / "ui"
PROGRAM = REPO / "tests" / "programs" / "diff_pair.py"
SLEEP_MS = 20.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("starlette")

    def build(d: Path) -> None:
        for name, extra in (("base", []), ("cand", ["--sleep-head-ms", str(SLEEP_MS)])):
            out = d / name
            env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out))
            subprocess.run([sys.executable, str(PROGRAM), "--steps", "12", *extra], env=env, cwd=d, check=True,
                           capture_output=True, timeout=300)
            cli("view", "-d", str(out), "--ingest-only", "--data-path", str(d / "workspace"), "--display-name",
                name, check=True)

    ws = shared_dir(tmp_path_factory, "ui_diff_workspace", build)[0] / "workspace"
    env = clean_env(XDG_CACHE_HOME=str(tmp_path_factory.mktemp("xdg-cache-diff")))
    p, url = start_server(ws, free_port(), env)
    yield url
    stop_server(p)


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _head_row(doc: dict) -> dict:
    rows = [r for r in doc["rows"] if r["kind"] == "graph" and r["key"].startswith("Head_")
            and not r["key"].endswith("_bwd")]
    assert len(rows) == 1, [r["key"] for r in doc["rows"]]
    return rows[0]


def test_the_api_answers_the_diff_on_each_profiles_axis(served):
    status, doc = _get(served + "api/profiles/base/diff?against=cand")
    assert status == 200 and doc["available"], doc
    head = _head_row(doc)
    assert head["verdict"] == "slower" and head["significant"], head
    # the change is the sleep (a sleep never takes less than asked; its accuracy is tests/diff's), and
    # the Head family leads the changes
    assert head["delta_ns"] >= 0.75 * SLEEP_MS * 1e6, head["delta_ns"]
    assert doc["changes"] and doc["changes"][0]["subject"].startswith("graph Head"), doc["changes"]
    for side, name in (("baseline", "base"), ("candidate", "cand")):
        at = head[side]["at"]
        _, ov = _get(served + f"api/profiles/{name}?wait=0")
        # t0/t1 are the absolute span given again on that profile's axis
        assert at["t0"] == at["start_ts"] - int(ov["origin_ns"]) and at["t1"] == at["end_ts"] - int(ov["origin_ns"])
        assert 0 <= at["t0"] < at["t1"] <= ov["duration_ns"], (at, ov["duration_ns"])
    # asked again: the same answer (kept for this pair of profile versions)
    assert _get(served + "api/profiles/base/diff?against=cand")[1] == doc


@pytest.mark.parametrize("query, status, words", [
    ("base/diff?against=base", 400, "not with itself"),
    ("base/diff", 400, "against"),
    ("base/diff?against=nope", 404, "nope"),
    ("nope/diff?against=base", 404, "nope"),
])
def test_refusals_are_one_line(served, query, status, words):
    got, doc = _get(served + "api/profiles/" + query)
    assert got == status and words in doc["error"] and "\n" not in doc["error"], doc


@pytest.fixture(scope="module")
def browser():
    yield from chromium(ARTIFACTS)


TRACE = "window.__nx.state.widgets.filter((x) => x.type === 'system-trace')"


def test_a_row_moves_both_timelines_to_the_item(served, browser):
    _, doc = _get(served + "api/profiles/base/diff?against=cand")
    head = _head_row(doc)
    pg = browser.new_page(viewport={"width": 1600, "height": 1000})
    watch_errors(pg)
    pg.goto(served + "#/p/base?w=system-trace,diff!cand")
    pg.wait_for_selector("[data-testid=diff-row]", timeout=600_000)
    settle(pg)
    # the table lists the changed graph with its verdict; only significant rows (and the step) by default
    row = pg.locator(f"[data-testid=diff-row][data-key='{head['key']}']")
    assert row.count() == 1
    assert "slower" in row.inner_text()
    kinds = pg.eval_on_selector_all("[data-testid=diff-row]", "(rs) => rs.map((r) => r.dataset.kind)")
    assert len(kinds) == len([r for r in doc["rows"] if r["significant"] or r["kind"] == "step"])
    assert pg.locator("[data-testid=diff-count]").inner_text() == str(len(doc["changes"]))
    pg.screenshot(path=str(ARTIFACTS / "diff-01-docked.png"))
    assert pg.evaluate(f"() => {TRACE}.length") == 1
    row.click()
    # the candidate's timeline opens beside the baseline's, the table stays under them
    pg.wait_for_function(f"() => {TRACE}.length === 2 && {TRACE}.every((w) => w.timeline && w.timeline.painted"
                         " && w.el.dataset.diffJump)", timeout=120_000)
    for i in range(2):
        settle(pg, f"{TRACE}[{i}].timeline")
    got = pg.evaluate(f"""() => {TRACE}.map((w) => ({{profile: w.profile, t0: w.timeline.t0, t1: w.timeline.t1,
                          half: w.half, top: w.el.getBoundingClientRect().top}}))""")
    diff_top = pg.evaluate("() => document.querySelector('[data-type=diff]').getBoundingClientRect().top")
    for g in got:
        at = head["baseline" if g["profile"] == "base" else "candidate"]["at"]
        # the view holds the occurrence, zoomed onto it (not the whole run)
        assert g["t0"] <= at["t0"] and at["t1"] <= g["t1"], (g, at)
        assert g["t1"] - g["t0"] <= 3 * (at["t1"] - at["t0"]) + 1, (g, at)
        assert g["half"] and g["top"] < diff_top
    assert {g["profile"] for g in got} == {"base", "cand"}
    pg.screenshot(path=str(ARTIFACTS / "diff-02-both-timelines.png"))
    # the URL keeps the three widgets; a reload brings them back, the diff answered again
    pg.wait_for_function("() => { const h = decodeURIComponent(location.hash); "
                         "return h.includes('diff!cand') && h.includes('system-trace@cand'); }")
    pg.reload()
    pg.wait_for_selector("[data-testid=diff-row]", timeout=600_000)
    assert pg.evaluate(f"() => {TRACE}.map((w) => w.profile).sort().join()") == "base,cand"
    assert not pg.console_errors, pg.console_errors
    pg.close()


def test_the_candidate_can_be_changed_and_a_failure_is_shown(served, browser):
    pg = browser.new_page(viewport={"width": 1600, "height": 1000})
    watch_errors(pg)
    pg.goto(served + "#/p/cand?w=diff")
    # without a second name the candidate is the first other profile
    pg.wait_for_selector("[data-testid=diff-row]", timeout=600_000)
    assert pg.locator("[data-testid=diff-against]").input_value() == "base"
    # seen from the other side, the sleep is a faster Head
    assert "faster" in pg.locator("[data-testid=diff-row][data-key^='Head_']").first.inner_text()
    pg.locator("[data-testid=diff-all]").check()
    assert pg.locator("[data-testid=diff-row]").count() > pg.locator("[data-testid=diff-row].changed").count()
    # a diff that cannot run is one line in the widget, never an error page
    pg.route("**/api/profiles/cand/diff*", lambda r: r.fulfill(
        status=200, content_type="application/json",
        body=json.dumps({"available": False, "reason": "the diff failed: baseline unreadable"})))
    pg.reload()
    pg.wait_for_selector("[data-testid=diff-unavailable]", timeout=60_000)
    assert "baseline unreadable" in pg.locator("[data-testid=diff-unavailable]").inner_text()
    pg.close()
