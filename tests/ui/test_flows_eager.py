"""Every flow of an event, on a real eager capture: a host call (``nrt_execute``) issued inside a
``record_function`` region is in the region's flow and in its core execution's flow, so the viewer
must draw framework region -> ``nrt_execute`` -> ``nc_exec_running`` (the index once kept only an
event's first flow id, and the region -> call arrow was never drawn)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.ui.app import create_app  # noqa: E402
from tests.conftest import clean_env, free_port  # noqa: E402

from .helpers import start_server, stop_server  # noqa: E402

P = "eager"


@pytest.fixture(scope="module")
def client(eager_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    return TestClient(create_app(eager_workspace, cache_dir=tmp_path_factory.mktemp("cache")))


def events(client: TestClient) -> list[dict]:
    """Every event of the profile (name, id, leaf, start relative to the origin), from its index."""
    client.get(f"/api/profiles/{P}")
    prof = client.app.state.workspace.profile(P)
    idx = prof.index
    out = []
    for lf in prof.leaves:
        for q in range(int(idx.off[lf.leaf]), int(idx.off[lf.leaf + 1])):
            out.append({"name": lf.name, "id": int(idx.id[q]), "leaf": lf.leaf, "s": int(idx.s[q]) + prof.shift})
    return out


def names_of_flows(client: TestClient, ev: dict) -> list[list[str]]:
    prof = client.app.state.workspace.profile(P)
    r = client.get(f"/api/profiles/{P}/event/flows", params={"id": ev["id"], "leaf": ev["leaf"], "s": ev["s"]})
    assert r.status_code == 200, r.text
    return sorted(sorted(prof.leaves[e[1]].name for e in f["ends"]) for f in r.json()["flows"])


def test_a_host_call_has_its_region_flow_and_its_execution_flow(client: TestClient, eager_workspace: Path) -> None:
    evs = events(client)
    calls = [e for e in evs if e["name"] == "nrt_execute"]
    regions = [e for e in evs if e["name"] == "my_region"]
    assert len(calls) == 3 and len(regions) == 3
    for call in calls:
        assert names_of_flows(client, call) == [["my_region", "nrt_execute"], ["nc_exec_running", "nrt_execute"]]
    for region in regions:
        assert names_of_flows(client, region) == [["my_region", "nrt_execute"]]
    # the Parquet store holds the same: two ids in each host call's flow_id list
    got = duckdb.connect().execute(f"""SELECT len(flow_id) FROM read_parquet(
        '{eager_workspace / P}/SystemProfileEvents/**/*.parquet') WHERE name = 'nrt_execute'""").fetchall()
    assert [g[0] for g in got] == [2, 2, 2]
    # "all flows in view": the 3 region -> call flows and the 3 call -> execution flows
    ov = client.get(f"/api/profiles/{P}").json()
    prof = client.app.state.workspace.profile(P)
    for how in ("gather", "walk"):
        prof.flow_strategy = how
        fl = client.get(f"/api/profiles/{P}/flows", params={"mode": "cpu_device", "t0": -1,
                                                           "t1": ov["duration_ns"] + 1}).json()["flows"]
        kinds = sorted(tuple(sorted(prof.leaves[e[1]].name for e in f["ends"])) for f in fl)
        assert kinds == [("my_region", "nrt_execute")] * 3 + [("nc_exec_running", "nrt_execute")] * 3, how
    prof.flow_strategy = "auto"


@pytest.mark.slow
def test_selecting_the_region_draws_its_arrow_to_the_host_call(eager_workspace: Path,
                                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    from .helpers import CHROMIUM, CHROMIUM_ARGS
    from .test_browser import TL, click_item
    from .test_browser_v2 import new_page

    sync_api = pytest.importorskip("playwright.sync_api")
    srv, url = start_server(eager_workspace, free_port(), clean_env(XDG_CACHE_HOME=str(tmp_path_factory.mktemp("c"))))
    try:
        with sync_api.sync_playwright() as pw:
            b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = new_page(b, url + f"#/p/{P}")
            tl = TL.format(p=P)
            for name, want in (("my_region", [["my_region", "nrt_execute"]]),
                               ("nrt_execute", [["my_region", "nrt_execute"], ["nc_exec_running", "nrt_execute"]])):
                click_item(page, P, name, None)
                page.wait_for_function(f"() => {tl}.selFlows !== null && {tl}.selected.id !== undefined")
                page.wait_for_function(f"() => {tl}.arrowsDrawn > 0")
                got = page.evaluate(f"""() => {{ const t = {tl};
                  return {{drawn: t.arrowsDrawn,
                           flows: t.drawnFlows().map((f) => f.ends.map((e) => t.source.nameOf(e[1])).sort())}}; }}""")
                assert sorted(got["flows"]) == want, name
                assert got["drawn"] == len(want), name
                # Event Details and the Flows tab list every flow, each endpoint a link
                page.wait_for_function(f"""() => [...document.querySelectorAll(
                  '[data-testid=event-details] .flows-in-details h3')]
                  .filter((h) => h.textContent.startsWith('Flow ')).length === {len(want)}""")
                links = page.locator("[data-testid=event-details] [data-testid=flow-end]").all_inner_texts()
                assert sum("my_region" in x for x in links) == 1 and sum("nrt_execute" in x for x in links) == len(want)
                page.keyboard.press("Escape")
            assert page.console_errors == []
            b.close()
    finally:
        stop_server(srv)
