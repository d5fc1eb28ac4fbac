"""The System Trace Viewer in real Debian Chromium, driven the way a new user would drive it.

One browser session walks the main views in order (each step builds on the previous page state) and
keeps a screenshot of each under test-artifacts/ui/. The steps are one test: pytest-xdist's work
stealing may hand a module's tests to different workers, and a step run on a fresh page without the
ones before it fails for no fault of the viewer. Only 127.0.0.1 is used; nothing asserts timing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO

from .helpers import chromium, serve_for_module, watch_errors

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "test-artifacts" / "ui"

# JS: locate an event item of the first system trace widget by its name (any layout: one row per name, or
# one track per thread/core with lanes), in canvas coordinates; "visible" when below the ruler and the
# sticky group headers and above the canvas's bottom. The timeline fetches only the tracks on screen, so
# when no drawn track holds the name, the answer is {off: row} for the first matching track off screen
# (the one to scroll to, as a user would), or null while nothing matches yet.
FIND_ITEM = """([profile, name, groupPart, single]) => {
  const w = window.__nx.state.widgets.find((x) => x.type === 'system-trace' && x.profile === profile);
  const tl = w.timeline;
  const fetched = new Set(tl.visibleRows().ev);
  let off = null, any = false;
  for (const e of tl.layout) {
    if (e.type !== 'row' || e.row.kind !== 'events') continue;
    if (groupPart && !e.row.group.some((g) => g.includes(groupPart))) continue;
    if (!fetched.has(e.row.idx)) { if (off === null) off = e.row.idx; continue; }
    const items = (tl.events.get(e.row.idx) || []).filter((i) => (i.name || e.row.name) === name);
    any = any || items.length > 0;
    const it = single ? items.find((i) => i.c === 1) : items[0];
    if (!it) continue;
    const x0 = Math.max(tl.xOf(it.s), 230), x1 = Math.min(Math.max(tl.xOf(it.e), x0 + 1), tl.w - 10);
    const y = 26 + e.y - tl.scrollY + it.lane * 18 + 9;
    return {x: (x0 + x1) / 2, y, c: it.c, s: it.s, e: it.e, id: String(it.id), leaf: it.leaf, row: e.row.idx,
            visible: y > 26 + (e.depth || 0) * 18 + 4 && y < tl.h - 4,
            inside: x1 - x0 >= 4};  // at least 4 px of it inside the canvas: its centre is on the event
  }
  return !any && off !== null ? {off} : null;
}"""

TL = "window.__nx.state.widgets.find((x) => x.type === 'system-trace' && x.profile === '{p}').timeline"
TIMELINE = "[data-testid=widget][data-type=system-trace][data-profile={p}] [data-testid=system-timeline]"


def click_item(page, profile: str, name: str, group: str | None, single: bool = True, tries: int = 12) -> dict:
    """Click an event on the timeline the way a user does, robustly: scroll to its track when that is off
    the canvas (tracks off screen are not fetched; zooming in can push a track down there, as the lanes
    of the tracks above grow), zoom into merged buckets, scroll its track into view, click, and retry
    until the timeline has selected it (waits on state, never on time)."""
    tl = TL.format(p=profile)
    seen = []
    for _ in range(tries):
        page.wait_for_function(FIND_ITEM, arg=[profile, name, group, False], timeout=20000)
        it = page.evaluate(FIND_ITEM, [profile, name, group, single])
        if it is not None and "off" in it:  # its track is off the canvas (not fetched): scroll to it
            before = fetches(page, profile)
            page.evaluate(f"(r) => {tl}.scrollToRow(r)", it["off"])
            wait_fetch_after(page, before, profile)
            continue
        if it is None or (single and it["c"] != 1):
            it = page.evaluate(FIND_ITEM, [profile, name, group, False])
            before = fetches(page, profile)
            page.evaluate(f"([s, e]) => {tl}.zoomTo(s, e)", [it["s"], it["e"]])
            wait_fetch_after(page, before, profile)
            continue
        if not it["inside"]:  # (partly) off the canvas's sides: bring the whole event into view
            before = fetches(page, profile)
            page.evaluate(f"([s, e]) => {tl}.zoomTo(s, e, 0.5)", [it["s"], it["e"]])
            wait_fetch_after(page, before, profile)
            continue
        if not it["visible"]:
            before = fetches(page, profile)
            page.evaluate(f"(r) => {{ const t = {tl}; t.scrollY = Math.max(0, t.rowY.get(r).y - 80); "
                          "t.clampScroll(); t.refresh(); }", it["row"])
            wait_fetch_after(page, before, profile)
            continue
        page.locator(TIMELINE.format(p=profile)).scroll_into_view_if_needed()
        box = canvas_box(page, profile)
        page.mouse.click(box["x"] + it["x"], box["y"] + it["y"])
        try:
            page.wait_for_function(f"(id) => String({tl}.selected?.id) === id", arg=it["id"], timeout=10000)
            return it
        except Exception:  # noqa: BLE001 - the window changed under the click: look again
            seen.append((it, box, page.evaluate(f"""([x, y]) => {{ const t = {tl}; const h = t.itemAt(x, y);
                return {{sel: t.selected, hit: h && h.item, w: t.w, scrollY: t.scrollY, top: t.top,
                         winY: window.scrollY}}; }}""", [it["x"], it["y"]])))
            continue
    raise AssertionError(f"could not click {name} in {profile}: {seen[-2:]}")


@pytest.fixture(scope="module")
def served(ui_workspace: Path, tmp_path_factory: pytest.TempPathFactory):
    yield from serve_for_module(ui_workspace, tmp_path_factory)


@pytest.fixture(scope="module")
def page(served: str):
    for browser in chromium(ARTIFACTS):
        pg = browser.new_page(viewport={"width": 1500, "height": 1050})
        watch_errors(pg)
        pg.goto(served)
        yield pg


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def fetches(page, profile: str = "run-a") -> int:
    v = page.get_attribute(TIMELINE.format(p=profile), "data-fetches")
    return int(v or 0)


def wait_fetch_after(page, before: int, profile: str = "run-a") -> None:
    page.wait_for_function(
        "([p, n]) => Number(document.querySelector(`" + TIMELINE.format(p="${p}") + "`)?.dataset.fetches || 0) > n",
        arg=[profile, before], timeout=20000)


def canvas_box(page, profile: str = "run-a") -> dict:
    return page.locator(TIMELINE.format(p=profile) + " canvas").bounding_box()


def step_profiles_page_lists_the_workspace(page) -> None:
    page.wait_for_selector("[data-testid=profile-row]")
    names = page.locator("[data-testid=profile-row]").all_inner_texts()
    assert any("run-a" in n for n in names) and any("run-b" in n for n in names)
    shot(page, "01-profiles")


def step_open_profile_draws_the_timeline(page) -> None:
    # a profile opens on its Summary page; the System Trace Viewer is one click from it
    page.click("[data-testid=profile-row][data-name=run-a]")
    page.wait_for_selector("[data-testid=summary-page]", timeout=30000)
    page.click("[data-testid=open-timeline]")
    page.wait_for_selector("[data-testid=system-timeline][data-ready='1']", timeout=30000)
    # details, area summary and flows are docked under the timeline (no separate widget by default)
    assert page.locator("[data-testid=dock] [data-testid=event-details]").count() == 1
    assert page.locator("[data-testid=widget][data-type=event-details]").count() == 0
    assert "CPU vs Device" in page.inner_text(".statusbar")
    shot(page, "02-system-trace")


def step_every_grouping_mode(page) -> None:
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


def step_range_selection_summary(page) -> None:
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


def step_hover_and_click_event_details(page) -> None:
    it = click_item(page, "run-a", "nrt_load", "rank 0")
    box = canvas_box(page)
    page.mouse.move(box["x"] + it["x"], box["y"] + it["y"] + 1)
    page.wait_for_selector("#tooltip", state="visible")
    assert "nrt_load" in page.inner_text("#tooltip")
    page.wait_for_function("document.querySelector('[data-testid=event-name]')?.textContent === 'nrt_load'")
    details = page.inner_text("[data-testid=event-details]")
    for prop in ("start_ts", "end_ts", "duration_ns", "trace_event_source", "thread_id", "nc_idx", "worker_gid",
                 "model_name", "flow_id"):
        assert prop in details, prop
    assert "Process" in details and "rank" in details
    shot(page, "05-event-details")


def step_keyboard_and_wheel_zoom_pan(page) -> None:
    view = ("() => { const tl = window.__nx.state.widgets.find((x) => x.type === 'system-trace').timeline; "
            "return [tl.t0, tl.t1]; }")
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
    page.keyboard.down("Control")  # Ctrl+wheel zooms (a plain wheel scrolls the tracks)
    page.mouse.wheel(0, 400)
    page.keyboard.up("Control")
    page.wait_for_function(f"(w) => {{ const t = {TL.format(p='run-a')}; return t.t1 - t.t0 > w; }}", arg=c1 - c0)
    d0, d1 = page.evaluate(view)
    assert d1 - d0 > c1 - c0
    before = fetches(page)
    page.keyboard.press("0")
    wait_fetch_after(page, before)
    e0, e1 = page.evaluate(view)
    assert e0 == 0


def show_profiled_execution(page, ui_workspace: Path, device_ref: dict) -> None:
    """Zoom run-a's timeline onto the one execution with a device profile (rank 0's first): at a wider
    zoom, the first unmerged nc_exec_running found may be any later execution, which has none."""
    import duckdb

    s, e = duckdb.connect().execute(
        f"SELECT start_ts, end_ts FROM read_parquet('{ui_workspace / 'run-a'}/SystemProfileEvents/**/*.parquet') "
        "WHERE name = 'nc_exec_running' AND exec_id = ? AND process_id = ? ORDER BY start_ts LIMIT 1",
        [device_ref["exec_id"], device_ref["process_id"]]).fetchall()[0]
    origin = int(page.evaluate("() => window.__nx.state.widgets.find((x) => x.type === 'system-trace' "
                               "&& x.profile === 'run-a').overview.origin_ns"))
    span = max(e - s, 1000)
    before = fetches(page)
    page.evaluate(f"([a, b]) => {TL.format(p='run-a')}.setView(a, b)", [s - origin - span, e - origin + span])
    wait_fetch_after(page, before)


def step_drill_down_from_nc_exec_running(page, ui_workspace: Path, device_ref: dict) -> None:
    show_profiled_execution(page, ui_workspace, device_ref)
    click_item(page, "run-a", "nc_exec_running", "rank 0")
    page.wait_for_selector("[data-testid=widget][data-type=device-trace] [data-testid=device-timeline][data-ready='1']",
                           timeout=20000)
    page.wait_for_function("document.querySelector('[data-testid=event-name]')?.textContent === 'nc_exec_running'")
    # the drill-down opens in view (the docked panel under the timeline), without any scrolling by the user
    vp = page.viewport_size
    dbox = page.locator("[data-testid=device-timeline]").bounding_box()
    assert dbox["y"] >= 0 and dbox["y"] + 60 <= vp["height"], (dbox, vp)
    # ... on the system timeline's time axis and range (issue 35: the panel follows the timeline), the
    # execution, which the system timeline shades, in view
    al = page.evaluate("""() => {
      const d = window.__nx.state.widgets.find((x) => x.type === 'device-trace').timeline;
      const s = window.__nx.state.widgets.find((x) => x.type === 'system-trace' && x.profile === 'run-a').timeline;
      return {d0: d.t0, d1: d.t1, a: s.highlight.a, b: s.highlight.b, sel: s.selected.s, s0: s.t0, s1: s.t1};
    }""")
    assert al["a"] == al["sel"] and al["d0"] <= al["a"] < al["b"] <= al["d1"], al
    assert abs(al["d0"] - al["s0"]) < 1 and abs(al["d1"] - al["s1"]) < 1, al
    shot(page, "06a-drill-down-in-view")
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


def step_flow_arrows_join_the_execution_and_its_host_call(page) -> None:
    """The execution selected by the drill-down shows its own flow only: the arrow from its host call
    (nrt_execute) to it (nc_exec_running), between two different tracks."""
    got = page.evaluate("""() => {
      const tl = window.__nx.state.widgets.find((x) => x.type === 'system-trace' && x.profile === 'run-a').timeline;
      const drawn = [];
      for (const f of tl.drawnFlows()) {
        const rows = f.ends.map((e) => tl.leafToRow.get(e[1]));
        drawn.push({names: f.ends.map((e) => tl.source.nameOf(e[1])), ids: f.ends.map((e) => String(e[0])),
                    rows: new Set(rows).size, shown: rows.every((r) => tl.rowMidY(r) !== null)});
      }
      return {mode: tl.flowMode, all: tl.flowData.length, sel: String(tl.selected.id), drawn};
    }""")
    assert got["mode"] == "selected" and got["all"] == 0, got
    assert got["drawn"] and all(got["sel"] in d["ids"] for d in got["drawn"]), got
    assert any("nrt_execute" in d["names"] and "nc_exec_running" in d["names"] and d["rows"] > 1 and d["shown"]
               for d in got["drawn"]), got
    page.locator("[data-testid=widget][data-type=system-trace][data-profile=run-a]").scroll_into_view_if_needed()
    shot(page, "06b-flow-arrows")


def step_device_profiles_list(page) -> None:
    page.click("[data-testid=widget][data-type=system-trace][data-profile=run-a] [data-testid=device-profiles-list]")
    page.wait_for_selector("[data-testid=device-profiles-table]")
    assert "dp-0" in page.inner_text("[data-testid=device-profiles-table]")
    shot(page, "07-device-profiles-list")
    page.click("[data-testid=device-profiles-submit]")  # already open from the drill-down: refused
    page.wait_for_selector("#toast.error", state="visible")
    assert "already open" in page.inner_text("#toast")
    page.click(".modal [data-act=cancel]")
    page.click("[data-testid=widget][data-type=device-trace] [data-testid=close-widget]")


def step_second_profile_side_by_side_and_duplicate_refused(page) -> None:
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
    page.wait_for_selector(TIMELINE.format(p="run-b") + "[data-ready='1']", timeout=30000)
    assert page.locator("[data-testid=widget][data-type=system-trace]").count() == 2
    # profile dropdown of the new widget shows run-b; the device note appears for run-b's executions
    select = page.locator("[data-testid=widget][data-profile=run-b] [data-testid=profile-select]")
    assert select.input_value() == "run-b"
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


def step_run_b_execution_has_no_device_profile(page) -> None:
    page.click("[data-testid=add-widget]")
    page.select_option("[data-testid=add-widget-profile]", "run-b")
    page.click("[data-testid=tile-event-details]")
    page.wait_for_selector("[data-testid=widget][data-type=event-details][data-profile=run-b]")
    click_item(page, "run-b", "nc_exec_running", "rank 0")
    page.locator("[data-testid=widget][data-type=event-details][data-profile=run-b]").scroll_into_view_if_needed()
    note = page.locator("[data-testid=widget][data-type=event-details][data-profile=run-b] [data-testid=device-note]")
    note.wait_for()
    assert "No device profile" in note.inner_text()
    shot(page, "11-no-device-profile-note")


def step_no_console_errors(page) -> None:
    assert page.console_errors == []


STEPS = [step_profiles_page_lists_the_workspace, step_open_profile_draws_the_timeline, step_every_grouping_mode,
         step_range_selection_summary, step_hover_and_click_event_details, step_keyboard_and_wheel_zoom_pan,
         step_drill_down_from_nc_exec_running, step_flow_arrows_join_the_execution_and_its_host_call,
         step_device_profiles_list, step_second_profile_side_by_side_and_duplicate_refused,
         step_run_b_execution_has_no_device_profile, step_no_console_errors]


def test_a_new_user_walks_the_viewer(page, ui_workspace: Path, device_ref: dict) -> None:
    """The steps above, in order, on one page; a failure names its step."""
    for step in STEPS:
        extra = (ui_workspace, device_ref) if step is step_drill_down_from_nc_exec_running else ()
        try:
            step(page, *extra)
        except BaseException as e:
            e.add_note(f"in step {step.__name__}")
            raise
