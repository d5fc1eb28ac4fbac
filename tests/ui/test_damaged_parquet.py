"""Parquet files damaged so that DuckDB's reader fails with an *internal* error, which invalidates the
whole database it ran on (every later query of any profile fails): a damaged summary falls back to
the events, a damaged events file fails its own profile with one line, and the workspace's other
profiles keep answering."""

from __future__ import annotations

import shutil
import struct
import threading
from pathlib import Path

import duckdb
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
pq = pytest.importorskip("pyarrow.parquet")

from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.contracts.dataset import EVENT_OVERVIEW, EVENT_SUMMARY, EVENTS, table_file  # noqa: E402
from neuron_explorer.ui.app import create_app  # noqa: E402

from .test_cold_open import P, _queries, _until  # noqa: E402


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | 0x80 if v else b)
        if not v:
            return bytes(out)


def _negative_chunk_size(f: Path) -> None:
    """Make the first column chunk's compressed size negative in the footer (thrift compact: the
    zigzag varint right after the uncompressed size; its low bits all set is an odd, so negative,
    value of the same length)."""
    data = bytearray(f.read_bytes())
    cc = pq.ParquetFile(f).metadata.row_group(0).column(0)
    zz = lambda v: v << 1  # noqa: E731 - positive values
    size = _varint(zz(cc.total_compressed_size))
    pat = b"\x16" + _varint(zz(cc.total_uncompressed_size)) + b"\x16" + size
    footer = len(data) - 8 - struct.unpack("<I", data[-8:-4])[0]
    j = data.index(pat, footer) + len(pat) - len(size)
    data[j] = 0xFF if data[j] & 0x80 else 0x7F
    f.write_bytes(bytes(data))


def _kills_duckdb(f: Path) -> bool:
    con = duckdb.connect()
    try:
        con.execute(f"SELECT * FROM read_parquet('{f}')").fetchall()
    except duckdb.Error:
        pass
    try:
        con.execute("SELECT 1").fetchall()
        return False
    except duckdb.Error:
        return True
    finally:
        con.close()


def _damaged_copy(ws: Path, dst: Path, table: str) -> Path:
    shutil.copytree(ws, dst)
    (dst / P / table_file(EVENT_OVERVIEW)).unlink(missing_ok=True)  # the summaries' and events' fallbacks
    f = sorted((dst / P / table).rglob("*.parquet"))[0]
    _negative_chunk_size(f)
    if not _kills_duckdb(f):
        pytest.skip("this DuckDB no longer invalidates its database on a negative column chunk size")
    return dst


def test_a_summary_that_kills_duckdb_falls_back_to_the_events(ui_workspace: Path, tmp_path: Path) -> None:
    ref = TestClient(create_app(ui_workspace, cache_dir=tmp_path / "ref"))
    ref.get(f"/api/profiles/{P}/activity")
    want = _queries(ref)
    ws = _damaged_copy(ui_workspace, tmp_path / "ws", EVENT_SUMMARY)
    app = create_app(ws, cache_dir=tmp_path / "c")
    gate = app.state.workspace.index_gate = threading.Event()
    app.state.workspace.coarse_min_events = 0
    c = TestClient(app)
    try:
        st = _until(c, lambda s: s.get("coarse") or s["state"] != "preparing", "the coarse level")
        assert st["coarse"], st
        # the damaged process was scanned from its events, the other from its summary
        assert app.state.workspace.profile(P, wait=False).first_paint_from == "events+summary"
        ov, w, _ = _queries(c)
        assert ov["events"] == want[0]["events"] == sum(w["c"])
    finally:
        gate.set()
    _until(c, lambda s: s["state"] == "ready", "the index")
    assert _queries(c)[1:] == want[1:]
    assert c.get("/api/profiles").json()  # the workspace's database still answers


def test_an_events_file_that_kills_duckdb_fails_only_its_profile(ui_workspace: Path, tmp_path: Path) -> None:
    ws = _damaged_copy(ui_workspace, tmp_path / "ws", EVENTS)
    c = TestClient(create_app(ws, cache_dir=tmp_path / "c"))
    before = c.get("/api/profiles/run-b/summary").json()  # run-b prepared on the database run-a will kill
    r = c.get(f"/api/profiles/{P}/summary")
    assert r.status_code == 500, r.text
    err = r.json()["error"]
    assert err.startswith(f"cannot read profile {P!r}: ") and "\n" not in err, err
    # run-b answers as before (prepared again on a new database), and the workspace still lists both
    assert c.get("/api/profiles/run-b/summary").json() == before
    assert {p["name"] for p in c.get("/api/profiles").json()["profiles"]} >= {"run-b"}
    # asking again gives the same one line, not a dead database's message
    r = c.get(f"/api/profiles/{P}/summary")
    assert r.status_code == 500 and "database has been invalidated" not in r.text, r.text
