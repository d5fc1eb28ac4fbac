"""The viewer opens grouped as `view` was asked at ingestion: the stored
``--system-trace-primary-group`` / ``--system-trace-secondary-group`` (ProfileMetadata) pick the
default grouping mode; a mode in the request (or the URL) still overrides it."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import duckdb
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.ui.app import create_app  # noqa: E402
from neuron_explorer.ui.rows import mode_of_grouping  # noqa: E402
from tests.conftest import cli, shared_dir, train_capture  # noqa: E402

CASES = {"by-thread": ("instance_id,process_id", "thread_id", "thread"),
         "by-core": ("instance_id", "nc_idx", "neuroncore"),
         "by-process": ("instance_id,process_id", "process_id", "process")}


@pytest.fixture(scope="module")
def grouped_ws(ui_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The UI fixture's capture ingested again with grouping flags (run-a, untouched, has the default);
    made once per run whichever xdist worker asks first (``shared_dir``, decision 0153): read only."""
    def build(ws: Path) -> None:
        capture, _ = train_capture(tmp_path_factory, "--steps", "5")  # the job the UI fixture ingested
        for name, (prim, sec, _) in CASES.items():
            p = cli("view", "-d", str(capture), "--ingest-only", "--data-path", str(ws), "--display-name", name,
                    "--system-trace-primary-group", prim, "--system-trace-secondary-group", sec)
            assert p.returncode == 0, p.stderr

    return shared_dir(tmp_path_factory, "ui_grouped_workspace", build)[0]


def test_the_stored_grouping_is_the_default_mode(grouped_ws: Path, tmp_path: Path) -> None:
    c = TestClient(create_app(grouped_ws, cache_dir=tmp_path / "cache"))
    for name, (prim, sec, mode) in CASES.items():
        stored = duckdb.connect().execute(f"""SELECT DISTINCT system_trace_primary_group, system_trace_secondary_group
            FROM read_parquet('{grouped_ws / name}/ProfileMetadata.parquet')""").fetchall()
        assert stored == [(prim, sec)], stored  # what `view` wrote
        ov = c.get(f"/api/profiles/{name}").json()
        assert ov["default_mode"] == mode and ov["stored_grouping"] == {"primary": prim, "secondary": sec, "mode": mode}
        # a request without a mode is answered in the stored one, with the same rows as asking for it
        plain = c.get(f"/api/profiles/{name}/tracks").json()
        asked = c.get(f"/api/profiles/{name}/tracks", params={"mode": mode}).json()
        assert plain["mode"] == mode and plain["rows"] == asked["rows"]
        # an explicit mode still overrides it
        assert c.get(f"/api/profiles/{name}/tracks", params={"mode": "cpu_device"}).json()["mode"] == "cpu_device"


def test_the_default_grouping_stays_cpu_vs_device(ui_workspace: Path, tmp_path: Path) -> None:
    c = TestClient(create_app(ui_workspace, cache_dir=tmp_path / "cache"))
    ov = c.get("/api/profiles/run-a").json()
    assert ov["stored_grouping"]["secondary"] in (None, "cpu_vs_device") and ov["default_mode"] == "cpu_device"
    assert c.get("/api/profiles/run-a/tracks").json()["mode"] == "cpu_device"


@pytest.mark.parametrize("prim, sec, mode", [
    (None, None, "cpu_device"), ("instance_id,process_id", "cpu_vs_device", "cpu_device"),
    ("instance_id", "thread_id,nc_idx", "thread"), ("process_id", "nc_idx,trace_event_source", "neuroncore"),
    ("instance_id", "instance_id", "instance"), ("instance_id", "instance_id,trace_event_source", "instance"),
    ("instance_id,process_id", "instance_id", "process"), ("instance_id", "process_id", "process")])
def test_mode_of_grouping(prim, sec, mode) -> None:
    assert mode_of_grouping(prim, sec) == mode


@pytest.mark.slow
def test_browser_opens_in_the_stored_grouping_and_the_url_overrides_it(grouped_ws: Path,
                                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.conftest import clean_env, free_port

    from .helpers import CHROMIUM, CHROMIUM_ARGS, start_server, stop_server
    from .test_browser_v2 import new_page

    sync_api = pytest.importorskip("playwright.sync_api")
    srv, url = start_server(grouped_ws, free_port(), clean_env(XDG_CACHE_HOME=str(tmp_path_factory.mktemp("c"))))
    tl = "window.__nx.state.widgets.find((x) => x.type === 'system-trace')"
    try:
        with sync_api.sync_playwright() as pw:
            b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            pg = new_page(b, url + "#/p/by-thread")
            assert pg.evaluate(f"() => {tl}.mode") == "thread"
            got = pg.evaluate(f"() => {tl}.timeline.rows.map((r) => [r.kind, r.group, r.label])")
            tracks = url + "api/profiles/by-thread/tracks?layout=tracks&mode="
            want = json.loads(urllib.request.urlopen(tracks + "thread").read())
            assert got == [[r["kind"], r["group"], r["label"]] for r in want["rows"]]
            other = json.loads(urllib.request.urlopen(tracks + "cpu_device").read())
            assert got != [[r["kind"], r["group"], r["label"]] for r in other["rows"]]
            pg.close()
            pg = new_page(b, url + "#/p/by-core?mode=process")  # the URL wins over the stored grouping
            assert pg.evaluate(f"() => {tl}.mode") == "process"
            pg.close()
            pg = new_page(b, url + "#/p/by-core")
            assert pg.evaluate(f"() => {tl}.mode") == "neuroncore"
            assert pg.console_errors == []
            b.close()
    finally:
        stop_server(srv)
