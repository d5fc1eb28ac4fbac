"""The UI server under hostile requests: foreign Host headers (DNS rebinding), non-finite or huge
numbers in query parameters, profiles removed while the server runs, impossible ports."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.ui.app import create_app  # noqa: E402
from neuron_explorer.ui.server import HostPolicy, split_host_header  # noqa: E402
from tests.conftest import clean_env, free_port  # noqa: E402

from .helpers import start_server, stop_server  # noqa: E402


def raw_get(port: int, path: str, host: str | None, http10: bool = False) -> tuple[int, bytes]:
    """One request written by hand, so that the Host header is exactly what an attacker's page sends."""
    lines = [f"GET {path} HTTP/{'1.0' if http10 else '1.1'}"]
    if host is not None:
        lines.append(f"Host: {host}")
    lines += ["Connection: close", "", ""]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall("\r\n".join(lines).encode("latin-1"))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.fixture(scope="module")
def server(ui_workspace: Path, tmp_path_factory: pytest.TempPathFactory):
    port = free_port()
    p, url = start_server(ui_workspace, port, clean_env(XDG_CACHE_HOME=str(tmp_path_factory.mktemp("xdg"))))
    yield port
    stop_server(p)


@pytest.mark.parametrize("host", ["evil.example:{port}", "attacker.test", "127.0.0.1.evil.example:{port}",
                                  "localhost.evil.example:{port}", "127.0.0.1:{other}", "localhost:{other}",
                                  "127.0.0.1", "", "[::1", "evil.example:{port}:{port}", "10.0.0.5:{port}"])
def test_a_foreign_host_header_is_refused(server: int, host: str) -> None:
    h = host.format(port=server, other=server + 1 if server < 65535 else server - 1)
    for path in ("/api/profiles", "/api/profiles/run-a/tracks", "/", "/static/app.js"):
        status, body = raw_get(server, path, h)
        assert status == 403, (h, path, status)
        assert b"run-a" not in body and b"does not name this server" in body


def test_no_host_header_is_refused(server: int) -> None:
    status, body = raw_get(server, "/api/profiles", None, http10=True)
    assert status == 403 and b"run-a" not in body


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "[::1]:{port}",
                                  "127.0.0.2:{port}", "localhost.:{port}"])
def test_the_served_address_is_answered(server: int, host: str) -> None:
    status, body = raw_get(server, "/api/profiles", host.format(port=server))
    assert status == 200 and b"run-a" in body


def test_host_policy_of_non_loopback_binds() -> None:
    """What `--host` opts into (no test binds a non-loopback address: checked on the policy itself)."""
    lan = HostPolicy("192.168.7.9", 3001)
    assert lan.allows("192.168.7.9:3001") and lan.allows("127.0.0.1:3001") and lan.allows("10.1.2.3:3001")
    assert not lan.allows("evil.example:3001") and not lan.allows("192.168.7.9:3002")
    named = HostPolicy("profiles.internal", 8080)
    assert named.allows("profiles.internal:8080") and named.allows("PROFILES.INTERNAL:8080")
    assert not named.allows("evil.example:8080")
    wild = HostPolicy("0.0.0.0", 3001)
    assert wild.allows(f"{socket.gethostname()}:3001") and wild.allows("172.16.0.4:3001")
    assert wild.allows("[fe80::1]:3001") and not wild.allows("evil.example:3001")
    loop = HostPolicy("127.0.0.1", 80)
    assert loop.allows("localhost") and loop.allows("127.0.0.1:80") and not loop.allows("10.0.0.1")
    assert split_host_header("[::1]:3001") == ("::1", 3001) and split_host_header("a:b") is None


@pytest.fixture(scope="module")
def client(ui_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    return TestClient(create_app(ui_workspace, cache_dir=tmp_path_factory.mktemp("cache")))


BAD_NUMBERS = ["inf", "-inf", "nan", "NaN", "1e308", "-1e308", "1e400", "4.7e18", "-9223372036854775809"]


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_non_finite_or_huge_numbers_are_400_not_500(client: TestClient, value: str, device_ref: dict) -> None:
    base = "/api/profiles/run-a"
    ok = {"t0": "0", "t1": "1000000", "px": "100", "rows": "0-3"}
    cases = [(f"{base}/{ep}", {**ok, k: value}) for ep in ("window", "counters") for k in ("t0", "t1", "px")]
    cases += [(f"{base}/flows", {"t0": value, "t1": "1"}), (f"{base}/flows", {"t0": "0", "t1": value}),
              (f"{base}/summary", {"t0": value, "t1": "1"}), (f"{base}/summary", {"t0": "-1", "t1": value}),
              (f"{base}/event", {"id": value}), (f"{base}/search/next", {"q": "nrt", "after": value}),
              (f"{base}/search/next", {"q": "nrt", "after": "0", "dir": value}),
              (f"{base}/device/dp-0/window", {**ok, "t0": value}), (f"{base}/device/dp-0/window", {**ok, "t1": value}),
              (f"{base}/device/dp-0/event", {"row": "0", "start": value}),
              (f"{base}/device/dp-0/event", {"row": value, "start": "0"})]
    for path, params in cases:
        r = client.get(path, params=params)
        assert r.status_code == 400, (path, params, r.status_code, r.text[:300])
        assert "error" in r.json()


def test_extreme_but_finite_windows_are_answered(client: TestClient) -> None:
    """The widest window the server accepts (+-2^62 ns) still gives an answer, not a failed query."""
    for ep in ("window", "counters"):
        r = client.get(f"/api/profiles/run-a/{ep}",
                       params={"t0": str(-(1 << 62)), "t1": str(1 << 62), "px": "20000", "rows": "0-3"})
        assert r.status_code == 200, (ep, r.text[:300])
    r = client.get("/api/profiles/run-a/device/dp-0/window", params={"t0": "-4e18", "t1": "4e18", "px": "500",
                                                                      "rows": "0-4"})
    assert r.status_code == 200, r.text[:300]


def test_a_profile_removed_while_the_server_runs_is_404(ui_workspace: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(ui_workspace / "run-b", ws / "gone")
    shutil.copytree(ui_workspace / "run-b", ws / "kept")
    c = TestClient(create_app(ws, cache_dir=tmp_path / "cache"))
    win = {"t0": "0", "t1": "1000000000", "px": "200", "rows": "0-8"}
    assert c.get("/api/profiles/gone/window", params=win).status_code == 200  # prepared and cached
    shutil.rmtree(ws / "gone")
    for ep, params in (("", {}), ("/tracks", {}), ("/window", win), ("/event", {"id": "1"}),
                       ("/summary", {"t0": "0", "t1": "1e9"}), ("/counters", win)):
        r = c.get(f"/api/profiles/gone{ep}", params=params)
        assert r.status_code == 404, (ep, r.status_code, r.text[:300])
        assert "no longer in the workspace" in r.json()["error"] or "not found" in r.json()["error"]
    assert [p["name"] for p in c.get("/api/profiles").json()["profiles"]] == ["kept"]
    assert c.get("/api/profiles/kept/window", params=win).status_code == 200
    # put back (re-ingested) under the same name: served again, from the new files
    shutil.copytree(ui_workspace / "run-b", ws / "gone")
    assert c.get("/api/profiles/gone/window", params=win).status_code == 200


def test_a_profile_whose_event_files_vanish_mid_use_is_not_a_500(ui_workspace: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(ui_workspace / "run-b", ws / "p")
    c = TestClient(create_app(ws, cache_dir=tmp_path / "cache"))
    assert c.get("/api/profiles/p").status_code == 200
    shutil.rmtree(ws / "p" / "SystemProfileEvents")  # the metadata stays: the profile is damaged, not gone
    r = c.get("/api/profiles/p/event", params={"id": "1"})
    assert r.status_code in (404, 500) and "error" in r.json(), r.text[:300]
    assert "Traceback" not in r.text


@pytest.mark.parametrize("port", ["70000", "0", "-1"])
def test_an_impossible_port_is_a_one_line_usage_error(ui_workspace: Path, port: str) -> None:
    p = subprocess.run([sys.executable, "-m", "neuron_explorer.ui.server", str(ui_workspace), "127.0.0.1", port],
                       capture_output=True, text=True, timeout=60, env=clean_env())
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0 and f"--port {port}" in p.stderr and "1 to 65535" in p.stderr
