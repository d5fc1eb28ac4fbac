"""The System Trace Viewer in real Debian Chromium, driven the way a new user would drive it.

One browser session walks the main views in order (each step builds on the previous page state) and
keeps a screenshot of each under test-artifacts/ui/. Only 127.0.0.1 is used; nothing asserts timing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO, clean_env, free_port

from .helpers import CHROMIUM, CHROMIUM_ARGS, start_server, stop_server

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "test-artifacts" / "ui"

# JS: locate an event item of the first system trace widget whose row matches, in canvas coordinates
FIND_ITEM = """([profile, rowName, groupPart, single]) => {
  const w = window.__nx.state.widgets.find((x) => x.type === 'system-trace' && x.profile === profile);
  const tl = w.timeline;
  for (const e of tl.layout) {
    if (e.type !== 'row' || e.row.name !== rowName) continue;
    if (groupPart && !e.row.group.some((g) => g.includes(groupPart))) continue;
    const items = tl.events.get(e.row.idx) || [];
    const it = single ? items.find((i) => i.c === 1) : items[0];
    if (!it) continue;
    const x0 = Math.max(tl.xOf(it.s), 230), x1 = Math.min(Math.max(tl.xOf(it.e), x0 + 1), tl.w - 10);
    if (26 + e.y - tl.scrollY < 26 || 26 + e.y + e.h - tl.scrollY > tl.h) tl.scrollToRow(e.row.idx);
    const y = 26 + e.y - tl.scrollY + e.h / 2;
    return {x: (x0 + x1) / 2, y, c: it.c, s: it.s, e: it.e, visible: y > 26 && y < tl.h};
  }
  return null;
}"""


@pytest.fixture(scope="module")
def served(ui_workspace: Path, tmp_path_factory: pytest.TempPathFactory):
    env = clean_env(XDG_CACHE_HOME=str(tmp_path_factory.mktemp("xdg-cache")))
    p, url = start_server(ui_workspace, free_port(), env)
    assert url.startswith("http://127.0.0.1:")
    yield url
    stop_server(p)


@pytest.fixture(scope="module")
def page(served: str):
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1500, "height": 1050})
        pg.console_errors = []  # type: ignore[attr-defined]
        pg.on("console", lambda m: pg.console_errors.append(m.text) if m.type == "error" else None)
        pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
        pg.goto(served)
        yield pg
        browser.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def fetches(page, profile: str = "run-a") -> int:
    v = page.get_attribute(f"[data-testid=widget][data-type=system-trace][data-profile={profile}] .timeline", "data-fetches")
    return int(v or 0)


def wait_fetch_after(page, before: int, profile: str = "run-a") -> None:
    page.wait_for_function(
        """([p, n]) => Number(document.querySelector(`[data-testid=widget][data-type=system-trace][data-profile=${p}] .timeline`)?.dataset.fetches || 0) > n""",
        arg=[profile, before], timeout=20000)


def canvas_box(page, profile: str = "run-a") -> dict:
    return page.locator(f"[data-testid=widget][data-type=system-trace][data-profile={profile}] canvas").bounding_box()


def test_profiles_page_lists_the_workspace(page) -> None:
    page.wait_for_selector("[data-testid=profile-row]")
    names = page.locator("[data-testid=profile-row]").all_inner_texts()
    assert any("run-a" in n for n in names) and any("run-b" in n for n in names)
    shot(page, "01-profiles")


def test_open_profile_draws_the_timeline(page) -> None:
    page.click("[data-testid=profile-row][data-name=run-a]")
    page.wait_for_selector("[data-testid=system-timeline][data-ready='1']", timeout=30000)
    assert page.locator("[data-testid=widget][data-type=event-details]").count() == 1
    assert "CPU vs Device" in page.inner_text(".statusbar")
    shot(page, "02-system-trace")


def test_every_grouping_mode(page) -> None:
    labels = {"cpu_device": "CPU vs Device", "neuroncore": "NeuronCore", "thread": "Thread", "process": "Process",
              "instance": "Instance"}
    for mode in ["neuroncore", "thread", "process", "instance", "cpu_device"]:
        page.click("[data-testid=settings]")
        page.wait_for_selector("[data-testid=settings-popover]")
        before = fetches(page)
        page.check(f"[data-testid=mode-{mode}]")
        page.wait_for_selector(f"[data-testid=widget][data-type=system-trace][data-mode={mode}]")
        wait_fetch_after(page, before)
        assert f"grouping: {labels[mode]}" in page.inner_text(".statusbar")
        shot(page, f"03-grouping-{mode}")
        page.keyboard.press("Escape")
        page.mouse.click(5, 5)  # close the popover
    assert page.locator("[data-testid=settings-popover]").count() == 0


def test_range_selection_summary(page) -> None:
    box = canvas_box(page)
    y = box["y"] + 60
    page.keyboard.down("Shift")
    page.mouse.move(box["x"] + 260, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=5)
    page.mouse.move(box["x"] + box["width"] - 5, y, steps=5)
    page.mouse.up()
    page.keyboard.up("Shift")
    page.wait_for_selector("[data-testid=summary-count]")
    count = int(page.inner_text("[data-testid=summary-count]").replace(",", ""))
    assert count > 0
    table = page.inner_text("[data-testid=summary-table]")
    assert "Count" in table and "Total duration" in table and "Mean duration" in table
    assert "nc_exec_running" in table
    shot(page, "04-range-summary")


def test_hover_and_click_event_details(page) -> None:
    box = canvas_box(page)
    it = page.evaluate(FIND_ITEM, ["run-a", "nrt_load", "rank 0", True])
    assert it and it["visible"], it
    page.mouse.move(box["x"] + it["x"], box["y"] + it["y"])
    page.wait_for_selector("#tooltip", state="visible")
    assert "nrt_load" in page.inner_text("#tooltip")
    page.mouse.click(box["x"] + it["x"], box["y"] + it["y"])
    page.wait_for_function("document.querySelector('[data-testid=event-name]')?.textContent === 'nrt_load'")
    details = page.inner_text("[data-testid=event-details]")
    for prop in ("start_ts", "end_ts", "duration_ns", "trace_event_source", "thread_id", "nc_idx", "worker_gid",
                 "model_name", "extra_attributes_json" if False else "flow_id"):
        assert prop in details, prop
    assert "Process" in details and "rank" in details
    shot(page, "05-event-details")


def test_keyboard_and_wheel_zoom_pan(page) -> None:
    view = "() => { const tl = window.__nx.state.widgets.find((x) => x.type === 'system-trace').timeline; return [tl.t0, tl.t1]; }"
    a0, a1 = page.evaluate(view)
    page.focus("[data-testid=widget][data-type=system-trace] .timeline")
    for k in ("w", "w", "ArrowUp"):
        page.keyboard.press(k)
    b0, b1 = page.evaluate(view)
    assert b1 - b0 < (a1 - a0) * 0.7
    page.keyboard.press("d")
    page.keyboard.press("ArrowRight")
    c0, c1 = page.evaluate(view)
    assert c0 > b0 and abs((c1 - c0) - (b1 - b0)) < 1e-3 * (b1 - b0)
    box = canvas_box(page)
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 200)
    page.mouse.wheel(0, 400)
    d0, d1 = page.evaluate(view)
    assert d1 - d0 > c1 - c0
    before = fetches(page)
    page.keyboard.press("0")
    wait_fetch_after(page, before)
    e0, e1 = page.evaluate(view)
    assert e0 == 0


def test_drill_down_from_nc_exec_running(page) -> None:
    box = canvas_box(page)
    it = None
    for _ in range(12):
        # the row is drawn once the window fetched by the previous test's last action has arrived
        page.wait_for_function(FIND_ITEM, arg=["run-a", "nc_exec_running", "rank 0", False], timeout=15000)
        it = page.evaluate(FIND_ITEM, ["run-a", "nc_exec_running", "rank 0", False])
        assert it, "nc_exec_running row of rank 0"
        if it["c"] == 1:
            break
        before = fetches(page)
        page.evaluate("""([s, e]) => window.__nx.state.widgets.find((x) => x.type === 'system-trace').timeline.zoomTo(s, e)""",
                      [it["s"], it["e"]])
        wait_fetch_after(page, before)
    assert it and it["c"] == 1
    # click until the drill-down widget is mounted: under load a click can land while the window is
    # being redrawn, and the row may have been scrolled out of the canvas by the previous test
    for _ in range(4):
        page.locator("[data-testid=widget][data-type=system-trace][data-profile=run-a] canvas").scroll_into_view_if_needed()
        box = canvas_box(page)
        it = page.evaluate(FIND_ITEM, ["run-a", "nc_exec_running", "rank 0", False])
        assert it and it["c"] == 1 and it["visible"], it
        page.mouse.click(box["x"] + it["x"], box["y"] + it["y"])
        try:
            page.wait_for_selector("[data-testid=widget][data-type=device-trace]", timeout=15000)
            break
        except Exception:  # playwright's TimeoutError: the click did not open an event; find the item again
            continue
    page.wait_for_selector("[data-testid=widget][data-type=device-trace] [data-testid=device-timeline][data-ready='1']",
                           timeout=60000)
    page.wait_for_function("document.querySelector('[data-testid=event-name]')?.textContent === 'nc_exec_running'")
    # click a PE op in the device trace: its details list the device columns
    page.locator("[data-testid=device-timeline]").scroll_into_view_if_needed()
    dev = page.locator("[data-testid=device-timeline] canvas").bounding_box()
    pos = page.evaluate("""() => {
      const tl = window.__nx.state.widgets.find((x) => x.type === 'device-trace').timeline;
      const e = tl.layout.find((x) => x.type === 'row' && x.row.label === 'pe');
      const it = tl.events.get(e.row.idx).find((i) => i.c === 1) || tl.events.get(e.row.idx)[0];
      return {x: Math.max(tl.xOf(it.s), 231) + 1, y: 26 + e.y + e.h / 2, c: it.c};
    }""")
    page.mouse.click(dev["x"] + pos["x"], dev["y"] + pos["y"])
    if pos["c"] > 1:  # merged: the click zoomed in; wait for the finer window, then click again
        page.wait_for_function("""() => {
          const tl = window.__nx.state.widgets.find((x) => x.type === 'device-trace').timeline;
          const e = tl.layout.find((x) => x.type === 'row' && x.row.label === 'pe');
          return e && (tl.events.get(e.row.idx) || []).some((i) => i.c === 1);
        }""", timeout=30000)
        pos = page.evaluate("""() => {
          const tl = window.__nx.state.widgets.find((x) => x.type === 'device-trace').timeline;
          const e = tl.layout.find((x) => x.type === 'row' && x.row.label === 'pe');
          const it = tl.events.get(e.row.idx).find((i) => i.c === 1);
          return {x: Math.max(tl.xOf(it.s), 231) + 1, y: 26 + e.y + e.h / 2};
        }""")
        page.mouse.click(dev["x"] + pos["x"], dev["y"] + pos["y"])
    page.wait_for_selector("[data-testid=device-event-name]")
    assert page.inner_text("[data-testid=device-event-name]").startswith("matmul_")
    assert "flops" in page.inner_text("[data-testid=device-event-details]")
    page.locator("[data-testid=widget][data-type=device-trace]").scroll_into_view_if_needed()
    shot(page, "06-device-trace")


def test_flow_arrows_join_the_execution_and_its_host_call(page) -> None:
    """With individual events on screen (this small capture shows them even zoomed out), the timeline
    holds the window's flows from /flows and has rows for both ends of at least one host call ->
    execution flow, so an arrow is drawn between two different rows."""
    got = page.evaluate("""() => {
      const tl = window.__nx.state.widgets.find((x) => x.type === 'system-trace' && x.profile === 'run-a').timeline;
      const names = new Map(tl.rows.map((r) => [r.idx, r.name]));
      const drawn = [];
      for (const f of tl.flowData) {
        const rows = f.ends.map((e) => tl.leafToRow.get(e[1]));
        if (rows.every((r) => tl.rowY.get(r)) && new Set(rows).size > 1) drawn.push(rows.map((r) => names.get(r)));
      }
      return {level: tl.level, show: tl.showFlows, n: tl.flowData.length, ends: tl.flowData.map((f) => f.ends.length),
              drawn};
    }""")
    assert got["level"] == "raw" and got["show"], got
    assert got["n"] >= 1 and min(got["ends"]) >= 2, got
    assert any("nrt_execute" in d and "nc_exec_running" in d for d in got["drawn"]), got
    page.locator("[data-testid=widget][data-type=system-trace][data-profile=run-a]").scroll_into_view_if_needed()
    shot(page, "06b-flow-arrows")

def test_device_profiles_list(page) -> None:
    page.click("[data-testid=widget][data-type=system-trace][data-profile=run-a] [data-testid=device-profiles-list]")
    page.wait_for_selector("[data-testid=device-profiles-table]")
    assert "dp-0" in page.inner_text("[data-testid=device-profiles-table]")
    shot(page, "07-device-profiles-list")
    page.click("[data-testid=device-profiles-submit]")  # already open from the drill-down: refused
    page.wait_for_selector("#toast.error", state="visible")
    assert "already open" in page.inner_text("#toast")
    page.click(".modal [data-act=cancel]")
    page.click("[data-testid=widget][data-type=device-trace] [data-testid=close-widget]")


def test_second_profile_side_by_side_and_duplicate_refused(page) -> None:
    page.click("[data-testid=add-widget]")
    page.wait_for_selector("[data-testid=add-widget-modal]")
    page.click("[data-testid=tab-device]")
    assert "device" in page.inner_text("[data-testid=tile-device-trace]")
    page.click("[data-testid=tab-system]")
    tiles = page.inner_text("[data-testid=add-widget-modal] .tiles")
    assert "System Trace Viewer" in tiles and "system" in tiles and "both" in tiles
    page.select_option("[data-testid=add-widget-profile]", "run-b")
    shot(page, "08-add-widget-modal")
    page.click("[data-testid=tile-system-trace]")
    page.wait_for_selector("[data-testid=widget][data-type=system-trace][data-profile=run-b] [data-testid=system-timeline][data-ready='1']",
                           timeout=30000)
    assert page.locator("[data-testid=widget][data-type=system-trace]").count() == 2
    # profile dropdown of the new widget shows run-b; the device note appears for run-b's executions
    assert page.locator("[data-testid=widget][data-profile=run-b] [data-testid=profile-select]").input_value() == "run-b"
    shot(page, "09-two-profiles")
    # same widget type for the same profile again: refused with a message
    page.click("[data-testid=add-widget]")
    page.select_option("[data-testid=add-widget-profile]", "run-b")
    page.click("[data-testid=tile-system-trace]")
    page.wait_for_selector("#toast.error", state="visible")
    msg = page.inner_text("#toast")
    assert "already open" in msg and "run-b" in msg and "not supported" in msg
    assert page.locator("[data-testid=widget][data-type=system-trace]").count() == 2
    shot(page, "10-duplicate-refused")
    page.click(".modal [data-act=cancel]")
    # switching the first widget's dropdown to run-b would duplicate too: refused, reverted
    sel = "[data-testid=widget][data-type=system-trace][data-profile=run-a] [data-testid=profile-select]"
    page.select_option(sel, "run-b")
    page.wait_for_selector("#toast.error", state="visible")
    assert page.locator(sel).input_value() == "run-a"


def test_run_b_execution_has_no_device_profile(page) -> None:
    box = canvas_box(page, "run-b")
    page.locator("[data-testid=widget][data-type=system-trace][data-profile=run-b]").scroll_into_view_if_needed()
    box = canvas_box(page, "run-b")
    page.click("[data-testid=add-widget]")
    page.select_option("[data-testid=add-widget-profile]", "run-b")
    page.click("[data-testid=tile-event-details]")
    page.wait_for_selector("[data-testid=widget][data-type=event-details][data-profile=run-b]")
    it = None
    for _ in range(12):
        it = page.evaluate(FIND_ITEM, ["run-b", "nc_exec_running", "rank 0", False])
        if it["c"] == 1:
            break
        before = fetches(page, "run-b")
        page.evaluate("""([s, e]) => window.__nx.state.widgets.find((x) => x.type === 'system-trace' && x.profile === 'run-b').timeline.zoomTo(s, e)""",
                      [it["s"], it["e"]])
        wait_fetch_after(page, before, "run-b")
    page.locator("[data-testid=widget][data-type=system-trace][data-profile=run-b]").scroll_into_view_if_needed()
    box = canvas_box(page, "run-b")
    page.mouse.click(box["x"] + it["x"], box["y"] + it["y"])
    page.locator("[data-testid=widget][data-type=event-details][data-profile=run-b]").scroll_into_view_if_needed()
    note = page.locator("[data-testid=widget][data-type=event-details][data-profile=run-b] [data-testid=device-note]")
    note.wait_for()
    assert "No device profile" in note.inner_text()
    shot(page, "11-no-device-profile-note")


def test_no_console_errors(page) -> None:
    assert page.console_errors == []
