"""Packed window answers in real Chromium (decision 0175): the page asks ``/window?format=bin``, its
decoder (api.js ``unpack``) reads exactly the JSON answer, the timeline holds exactly the JSON
answer's items, and the canvas drawn from the packed answer is pixel for pixel the canvas drawn from
the JSON one; hovering and clicking an event still show it. On the real eager capture of the UI tests,
at its first view (merged buckets) and zoomed in (single events)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO

from .helpers import FIRST_TL, chromium, ready, screen_pixels, serve_for_module, settle, watch_errors
from .test_browser import click_item

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "test-artifacts" / "ui"

# JS: the timeline's last window request, asked again packed and as JSON; the page's decoder against
# JSON.parse, field by field, and the timeline's items against the JSON answer's
COMPARE = """async () => {
  const t = %s, api = await import('/static/js/api.js');
  const asked = performance.getEntriesByType('resource')
    .filter((e) => e.name.includes('/window?') && !e.name.includes('/device/'));
  if (!asked.length) return 'no window asked';
  const last = new URL(asked[asked.length - 1].name);
  if (last.searchParams.get('format') !== 'bin') return 'not packed: ' + last.search;
  // the timeline's last request (settled: the answer it ingested); its rows may have scrolled or
  // relaid out since, so it is asked again as it was, not rebuilt from the current view
  const u = new URL(last);
  u.searchParams.delete('format');
  const js = await (await fetch(u)).json();
  u.searchParams.set('format', 'bin');
  const res = await fetch(u);
  const type = res.headers.get('content-type');
  if (type !== 'application/octet-stream') return 'answered ' + type;
  const bin = api.unpack(await res.arrayBuffer());
  const keys = (o) => Object.keys(o).sort().join(',');
  if (keys(js) !== keys(bin)) return 'keys ' + keys(js) + ' / ' + keys(bin);
  let arrays = 0;
  for (const k of Object.keys(js)) {
    const a = js[k], b = bin[k];
    if (ArrayBuffer.isView(b)) {
      arrays++;
      if (!Array.isArray(a) || a.length !== b.length) return 'length of ' + k;
      for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return `${k}[${i}]: ${a[i]} / ${b[i]}`;
    } else if (JSON.stringify(a) !== JSON.stringify(b)) return k + ': ' + JSON.stringify(a) + ' / ' + JSON.stringify(b);
  }
  // what the timeline drew from (its items, per row) is the JSON answer's items, one for one
  const tup = (r, s, e, c, d, id, leaf) => [r, s, e, c, d, String(id), leaf].join(':');
  const want = js.row.map((r, i) => tup(r, js.s[i], js.e[i], js.c[i], js.d[i], js.id[i], js.leaf[i])).sort();
  const got = [...t.events.values()].flat().map((x) => tup(x.row, x.s, x.e, x.c, x.d, x.id, x.leaf)).sort();
  if (want.join('|') !== got.join('|')) return `timeline items differ: ${got.length} / ${want.length}`;
  const single = js.c.filter((c) => c === 1).length;
  return { items: js.row.length, arrays, single, level: js.level };
}""" % FIRST_TL

# JS: the page's window requests as JSON (the form before decision 0175) or packed again, then a redraw
USE_JSON = """async (json) => {
  const m = await import('/static/js/api.js');
  if (!window.__nxPackedWindow) window.__nxPackedWindow = m.api.window;
  m.api.window = json
    ? (name, mode, layout, rows, t0, t1, px, signal) => fetch(`/api/profiles/${encodeURIComponent(name)}/window?` +
        new URLSearchParams({ mode, layout, rows: m.encodeRows(rows), t0, t1, px }), { signal }).then((r) => r.json())
    : window.__nxPackedWindow;
  %s.refresh();
}""" % FIRST_TL


@pytest.fixture(scope="module")
def served(ui_workspace: Path, tmp_path_factory: pytest.TempPathFactory):
    yield from serve_for_module(ui_workspace, tmp_path_factory)


@pytest.fixture(scope="module")
def browser():
    yield from chromium(ARTIFACTS)


def canvas_pixels(pg):
    box = pg.locator("[data-testid=system-timeline] canvas").bounding_box()
    return screen_pixels(pg, {"x": box["x"], "y": box["y"], "width": box["width"], "height": min(box["height"], 700)})


def test_page_draws_packed_windows_as_it_drew_json(browser, served: str) -> None:
    import numpy as np

    pg = browser.new_page(viewport={"width": 1600, "height": 1000})
    watch_errors(pg)
    try:
        pg.goto(served + "#/p/run-a")
        ready(pg)
        pg.mouse.move(5, 5)  # no tooltip over the canvas
        first = pg.evaluate(COMPARE)
        assert isinstance(first, dict) and first["items"] > 0 and first["arrays"] >= 6, first
        views = [first]
        # zoomed into the busiest stretch: single events (the items hover and click pick)
        s, e = pg.evaluate(f"""() => {{ const t = {FIRST_TL};
            const it = [...t.events.values()].flat().filter((x) => x.c === 1).sort((a, b) => b.d - a.d)[0];
            return [it.s, it.s + Math.max(it.d * 40, 20000)]; }}""")
        pg.evaluate(f"([s, e]) => {FIRST_TL}.zoomTo(s, e)", [s, e])
        settle(pg)
        zoomed = pg.evaluate(COMPARE)
        assert isinstance(zoomed, dict) and zoomed["single"] > 0, zoomed
        views.append(zoomed)
        # the same view drawn from the JSON answer: the same pixels
        packed_px = canvas_pixels(pg)
        pg.evaluate(USE_JSON, True)
        settle(pg)
        json_px = canvas_pixels(pg)
        assert np.array_equal(packed_px, json_px), int((packed_px != json_px).any(axis=2).sum())
        pg.evaluate(USE_JSON, False)
        settle(pg)
        assert np.array_equal(canvas_pixels(pg), packed_px)
        # hover and click still find the events drawn from the packed answer
        pg.evaluate(f"() => {FIRST_TL}.zoomTo(0, {FIRST_TL}.source.duration)")
        settle(pg)
        it = click_item(pg, "run-a", "nrt_load", "rank 0")
        box = pg.locator("[data-testid=system-timeline] canvas").bounding_box()
        pg.mouse.move(box["x"] + it["x"], box["y"] + it["y"] + 1)
        pg.wait_for_selector("#tooltip", state="visible")
        assert "nrt_load" in pg.inner_text("#tooltip")
        pg.wait_for_function("document.querySelector('[data-testid=event-name]')?.textContent === 'nrt_load'")
        pg.screenshot(path=str(ARTIFACTS / "packed-window-details.png"))
        assert pg.console_errors == [], pg.console_errors
    finally:
        pg.close()


def test_page_decoder_refuses_damaged_answers_in_one_line(browser, served: str) -> None:
    """The page's ``unpack`` on damaged packed windows: an Error with one line, or views inside the body."""
    pg = browser.new_page()
    try:
        pg.goto(served)
        out = pg.evaluate("""async () => {
          const api = await import('/static/js/api.js');
          const rows = (await (await fetch('/api/profiles/run-a/tracks?mode=cpu_device')).json()).rows
            .filter((r) => r.kind === 'events').map((r) => r.idx);
          const ov = await (await fetch('/api/profiles/run-a')).json();
          const body = new Uint8Array(await (await fetch(`/api/profiles/run-a/window?mode=cpu_device&format=bin&rows=${
            api.encodeRows(rows)}&t0=0&t1=${ov.duration_ns}&px=800`)).arrayBuffer());
          let x = 175, refused = 0, read = 0;
          const rnd = (n) => { x = (x * 1103515245 + 12345) % 2147483648; return x % n; };
          for (let k = 0; k < 400; k++) {
            let b = body.slice(0, rnd(3) === 0 ? rnd(body.length) : body.length);
            for (let j = 0; j <= rnd(6); j++) {
              if (b.length) b[rnd(Math.min(b.length, rnd(3) ? 400 : b.length))] = rnd(256);
            }
            try {
              const h = api.unpack(b.buffer);
              for (const v of Object.values(h)) {
                if (ArrayBuffer.isView(v) && v.byteOffset + v.byteLength > b.length) return 'past the end at ' + k;
              }
              read++;
            } catch (e) {
              if (!(e instanceof Error) || e.message.includes('\\n')) return 'not one line at ' + k + ': ' + e;
              refused++;
            }
          }
          return { refused, read };
        }""")
        assert isinstance(out, dict) and out["refused"] > 0, out
    finally:
        pg.close()
