"""A cold open answers windows and busy shares from the coarse level while the event index builds in
the background (held here by the workspace's test gate, so nothing depends on timing), then switches
to the index: the final answers equal those of a profile whose index was built before any request."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import duckdb
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.ui.app import create_app  # noqa: E402

P = "run-a"


def _until(client: TestClient, pred, what: str) -> dict:
    """Poll /status until ``pred`` holds (the background threads run on their own; a bound of 2 minutes
    only stops a broken build from hanging the suite)."""
    end = time.monotonic() + 120
    while True:
        st = client.get(f"/api/profiles/{P}/status").json()
        if pred(st):
            return st
        assert time.monotonic() < end, f"{what}: {st}"
        time.sleep(0.05)


def _queries(client: TestClient) -> tuple[dict, dict, dict]:
    ov = client.get(f"/api/profiles/{P}", params={"wait": 0}).json()
    rows = client.get(f"/api/profiles/{P}/tracks", params={"mode": "cpu_device", "layout": "tracks"}).json()["rows"]
    ev = [r["idx"] for r in rows if r["kind"] == "events"]
    args = {"mode": "cpu_device", "layout": "tracks", "t0": -1, "t1": ov["duration_ns"] + 1, "px": 1200}
    w = client.get(f"/api/profiles/{P}/window", params={**args, "rows": ",".join(map(str, ev))}).json()
    b = client.get(f"/api/profiles/{P}/busy", params={**args, "groups": ";".join(map(str, ev))}).json()
    return ov, w, b


def test_cold_open_answers_coarse_before_the_index_then_the_indexed_answer(ui_workspace: Path, tmp_path: Path) -> None:
    ref = TestClient(create_app(ui_workspace, cache_dir=tmp_path / "ref"))
    ref.get(f"/api/profiles/{P}/activity")  # waits for the index: built before any window
    want_ov, want_w, want_b = _queries(ref)
    assert want_ov["index_ready"] and want_w["level"] == "raw" and not want_w["coarse"]

    app = create_app(ui_workspace, cache_dir=tmp_path / "cold")
    gate = app.state.workspace.index_gate = threading.Event()
    app.state.workspace.coarse_min_events = 0  # the small capture takes the large profiles' path
    cold = TestClient(app)
    try:
        st = _until(cold, lambda s: s.get("coarse"), "the coarse level")
        assert st["state"] == "preparing"
        ov, w, b = _queries(cold)  # the index build is held: these come from the coarse level
        prof = app.state.workspace.profile(P, wait=False)
        assert prof.index is None and not ov["index_ready"]
        assert w["coarse"] and w["level"] == "coarse" and b["coarse"]
        # the coarse answer holds every event once, merged by bucket
        assert sum(w["c"]) == ov["events"] == want_ov["events"] > 50
        assert {k: ov[k] for k in ("origin_ns", "duration_ns", "names", "events")} == \
            {k: want_ov[k] for k in ("origin_ns", "duration_ns", "names", "events")}
        # the busy shares are close to the exact ones already (a bucket's duration over its extent)
        assert len(b["groups"]) == len(want_b["groups"])
        diffs = [abs(g["mean_busy"] - h["mean_busy"]) for g, h in zip(b["groups"], want_b["groups"])]
        assert max(diffs) <= 0.02, diffs
        assert {g["level"] for g in b["groups"]} == {"coarse"}
    finally:
        gate.set()
    _until(cold, lambda s: s["state"] == "ready", "the index")
    ov, w, b = _queries(cold)
    assert ov["index_ready"] and not w["coarse"] and not b["coarse"]
    assert w == want_w and b == want_b
    # the index (and its leaf table) is the one a synchronous build gives; the leaves are the old scan's
    got = app.state.workspace.profile(P)
    exp = ref.app.state.workspace.profile(P)
    assert [lf.to_list() for lf in got.leaves] == [lf.to_list() for lf in exp.leaves]
    assert got.index.meta == exp.index.meta
    for k, v in exp.index.a.items():
        assert (got.index.a[k] == v).all(), k
    files = f"'{ui_workspace / P}/SystemProfileEvents/**/*.parquet'"
    old_scan = duckdb.connect().execute(f"""
        SELECT instance_id, process_id, coalesce(thread_id, -1), coalesce(nc_idx, -1),
               coalesce(trace_event_source, ''), name, count(*), min(start_ts), max(end_ts),
               max(duration_ns), max(coalesce(event_group, ''))
        FROM read_parquet({files}) GROUP BY ALL ORDER BY ALL""").fetchall()
    assert [tuple(lf.to_list()) for lf in got.leaves] == [tuple(r) for r in old_scan]


def test_requests_that_need_the_index_wait_for_it(ui_workspace: Path, tmp_path: Path) -> None:
    """Event details, flows and areas are answered from the index: asked during the build, they wait."""
    app = create_app(ui_workspace, cache_dir=tmp_path / "c")
    gate = app.state.workspace.index_gate = threading.Event()
    app.state.workspace.coarse_min_events = 0  # the small capture takes the large profiles' path
    cold = TestClient(app)
    _until(cold, lambda s: s.get("coarse"), "the coarse level")
    ov = cold.get(f"/api/profiles/{P}", params={"wait": 0}).json()
    got: dict = {}
    t = threading.Thread(target=lambda: got.update(r=cold.get(f"/api/profiles/{P}/flows", params={
        "mode": "cpu_device", "t0": 0, "t1": ov["duration_ns"]})))
    t.start()
    t.join(0.5)
    assert "r" not in got  # still waiting for the index
    gate.set()
    t.join(120)
    assert got["r"].status_code == 200 and got["r"].json()["flows"]


@contextlib.contextmanager
def _held_server(ui_workspace: Path, tmp_path: Path) -> Iterator[tuple[Any, threading.Event, int]]:
    """A UI server on loopback whose event index build waits for the yielded gate (the small
    capture takes the large profiles' path): (app, gate, port)."""
    import uvicorn

    from tests.conftest import free_port

    app = create_app(ui_workspace, cache_dir=tmp_path / "cache")
    gate = app.state.workspace.index_gate = threading.Event()
    app.state.workspace.coarse_min_events = 0
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    try:
        while not server.started:
            time.sleep(0.05)
        yield app, gate, port
    finally:
        gate.set()
        server.should_exit = True
        th.join(10)


def _chromium_page(pw: Any, port: int) -> tuple[Any, Any]:
    """Chromium at the profile's page, once it has painted: (browser, page)."""
    from .helpers import CHROMIUM, CHROMIUM_ARGS
    from .test_browser_v2 import new_page

    b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    return b, new_page(b, f"http://127.0.0.1:{port}/#/p/{P}")  # waits for the first paint


@pytest.mark.slow
def test_browser_paints_the_coarse_view_then_switches_to_the_index(ui_workspace: Path, tmp_path: Path) -> None:
    """In Chromium: the timeline paints (and says detail is still loading) while the index build is
    held, then fetches its view again from the index once it is ready, without a reload."""
    sync_api = pytest.importorskip("playwright.sync_api")
    tl = "window.__nx.state.widgets.find((x) => x.type === 'system-trace').timeline"
    with _held_server(ui_workspace, tmp_path) as (app, gate, port), sync_api.sync_playwright() as pw:
        b, pg = _chromium_page(pw, port)
        assert pg.evaluate("document.querySelector('[data-testid=system-timeline]').dataset.detail") == "coarse"
        assert pg.locator("[data-testid=detail-loading]").is_visible()
        assert pg.evaluate(f"() => {tl}.level") == "coarse"
        assert app.state.workspace.profile(P, wait=False).index is None  # painted before the index
        gate.set()
        pg.wait_for_selector("[data-testid=system-timeline][data-detail='1']", timeout=120000)
        pg.wait_for_function(f"() => {tl}.level !== 'coarse'", timeout=120000)
        assert pg.locator("[data-testid=detail-loading]").count() == 0
        assert pg.console_errors == []
        b.close()


@pytest.mark.slow
def test_browser_asks_nothing_of_the_index_before_its_first_paint(ui_workspace: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that waits for the index also starts its build at once (no grace for the first
    paint): a cold open asks such requests (where the work is, the device lanes) only once its
    coarse first answer went out, so the build does not take the cores from the first paint
    (decision 0185)."""
    from neuron_explorer.ui.profile import Profile

    sync_api = pytest.importorskip("playwright.sync_api")
    asked: list[bool] = []  # per request waiting for the index: had the first coarse answer gone out?
    wait_index = Profile.wait_index

    def recorded(self: Profile) -> Profile:
        asked.append(self.first_paint.is_set())
        return wait_index(self)

    monkeypatch.setattr(Profile, "wait_index", recorded)
    with _held_server(ui_workspace, tmp_path) as (app, gate, port), sync_api.sync_playwright() as pw:
        b, pg = _chromium_page(pw, port)
        end = time.monotonic() + 300  # (only a hang guard: the page asks right after its paint)
        while not asked and time.monotonic() < end:  # where the work is: asked after the paint
            time.sleep(0.05)
        assert asked and all(asked), asked
        gate.set()
        pg.wait_for_selector("[data-testid=system-timeline][data-detail='1']", timeout=120000)
        assert pg.console_errors == []
        b.close()


def test_a_failed_background_build_is_one_line_and_the_next_open_retries(ui_workspace: Path, tmp_path: Path) -> None:
    """Event files damaged between the scan and the index build: /status says error, a request that
    needs the index gets one line (500), and once the files are whole again the profile opens."""
    import shutil

    ws = tmp_path / "ws"
    shutil.copytree(ui_workspace / P, ws / P)
    app = create_app(ws, cache_dir=tmp_path / "cache")
    gate = app.state.workspace.index_gate = threading.Event()
    app.state.workspace.coarse_min_events = 0  # the small capture takes the large profiles' path
    c = TestClient(app)
    _until(c, lambda s: s.get("coarse"), "the coarse level")
    parts = sorted((ws / P / "SystemProfileEvents").rglob("*.parquet"))
    saved = {f: f.read_bytes() for f in parts}
    for f in parts:
        f.write_bytes(b"PAR1 not a parquet file PAR1")
    gate.set()
    st = _until(c, lambda s: s["state"] == "error", "the failed build")
    assert "\n" not in st["error"] and st["error"]
    r = c.get(f"/api/profiles/{P}/activity")
    assert r.status_code == 500 and "\n" not in r.json()["error"], r.text
    for f, b in saved.items():
        f.write_bytes(b)
    app.state.workspace.index_gate = None
    assert c.get(f"/api/profiles/{P}/activity").status_code == 200
    assert c.get(f"/api/profiles/{P}/status").json()["state"] == "ready"
