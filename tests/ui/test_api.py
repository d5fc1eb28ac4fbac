"""The server's JSON API over a real 2-rank capture: windows, details, device tables, confinement."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.ui import flows as flows_q  # noqa: E402
from neuron_explorer.ui.app import create_app  # noqa: E402
from neuron_explorer.ui.rows import MODES  # noqa: E402
from neuron_explorer.ui.server import is_loopback, url_for  # noqa: E402


@pytest.fixture(scope="module")
def client(ui_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    return TestClient(create_app(ui_workspace, cache_dir=tmp_path_factory.mktemp("cache")))


def all_rows(client: TestClient, profile: str, mode: str) -> list[dict]:
    r = client.get(f"/api/profiles/{profile}/tracks", params={"mode": mode})
    assert r.status_code == 200, r.text
    return r.json()["rows"]


def test_profiles_listed(client: TestClient) -> None:
    r = client.get("/api/profiles").json()
    names = {p["name"]: p for p in r["profiles"]}
    assert set(names) == {"run-a", "run-b"}
    assert names["run-a"]["processes"] == 2 and names["run-a"]["world_size"] == 2
    assert names["run-a"]["types"] == ["system", "device"] and names["run-b"]["types"] == ["system"]
    assert client.get("/").status_code == 200
    assert client.get("/static/js/app.js").status_code == 200


def test_every_grouping_mode_covers_every_event(client: TestClient) -> None:
    ov = client.get("/api/profiles/run-a").json()
    total = ov["events"]
    assert total > 50
    for mode in MODES:
        rows = all_rows(client, "run-a", mode)
        ev_rows = [r for r in rows if r["kind"] == "events"]
        assert sum(r["count"] for r in ev_rows) == total, mode
        w = client.get("/api/profiles/run-a/window", params={
            "mode": mode, "rows": ",".join(str(r["idx"]) for r in ev_rows),
            "t0": -1, "t1": ov["duration_ns"] + 1, "px": 10_000}).json()
        assert w["level"] == "raw"
        assert sum(w["c"]) == total, mode  # nothing lost, nothing counted twice
    groups = {m: {tuple(r["group"]) for r in all_rows(client, "run-a", m) if r["kind"] == "events"} for m in MODES}
    assert any(g[-1] == "Device" for g in groups["cpu_device"]) and any(g[-1] == "CPU" for g in groups["cpu_device"])
    assert {g[-1] for g in groups["neuroncore"]} == {"NC 0", "NC 1"}
    assert len(groups["process"]) == 2 and len(groups["instance"]) == 1
    assert all(g[-1].startswith("thread ") for g in groups["thread"])


def test_cpu_and_device_split_and_process_labels_follow_the_track_contract(client: TestClient,
                                                                            ui_workspace: Path) -> None:
    """CPU vs Device puts an event type where the Perfetto and JSON outputs put its track (core vs
    host thread, ``contracts.tracks``), and names processes with the same label."""
    import duckdb

    from neuron_explorer.contracts.tracks import on_device, process_label, track_kind

    types = duckdb.connect().execute(f"""SELECT DISTINCT name, event_group
        FROM read_parquet('{ui_workspace / 'run-a'}/SystemProfileEvents/**/*.parquet')""").fetchall()
    device = {n for n, g in types if on_device(track_kind(n, g))}
    assert device and device != {n for n, _ in types}, "the capture has both host and device events"
    rows = [r for r in all_rows(client, "run-a", "cpu_device") if r["kind"] == "events"]
    assert {r["name"] for r in rows if r["group"][-1] == "Device"} == device
    assert {r["name"] for r in rows if r["group"][-1] == "CPU"} == {n for n, _ in types} - device
    procs = client.get("/api/profiles/run-a").json()["processes"]
    labels = {process_label(int(p["process_id"]), int(p["rank"])) for p in procs}
    assert {r["group"][1] for r in rows} == labels and all(" rank " in x for x in labels)


def test_window_is_aggregated_to_screen_resolution(client: TestClient) -> None:
    ov = client.get("/api/profiles/run-a").json()
    rows = [r for r in all_rows(client, "run-a", "process") if r["kind"] == "events"]
    idx = ",".join(str(r["idx"]) for r in rows)
    coarse = client.get("/api/profiles/run-a/window", params={"mode": "process", "rows": idx, "t0": 0,
                                                               "t1": ov["duration_ns"], "px": 20}).json()
    # at 20 pixels, at most ~ one item per pixel per row plus events longer than a pixel
    assert len(coarse["c"]) <= len(rows) * 21
    assert any(c > 1 for c in coarse["c"]), "short events must be merged into counted buckets"
    assert sum(coarse["c"]) == ov["events"]
    for s, e in zip(coarse["s"], coarse["e"]):
        assert e >= s
    # a narrow window only returns events overlapping it
    mid = ov["duration_ns"] * 0.98
    narrow = client.get("/api/profiles/run-a/window", params={"mode": "process", "rows": idx, "t0": mid,
                                                               "t1": mid + 5e7, "px": 800}).json()
    for s, e in zip(narrow["s"], narrow["e"]):
        assert e >= mid and s < mid + 5e7


def test_pyramid_levels_agree_with_events(ui_workspace: Path, tmp_path: Path) -> None:
    """Force the level-of-detail pyramid on the small capture: zoomed-out counts must match raw ones."""
    c = TestClient(create_app(ui_workspace, cache_dir=tmp_path, pyramid_min_events=0, raw_budget=0))
    ov = c.get("/api/profiles/run-a").json()
    assert ov["levels"], "pyramid should have been built"
    rows = [r for r in all_rows(c, "run-a", "cpu_device") if r["kind"] == "events"]
    idx = ",".join(str(r["idx"]) for r in rows)
    span = ov["levels"][0] * 4
    w = c.get("/api/profiles/run-a/window", params={"mode": "cpu_device", "rows": idx, "t0": 0, "t1": span,
                                                     "px": 2}).json()
    assert w["level"] == 0
    assert sum(w["c"]) == ov["events"]
    per_row = {}
    for r, n in zip(w["row"], w["c"]):
        per_row[r] = per_row.get(r, 0) + n
    assert per_row == {r["idx"]: r["count"] for r in rows}
    cached = list(tmp_path.glob("*.idx"))
    assert len(cached) == 1 and (cached[0] / "p0_s.npy").is_file(), "index and pyramid cached outside the workspace"
    assert not list(ui_workspace.rglob("*.npy")), "nothing written into the workspace"
    # the cache is reused by a second app
    c2 = TestClient(create_app(ui_workspace, cache_dir=tmp_path, pyramid_min_events=0, raw_budget=0))
    assert c2.get("/api/profiles/run-a").json()["levels"] == ov["levels"]


def test_event_details_list_every_property(client: TestClient) -> None:
    ov = client.get("/api/profiles/run-a").json()
    rows = all_rows(client, "run-a", "cpu_device")
    cc = next(r for r in rows if r["kind"] == "events" and r["name"] == "cc_running")
    w = client.get("/api/profiles/run-a/window", params={"mode": "cpu_device", "rows": cc["idx"], "t0": 0,
                                                          "t1": ov["duration_ns"], "px": 20000}).json()
    i = w["c"].index(1)
    d = client.get("/api/profiles/run-a/event", params={"id": w["id"][i], "leaf": w["leaf"][i]}).json()
    assert d["name"] == "cc_running"
    for col in ("id", "name", "start_ts", "end_ts", "duration_ns", "trace_event_source", "instance_id", "process_id",
                "thread_id", "nc_idx", "pcore_idx", "worker_gid", "flow_id", "framework_stream_id", "op", "seq",
                "bytes", "dtype", "group_ranks"):
        assert col in d["properties"], col
    assert d["process"]["rank"] in (0, 1)
    assert client.get("/api/profiles/run-a/event", params={"id": 10**12}).status_code == 404


def test_flows_counters_summary_search(client: TestClient) -> None:
    ov = client.get("/api/profiles/run-a").json()
    dur = ov["duration_ns"]
    f = client.get("/api/profiles/run-a/flows", params={"t0": 0, "t1": dur}).json()
    assert f["flows"] and all(len(x["ends"]) >= 2 for x in f["flows"])
    rows = all_rows(client, "run-a", "cpu_device")
    crow = [r for r in rows if r["kind"] == "counter"]
    labels = {r["label"] for r in crow}
    assert {"CPU utilization (host)", "Host memory (used / available)", "CPU utilization (process)"} <= labels
    cn = client.get("/api/profiles/run-a/counters", params={"mode": "cpu_device", "rows": ",".join(
        str(r["idx"]) for r in crow), "t0": 0, "t1": dur, "px": 300}).json()
    mem = next(r for r in crow if r["label"].startswith("Host memory (used"))
    series = cn["rows"][str(mem["idx"])]
    assert set(series) == {"host_mem.host_used", "host_mem.host_available"}
    assert len(series["host_mem.host_used"]["t"]) <= 301
    s = client.get("/api/profiles/run-a/summary", params={"mode": "cpu_device", "t0": 0, "t1": dur + 1}).json()
    assert s["count"] == ov["events"]
    by = {x["name"]: x for x in s["by_name"]}
    assert by["nc_exec_running"]["count"] == 30  # 2 ranks x 5 steps x (forward, backward, optimizer step)
    assert by["nc_exec_running"]["mean_ns"] == pytest.approx(by["nc_exec_running"]["total_ns"] / 30)
    q = client.get("/api/profiles/run-a/search", params={"q": "EXEC_run", "mode": "process"}).json()
    assert [n for n, _ in q["names"]] == ["nc_exec_running"] and len(q["rows"]) == 2
    nx = client.get("/api/profiles/run-a/search/next", params={"q": "nc_exec", "after": 0, "dir": 1}).json()
    assert nx["found"] and nx["name"] == "nc_exec_running"


def test_device_profiles_and_linking(client: TestClient, device_ref: dict) -> None:
    assert client.get("/api/profiles/run-b/device-profiles").json() == {"device_profiles": []}
    dps = client.get("/api/profiles/run-a/device-profiles").json()["device_profiles"]
    assert [d["profile_id"] for d in dps] == ["dp-0"]
    ov = client.get("/api/profiles/run-a/device/dp-0").json()
    assert ov["events"] == 40 and [r["label"] for r in ov["rows"]] == ["act", "dma_q0", "dma_q1", "pe", "pool"]
    w = client.get("/api/profiles/run-a/device/dp-0/window", params={"rows": "0-4", "t0": 0,
                                                                      "t1": ov["duration_ns"], "px": 2000}).json()
    assert sum(w["c"]) == 40
    i = w["row"].index(3)
    e = client.get("/api/profiles/run-a/device/dp-0/event", params={"row": 3, "start": w["s"][i]}).json()
    assert e["name"].startswith("matmul_") and e["attributes"]["engine"] == "pe"
    assert client.get("/api/profiles/run-a/device/nope").status_code == 404
    assert client.get("/api/profiles/run-b/device/dp-0").status_code == 404
    # nc_exec_running of that execution links to dp-0; in run-b the same event notes there is none
    for prof, linked in (("run-a", True), ("run-b", False)):
        hit = client.get(f"/api/profiles/{prof}/search/next",
                         params={"q": "nc_exec_running", "after": -1, "dir": 1}).json()
        found = None
        after = -1
        for _ in range(30):
            hit = client.get(f"/api/profiles/{prof}/search/next",
                             params={"q": "nc_exec_running", "after": after, "dir": 1}).json()
            d = client.get(f"/api/profiles/{prof}/event", params={"id": hit["id"], "leaf": hit["leaf"]}).json()
            if all(d["properties"][k] == device_ref[k] for k in ("process_id", "exec_id", "model_name")):
                found = d
                break
            after = hit["s"]
        assert found is not None
        if linked:
            assert found["device_profile"]["profile_id"] == "dp-0"
        else:
            assert found["device_profile"] is None and "No device profile" in found["device_note"]


@pytest.mark.parametrize("path", [
    "/api/profiles/..", "/api/profiles/..%2F..%2Fetc", "/api/profiles/%2Fetc%2Fpasswd", "/api/profiles/.hidden",
    "/api/profiles/..%5C..", "/api/profiles/%2E%2E/tracks", "/api/profiles/run-a%00/tracks",
    "/static/../server.py", "/static/%2E%2E/server.py", "/api/profiles/..%2Frun-a/window?t0=0&t1=1&px=1",
])
def test_requests_cannot_escape_the_workspace(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code in (400, 403, 404), (path, r.status_code)
    assert "ProfileMetadata" not in r.text and "def serve" not in r.text and "root:" not in r.text


def test_symlinks_out_of_the_workspace_are_not_followed(ui_workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "secret").mkdir(parents=True)
    # a full profile outside the workspace, linked in
    import shutil

    shutil.copytree(ui_workspace / "run-b", outside / "secret", dirs_exist_ok=True)
    ws = tmp_path / "ws"
    shutil.copytree(ui_workspace / "run-b", ws / "inside")
    os.symlink(outside / "secret", ws / "linked")
    # and a Parquet part inside a real profile that points outside
    part = next((ws / "inside" / "SystemProfileEvents").rglob("part-0.parquet"))
    evil_dir = part.parent.parent / "process=999"
    evil_dir.mkdir()
    os.symlink(next((outside / "secret" / "SystemProfileEvents").rglob("part-0.parquet")), evil_dir / "part-0.parquet")
    c = TestClient(create_app(ws, cache_dir=tmp_path / "cache"))
    assert [p["name"] for p in c.get("/api/profiles").json()["profiles"]] == ["inside"]
    assert c.get("/api/profiles/linked").status_code == 403
    assert c.get("/api/profiles/linked/tracks").status_code == 403
    ov = c.get("/api/profiles/inside").json()
    ref = TestClient(create_app(ui_workspace, cache_dir=tmp_path / "cache2")).get("/api/profiles/run-b").json()
    assert ov["events"] == ref["events"], "the symlinked part outside the workspace must not be read"


def test_bad_parameters_are_400(client: TestClient) -> None:
    base = "/api/profiles/run-a"
    for params in ({"t0": 5, "t1": 1, "px": 10}, {"t0": "x", "t1": 1, "px": 10}, {"t0": 0, "t1": 1, "px": 0},
                   {"t0": 0, "t1": 1, "px": 10, "rows": "999999"}, {"t0": 0, "t1": 1, "px": 10, "mode": "nope"},
                   {"t0": 0, "t1": "inf", "px": 10}):
        r = client.get(f"{base}/window", params=params)
        assert r.status_code == 400, (params, r.text)
    assert client.get("/api/profiles/missing").status_code == 404
    assert client.post("/api/profiles").status_code == 405  # read-only


def test_loopback_detection_and_url() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.1.2.3")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.com")
    assert url_for("127.0.0.1", 3001) == "http://127.0.0.1:3001/"
    assert url_for("::1", 8080) == "http://[::1]:8080/"


def test_windows_match_the_events_in_parquet(client: TestClient, ui_workspace: Path) -> None:
    """Every answer agrees with a brute-force read of the Parquet store: per row, the events overlapping
    the window, those at least a pixel long one by one (by id) and the rest counted per pixel."""
    import duckdb

    ov = client.get("/api/profiles/run-a").json()
    origin, dur = int(ov["origin_ns"]), ov["duration_ns"]
    ev = duckdb.connect().execute(f"""
        SELECT id, instance_id, process_id, coalesce(thread_id, -1), coalesce(nc_idx, -1),
               coalesce(trace_event_source, ''), name, start_ts - {origin}, end_ts - {origin}
        FROM read_parquet('{ui_workspace / 'run-a'}/SystemProfileEvents/**/*.parquet')""").fetchall()
    leaf_of = {(lf.inst, lf.pid, lf.tid, lf.nc, lf.src, lf.name): lf.leaf
               for lf in client.app.state.workspace.profile("run-a").leaves}
    checked = 0
    for mode in ("cpu_device", "process", "instance"):
        rows = [r for r in all_rows(client, "run-a", mode) if r["kind"] == "events"]
        leaf_row = {lf: r["idx"] for r in rows for lf in r["leaves"]}
        for t0, t1, px in ((0, dur, 50), (dur * 0.3, dur * 0.31, 400), (dur * 0.5, dur * 0.5 + 2e5, 1000),
                           (-dur, 2 * dur, 7)):
            w = client.get("/api/profiles/run-a/window", params={
                "mode": mode, "rows": ",".join(str(r["idx"]) for r in rows), "t0": t0, "t1": t1, "px": px}).json()
            npp = (t1 - t0) / px
            want_count: dict[int, int] = {}
            want_single: set[int] = set()
            for e in ev:
                if e[7] < t1 and e[8] >= t0:
                    r = leaf_row[leaf_of[tuple(e[1:7])]]
                    want_count[r] = want_count.get(r, 0) + 1
                    if e[8] - e[7] >= npp:
                        want_single.add(e[0])
            got_count: dict[int, int] = {}
            for r, c in zip(w["row"], w["c"]):
                got_count[r] = got_count.get(r, 0) + c
            assert got_count == want_count, (mode, t0, t1)
            singles = {i for i, c, s, e in zip(w["id"], w["c"], w["s"], w["e"]) if c == 1 and e - s >= npp}
            assert singles == want_single, (mode, t0, t1)
            assert all(c == 1 or e - s >= 0 for c, s, e in zip(w["c"], w["s"], w["e"]))
            checked += sum(got_count.values())
    assert checked > 100



def brute_force_flows(workspace: Path, profile: str, origin: int, leaf_of: dict, t0: float, t1: float,
                      limit: int) -> tuple[list[dict], bool]:
    """Flows from SystemProfileEvents.flow_id alone: events overlapping [t0, t1) (start < t1, end >= t0),
    grouped by flow id (every id of an event's list: a host call issued in a framework region is in
    two flows), flows with >= 2 such events, smallest ids first, endpoints by start then id."""
    import duckdb

    ev = duckdb.connect().execute(f"""
        SELECT f, id, instance_id, process_id, coalesce(thread_id, -1), coalesce(nc_idx, -1),
               coalesce(trace_event_source, ''), name, s, e
        FROM (SELECT unnest(flow_id) AS f, *, start_ts - {origin} AS s, end_ts - {origin} AS e
              FROM read_parquet('{workspace / profile}/SystemProfileEvents/**/*.parquet'))
        WHERE f IS NOT NULL AND f <> 0 AND s < ? AND e >= ?""", [t1, t0]).fetchall()
    by: dict[int, list] = {}
    for f, eid, *key, s, e in ev:
        by.setdefault(int(f), []).append([int(eid), leaf_of[tuple(key)], int(s), int(e)])
    multi = sorted(f for f, v in by.items() if len(v) >= 2)
    return ([{"flow_id": str(f), "ends": sorted(by[f], key=lambda x: (x[2], x[0]))} for f in multi[:limit]],
            len(multi) > limit)


def test_flows_match_the_flow_ids_in_parquet(client: TestClient, ui_workspace: Path) -> None:
    """/flows equals a brute-force grouping of SystemProfileEvents.flow_id over the window, in every
    grouping mode, whichever way the index answers (gather the window's ids / walk flows by id)."""
    ov = client.get("/api/profiles/run-a").json()
    origin, dur = int(ov["origin_ns"]), ov["duration_ns"]
    prof = client.app.state.workspace.profile("run-a")
    leaf_of = {(lf.inst, lf.pid, lf.tid, lf.nc, lf.src, lf.name): lf.leaf for lf in prof.leaves}
    whole, _ = brute_force_flows(ui_workspace, "run-a", origin, leaf_of, -1, dur + 1, 10**9)
    assert len(whole) >= 10, "the capture has host call -> execution and collective flows"
    assert any(len({e[1] for e in f["ends"]}) >= 2 for f in whole)
    # the windows: the whole profile, beyond it, slices, and windows that start where a flow's event ends
    # or end where one starts (the bounds are end >= t0 and start < t1)
    ends = [e for f in whole for e in f["ends"]]
    windows = [(0, dur), (-dur, 2 * dur), (dur * 0.3, dur * 0.31), (dur * 0.5, dur * 0.5 + 2e5), (dur * 0.2, dur * 0.7),
               (2 * dur, 3 * dur)]
    for x in ends[len(ends) // 3:len(ends) // 3 + 3]:
        windows += [(x[3], x[3] + dur * 0.05), (x[2] - dur * 0.05, x[2])]
    checked = 0
    try:
        for how in ("auto", "gather", "walk"):
            prof.flow_strategy = how
            for t0, t1 in windows:
                want, trunc = brute_force_flows(ui_workspace, "run-a", origin, leaf_of, t0, t1, 2000)
                for mode in MODES:
                    got = client.get("/api/profiles/run-a/flows", params={"mode": mode, "t0": t0, "t1": t1}).json()
                    assert got == {"flows": want, "truncated": trunc}, (how, mode, t0, t1)
                    # every endpoint's leaf is drawn by a row of the mode (the browser maps leaves to rows)
                    drawn = {lf for r in all_rows(client, "run-a", mode) if r["kind"] == "events" for lf in r["leaves"]}
                    assert {e[1] for f in got["flows"] for e in f["ends"]} <= drawn
                checked += len(want)
                for limit in (0, 1, 3):
                    want, trunc = brute_force_flows(ui_workspace, "run-a", origin, leaf_of, t0, t1, limit)
                    got = flows_q.flows(prof, "cpu_device", t0, t1, limit)
                    assert got == {"flows": want, "truncated": trunc}, (how, limit, t0, t1)
    finally:
        prof.flow_strategy = "auto"
    assert checked > 30
    assert client.get("/api/profiles/run-a/flows", params={"mode": "nope", "t0": 0, "t1": 1}).status_code == 400


def test_a_leftover_flows_table_is_ignored(ui_workspace: Path, tmp_path: Path) -> None:
    """Stores written before the SystemProfileFlows table was dropped may still hold one: flows come
    from SystemProfileEvents.flow_id whatever it says."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    ws = tmp_path / "ws"
    shutil.copytree(ui_workspace / "run-b", ws / "old")
    part = next((ws / "old" / "SystemProfileEvents").rglob("*.parquet"))
    d = ws / "old" / "SystemProfileFlows" / part.parent.parent.name / part.parent.name
    d.mkdir(parents=True)
    pq.write_table(pa.table({"flow_id": [7, 7], "event_id": [0, 1], "ts": [0, 1]}), d / "part-0.parquet")
    c = TestClient(create_app(ws, cache_dir=tmp_path / "cache"))
    ref = TestClient(create_app(ui_workspace, cache_dir=tmp_path / "cache2"))
    dur = ref.get("/api/profiles/run-b").json()["duration_ns"]
    got = c.get("/api/profiles/old/flows", params={"t0": 0, "t1": dur}).json()
    assert got["flows"] and got == ref.get("/api/profiles/run-b/flows", params={"t0": 0, "t1": dur}).json()
    assert "7" not in {f["flow_id"] for f in got["flows"]}

def test_flow_id_as_a_plain_column_or_missing(ui_workspace: Path, tmp_path: Path) -> None:
    """A store whose flow_id is a plain integer gives the flows of a list column holding only each
    event's first id; one without the column, none."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    ws = tmp_path / "ws"
    for name in ("scalar", "none", "first"):
        shutil.copytree(ui_workspace / "run-b", ws / name)
        for part in (ws / name / "SystemProfileEvents").rglob("*.parquet"):
            tbl = pq.read_table(part)
            i = tbl.schema.get_field_index("flow_id")
            if name == "scalar":
                first = pa.array([v[0] if v else 0 for v in tbl["flow_id"].to_pylist()], type=pa.int64())
                tbl = tbl.set_column(i, "flow_id", first)
            elif name == "first":
                first = pa.array([v[:1] for v in tbl["flow_id"].to_pylist()], type=pa.list_(pa.int64()))
                tbl = tbl.set_column(i, "flow_id", first)
            else:
                tbl = tbl.remove_column(i)
            pq.write_table(tbl, part)
    c = TestClient(create_app(ws, cache_dir=tmp_path / "cache"))
    ov = c.get("/api/profiles/first").json()
    want = c.get("/api/profiles/first/flows", params={"t0": 0, "t1": ov["duration_ns"]}).json()
    assert want["flows"]
    assert c.get("/api/profiles/scalar/flows", params={"t0": 0, "t1": ov["duration_ns"]}).json() == want
    assert c.get("/api/profiles/none/flows", params={"t0": 0, "t1": ov["duration_ns"]}).json() == \
        {"flows": [], "truncated": False}
    assert c.get("/api/profiles/none").json()["events"] == ov["events"]

def test_parts_not_sorted_by_start_give_the_same_answers(ui_workspace: Path, tmp_path: Path) -> None:
    """The index sorts what it reads: shuffled Parquet parts answer exactly as the originals."""
    import shutil

    import numpy as np
    import pyarrow.parquet as pq

    ws = tmp_path / "ws"
    shutil.copytree(ui_workspace / "run-b", ws / "shuffled")
    shutil.copytree(ui_workspace / "run-b", ws / "sorted")
    for part in (ws / "shuffled" / "SystemProfileEvents").rglob("*.parquet"):
        tbl = pq.read_table(part)
        pq.write_table(tbl.take(np.random.default_rng(3).permutation(tbl.num_rows)), part)
    c = TestClient(create_app(ws, cache_dir=tmp_path / "cache"))
    answers = {}
    for prof in ("shuffled", "sorted"):
        dur = c.get(f"/api/profiles/{prof}").json()["duration_ns"]
        rows = ",".join(str(r["idx"]) for r in all_rows(c, prof, "thread") if r["kind"] == "events")
        answers[prof] = [c.get(f"/api/profiles/{prof}/window", params={
            "mode": "thread", "rows": rows, "t0": t0, "t1": t1, "px": px}).json()
            for t0, t1, px in ((0, dur, 10_000), (0, dur, 30), (dur * 0.4, dur * 0.45, 500))]
        nx = c.get(f"/api/profiles/{prof}/search/next", params={"q": "nc_exec", "after": dur, "dir": -1}).json()
        answers[prof].append({k: nx[k] for k in ("found", "s", "e", "name")})
    assert answers["shuffled"] == answers["sorted"]
    assert sum(answers["sorted"][0]["c"]) > 50


def test_stale_caches_of_a_profile_are_removed(ui_workspace: Path, tmp_path: Path) -> None:
    """A rebuilt index replaces the profile's older caches (gigabytes at 100M events), and only those."""
    import shutil

    cache = tmp_path / "cache"
    c = TestClient(create_app(ui_workspace, cache_dir=cache))
    c.get("/api/profiles/run-a")
    (current,) = list(cache.glob("*.idx"))
    tag = current.name.split("-")[0]
    (cache / f"{tag}-0123456789abcdef.idx").mkdir()  # an older version of run-a's files
    (cache / f"{tag}-0123456789abcdef-1024x3.parquet").write_bytes(b"old pyramid")
    other = cache / "pffffffffffff-0123456789abcdef.idx"  # another profile's
    other.mkdir()
    shutil.rmtree(current)  # force a rebuild
    c2 = TestClient(create_app(ui_workspace, cache_dir=cache))
    assert c2.get("/api/profiles/run-a").json()["index"]["build_s"] is not None
    names = sorted(x.name for x in cache.iterdir())
    assert names == sorted([current.name, other.name]), names
    # reopening from the cache builds nothing
    c3 = TestClient(create_app(ui_workspace, cache_dir=cache))
    assert c3.get("/api/profiles/run-a").json()["index"]["build_s"] is None
