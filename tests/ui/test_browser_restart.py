"""The viewer's URL after a restart, in real Debian Chromium: a view built by hand on one server (grouping,
search, selected event, zoom, area; two profiles side by side, synchronised), then the server stopped
and started again on the same workspace and index cache, and the same URL opened on it.

Why: the dashboard keeps its state in the URL's fragment so that a view survives a reload, a restart
and a link sent to someone. A URL holding an area threw ``w.showArea is not a function`` (the area was
restored before the widget's area summary existed), which also lost the selected event; argument search
answered HTTP 500 on a warm cache (tests/ui/test_restart.py). Every wait is on page state, never on time.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl

import pytest

from tests.conftest import clean_env, free_port

from .helpers import chromium, start_server, stop_server, watch_errors
from .test_browser import TL, canvas_box, click_item, fetches, wait_fetch_after

pytestmark = pytest.mark.slow

P = "run-a"
ST = "[data-testid=widget][data-type=system-trace][data-profile={p}]"
READY = ST + " [data-testid=system-timeline][data-ready='1']"

# the restored state of the home profile's System Trace Viewer, as the page holds it
STATE = """() => {
  const w = window.__nx.state.widgets.find((x) => x.type === 'system-trace' && x.profile === 'run-a');
  const t = w.timeline;
  return {mode: w.mode, layout: w.layout, t0: t.t0, t1: t.t1,
          sel: t.sel && {a: t.sel.a, b: t.sel.b, rows: t.sel.rows, drawnOverRows: t.sel.y0 !== undefined},
          selected: t.selected && {id: String(t.selected.id), leaf: t.selected.leaf, s: t.selected.s},
          query: document.querySelector('[data-testid=search]').value,
          widgets: window.__nx.state.widgets.map((x) => [x.type, x.profile, !!x.half])};
}"""

# the URL holds the finished area (a save due earlier can write the area of a drag still going on)
SAVED = """() => {
  const t = window.__nx.state.widgets.find((x) => x.type === 'system-trace' && x.profile === 'run-a').timeline;
  const q = new URLSearchParams(location.hash.split('?')[1]);
  return t.sel && t.sel.rows && q.get('a0') === String(Math.round(t.sel.a))
    && q.get('a1') === String(Math.round(t.sel.b)) && q.get('rows') === t.sel.rows.join('.') && q.get('ev')
    && q.get('mode') === 'process';
}"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    yield from chromium(tmp_path_factory.mktemp("shots"))


def _open(browser, url: str):
    pg = browser.new_page(viewport={"width": 1600, "height": 1000})
    watch_errors(pg)
    pg.goto(url)
    pg.wait_for_selector(READY.format(p=P), timeout=60000)
    return pg


def _wait(pg, js: str, arg: object = None, timeout: float = 30000) -> None:
    """Wait for ``js`` to hold; when it does not, fail naming what the page reported (an uncaught
    exception is why a restored state never shows)."""
    try:
        pg.wait_for_function(js, arg=arg, timeout=timeout)
    except Exception as e:  # noqa: BLE001 - playwright's TimeoutError, with the page's errors
        raise AssertionError(f"{js!r} never held; page errors: {pg.console_errors}") from e


def _fragment(pg) -> dict[str, str]:
    return dict(parse_qsl(pg.evaluate("location.hash").split("?", 1)[1]))


def _restarted(ws: Path, env: dict[str, str], proc) -> tuple[object, str]:
    """Stop the first server, start another on the same workspace and cache (a new port, as after a
    restart: only the fragment carries over)."""
    stop_server(proc)
    return start_server(ws, free_port(), env)


def _drag_area(pg, row: int) -> None:
    """Shift+drag over track ``row`` and the one below it, across the whole visible time range."""
    tl = TL.format(p=P)
    y = pg.evaluate(f"(r) => {{ const t = {tl}; const e = t.rowY.get(r); return [t.top + e.y - t.scrollY, e.h]; }}",
                    row)
    box = canvas_box(pg, P)
    y0, y1 = box["y"] + y[0] + 3, box["y"] + y[0] + y[1] + 12
    pg.keyboard.down("Shift")
    pg.mouse.move(box["x"] + 240, y0)
    pg.mouse.down()
    pg.mouse.move(box["x"] + box["width"] * 0.6, y1, steps=5)
    pg.mouse.move(box["x"] + box["width"] - 5, y1, steps=5)
    pg.mouse.up()
    pg.keyboard.up("Shift")


def test_a_url_with_grouping_search_event_zoom_and_area_is_restored_after_a_restart(browser, ui_workspace: Path,
                                                                                    tmp_path: Path) -> None:
    env = clean_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc, url = start_server(ui_workspace, free_port(), env)
    try:
        pg = _open(browser, url + f"#/p/{P}")
        # grouping: by process
        pg.click(ST.format(p=P) + " [data-testid=settings]")
        pg.check(ST.format(p=P) + " [data-testid=mode-process]")
        pg.wait_for_selector(ST.format(p=P) + "[data-mode=process]")
        pg.mouse.click(5, 5)
        # search by argument (a model name): Enter jumps to the first match
        pg.fill(ST.format(p=P) + " [data-testid=search]", "sequential")
        pg.press(ST.format(p=P) + " [data-testid=search]", "Enter")
        pg.wait_for_function("/^1 of \\d+$/.test(document.querySelector('[data-testid=search-k]').textContent)")
        n = pg.inner_text("[data-testid=search-k]").split(" of ")[1]
        # an event clicked on the timeline (zoomed in to reach it), then an area over its track
        it = click_item(pg, P, "nrt_execute", "rank 0")
        pg.wait_for_function("document.querySelector('[data-testid=event-name]')?.textContent === 'nrt_execute'")
        _drag_area(pg, it["row"])
        pg.wait_for_selector("[data-testid=summary-count]")
        area = pg.inner_text("[data-testid=area-head]")
        count = pg.inner_text("[data-testid=summary-count]")
        pg.wait_for_function(SAVED)
        want = pg.evaluate(STATE)
        frag = pg.evaluate("location.hash")
        assert want["sel"]["rows"] and int(count.replace(",", "")) > 0, (want, count)
        assert pg.console_errors == []
        pg.close()

        proc, url = _restarted(ui_workspace, env, proc)
        pg = _open(browser, url + frag)
        _wait(pg, "document.querySelector('[data-testid=event-name]')?.textContent === 'nrt_execute'")
        _wait(pg, "document.querySelector('[data-testid=summary-count]') !== null")
        _wait(pg, "(n) => document.querySelector('[data-testid=search-k]').textContent === `– of ${n}`", arg=n)
        got = pg.evaluate(STATE)
        same = ("mode", "layout", "selected", "query", "widgets")
        assert {k: got[k] for k in same} == {k: want[k] for k in same}
        saved = dict(parse_qsl(frag.split("?", 1)[1]))
        assert abs(got["t0"] - int(saved["t0"])) <= 1 and abs(got["t1"] - int(saved["t1"])) <= 1, (got, saved)
        assert (got["sel"]["a"], got["sel"]["b"]) == (want["sel"]["a"], want["sel"]["b"]), (got, want, frag)
        assert got["sel"]["rows"] == want["sel"]["rows"] and got["sel"]["drawnOverRows"]
        # the selected event's details are on show; the area's summary is one tab away, the same as built
        assert pg.is_visible("[data-testid=event-details] [data-testid=event-name]")
        assert pg.evaluate(f"() => String({TL.format(p=P)}.selected.id)") == it["id"]
        pg.click(ST.format(p=P) + " [data-testid=tab-range]")
        assert pg.is_visible("[data-testid=summary-count]")
        assert pg.inner_text("[data-testid=summary-count]") == count
        assert pg.inner_text("[data-testid=area-head]") == area
        # nothing was dropped from the URL once restored, and nothing went wrong on the page
        pg.wait_for_function("(f) => location.hash === f", arg=frag)
        assert pg.console_errors == []
        pg.close()
    finally:
        stop_server(proc)


def test_two_profiles_synchronised_stay_together_after_a_restart(browser, ui_workspace: Path, tmp_path: Path) -> None:
    """Side by side with "synchronise the time axis": the second profile's viewer follows the first's
    restored view (it showed its whole profile, out of step, before)."""
    env = clean_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc, url = start_server(ui_workspace, free_port(), env)
    try:
        pg = _open(browser, url + f"#/p/{P}")
        pg.click("[data-testid=add-widget]")
        pg.select_option("[data-testid=add-widget-profile]", "run-b")
        pg.click("[data-testid=tile-system-trace]")
        pg.wait_for_selector(READY.format(p="run-b"), timeout=30000)
        pg.click(ST.format(p=P) + " [data-testid=settings]")
        pg.check(ST.format(p=P) + " [data-testid=sync-time]")
        pg.mouse.click(5, 5)
        before = fetches(pg, P)
        pg.evaluate(f"() => {TL.format(p=P)}.setView(2000000, 7000000)")
        wait_fetch_after(pg, before, P)
        pg.wait_for_function(f"() => {{ const t = {TL.format(p='run-b')}; "
                             "return t.t0 === 2000000 && t.t1 === 7000000; }")
        pg.wait_for_function("() => decodeURIComponent(location.hash).includes('system-trace@run-b~h') "
                             "&& location.hash.includes('sync=1') && location.hash.includes('t0=2000000')")
        frag = pg.evaluate("location.hash")
        pg.close()

        proc, url = _restarted(ui_workspace, env, proc)
        pg = _open(browser, url + frag)
        pg.wait_for_selector(READY.format(p="run-b"), timeout=30000)
        _wait(pg, f"() => {{ const t = {TL.format(p='run-b')}; return t.t0 === 2000000 && t.t1 === 7000000; }}",
              timeout=10000)
        assert pg.evaluate(STATE)["widgets"] == [["system-trace", P, True], ["system-trace", "run-b", True]]
        assert _fragment(pg)["sync"] == "1"
        assert pg.console_errors == []
        pg.close()
    finally:
        stop_server(proc)


def test_a_url_the_profile_no_longer_matches_paints_and_says_what_it_left_out(browser, ui_workspace: Path,
                                                                             tmp_path: Path) -> None:
    """A link made before the profile was ingested again (its tracks and events numbered anew), or by
    another version: an unknown grouping and layout, an area over tracks and an event on a track the
    profile does not have. The timeline paints in the default grouping, nothing is asked that must
    fail, one note names what was left out, and the URL drops it (an unknown grouping left the widget
    blank, and an area over missing tracks threw "row 998 out of range" with its summary stuck)."""
    env = clean_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc, url = start_server(ui_workspace, free_port(), env)
    try:
        pg = browser.new_page(viewport={"width": 1600, "height": 1000})
        watch_errors(pg)
        pg.goto(url + f"#/p/{P}?w=system-trace&mode=by_gpu&layout=flame&t0=1000&t1=9000000&a0=2000&a1=8000000"
                      "&rows=998.999&ev=999:123:5000")
        try:
            pg.wait_for_selector(READY.format(p=P), timeout=30000)
        except Exception as e:  # noqa: BLE001 - playwright's TimeoutError
            raise AssertionError(f"the timeline never painted; page errors: {pg.console_errors}") from e
        default = pg.evaluate("async () => (await (await fetch('/api/profiles/run-a')).json()).default_mode")
        _wait(pg, "() => document.querySelector('#toast').style.display === 'block'")
        note = pg.inner_text("#toast")
        for what in ('grouping "by_gpu"', 'layout "flame"', "area", "selected event"):
            assert what in note, note
        _wait(pg, "(m) => location.hash.includes(`mode=${m}`) && !location.hash.includes('a0=') "
              "&& !location.hash.includes('ev=')", arg=default)
        got = pg.evaluate(STATE)
        assert (got["mode"], got["layout"], got["sel"], got["selected"]) == (default, "tracks", None, None)
        assert (got["t0"], got["t1"]) == (1000, 9000000)  # what still applies is kept
        assert pg.console_errors == []
        pg.close()
    finally:
        stop_server(proc)


def test_other_profiles_and_device_traces_come_back_after_a_restart(browser, ui_workspace: Path,
                                                                    tmp_path: Path) -> None:
    """The widgets of another profile whose name holds the URL's separators (``@``, ``~``, ``,``: any
    one path component is a valid --display-name) and a Device Trace Viewer added from Add Widget come
    back on a restarted server; a profile gone from the workspace is named, not replaced by another's
    widget. (Before: the odd name was cut at its ``@`` and the widget refused as a duplicate of the
    page's own; a Device Trace Viewer was never restored.)"""
    import shutil

    ws = tmp_path / "ws"
    odd = "b@v2~1,x"
    shutil.copytree(ui_workspace / P, ws / P)
    shutil.copytree(ui_workspace / "run-b", ws / odd)
    shutil.copytree(ui_workspace / "run-b", ws / "gone-later")
    env = clean_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc, url = start_server(ws, free_port(), env)
    try:
        pg = _open(browser, url + f"#/p/{P}")
        for prof in (odd, "gone-later"):
            pg.click("[data-testid=add-widget]")
            pg.select_option("[data-testid=add-widget-profile]", prof)
            pg.click("[data-testid=tile-system-trace]")
            pg.wait_for_selector(f'[data-testid=widget][data-type=system-trace][data-profile="{prof}"] '
                                 "[data-testid=system-timeline][data-ready='1']", timeout=30000)
        pg.click("[data-testid=add-widget]")
        pg.click("[data-testid=tab-device]")
        pg.click("[data-testid=tile-device-trace]")
        pg.wait_for_selector("[data-testid=widget][data-type=device-trace] [data-testid=device-timeline]")
        dp = pg.get_attribute("[data-testid=widget][data-type=device-trace]", "data-device-profile")
        assert dp
        want = [["system-trace", P, True], ["system-trace", odd, True], ["system-trace", "gone-later", False],
                ["device-trace", P, False]]
        assert pg.evaluate(STATE)["widgets"] == want
        _wait(pg, "() => new URLSearchParams(location.hash.split('?')[1]).get('w').includes('device-trace!')")
        frag = pg.evaluate("location.hash")
        assert pg.console_errors == []
        pg.close()

        shutil.rmtree(ws / "gone-later")
        proc, url = _restarted(ws, env, proc)
        pg = _open(browser, url + frag)
        _wait(pg, "(n) => window.__nx.state.widgets.length === n", arg=len(want) - 1)
        pg.wait_for_selector(f'[data-testid=widget][data-type=system-trace][data-profile="{odd}"] '
                             "[data-testid=system-timeline][data-ready='1']", timeout=30000)
        pg.wait_for_selector("[data-testid=widget][data-type=device-trace] [data-testid=device-timeline]")
        assert pg.evaluate(STATE)["widgets"] == [w for w in want if w[1] != "gone-later"]
        assert pg.get_attribute("[data-testid=widget][data-type=device-trace]", "data-device-profile") == dp
        _wait(pg, "() => document.querySelector('#toast').style.display === 'block'")
        assert '"gone-later"' in pg.inner_text("#toast") and "no longer in the workspace" in pg.inner_text("#toast")
        assert pg.console_errors == []
        pg.close()
    finally:
        stop_server(proc)
