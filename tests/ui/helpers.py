"""Helpers shared by the UI tests: hand-made device-profile tables and a served workspace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ENGINES = ["pe", "act", "pool", "dma_q0", "dma_q1"]


def add_device_profile(profile_dir: Path) -> dict:
    """Write DeviceProfiles.parquet and DeviceProfileEvents/ for the first nc_exec_running of rank 0.

    The device-profile table does not exist in the store yet (another issue produces it); these are
    the columns the UI is built against, with ops on five engines laid over that execution.
    """
    con = duckdb.connect()
    ev = con.execute(f"""SELECT instance_id, process_id, nc_idx, model_name, exec_id, start_ts, end_ts
                         FROM read_parquet('{profile_dir}/SystemProfileEvents/**/*.parquet')
                         WHERE name = 'nc_exec_running' AND worker_gid = 0 ORDER BY start_ts LIMIT 1""").fetchall()[0]
    inst, pid, nc, model, exec_id, s, e = ev
    rows = {k: [] for k in ("profile_id", "instance_id", "process_id", "nc_idx", "model_name", "exec_id", "name",
                            "track", "start_ts", "end_ts", "duration_ns", "flops", "bytes", "extra_attributes_json")}
    span = max(e - s, 1000)
    n = 40
    for i in range(n):
        eng = ENGINES[i % len(ENGINES)]
        a = s + span * i // n
        b = a + max(span // (n * 2), 1)
        for k, v in (("profile_id", "dp-0"), ("instance_id", inst), ("process_id", pid), ("nc_idx", nc),
                     ("model_name", model), ("exec_id", exec_id), ("name", f"{'matmul' if eng == 'pe' else 'op'}_{i}"),
                     ("track", eng), ("start_ts", a), ("end_ts", b), ("duration_ns", b - a), ("flops", 1000 * i),
                     ("bytes", 64 * i),
                     ("extra_attributes_json", json.dumps({"instruction": f"inst_{i}", "engine": eng}))):
            rows[k].append(v)
    d = profile_dir / "DeviceProfileEvents" / f"instance={inst}" / f"process={pid}"
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows), d / "part-0.parquet")
    info = {"profile_id": ["dp-0"], "instance_id": [inst], "process_id": [pid], "nc_idx": [nc], "model_name": [model],
            "exec_id_first": [exec_id], "exec_id_last": [exec_id]}
    pq.write_table(pa.table(info), profile_dir / "DeviceProfiles.parquet")
    return {"instance_id": inst, "process_id": pid, "nc_idx": nc, "model_name": model, "exec_id": exec_id}


def start_server(workspace: Path, port: int, env: dict[str, str],
                 argv: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    """Run the real ``serve()`` in a child process (``argv``: another command than ``python -m
    neuron_explorer.ui.server``, given the same arguments); return it and the URL it printed."""
    argv = argv or [sys.executable, "-m", "neuron_explorer.ui.server"]
    p = subprocess.Popen([*argv, str(workspace), "127.0.0.1", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    url = p.stdout.readline().strip()
    if not url.startswith("http://"):
        p.kill()
        raise AssertionError(f"server did not print its URL: {url!r} {p.stderr.read()[-2000:]}")
    import urllib.request

    for _ in range(100):
        try:
            urllib.request.urlopen(url + "api/profiles", timeout=2).read()
            break
        except OSError:
            time.sleep(0.1)
    return p, url


def serve_for_module(workspace: Path, tmp_path_factory: pytest.TempPathFactory):
    """The body of a module fixture: a UI server on ``workspace`` with its own cache directory,
    yielding its URL and stopped after the module's tests."""
    from tests.conftest import clean_env, free_port

    env = clean_env(XDG_CACHE_HOME=str(tmp_path_factory.mktemp("xdg-cache")))
    p, url = start_server(workspace, free_port(), env)
    assert url.startswith("http://127.0.0.1:"), url
    try:
        yield url
    finally:
        stop_server(p)


def serve_capture(capture: Path, base: Path, name: str):
    """The body of a module fixture: ``capture`` ingested by ``view --ingest-only`` into a
    workspace under ``base`` as profile ``name`` and served (this tree on PYTHONPATH), yielding the
    URL and stopped after the module's tests."""
    from tests.conftest import clean_env, cli, free_port

    ws, path = base / "workspace", os.environ.get("PYTHONPATH", "")
    cli("view", "-d", str(capture), "--ingest-only", "--data-path", str(ws), "--display-name", name,
        "--no-progress", env=clean_env(PYTHONPATH=path), check=True)
    assert (ws / name / "summary.json").is_file()
    p, url = start_server(ws, free_port(), clean_env(XDG_CACHE_HOME=str(base / "cache"), PYTHONPATH=path))
    try:
        yield url
    finally:
        stop_server(p)


def summary_insight(pg, url: str, name: str, iid: str):
    """Open profile ``name``'s Summary page and find insight ``iid``: its JSON (with a time range)
    and its one item on the page."""
    pg.goto(url + f"#/s/{name}")
    pg.wait_for_selector("[data-testid=summary-page] [data-testid=insight]", timeout=60000)
    si = pg.evaluate(f"() => fetch('/api/profiles/{name}/insights').then((r) => r.json())")
    ins = next((x for x in si["insights"] if x["id"] == iid), None)
    assert ins is not None, [x["id"] for x in si["insights"]]
    assert ins["t0"] is not None and ins["t1"] is not None and ins["t1"] > ins["t0"]
    item = pg.locator("[data-testid=summary-page] [data-testid=insight]", has_text=ins["title"])
    assert item.count() == 1
    return ins, item


def follow_insight(pg, item, ins: dict) -> tuple[float, float]:
    """Click an insight's link: the System Trace Viewer opens on its range (within 20% more)."""
    item.locator("[data-testid=insight-open]").click()
    ready(pg)
    t0, t1 = pg.evaluate(f"() => [{FIRST_TL}.t0, {FIRST_TL}.t1]")
    assert t0 <= ins["t0"] and ins["t1"] <= t1 and (t1 - t0) < 1.2 * (ins["t1"] - ins["t0"]), (t0, t1, ins)
    return t0, t1


def stop_server(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
CHROMIUM = os.environ.get("NEURON_EXPLORER_CHROMIUM", "/usr/bin/chromium")


def watch_errors(pg) -> None:
    """Collects what the page reports as errors in ``pg.console_errors``: console errors, uncaught
    exceptions, and every answer of 400 or more with its URL (a bare "status of 400" console line does
    not say which request failed)."""
    pg.console_errors = []

    def on_response(r) -> None:
        if r.status >= 400:
            pg.console_errors.append(f"HTTP {r.status} {r.url}")

    pg.on("console", lambda m: pg.console_errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
    pg.on("response", on_response)



def screen_pixels(pg, clip: dict | None = None):
    """What the screen shows (DOM and canvas together) as an (h, w, 3) uint8 array: a real screenshot
    (``clip``: x, y, width, height in CSS pixels), decoded by the browser's own PNG decoder in an
    OffscreenCanvas (no imaging library needed; the page's DOM is not touched)."""
    import base64

    import numpy as np

    png = base64.b64encode(pg.screenshot(clip=clip) if clip else pg.screenshot()).decode()
    got = pg.evaluate("""async (b64) => {
      const bin = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      const bmp = await createImageBitmap(new Blob([bin], { type: "image/png" }));
      const cv = new OffscreenCanvas(bmp.width, bmp.height);
      const cx = cv.getContext("2d");
      cx.drawImage(bmp, 0, 0);
      const d = cx.getImageData(0, 0, bmp.width, bmp.height).data;
      let s = "";
      for (let i = 0; i < d.length; i += 32768) s += String.fromCharCode.apply(null, d.subarray(i, i + 32768));
      return [bmp.width, bmp.height, btoa(s)];
    }""", png)
    w, h, raw = got
    return np.frombuffer(base64.b64decode(raw), dtype=np.uint8).reshape(h, w, 4)[:, :, :3]


def add_device_profiles_per_execution(profile_dir: Path, ranks: list[int], per_rank: int) -> list[dict]:
    """One device profile per execution: the first ``per_rank`` nc_exec_running of each of ``ranks``
    (``worker_gid``), each with six ops on three engines laid over its execution (``model`` mode's
    profile of each graph, over many executions: more profiles than the viewer once laned)."""
    con = duckdb.connect()
    rows = {k: [] for k in ("profile_id", "instance_id", "process_id", "nc_idx", "model_name", "exec_id", "name",
                            "track", "start_ts", "end_ts", "duration_ns", "flops", "bytes", "extra_attributes_json")}
    info: dict[str, list] = {k: [] for k in ("profile_id", "instance_id", "process_id", "nc_idx", "model_name",
                                             "exec_id_first", "exec_id_last", "mode")}
    made = []
    for rank in ranks:
        evs = con.execute(f"""SELECT instance_id, process_id, nc_idx, model_name, exec_id, start_ts, end_ts
                              FROM read_parquet('{profile_dir}/SystemProfileEvents/**/*.parquet')
                              WHERE name = 'nc_exec_running' AND worker_gid = {rank}
                              ORDER BY start_ts LIMIT {per_rank}""").fetchall()
        for inst, pid, nc, model, exec_id, s, e in evs:
            dp = f"dp-r{rank}-x{exec_id}"
            span = max(e - s, 600)
            for i, eng in enumerate(["act", "dma_q0", "pe", "act", "pe", "dma_q0"]):
                a = s + span * i // 6
                b = a + span // 8
                for k, v in (("profile_id", dp), ("instance_id", inst), ("process_id", pid), ("nc_idx", nc),
                             ("model_name", model), ("exec_id", exec_id), ("name", f"{eng}_op_{i}"), ("track", eng),
                             ("start_ts", a), ("end_ts", b), ("duration_ns", b - a), ("flops", 100 * i),
                             ("bytes", 64 * i), ("extra_attributes_json", json.dumps({"engine": eng}))):
                    rows[k].append(v)
            for k, v in (("profile_id", dp), ("instance_id", inst), ("process_id", pid), ("nc_idx", nc),
                         ("model_name", model), ("exec_id_first", exec_id), ("exec_id_last", exec_id),
                         ("mode", "all")):
                info[k].append(v)
            made.append({"profile_id": dp, "rank": rank, "start_ts": s, "end_ts": e, "exec_id": exec_id})
    d = profile_dir / "DeviceProfileEvents" / "part-0.parquet"
    d.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows), d)
    pq.write_table(pa.table(info), profile_dir / "DeviceProfiles.parquet")
    return made


def chromium(artifacts: Path):
    """A module's browser fixture body: skips without Chromium or Playwright, else yields a headless
    Chromium (the project's flags) and closes it; ``artifacts`` is made for the screenshots."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    artifacts.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


# JS: the page's first System Trace Viewer's timeline
FIRST_TL = "window.__nx.state.widgets.find((x) => x.type === 'system-trace').timeline"


def settle(pg, tl: str = FIRST_TL, timeout: int = 60000) -> None:
    """Wait until every window asked is answered and drawn (``Timeline.pending``), then two frames."""
    pg.wait_for_function(f"() => {tl} && !{tl}.pending", timeout=timeout)
    pg.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")


def ready(pg, tl: str = FIRST_TL) -> None:
    """The page's timeline is open, at its first view, and drawn."""
    pg.wait_for_selector("[data-testid=system-timeline][data-ready='1']", timeout=60000)
    pg.wait_for_function(f"() => {tl}.host.dataset.opened !== undefined", timeout=60000)
    settle(pg, tl)


def canvas_origin(pg) -> tuple[float, float]:
    """The System Trace Viewer canvas's top-left corner on the page."""
    b = pg.locator("[data-testid=system-timeline] canvas").bounding_box()
    return b["x"], b["y"]
