"""System Trace Viewer benchmark: first paint, pan/zoom window latency, flow-arrow (/flows) latency and
browser memory on a synthetic many-rank profile, plus the same trace's size as Chrome JSON and .pftrace.

Two data paths, because ingesting through `view` runs at ~0.1M events/s on this 2-core machine
(100M events would take ~17 minutes):

* the *big* profile is written straight into the Parquet store's layout and schema (the tables `view`
  writes: SystemProfileEvents partitioned by instance/process, SystemProfileCounters, ProfileMetadata),
  with the event mix of bench/synth_capture.py: executions (nrt_execute + nc_exec_running, one flow id
  per execution), collectives (one flow id per collective across all ranks), model switches, CPU and
  memory samples;
* a *small* capture of the same shape goes through the real path (bench/synth_capture.py, then
  `neuron-explorer view --output-format json|perfetto|parquet`) to measure bytes per event of each
  format, which are scaled to the big profile's event count (both outputs grow linearly with events).

    python -m bench.ui_bench --events 20000000            # 8 instances x 8 ranks (the defaults)
    python -m bench.ui_bench --events 100000000 --work /tmp/ui100m --no-formats   # keep the store and cache
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from neuron_explorer.contracts.dataset import EVENT_SUMMARY
from neuron_explorer.exporters import event_overview, event_summary

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "ui.json"
CHROMIUM = os.environ.get("NEURON_EXPLORER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

SPANS = (1.0, 0.25, 1 / 16, 1 / 256, 1 / 4096, 1 / 65536, 1 / 1_000_000)  # window widths, fractions of the profile
ZOOMED_OUT_MIN = 1 / 16  # spans of 1/16 and wider count as zoomed out
NAMES = ["nrt_execute", "nc_exec_running", "cc_running", "nrt_model_switch"]
SOURCES = ["neuron_rt", "neuron_hw", "neuron_hw", "neuron_hw"]
GROUPS = ["software", "hardware", "hardware", "hardware"]


def _dict(idx: np.ndarray, values: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32)), pa.array(values, type=pa.string()))


def write_store(out: Path, instances: int, per_instance: int, events: int, seed: int = 0,
                straggler: int | None = None, summary: bool = True) -> int:
    """A Parquet store with the `view` layout: ~events in total over instances x per_instance ranks.

    ``straggler``: the rank whose executions take longer (150-190 us instead of 20-150 us of each 200 us
    step) and that enters every collective 30 us after the others: busier on its summary track, last
    to arrive in the per-collective table. ``summary``: write the events summaries and the events
    overview `view` writes (without: a workspace of an older `view`, whose first open scans the
    events)."""
    rng = np.random.default_rng(seed)
    ranks = instances * per_instance
    per = events // ranks
    t0 = 1_790_000_000_000_000_000
    step = 200_000  # ns between executions, as synth_capture
    meta = {k: [] for k in ("instance_id", "process_id", "process_tag", "rank", "local_rank", "world_size",
                            "display_name", "device_kind", "nd_idx", "start_wall_ns", "end_reason", "events",
                            "dropped_events", "wall_offset_ns", "clock_offset_ns", "clock_offset_uncertainty_ns",
                            "clock_offset_samples", "clock_offset_method", "session_path", "versions_json",
                            "config_json")}
    next_id = 0
    total = 0
    for inst in range(instances):
        iid = f"i-{inst:017x}"
        for lp in range(per_instance):
            rank = inst * per_instance + lp
            pid = 10_000 + rank
            n_exec = int(per * 0.4)
            n_cc = int(per * 0.15)
            n_sw = per - 2 * n_exec - n_cc
            starts = t0 + np.arange(n_exec, dtype=np.int64) * step + rng.integers(0, 5_000, n_exec)
            slow = rank == straggler
            durs = rng.integers(150_000, 190_000, n_exec) if slow else rng.integers(20_000, 150_000, n_exec)
            cc_s = (t0 + np.arange(n_cc, dtype=np.int64) * (step * n_exec // max(n_cc, 1)) + 170_000
                    + (30_000 if slow else 0))
            cc_d = 25_000 + rng.integers(0, 2_000, n_cc)
            sw_s = starts[:n_sw]
            s = np.concatenate([starts, starts, cc_s, sw_s])
            e = np.concatenate([starts + durs, starts + durs, cc_s + cc_d, sw_s])
            typ = np.concatenate([np.zeros(n_exec), np.ones(n_exec), np.full(n_cc, 2),
                                  np.full(len(sw_s), 3)]).astype(np.int32)
            order = np.argsort(s, kind="stable")
            s, e, typ = s[order], e[order], typ[order]
            n = len(s)
            tid = np.where(typ == 0, pid, pid + 1).astype(np.int64)
            ids_by_type = np.concatenate([np.arange(n_exec), np.arange(n_exec),
                                          np.zeros(n_cc + len(sw_s), dtype=np.int64)])
            exec_id = np.where(typ <= 1, ids_by_type[order], -1)
            ids = np.arange(next_id, next_id + n, dtype=np.int64)
            next_id += n
            # flow ids as `view` assigns them: a host call and its core execution share one (per process,
            # per exec id); the ranks of one collective share one (a hash of its sequence number)
            cc_seq = np.concatenate([np.zeros(2 * n_exec, dtype=np.int64), np.arange(n_cc, dtype=np.int64),
                                     np.zeros(len(sw_s), dtype=np.int64)])[order]
            flow = np.zeros(n, dtype=np.int64)
            flow[typ <= 1] = ((rank + 1) << 40) | exec_id[typ <= 1]
            mixed = (cc_seq[typ == 2].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) & np.uint64((1 << 62) - 1)
            flow[typ == 2] = (mixed | np.uint64(1 << 62)).astype(np.int64)
            has_flow = flow != 0
            flow_off = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(has_flow, out=flow_off[1:])
            tbl = pa.table({
                "id": ids, "name": _dict(typ, NAMES), "start_ts": s, "end_ts": e, "duration_ns": e - s,
                "trace_event_source": _dict(typ, SOURCES), "instance_id": _dict(np.zeros(n), [iid]),
                "process_id": np.full(n, pid, dtype=np.int64), "thread_id": tid,
                "nc_idx": np.full(n, lp, dtype=np.int32), "pcore_idx": np.full(n, lp, dtype=np.int32),
                "worker_gid": np.full(n, rank, dtype=np.int32),
                "flow_id": pa.ListArray.from_arrays(pa.array(flow_off), pa.array(flow[has_flow], type=pa.int64())),
                "framework_stream_id": pa.nulls(n, type=pa.int64()),
                "extra_attributes_json": pa.nulls(n, type=pa.string()),
                "event_group": _dict(typ, GROUPS),
                "model_name": _dict(np.where(typ <= 1, 1 + (exec_id % 2), 0), ["", "fwd_graph", "bwd_graph"]),
                "exec_id": pa.array(exec_id, mask=exec_id < 0),
            })
            d = out / "SystemProfileEvents" / f"instance={iid}" / f"process={pid}"
            d.mkdir(parents=True, exist_ok=True)
            pq.write_table(tbl, d / "part-0.parquet", row_group_size=1 << 20, compression="zstd")
            if summary:  # what `view` writes beside the events for the viewer's first paint
                sd = out / EVENT_SUMMARY / f"instance={iid}" / f"process={pid}"
                sd.mkdir(parents=True, exist_ok=True)
                event_summary.write(str(sd / "part-0.parquet"), [event_summary.chunk(
                    tid, np.full(n, lp, dtype=np.int32), typ, s, e, NAMES, SOURCES, GROUPS)],
                    (d / "part-0.parquet").stat().st_size, n)
            total += n
            # 10 Hz CPU / memory samples over the span
            ts = np.arange(s[0], e.max(), 100_000_000, dtype=np.int64)
            cnames = ["cpu_util.process", "cpu_util.host_mean", "host_mem.process_rss", "host_mem.host_used",
                      "host_mem.host_available"]
            units = ["percent", "percent", "bytes", "bytes", "bytes"]
            k = len(ts)
            vals = [rng.uniform(20, 95, k), rng.uniform(30, 90, k), 3e8 + rng.uniform(0, 1e8, k),
                    8e9 + rng.uniform(0, 1e9, k), 6e9 - rng.uniform(0, 1e9, k)]
            ct = pa.table({"instance_id": [iid] * (k * 5), "process_id": np.full(k * 5, pid, dtype=np.int64),
                           "ts": np.tile(ts, 5), "counter": np.repeat(cnames, k), "value": np.concatenate(vals),
                           "unit": np.repeat(units, k)})
            d = out / "SystemProfileCounters" / f"instance={iid}" / f"process={pid}"
            d.mkdir(parents=True, exist_ok=True)
            pq.write_table(ct, d / "part-0.parquet")
            for key, v in (("instance_id", iid), ("process_id", pid), ("process_tag", str(pid)), ("rank", rank),
                           ("local_rank", lp), ("world_size", ranks), ("display_name", out.name),
                           ("device_kind", "cpu"), ("nd_idx", 0), ("start_wall_ns", int(s[0])), ("end_reason", "exit"),
                           ("events", n), ("dropped_events", 0), ("wall_offset_ns", 0), ("clock_offset_ns", 0),
                           ("clock_offset_uncertainty_ns", 0), ("clock_offset_samples", 0),
                           ("clock_offset_method", "reference"), ("session_path", ""), ("versions_json", "{}"),
                           ("config_json", "{}")):
                meta[key].append(v)
    pq.write_table(pa.table(meta), out / "ProfileMetadata.parquet")
    if summary:  # what `view` writes once the processes are written: the summaries merged in one file
        event_overview.write(str(out))
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _own_browser_memory(psutil) -> dict:
    """The memory of this bench's own browser: the Chromium processes descending from this
    process (Playwright's driver starts them), as PSS (a shared page counted once across them;
    RSS counted each shared page in every process) and, for comparison, RSS.  Another job's
    headless Chromium on the machine is not ours: summing every one on the host read 954 MB."""
    pss = rss = uss = n = 0
    own = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if "chrom" not in proc.name().lower():
                continue
            info = proc.memory_full_info()
            pss += getattr(info, "pss", 0)
            uss += getattr(info, "uss", 0)
            rss += info.rss
            n += 1
            own.add(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    # PSS shares a page among every process mapping it: other Chromiums on the host (a test suite's)
    # lower ours by sharing the binary's pages, so their number is kept beside it; USS (the pages no
    # other process maps) does not depend on them
    others = sum(1 for p in psutil.process_iter(["name"]) if p.pid not in own
                 and "chrom" in (p.info.get("name") or "").lower())
    return {"own_chromium_pss_bytes": pss, "own_chromium_uss_bytes": uss, "own_chromium_rss_bytes": rss,
            "own_chromium_processes": n, "other_chromium_processes_on_host": others}


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))] if xs else float("nan")


def format_sizes(work: Path, ranks: int, per_rank: int) -> dict:
    """Chrome JSON, .pftrace and Parquet bytes/event from a small capture through the real `view`."""
    cap = work / "small-capture"
    inst = max(1, ranks // 8)
    procs = ranks // inst
    subprocess.run([sys.executable, "-m", "bench.synth_capture", str(cap), "--instances", str(inst), "--processes",
                    str(procs), "--events", str(per_rank)], check=True, cwd=REPO, capture_output=True)
    out: dict = {"ranks": ranks, "events_per_rank": per_rank}
    for fmt, name in (("json", "trace.json"), ("perfetto", "trace.pftrace"), ("parquet", "store")):
        dest = work / name
        r = subprocess.run([sys.executable, "-m", "neuron_explorer", "view", "-d", str(cap), "--output-format", fmt,
                            "--output-file", str(dest)], capture_output=True, text=True, cwd=REPO)
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file()) if dest.is_dir() else dest.stat().st_size
        if dest.is_dir() and fmt != "parquet":
            size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
        out[fmt + "_bytes"] = size
    import duckdb

    n = duckdb.connect().execute(
        f"SELECT count(*) FROM read_parquet('{work / 'store'}/SystemProfileEvents/**/*.parquet')").fetchall()[0][0]
    out["events"] = int(n)
    for fmt in ("json", "perfetto", "parquet"):
        out[fmt + "_bytes_per_event"] = out[fmt + "_bytes"] / max(n, 1)
    return out


def cold_open(url: str, name: str, server_pid: int | None = None, timings: bool = False) -> dict:
    """Open a profile the server has not prepared: ms (after navigation) until the progress bar shows,
    until the timeline's first paint (the coarse view, while the event index builds), and until the
    detail (the index) is drawn; with ``server_pid``, the server's CPU seconds at the first paint (the
    figure a loaded machine does not distort: what a first paint costs on an idle one). With
    ``timings``, when each API request of the first paint was answered (ms after navigation). The
    page's main-thread busy time at the first paint is its tasks' thread time (CDP ``TaskDuration``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = b.new_page(viewport={"width": 1600, "height": 1000})
        # the page's main thread: its tasks' thread time (CPU, not wall) up to the first paint, which
        # moves less with the machine's load than the wall time does
        cdp = pg.context.new_cdp_session(pg)
        cdp.send("Performance.enable", {"timeDomain": "threadTicks"})
        pg.goto(f"{url}#/p/{name}")
        pg.wait_for_selector("[data-testid=system-timeline][data-ready='1']", timeout=3_600_000)
        cpu = None
        if server_pid is not None:
            import psutil

            ct = psutil.Process(server_pid).cpu_times()
            cpu = round(ct.user + ct.system, 2)
        perf = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
        got = pg.evaluate("() => ({p: window.__nxStats.progressShownMs, f: window.__nxStats.firstPaintMs})")
        reqs = pg.evaluate("""() => performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/'))
            .map((e) => [new URL(e.name).pathname.split('/').pop(), Math.round(e.startTime),
                         Math.round(e.responseEnd)])""") \
            if timings else None
        pg.wait_for_function("() => document.querySelector('[data-testid=system-timeline]').dataset.detail "
                             "!== 'coarse'", timeout=3_600_000)
        detail = pg.evaluate("performance.now()")
        b.close()
    return {"progress_shown_ms": None if got["p"] is None else round(got["p"], 1), "first_paint_ms": round(got["f"], 1),
            "detail_ready_ms": round(detail, 1), "server_cpu_s_at_first_paint": cpu,
            "page_main_thread_busy_ms_at_first_paint": round(perf.get("TaskDuration", 0.0) * 1000, 1),
            "loadavg": list(os.getloadavg()),
            **({"requests": [r for r in reqs if r[2] <= got["f"]]} if reqs is not None else {})}


def play(pg, ops: list[str]) -> None:
    """The bench's pan/zoom operations, as a user does them (keys; Ctrl+wheel zooms at the mouse)."""
    for op in ops:
        if op in ("wheel+", "wheel-"):
            pg.keyboard.down("Control")
            pg.mouse.wheel(0, -240 if op == "wheel+" else 240)
            pg.keyboard.up("Control")
        else:
            pg.keyboard.press(op)
        pg.wait_for_timeout(160)
    pg.wait_for_timeout(1000)


def expanded_ops(pg, ops: list[str], psutil, blank: dict) -> dict:
    """Every rank expanded (a screenful of tracks, each a window row), back to the whole profile, then
    ``ops``: the window fetches' times (request to decoded answer, in the page) and the browser's PSS."""
    pg.evaluate("""() => { const t = window.__nx.state.widgets.find((x) => x.type === 'system-trace').timeline;
        t.collapsed.clear(); t.relayout(); t.t0 = 0; t.t1 = t.source.duration; t.refresh(); }""")
    pg.wait_for_function("() => !window.__nx.state.widgets.find((x) => x.type === 'system-trace').timeline.pending",
                         timeout=120_000)
    pg.evaluate("window.__nxStats.windowMs = []")
    play(pg, ops)
    asked = sum("/window?" in u for u in pg.evaluate("performance.getEntriesByType('resource').map((e) => e.name)"))
    wms = pg.evaluate("window.__nxStats.windowMs")
    own = _own_browser_memory(psutil)
    return {"window_fetch_ms": {"p50": round(statistics.median(wms), 1), "p95": round(p95(wms), 1), "n": len(wms)},
            "window_requests_total": asked, **own,
            **{f"page_{k}_bytes": own[f"own_chromium_{k}_bytes"] - blank[f"own_chromium_{k}_bytes"]
               for k in ("pss", "uss")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--ranks-per-instance", type=int, default=8)
    ap.add_argument("--events", type=int, default=20_000_000, help="total events of the big profile")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temp dir, removed)")
    ap.add_argument("--no-write", action="store_true", help="reuse the store already in --work")
    ap.add_argument("--no-formats", action="store_true", help="skip the JSON/.pftrace size comparison (slow)")
    ap.add_argument("--no-browser", action="store_true", help="server-side window latency only")
    ap.add_argument("--repeat", type=int, default=12, help="windows per zoom level (default 12)")
    ap.add_argument("--results", default=str(RESULTS), help=f"where to write the JSON results (default {RESULTS})")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="ui-bench-"))
    ws = work / "workspace"
    store = ws / f"synthetic-{args.instances * args.ranks_per_instance}r"
    ranks = args.instances * args.ranks_per_instance
    res: dict = {**provenance.stamp(), "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                                                "python": platform.python_version()}}
    t = time.perf_counter()
    if not args.no_write:
        shutil.rmtree(store, ignore_errors=True)
        n = write_store(store, args.instances, args.ranks_per_instance, args.events)
    else:
        import duckdb

        n = duckdb.connect().execute(
            f"SELECT sum(events) FROM read_parquet('{store}/ProfileMetadata.parquet')").fetchall()[0][0]
    res["profile"] = {"events": int(n), "ranks": ranks, "instances": args.instances,
                      "parquet_bytes": sum(f.stat().st_size for f in store.rglob("*.parquet")),
                      "write_s": round(time.perf_counter() - t, 2)}
    print(f"store: {n:,} events, {ranks} ranks, {res['profile']['parquet_bytes'] / 1e6:.0f} MB "
          f"({res['profile']['write_s']} s)", flush=True)

    env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "neuron_explorer.ui.server", str(ws), "127.0.0.1", str(port)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    url = srv.stdout.readline().strip()
    try:
        import httpx

        if not args.no_browser:
            # a cold open in the browser: how soon the index-build progress shows, and the timeline's
            # first paint once the index is built (the server has never prepared this profile)
            res["cold_open"] = cold_open(url, store.name, srv.pid)
            c = res["cold_open"]
            print(f"cold open: progress shown {c['progress_shown_ms']} ms after navigation, timeline painted "
                  f"(coarse) after {c['first_paint_ms']} ms (server {c['server_cpu_s_at_first_paint']} CPU-s), "
                  f"detail (index) after {c['detail_ready_ms']} ms; load average {c['loadavg']}", flush=True)
        cl = httpx.Client(base_url=url, timeout=600)
        t = time.perf_counter()
        ov = cl.get(f"/api/profiles/{store.name}").json()
        res["prepare_s"] = ov["prepare_s"] if not args.no_browser else round(time.perf_counter() - t, 2)
        res["pyramid_levels_ns"] = ov["levels"]
        ix = ov.get("index") or {}
        res["index"] = {"bytes": ix.get("bytes"), "build_s": ix.get("build_s"),
                        "bytes_per_event": round(ix["bytes"] / max(ov["events"], 1), 2) if ix.get("bytes") else None}
        print(f"prepare (leaves + index + pyramid, once per profile, cached): {res['prepare_s']} s; index "
              f"{(ix.get('bytes') or 0) / 1e6:.0f} MB ({res['index']['bytes_per_event']} B/event), "
              f"built in {ix.get('build_s')} s (None: from cache)", flush=True)
        # server-side window latency over a pan/zoom walk across zoom levels (what the browser issues)
        rows = cl.get(f"/api/profiles/{store.name}/tracks", params={"mode": "cpu_device"}).json()["rows"]
        ev_rows = [r["idx"] for r in rows if r["kind"] == "events"][:40]  # one screenful of tracks
        dur = ov["duration_ns"]
        lat: dict[str, list[float]] = {}
        lat_zoom: dict[str, list[float]] = {}
        srv_ms: dict[str, list[float]] = {}
        parse_ms: list[float] = []
        with_parse: dict[str, list[float]] = {}  # the pre-2026-11-21 measure, for comparisons
        packed_ms: dict[str, list[float]] = {}
        packed_bytes: list[int] = []
        json_bytes: list[int] = []
        rng = np.random.default_rng(1)
        for span_frac in SPANS:
            span = dur * span_frac
            for _ in range(args.repeat):
                a = float(rng.uniform(0, max(dur - span, 1)))
                t = time.perf_counter()
                w = cl.get(f"/api/profiles/{store.name}/window", params={
                    "mode": "cpu_device", "rows": ",".join(map(str, ev_rows)), "t0": a, "t1": a + span, "px": 1300})
                ms = (time.perf_counter() - t) * 1000  # request sent -> whole answer received
                # (before 2026-11-21 this also counted the client's json() of the answer: ~30-60 ms for the
                # ~2 MB zoomed-out answers on this VM; parsing is now timed apart)
                t = time.perf_counter()
                level = str(w.json()["level"])
                parse_ms.append((time.perf_counter() - t) * 1000)
                with_parse.setdefault(f"1/{round(1 / span_frac)}", []).append(ms + parse_ms[-1])
                with_parse.setdefault("all", []).append(ms + parse_ms[-1])
                lat.setdefault(level, []).append(ms)
                lat.setdefault("all", []).append(ms)
                # the server's own share (query + JSON encoding), from its Server-Timing header
                st = dict(x.strip().split(";dur=") for x in w.headers.get("server-timing", "").split(",")
                          if ";dur=" in x)
                srv_ms.setdefault(f"1/{round(1 / span_frac)}", []).append(sum(float(x) for x in st.values()))
                # the same window packed (format=bin, what the browser asks since decision 0175): request
                # and the client's unpack (views on the body, as the page's typed arrays)
                t = time.perf_counter()
                bn = cl.get(f"/api/profiles/{store.name}/window", params={
                    "mode": "cpu_device", "rows": ",".join(map(str, ev_rows)), "t0": a, "t1": a + span, "px": 1300,
                    "format": "bin"})
                if bn.headers.get("content-type") == "application/octet-stream":
                    from neuron_explorer.ui.wire import unpack

                    unpack(bn.content)
                    packed_ms.setdefault("all", []).append((time.perf_counter() - t) * 1000)
                    packed_bytes.append(len(bn.content))
                    json_bytes.append(len(w.content))
            v = lat_zoom.setdefault(f"1/{round(1 / span_frac)}", [])
            v.extend(lat["all"][-args.repeat:])
        res["window_query_ms"] = {k: {"p50": round(statistics.median(v), 1), "p95": round(p95(v), 1), "n": len(v)}
                                  for k, v in lat.items()}
        res["window_query_ms_by_span"] = {k: {"p50": round(statistics.median(v), 1), "p95": round(p95(v), 1),
                                              "n": len(v)} for k, v in lat_zoom.items()}
        res["window_client_json_parse_ms"] = {"p50": round(statistics.median(parse_ms), 1),
                                              "p95": round(p95(parse_ms), 1)}
        res["window_query_plus_client_parse_ms_by_span"] = {
            k: {"p50": round(statistics.median(v), 1), "p95": round(p95(v), 1)} for k, v in with_parse.items()}
        res["window_server_ms_by_span"] = {k: {"p50": round(statistics.median(v), 1), "p95": round(p95(v), 1)}
                                           for k, v in srv_ms.items() if v}
        if packed_ms:  # a server of before decision 0175 answers JSON to format=bin: no figure
            v = packed_ms["all"]
            res["window_packed_query_plus_client_unpack_ms"] = {"p50": round(statistics.median(v), 1),
                                                                 "p95": round(p95(v), 1), "n": len(v)}
            res["window_answer_bytes_median"] = {"json": statistics.median(json_bytes),
                                                 "packed": statistics.median(packed_bytes)}
            print(f"window packed (format=bin) with the client's unpack: p50 {statistics.median(v):.1f} ms, "
                  f"p95 {p95(v):.1f} ms; median answer {res['window_answer_bytes_median']}", flush=True)
        for k, v in res["window_query_ms_by_span"].items():
            s = res["window_server_ms_by_span"].get(k, {})
            w = res["window_query_plus_client_parse_ms_by_span"].get(k, {})
            print(f"window span {k} of the profile: p50 {v['p50']} ms, p95 {v['p95']} ms (n={v['n']}); "
                  f"in the server (query + JSON): p50 {s.get('p50')} ms, p95 {s.get('p95')} ms; "
                  f"with the client's json(): p50 {w.get('p50')} ms, p95 {w.get('p95')} ms", flush=True)
        # busy shading of collapsed processes (the track tree's summary tracks): one screenful of groups
        trows = cl.get(f"/api/profiles/{store.name}/tracks",
                       params={"mode": "cpu_device", "layout": "tracks"}).json()["rows"]
        procs: dict[tuple, list[int]] = {}
        for r in trows:
            if r["kind"] == "events" and len(r["group"]) >= 2:
                procs.setdefault(tuple(r["group"][:2]), []).append(r["idx"])
        groups = ";".join(",".join(map(str, v)) for v in list(procs.values())[:40])
        busy_ms: dict[str, list[float]] = {}
        for span_frac in SPANS:
            span = dur * span_frac
            for _ in range(max(2, args.repeat // 2)):
                a = float(rng.uniform(0, max(dur - span, 1)))
                t = time.perf_counter()
                cl.get(f"/api/profiles/{store.name}/busy", params={"mode": "cpu_device", "layout": "tracks",
                                                                    "groups": groups, "t0": a, "t1": a + span,
                                                                    "px": 1300})
                busy_ms.setdefault(f"1/{round(1 / span_frac)}", []).append((time.perf_counter() - t) * 1000)
                busy_ms.setdefault("all", []).append(busy_ms[f"1/{round(1 / span_frac)}"][-1])
        res["busy_query_ms"] = {k: {"p50": round(statistics.median(v), 1), "p95": round(p95(v), 1), "n": len(v)}
                                for k, v in busy_ms.items()}
        for k, v in res["busy_query_ms"].items():
            print(f"busy shading of 40 collapsed ranks, span {k}: p50 {v['p50']} ms, p95 {v['p95']} ms (n={v['n']})",
                  flush=True)
        # flow arrows: /flows over the same kind of walk (the browser asks for them whenever a window
        # shows individual events; the answer covers every row, not only the visible ones)
        flow_ms: dict[str, list[float]] = {}
        flow_srv: dict[str, list[float]] = {}
        flow_n: dict[str, list[int]] = {}
        for span_frac in SPANS:
            span = dur * span_frac
            key = f"1/{round(1 / span_frac)}"
            for _ in range(args.repeat):
                a = float(rng.uniform(0, max(dur - span, 1)))
                t = time.perf_counter()
                r = cl.get(f"/api/profiles/{store.name}/flows", params={"mode": "cpu_device", "t0": a, "t1": a + span})
                ms = (time.perf_counter() - t) * 1000
                body = r.json()
                flow_ms.setdefault(key, []).append(ms)
                zoom = "zoomed_out" if span_frac >= ZOOMED_OUT_MIN else "zoomed_in"
                flow_ms.setdefault(zoom, []).append(ms)
                st = dict(x.strip().split(";dur=") for x in r.headers.get("server-timing", "").split(",")
                          if ";dur=" in x)
                flow_srv.setdefault(key, []).append(sum(float(x) for x in st.values()))
                flow_n.setdefault(key, []).append(len(body["flows"]))
        res["flows_query_ms"] = {k: {"p50": round(statistics.median(v), 1), "p95": round(p95(v), 1), "n": len(v)}
                                 for k, v in flow_ms.items()}
        res["flows_server_ms_by_span"] = {k: {"p50": round(statistics.median(v), 1), "p95": round(p95(v), 1)}
                                          for k, v in flow_srv.items()}
        res["flows_returned_median_by_span"] = {k: statistics.median(v) for k, v in flow_n.items()}
        for k, v in res["flows_query_ms"].items():
            s = res["flows_server_ms_by_span"].get(k, {})
            print(f"flows {k}: p50 {v['p50']} ms, p95 {v['p95']} ms (n={v['n']})"
                  + (f"; in the server p50 {s['p50']} ms, p95 {s['p95']} ms; flows returned (median) "
                     f"{res['flows_returned_median_by_span'][k]}" if s else ""), flush=True)
        if not args.no_browser:
            # the browser: first paint, pan/zoom as a user does it, memory
            from playwright.sync_api import sync_playwright

            with sync_playwright() as pw:
                b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                pg = b.new_page(viewport={"width": 1600, "height": 1000})
                errors: list[str] = []
                pg.on("pageerror", lambda e: errors.append(str(e)))
                import psutil

                pg.goto("about:blank")  # the same browser before our page: what Chromium itself takes
                pg.wait_for_timeout(2000)
                blank = _own_browser_memory(psutil)
                pg.goto(f"{url}#/p/{store.name}")
                pg.wait_for_selector("[data-testid=system-timeline][data-ready='1']", timeout=120_000)
                fp = pg.evaluate("window.__nxStats.firstPaintMs")
                load = pg.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
                res["first_paint_ms_after_navigation"] = round(fp, 1)
                res["first_paint_ms_after_load_event"] = round(fp - load, 1)
                pg.evaluate("window.__nxStats.windowMs = []")
                pg.focus("[data-testid=system-timeline]")
                box = pg.locator("[data-testid=system-timeline] canvas").bounding_box()
                pg.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 300)

                ops = (["w"] * 14 + ["d", "a", "ArrowRight", "ArrowLeft"] * 3 + ["s"] * 6 + ["wheel+", "wheel-"] * 4
                       + ["PageDown", "PageUp"] * 2)
                play(pg, ops)
                ms = pg.evaluate("window.__nxStats.windowMs")
                res["browser_window_fetch_ms"] = {"p50": round(statistics.median(ms), 1), "p95": round(p95(ms), 1),
                                                  "n": len(ms)}
                cdp = pg.context.new_cdp_session(pg)
                cdp.send("Performance.enable")
                m = {x["name"]: x["value"] for x in cdp.send("Performance.getMetrics")["metrics"]}
                mem = pg.evaluate("performance.memory ? performance.memory.usedJSHeapSize : null")
                own = _own_browser_memory(psutil)
                page = {f"page_{k}_bytes": own[f"own_chromium_{k}_bytes"] - blank[f"own_chromium_{k}_bytes"]
                        for k in ("pss", "uss")}
                res["browser_memory"] = {"js_heap_used_bytes": int(m.get("JSHeapUsedSize", 0)),
                                         "performance_memory_used_bytes": mem, **own, "blank_page": blank, **page,
                                         "page_errors": errors}
                # the same operations with every rank expanded: the page now asks /window for its tracks
                # (collapsed, it asks only /busy); its window fetches include the page's decoding
                res["browser_expanded"] = expanded_ops(pg, ops, psutil, blank)
                e = res["browser_expanded"]
                print(f"browser, ranks expanded: window fetch + decode p50 {e['window_fetch_ms']['p50']} ms, "
                      f"p95 {e['window_fetch_ms']['p95']} ms (n={e['window_fetch_ms']['n']}); own Chromium PSS "
                      f"{e['own_chromium_pss_bytes'] / 1e6:.0f} MB (page {e['page_pss_bytes'] / 1e6:.0f} MB)",
                      flush=True)
                pg.screenshot(path=str(work / "bench.png"))
                b.close()
        res["server_rss_bytes"] = __import__("psutil").Process(srv.pid).memory_info().rss
    finally:
        srv.terminate()
        srv.wait(10)
    scale = res["profile"]["events"]
    sizes = format_sizes(work, ranks, 20_000) if not args.no_formats else None
    res["formats"] = None if sizes is None else {
        "measured_on": {"events": sizes["events"], "ranks": ranks,
                        **{k: v for k, v in sizes.items() if k.endswith("_bytes")}},
        "bytes_per_event": {k: round(sizes[k + "_bytes_per_event"], 2) for k in ("json", "perfetto", "parquet")},
        "extrapolated_bytes_at_profile": {k: int(sizes[k + "_bytes_per_event"] * scale) for k in ("json", "perfetto")},
        "extrapolated_bytes_at_100M": {k: int(sizes[k + "_bytes_per_event"] * 100_000_000)
                                       for k in ("json", "perfetto", "parquet")},
    }
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(res, indent=2) + "\n")
    wq = res["window_query_ms"]
    print("\n| metric | value |\n| --- | --- |")
    print(f"| profile | {scale:,} events, {ranks} ranks, {res['profile']['parquet_bytes'] / 1e6:.0f} MB Parquet |")
    print("| prepare before the first paint (metadata, leaf + coarse scan, counters; the index builds after it) | "
          f"{res['prepare_s']} s |")
    print(f"| window index (sorted events + pyramid) | {res['index']['bytes_per_event']} B/event, built in "
          f"{res['index']['build_s']} s |")
    for k, v in wq.items():
        print(f"| window query ({k}) p50 / p95 | {v['p50']} / {v['p95']} ms (n={v['n']}) |")
    for k, v in res["window_query_ms_by_span"].items():
        s = res["window_server_ms_by_span"].get(k, {})
        print(f"| window query, span {k} p50 / p95 (in the server) | {v['p50']} / {v['p95']} ms "
              f"({s.get('p50')} / {s.get('p95')} ms) (n={v['n']}) |")
    bq = res.get("busy_query_ms", {}).get("all")
    if bq:
        print(f"| busy shading, 40 collapsed ranks (summary tracks) p50 / p95 | {bq['p50']} / {bq['p95']} ms "
              f"(n={bq['n']}) |")
    for k in ("zoomed_in", "zoomed_out"):
        v = res["flows_query_ms"].get(k)
        if v:
            print(f"| flows ({k.replace('_', ' ')}) p50 / p95 | {v['p50']} / {v['p95']} ms (n={v['n']}) |")
    cp = res["window_client_json_parse_ms"]
    print(f"| client json() of a window answer (not counted above) p50 / p95 | {cp['p50']} / {cp['p95']} ms |")
    print(f"| server RSS after the walk | {res['server_rss_bytes'] / 1e6:.0f} MB |")
    if not args.no_browser:
        co = res.get("cold_open") or {}
        print(f"| cold open: progress shown / timeline painted (after navigation) | {co.get('progress_shown_ms')} ms / "
              f"{co.get('first_paint_ms')} ms |")
        print(f"| first paint after load event / after navigation | {res['first_paint_ms_after_load_event']} ms / "
              f"{res['first_paint_ms_after_navigation']} ms |")
        bw = res["browser_window_fetch_ms"]
        print(f"| browser pan/zoom fetch p50 / p95 | {bw['p50']} / {bw['p95']} ms (n={bw['n']}) |")
        bm = res["browser_memory"]
        print(f"| browser JS heap / the bench's own Chromium, PSS (RSS) over its processes | "
              f"{bm['js_heap_used_bytes'] / 1e6:.1f} MB / {bm['own_chromium_pss_bytes'] / 1e6:.0f} MB "
              f"({bm['own_chromium_rss_bytes'] / 1e6:.0f} MB, {bm['own_chromium_processes']} processes) |")
    f = res["formats"]
    if f is None:
        print(f"\nwrote {results}")
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
        return
    per, prof, at100 = f["bytes_per_event"], f["extrapolated_bytes_at_profile"], f["extrapolated_bytes_at_100M"]
    print(f"| bytes/event JSON / pftrace / Parquet | {per['json']} / {per['perfetto']} / {per['parquet']} |")
    print(f"| this profile as Chrome JSON / .pftrace (extrapolated) | {prof['json'] / 1e9:.1f} GB / "
          f"{prof['perfetto'] / 1e9:.1f} GB |")
    print(f"| 100M events as Chrome JSON / .pftrace / Parquet | {at100['json'] / 1e9:.1f} GB / "
          f"{at100['perfetto'] / 1e9:.1f} GB / {at100['parquet'] / 1e9:.1f} GB |")
    print(f"\nwrote {results}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
