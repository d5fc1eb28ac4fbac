"""``/device-spans``: every device profile's core, span and engines in one answer (the device lanes of
the System Trace Viewer; decision 0137), checked against the Parquet tables and against each profile's
own overview, whose row numbers the device windows use."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.ui import device  # noqa: E402
from neuron_explorer.ui.app import create_app  # noqa: E402

from .helpers import add_device_profiles_per_execution  # noqa: E402

NAME = "spans"


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bench.ui_bench import write_store

    root = tmp_path_factory.mktemp("spans")
    write_store(root / NAME, 1, 2, 20_000, seed=5)
    add_device_profiles_per_execution(root / NAME, [0, 1], 140)
    return root


@pytest.fixture(scope="module")
def client(ws: Path, tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    return TestClient(create_app(ws, cache_dir=tmp_path_factory.mktemp("cache")))


def test_spans_match_parquet_and_each_overview(client: TestClient, ws: Path) -> None:
    r = client.get(f"/api/profiles/{NAME}/device-spans")
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["total"] == 280 == len(d["profiles"])  # past the 256 once laned
    origin = int(client.get(f"/api/profiles/{NAME}").json()["origin_ns"])
    want = {pid: (a - origin, b - origin) for pid, a, b in duckdb.connect().execute(
        "SELECT profile_id, min(start_ts), max(end_ts) "
        f"FROM read_parquet('{ws / NAME}/DeviceProfileEvents/**/*.parquet') GROUP BY 1").fetchall()}
    starts = [p["start_ns"] for p in d["profiles"]]
    assert starts == sorted(starts)  # earliest first
    for p in d["profiles"]:
        assert (p["start_ns"], p["end_ns"]) == want[p["profile_id"]]
        assert p["instance_id"] and p["process_id"] in (10_000, 10_001) and p["nc_idx"] in (0, 1)
    # the engines in the order of the profile's own overview rows (the device window's row numbers)
    for p in d["profiles"][::70]:
        ov = client.get(f"/api/profiles/{NAME}/device/{p['profile_id']}", params={"frame": "system"}).json()
        assert p["tracks"] == [row["label"] for row in ov["rows"]]
        assert p["start_ns"] == ov["start_ns"]


def test_spans_are_bounded_and_say_how_many_there_are(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "SPANS_MAX", 50)
    d = client.get(f"/api/profiles/{NAME}/device-spans").json()
    assert len(d["profiles"]) == 50 and d["total"] == 280 and d["limit"] == 50


def test_a_profile_without_device_profiles_has_no_spans(tmp_path: Path) -> None:
    from bench.ui_bench import write_store

    write_store(tmp_path / "plain", 1, 1, 2_000, seed=1)
    c = TestClient(create_app(tmp_path, cache_dir=tmp_path / "cache"))
    assert c.get("/api/profiles/plain/device-spans").json() == {"profiles": [], "total": 0, "limit": device.SPANS_MAX}
