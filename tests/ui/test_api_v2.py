"""The second viewer's server answers, checked against the Parquet store and the CLI's own rules.

64-bit values cross the wire as strings; the selected event's flows; busy shading and area statistics
against the union of intervals computed from Parquet; the per-collective straggler table against the
CLI summary's rule; the device trace on system time; search over arguments with "k of N"; index-build
progress; the memory counters' styles and the device memory by category.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.contracts.stragglers import arrivals, summarize  # noqa: E402
from neuron_explorer.ui.app import create_app  # noqa: E402
from neuron_explorer.util.intervals import union_length  # noqa: E402

STRAGGLER = 21
SYNTH = "synth-32r"


@pytest.fixture(scope="module")
def client(ui_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    return TestClient(create_app(ui_workspace, cache_dir=tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def synth_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bench.ui_bench import write_store

    ws = tmp_path_factory.mktemp("synth-api")
    write_store(ws / SYNTH, 4, 8, 64_000, seed=5, straggler=STRAGGLER)
    return ws


@pytest.fixture(scope="module")
def synth(synth_ws: Path, tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    return TestClient(create_app(synth_ws, cache_dir=tmp_path_factory.mktemp("cache")))


def parquet(ws: Path, name: str, sql: str) -> list[tuple]:
    events = f"read_parquet('{ws / name}/SystemProfileEvents/**/*.parquet')"
    return duckdb.connect().execute(sql.replace("EVENTS", events)).fetchall()


def rows_of(client: TestClient, name: str, mode: str = "cpu_device", layout: str = "tracks") -> list[dict]:
    r = client.get(f"/api/profiles/{name}/tracks", params={"mode": mode, "layout": layout})
    assert r.status_code == 200, r.text
    return r.json()["rows"]


# ---------------------------------------------------------------- time you can trust
def test_64bit_values_cross_the_wire_as_strings(client: TestClient, ui_workspace: Path) -> None:
    ov = client.get("/api/profiles/run-a").json()
    assert isinstance(ov["origin_ns"], str)
    assert all(isinstance(p["start_wall_ns"], str) for p in ov["processes"])
    want = parquet(ui_workspace, "run-a", "SELECT id, start_ts, end_ts FROM EVENTS ORDER BY start_ts DESC LIMIT 5")
    for i, s, e in want:
        ev = client.get("/api/profiles/run-a/event", params={"id": str(i)}).json()
        assert ev["properties"]["start_ts"] == str(s) and ev["properties"]["end_ts"] == str(e)
        # relative times are exact integers: origin + relative is the Parquet value, digit for digit
        assert int(ev["origin_ns"]) + ev["relative"]["start"] == s
        assert isinstance(ev["properties"]["id"], str)
    prof = client.get("/api/profiles").json()["profiles"]
    assert all(isinstance(p["start_wall_ns"], (str, type(None))) for p in prof)


def test_event_ids_are_parsed_exactly(client: TestClient) -> None:
    # 2^53 + 1 is not a double: a float parse would look up 2^53 instead
    r = client.get("/api/profiles/run-a/event", params={"id": str((1 << 53) + 1)})
    assert r.status_code == 404
    r = client.get("/api/profiles/run-a/event", params={"id": "1.5"})
    assert r.status_code == 400 and "id" in r.json()["error"]
    r = client.get("/api/profiles/run-a/event", params={"id": str(1 << 64)})
    assert r.status_code == 400 and "64-bit" in r.json()["error"]


# ---------------------------------------------------------------- flows on demand
def _event(client: TestClient, name: str, profile: str = "run-a", rank_part: str = "rank 0") -> dict:
    """One event of ``name`` from a window answer: id, leaf, start."""
    rows = rows_of(client, profile)
    ov = client.get(f"/api/profiles/{profile}").json()
    t = client.get(f"/api/profiles/{profile}/tracks", params={"mode": "cpu_device", "layout": "tracks"}).json()
    names = [t["names"][i] for i in t["leaf_name"]]
    ev_rows = [r for r in rows if r["kind"] == "events" and any(rank_part in g for g in r["group"])]
    w = client.get(f"/api/profiles/{profile}/window", params={
        "mode": "cpu_device", "layout": "tracks", "rows": ",".join(str(r["idx"]) for r in ev_rows),
        "t0": 0, "t1": ov["duration_ns"] + 1, "px": 10_000}).json()
    for i, lf in enumerate(w["leaf"]):
        if names[lf] == name and w["c"][i] == 1:
            return {"id": w["id"][i], "leaf": lf, "s": w["s"][i], "e": w["e"][i], "names": names}
    raise AssertionError(f"no {name}")


def test_selected_event_flows_host_call_and_framework_chain(client: TestClient, ui_workspace: Path) -> None:
    ev = _event(client, "nc_exec_running")
    f = client.get("/api/profiles/run-a/event/flows", params={"id": ev["id"], "leaf": ev["leaf"], "s": ev["s"]}).json()
    names = ev["names"]
    assert f["event"][:2] == [ev["id"], ev["leaf"]]
    assert len(f["flows"]) == 1
    fl = f["flows"][0]
    assert fl["kind"] == "execution"
    assert {names[e[1]] for e in fl["ends"]} == {"nrt_execute", "nc_exec_running"}
    # the flow's members are exactly the events carrying its flow id in Parquet
    fid = int(fl["flow_id"])
    want = parquet(ui_workspace, "run-a",
                   f"SELECT id FROM EVENTS WHERE list_contains(flow_id, {fid}) ORDER BY start_ts, id")
    assert [int(e[0]) for e in fl["ends"]] == [r[0] for r in want]
    # its chain: events on the host call's thread enclosing the host call (each starts before, ends after it)
    host = next(e for e in fl["ends"] if names[e[1]] == "nrt_execute")
    for c in f["chain"]:
        assert c[2] <= host[2] and c[3] >= host[3], (c, host)
    # without the start, the same answer (the leaf's ids are scanned)
    assert client.get("/api/profiles/run-a/event/flows", params={"id": ev["id"], "leaf": ev["leaf"]}).json() == f
    assert client.get("/api/profiles/run-a/event/flows", params={"id": 10 ** 12, "leaf": ev["leaf"]}).status_code == 404


def test_collective_flow_spans_every_rank(synth: TestClient) -> None:
    ev = _event(synth, "cc_running", SYNTH, "rank 3")
    f = synth.get(f"/api/profiles/{SYNTH}/event/flows", params={"id": ev["id"], "leaf": ev["leaf"]}).json()
    fl = f["flows"][0]
    assert fl["kind"] == "collective" and len(fl["ends"]) == 32
    starts = [e[2] for e in fl["ends"]]
    assert starts == sorted(starts)  # arrival order
    t = synth.get(f"/api/profiles/{SYNTH}/tracks", params={"mode": "cpu_device", "layout": "tracks"}).json()
    assert t["leaf_rank"][fl["ends"][-1][1]] == STRAGGLER  # the last to arrive


# ---------------------------------------------------------------- busy shading, area statistics
def test_busy_share_is_the_union_of_intervals(client: TestClient, ui_workspace: Path) -> None:
    rows = rows_of(client, "run-a")
    ov = client.get("/api/profiles/run-a").json()
    origin = int(ov["origin_ns"])
    dur = ov["duration_ns"]
    for r in [r for r in rows if r["kind"] == "events"]:
        t0, t1, px = 0, dur, 50
        b = client.get("/api/profiles/run-a/busy", params={"mode": "cpu_device", "layout": "tracks",
                                                            "groups": str(r["idx"]), "t0": t0, "t1": t1,
                                                            "px": px}).json()
        g = b["groups"][0]
        got = np.frombuffer(base64.b64decode(g["busy"]), dtype=np.uint8) / 255
        cc = np.frombuffer(base64.b64decode(g["cc"]), dtype=np.uint8) / 255
        # per pixel (decision 0123): the busiest core execution's union of intervals; with no execution on
        # the track, the busiest host call's (framework regions never); collectives where no execution
        # covers them (exposed)
        t = client.get("/api/profiles/run-a/tracks", params={"mode": "cpu_device", "layout": "tracks"}).json()
        names = [t["names"][i] for i in t["leaf_name"]]
        src = parquet(ui_workspace, "run-a", "SELECT DISTINCT name, trace_event_source FROM EVENTS")
        framework = {n for n, so in src if so == "framework"}
        compute = np.zeros(px)
        host = np.zeros(px)
        want_cc = np.zeros(px)
        edges = np.linspace(t0, t1, px + 1)
        has_compute = any(names[lf] in ("nc_exec_running", "device_exec") for lf in r["leaves"])
        for lf in r["leaves"]:
            got_lf = parquet(ui_workspace, "run-a", f"""SELECT start_ts - {origin}, end_ts - {origin} FROM EVENTS
                WHERE name = '{names[lf]}' AND process_id = {int(r['group'][1].split()[1])}""")
            # (the leaf also splits by thread/core; on this 2-rank capture a name lives on one track per process)
            s = np.array([x[0] for x in got_lf], dtype=np.int64)
            e = np.array([x[1] for x in got_lf], dtype=np.int64)
            share = np.array([union_length(np.clip(s, a, z), np.clip(e, a, z)) / (z - a)
                              for a, z in zip(edges[:-1], edges[1:])])
            if names[lf].startswith("cc_"):
                np.maximum(want_cc, share, out=want_cc)
            elif names[lf] in ("nc_exec_running", "device_exec"):
                np.maximum(compute, share, out=compute)
            elif names[lf] not in framework and r["group"][-1] == "CPU":
                np.maximum(host, share, out=host)
        want = compute if has_compute else host
        want_cc = np.minimum(want_cc, 1 - compute)
        assert g["basis"] == ("compute" if has_compute else "host")
        assert np.allclose(got, want, atol=1.5 / 255), (r["label"], got, want)
        assert np.allclose(cc, want_cc, atol=1.5 / 255)


def test_area_statistics_against_parquet(client: TestClient, ui_workspace: Path) -> None:
    ov = client.get("/api/profiles/run-a").json()
    origin = int(ov["origin_ns"])
    rows = [r for r in rows_of(client, "run-a") if r["kind"] == "events"]
    t0, t1 = ov["duration_ns"] * 0.5, ov["duration_ns"]
    a = client.get("/api/profiles/run-a/area", params={"mode": "cpu_device", "layout": "tracks",
                                                        "rows": ",".join(str(r["idx"]) for r in rows),
                                                        "t0": t0, "t1": t1}).json()
    assert not a["approximate"]
    by_rank = {x["rank"]: x for x in a["ranks"]}
    assert set(by_rank) == {0, 1}
    for rank, x in by_rank.items():
        ev = parquet(ui_workspace, "run-a", f"""SELECT start_ts - {origin}, end_ts - {origin} FROM EVENTS
                     WHERE worker_gid = {rank} AND end_ts - {origin} >= {int(np.ceil(t0))}
                     AND start_ts - {origin} < {t1}""")
        s = np.array([e[0] for e in ev], dtype=np.int64)
        e = np.array([e[1] for e in ev], dtype=np.int64)
        assert x["count"] == len(ev)
        # a rank's busy time is its compute: the union of its core executions (decision 0123), never the
        # sum of durations and never its framework regions or host calls
        ex = parquet(ui_workspace, "run-a", f"""SELECT start_ts - {origin}, end_ts - {origin} FROM EVENTS
                     WHERE worker_gid = {rank} AND name = 'nc_exec_running' AND end_ts - {origin} >= {int(np.ceil(t0))}
                     AND start_ts - {origin} < {t1}""")
        xs = np.array([v[0] for v in ex], dtype=np.int64)
        xe = np.array([v[1] for v in ex], dtype=np.int64)
        span = t1 - t0
        lo, hi = int(np.ceil(t0)), int(t1)
        assert x["busy_ns"] == x["compute_ns"] == union_length(np.maximum(xs, lo), np.minimum(xe, hi))
        assert abs(x["compute_ns"] + x["cc_exposed_ns"] + x["idle_ns"] - span) <= 1
        rg = parquet(ui_workspace, "run-a", f"""SELECT start_ts - {origin}, end_ts - {origin} FROM EVENTS
                     WHERE worker_gid = {rank} AND trace_event_source = 'framework'
                     AND end_ts - {origin} >= {int(np.ceil(t0))} AND start_ts - {origin} < {t1}""")
        rs = np.array([v[0] for v in rg], dtype=np.int64)
        re_ = np.array([v[1] for v in rg], dtype=np.int64)
        assert x["region_ns"] == union_length(np.maximum(rs, lo), np.minimum(re_, hi))
        d = e - s
        assert x["min_ns"] == d.min() and x["max_ns"] == d.max()
        assert x["p50_ns"] == int(np.quantile(d, 0.5, method="inverted_cdf"))
        assert x["p99_ns"] == int(np.quantile(d, 0.99, method="inverted_cdf"))
        assert 0 <= x["busy_pct"] <= 100
    assert sum(x["count"] for x in a["tracks"]) == a["count"]


def test_collective_table_names_the_straggler_as_the_cli_rule_does(synth: TestClient, synth_ws: Path) -> None:
    ov = synth.get(f"/api/profiles/{SYNTH}").json()
    c = synth.get(f"/api/profiles/{SYNTH}/collectives", params={"mode": "cpu_device", "layout": "tracks",
                                                               "t0": 0, "t1": ov["duration_ns"]}).json()
    sm = c["summary"]
    assert sm["slowest_rank"] == STRAGGLER
    assert c["collectives"] and all(x["last_rank"] == STRAGGLER for x in c["collectives"])
    assert all(x["ranks"] == 32 for x in c["collectives"])
    # the same rule applied to the Parquet rows directly (key: the collective's flow id)
    got = duckdb.connect().execute(f"""SELECT flow_id[1], start_ts, worker_gid FROM
        read_parquet('{synth_ws / SYNTH}/SystemProfileEvents/**/*.parquet') WHERE name = 'cc_running'
        ORDER BY instance_id, process_id, start_ts""").fetchall()
    keys = np.array([g[0] for g in got], dtype=np.int64)
    want = summarize(arrivals(keys, np.array([g[1] for g in got]), np.array([g[2] for g in got])))
    for k in ("collectives_compared", "last_to_enter", "slowest_rank", "spread_ns_median", "spread_ns_max"):
        assert sm[k] == want[k], k
    spreads = sorted((x["spread_ns"] for x in c["collectives"]), reverse=True)
    assert [x["spread_ns"] for x in c["collectives"]] == spreads  # widest first


def test_shared_straggler_rule_agrees_with_the_cli_summary() -> None:
    """contracts.stragglers (the UI's) and analysis.align.stragglers (the CLI summary's) on the same input."""
    from neuron_explorer.analysis.align import CollectiveIndex, stragglers

    rng = np.random.default_rng(11)
    for trial in range(20):
        index = CollectiveIndex()
        pair = index.pair_id("world", "all_reduce")
        entries = []
        ks, st, rk = [], [], []
        for rank in range(int(rng.integers(1, 9))):
            seqs = np.sort(rng.choice(40, size=int(rng.integers(0, 40)), replace=False))
            keys = (pair << 40) | seqs.astype(np.int64)
            start = rng.integers(0, 50, len(keys)).astype(np.int64) * 1000 + seqs * 100_000  # ties happen
            entries.append((rank, "i-0", (keys, start, start + 10)))
            ks.append(keys); st.append(start); rk.append(np.full(len(keys), rank))
        cli = stragglers(entries, {}, index)
        if not ks or not sum(len(k) for k in ks):
            continue

        def describe(key: int, index: CollectiveIndex = index) -> dict:
            g, q, o = index.describe(key)
            return {"group": g, "seq": int(q), "op": o}

        ui = summarize(arrivals(np.concatenate(ks), np.concatenate(st), np.concatenate(rk)), describe)
        assert ui == cli, trial


def test_activity_range_skips_start_up(synth: TestClient) -> None:
    a = synth.get(f"/api/profiles/{SYNTH}/activity").json()
    ov = synth.get(f"/api/profiles/{SYNTH}").json()
    assert 0 <= a["t0"] < a["t1"] <= ov["duration_ns"]
    assert sum(a["bins"]) == a["events"] == ov["events"]


# ---------------------------------------------------------------- device trace on system time
def test_device_trace_on_system_time(client: TestClient, device_ref: dict) -> None:
    dev = client.get("/api/profiles/run-a/device/dp-0").json()
    sysf = client.get("/api/profiles/run-a/device/dp-0", params={"frame": "system"}).json()
    ov = client.get("/api/profiles/run-a").json()
    assert sysf["origin_ns"] == ov["origin_ns"] and dev["start_ns"] == 0
    assert int(dev["origin_ns"]) - int(ov["origin_ns"]) == sysf["start_ns"]
    # the execution it covers starts where the device trace starts, on the system timeline's axis
    ev = _event(client, "nc_exec_running")
    assert sysf["start_ns"] == ev["s"]
    w = client.get("/api/profiles/run-a/device/dp-0/window", params={
        "frame": "system", "rows": "0-4", "t0": ev["s"], "t1": ev["e"] + 1, "px": 10_000}).json()
    assert min(w["s"]) == ev["s"]
    e = client.get("/api/profiles/run-a/device/dp-0/event", params={"frame": "system", "row": w["row"][0],
                                                                    "start": w["s"][0]}).json()
    assert int(e["origin_ns"]) + e["relative"]["start"] == int(e["properties"]["start_ts"])
    r = client.get("/api/profiles/run-a/device/dp-0", params={"frame": "wall"})
    assert r.status_code == 400 and "frame" in r.json()["error"]


# ---------------------------------------------------------------- search, progress, rows
def test_search_arguments_k_of_n(synth: TestClient, synth_ws: Path) -> None:
    s = synth.get(f"/api/profiles/{SYNTH}/search",
                  params={"mode": "cpu_device", "layout": "tracks", "q": "bwd_gr"}).json()
    want = duckdb.connect().execute(f"""SELECT count(*)
                                        FROM read_parquet('{synth_ws / SYNTH}/SystemProfileEvents/**/*.parquet')
                                        WHERE model_name = 'bwd_graph'""").fetchall()[0][0]
    assert s["n"] == want and {"column": "model_name", "value": "bwd_graph"} in s["args"]
    r1 = synth.get(f"/api/profiles/{SYNTH}/search/next", params={"q": "bwd_gr", "after": -1, "dir": 1}).json()
    assert r1["found"] and r1["k"] == 1 and r1["n"] == want
    r2 = synth.get(f"/api/profiles/{SYNTH}/search/next", params={"q": "bwd_gr", "after": r1["s"], "dir": 1,
                                                                 "leaf": r1["leaf"], "id": r1["id"]}).json()
    assert r2["k"] == 2 and (r2["s"], r2["leaf"]) >= (r1["s"], r1["leaf"])
    back = synth.get(f"/api/profiles/{SYNTH}/search/next", params={"q": "bwd_gr", "after": r2["s"], "dir": -1,
                                                                   "leaf": r2["leaf"], "id": r2["id"]}).json()
    assert back["k"] == 1 and back["id"] == r1["id"]


def test_status_shows_progress_then_ready(synth_ws: Path, tmp_path: Path) -> None:
    c = TestClient(create_app(synth_ws, cache_dir=tmp_path / "cache"))
    first = c.get(f"/api/profiles/{SYNTH}/status").json()
    assert first["state"] in ("preparing", "ready") and 0 <= first["fraction"] <= 1
    seen = [first]
    deadline = time.monotonic() + 120
    while seen[-1]["state"] != "ready" and time.monotonic() < deadline:
        time.sleep(0.05)
        seen.append(c.get(f"/api/profiles/{SYNTH}/status").json())
    assert seen[-1]["state"] == "ready" and seen[-1]["fraction"] == 1.0
    fr = [s["fraction"] for s in seen]
    assert fr == sorted(fr)  # never goes back
    assert c.get("/api/profiles/nope/status").status_code == 404


def test_tracks_layout_places_every_leaf_once(client: TestClient) -> None:
    for mode in ("cpu_device", "neuroncore", "thread", "process", "instance"):
        t = client.get("/api/profiles/run-a/tracks", params={"mode": mode, "layout": "tracks"}).json()
        leaves = [lf for r in t["rows"] if r["kind"] == "events" for lf in r["leaves"]]
        assert sorted(leaves) == list(range(len(t["leaf_name"]))), mode
    assert client.get("/api/profiles/run-a/tracks", params={"layout": "lanes"}).status_code == 400


def test_memory_counters_used_against_total_and_device_memory_by_category(ui_workspace: Path, tmp_path: Path) -> None:
    import shutil

    ws = tmp_path / "ws"
    shutil.copytree(ui_workspace / "run-a", ws / "mem")
    meta = duckdb.connect().execute("SELECT instance_id, process_id "
                                    f"FROM read_parquet('{ws / 'mem' / 'ProfileMetadata.parquet'}')").fetchall()
    inst, pid = meta[0]
    ov_ts = duckdb.connect().execute(
        f"SELECT min(ts) FROM read_parquet('{ws / 'mem'}/SystemProfileCounters/**/*.parquet')").fetchall()[0][0]
    # the capture already samples device memory by category (parameters, gradients, ...): the synthetic
    # categories are added to that process's own series
    own = {r[0] for r in duckdb.connect().execute(
        f"SELECT DISTINCT counter FROM read_parquet('{ws / 'mem'}/SystemProfileCounters/**/*.parquet') "
        f"WHERE counter LIKE 'device_mem.nc0.%' AND process_id = {int(pid)}").fetchall()}
    cats = ["weights", "activations", "collectives"]
    want = own | {f"device_mem.nc0.{c}" for c in cats}
    n = 5
    tbl = pa.table({"instance_id": [inst] * (n * 3), "process_id": np.full(n * 3, pid, dtype=np.int64),
                    "ts": np.tile(ov_ts + np.arange(n, dtype=np.int64) * 1000, 3),
                    "counter": np.repeat([f"device_mem.nc0.{c}" for c in cats], n),
                    "value": np.arange(n * 3, dtype=np.float64) * 1e6, "unit": ["bytes"] * (n * 3)})
    d = ws / "mem" / "SystemProfileCounters" / f"instance={inst}" / f"process={pid}"
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(tbl, d / "devmem.parquet")
    c = TestClient(create_app(ws, cache_dir=tmp_path / "cache"))
    rows = c.get("/api/profiles/mem/tracks", params={"mode": "cpu_device"}).json()["rows"]
    host = next(r for r in rows if r["label"].startswith("Host memory (used"))
    assert host["style"] == "used_total"  # used against a total line, not stacked
    dm = [r for r in rows if r["label"].startswith("Device memory · NC 0")]
    assert len(dm) == 1 and dm[0]["series"] == sorted(want)
    assert dm[0]["group"][-1] == "Device"  # with the core's tracks
    got = c.get("/api/profiles/mem/counters", params={"mode": "cpu_device", "rows": str(dm[0]["idx"]), "t0": 0,
                                                       "t1": 10 ** 12, "px": 1000}).json()["rows"][str(dm[0]["idx"])]
    assert set(got) == want


def test_device_profiles_list_leads_with_model_core_executions_flops(client: TestClient) -> None:
    dps = client.get("/api/profiles/run-a/device-profiles").json()["device_profiles"]
    keys = list(dps[0])
    assert keys[:2] == ["model_name", "nc_idx"]
    assert keys.index("model_name") < keys.index("profile_id") and keys.index("nc_idx") < keys.index("instance_id")


def test_coverage_matches_a_per_pixel_reference() -> None:
    """busy.coverage (vectorized over keys) against clipping each interval to each pixel, at absolute
    times like a real profile's and at nanosecond pixels."""
    from neuron_explorer.ui.busy import coverage

    rng = np.random.default_rng(4)
    for t0, span, px in ((3.6e12, 1e9, 97), (5e12, 2_000.0, 40), (0.0, 1e11, 300)):
        n = 3
        s = t0 - span * 0.2 + rng.uniform(0, span * 1.3, 200)
        e = s + rng.exponential(span / 30, 200)
        rho = rng.uniform(0.1, 1, 200)
        key = rng.integers(0, n, 200)
        got = coverage(s, e, rho, key, n, t0, t0 + span, px)
        edges = t0 + span * np.arange(px + 1) / px
        want = np.zeros((n, px))
        for a, b, r, k in zip(s, e, rho, key):
            want[k] += r * np.clip(np.minimum(b, edges[1:]) - np.maximum(a, edges[:-1]), 0, None) / (span / px)
        assert np.allclose(got, np.clip(want, 0, 1), atol=1e-6), (t0, span)


# ---------------------------------------------------------------- the new endpoints keep the old guarantees
NEW_ENDPOINTS = ["/status", "/busy?groups=0&t0=0&t1=10&px=5", "/activity", "/nonempty?t0=0&t1=10",
                 "/area?t0=0&t1=10", "/collectives?t0=0&t1=10", "/event/flows?id=1&leaf=0"]


@pytest.mark.parametrize("ep", NEW_ENDPOINTS)
@pytest.mark.parametrize("name", ["..", "..%2F..%2Fetc", "%2Fetc%2Fpasswd", ".hidden", "%2E%2E", "run-a%00"])
def test_new_endpoints_cannot_escape_the_workspace(client: TestClient, name: str, ep: str) -> None:
    r = client.get(f"/api/profiles/{name}{ep}")
    assert r.status_code in (400, 403, 404), (name, ep, r.status_code)
    assert "ProfileMetadata" not in r.text and "root:" not in r.text


def test_new_endpoints_refuse_symlinked_profiles(ui_workspace: Path, tmp_path: Path) -> None:
    import os
    import shutil

    outside = tmp_path / "outside"
    shutil.copytree(ui_workspace / "run-b", outside)
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(outside, ws / "linked")
    c = TestClient(create_app(ws, cache_dir=tmp_path / "cache"))
    for ep in NEW_ENDPOINTS:
        assert c.get(f"/api/profiles/linked{ep}").status_code == 403, ep


def test_new_endpoints_bad_parameters_are_400(client: TestClient) -> None:
    base = "/api/profiles/run-a"
    bad = [("/busy", {"groups": "0", "t0": 0, "t1": 10, "px": 5, "layout": "lanes"}),
           ("/busy", {"groups": "999999", "t0": 0, "t1": 10, "px": 5}),
           ("/busy", {"groups": ";".join(["0"] * 5000), "t0": 0, "t1": 10, "px": 5}),
           ("/busy", {"groups": "0", "t0": 10, "t1": 0, "px": 5}),
           ("/area", {"t0": 0, "t1": "nan"}), ("/area", {"t0": 0, "t1": 10, "mode": "nope"}),
           ("/collectives", {"t0": 0, "t1": 10, "rows": "a-b"}),
           ("/nonempty", {"t0": "x", "t1": 10}),
           ("/event/flows", {"id": "x", "leaf": 0}), ("/event/flows", {"id": 1}),
           ("/search/next", {"q": "nrt", "after": 0, "dir": 1, "leaf": "x", "id": 1})]
    for ep, params in bad:
        r = client.get(base + ep, params=params)
        assert r.status_code == 400, (ep, params, r.status_code, r.text)
        assert "error" in r.json()
    r = client.get(base + "/event/flows", params={"id": 1, "leaf": 10 ** 6})
    assert r.status_code == 404


def test_each_cores_device_memory_track_sits_with_that_core(ui_workspace: Path, tmp_path: Path) -> None:
    """A process with two cores: its Device group reads NC 0's tracks, NC 0's memory, NC 1's tracks,
    NC 1's memory (the memory rows once all came before the first core), in both layouts; in the
    NeuronCore mode each core's memory is in that core's group, after its events."""
    import shutil

    ws = tmp_path / "ws"
    shutil.copytree(ui_workspace / "run-a", ws / "cores")
    inst, pid = duckdb.connect().execute(
        f"SELECT instance_id, process_id FROM read_parquet('{ws / 'cores' / 'ProfileMetadata.parquet'}') "
        "ORDER BY process_id LIMIT 1").fetchall()[0]
    (part,) = (ws / "cores" / "SystemProfileEvents" / f"instance={inst}" / f"process={pid}").glob("*.parquet")
    ev = pq.read_table(part)
    # the process's core executions again on NC 1 (new ids): a second core with its own tracks
    import pyarrow.compute as pc

    more = ev.filter(pc.equal(ev["name"], "nc_exec_running"))
    more = more.set_column(more.schema.get_field_index("nc_idx"), "nc_idx",
                           pa.array([1] * more.num_rows, type=ev.schema.field("nc_idx").type))
    more = more.set_column(more.schema.get_field_index("id"), "id", pc.add(more["id"], 10_000_000))
    pq.write_table(pa.concat_tables([ev, more]), part)
    ts = duckdb.connect().execute(
        f"SELECT min(ts) FROM read_parquet('{ws / 'cores'}/SystemProfileCounters/**/*.parquet')").fetchall()[0][0]
    names = [f"device_mem.nc{nc}.{c}" for nc in (0, 1) for c in ("weights", "activations")]
    tbl = pa.table({"instance_id": [inst] * 4, "process_id": np.full(4, pid, dtype=np.int64),
                    "ts": np.full(4, ts, dtype=np.int64), "counter": names,
                    "value": np.arange(4, dtype=np.float64), "unit": ["bytes"] * 4})
    d = ws / "cores" / "SystemProfileCounters" / f"instance={inst}" / f"process={pid}"
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(tbl, d / "devmem2.parquet")
    c = TestClient(create_app(ws, cache_dir=tmp_path / "cache"))

    def core_of(r: dict) -> int:
        text = r["label"] if r["kind"] == "counter" or r["label"].startswith("NC") else r["label"].split(" · ")[-1]
        return int(text.split("NC ")[1].split()[0])

    for layout in ("tracks", "names"):
        rows = c.get("/api/profiles/cores/tracks", params={"mode": "cpu_device", "layout": layout}).json()["rows"]
        dev = [r for r in rows if r["group"][:3] == [inst, rows_proc_label(rows, pid), "Device"]]
        seq = [(core_of(r), r["kind"]) for r in dev]
        assert [k for _, k in seq].count("counter") == 2, seq
        # cores ascend, and each core's memory row is the last of that core's rows
        assert [nc for nc, _ in seq] == sorted(nc for nc, _ in seq), seq
        for nc in (0, 1):
            mine = [k for n, k in seq if n == nc]
            assert mine[-1] == "counter" and mine.count("counter") == 1 and len(mine) >= 2, (layout, seq)
    rows = c.get("/api/profiles/cores/tracks", params={"mode": "neuroncore", "layout": "tracks"}).json()["rows"]
    for nc in (0, 1):  # the core's track, then its memory, in the same group (no second "NC n" group, issue 35)
        (track,) = [i for i, r in enumerate(rows) if r["kind"] == "events" and r["label"] == f"NC {nc}"]
        mem = [i for i, r in enumerate(rows) if r["kind"] == "counter" and r["group"] == rows[track]["group"]
               and r["label"].startswith(f"Device memory · NC {nc}")]
        assert mem and mem[0] == track + 1, (nc, track, mem)


def rows_proc_label(rows: list[dict], pid: int) -> str:
    return next(r["group"][1] for r in rows if len(r["group"]) > 1 and r["group"][1].startswith(f"pid {pid}"))
