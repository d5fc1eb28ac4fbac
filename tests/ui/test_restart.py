"""The viewer after a restart: a server reopening a workspace from its warm index cache answers as the
first one did.

Why: a profile's index (with its leaf table) is cached under the user's cache directory, so a restarted
server builds nothing. Anything made only as a by-product of the build is then missing: the DuckDB
leaf table argument search joins on was, and every argument search of a restarted server answered
HTTP 500 ("Table with name ..._leaves does not exist") while the tests, each on a fresh cache, never
saw it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import clean_env, free_port

from .helpers import start_server, stop_server

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.ui.app import create_app  # noqa: E402

P = "run-a"
# "sequential" is only a model name (Sequential_<hash>, Sequential_<hash>_bwd), "all_reduce" only a
# collective's op; "sgd" is both a model name and part of event names (Optimizer.step#SGD.step)
ARG_QUERIES = ("sequential", "all_reduce", "sgd")


def _get(url: str, path: str, **params: Any) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(params)}", timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _search_answers(url: str) -> dict[str, Any]:
    """Each query's /search answer and every match stepped through with /search/next, forward from
    the start and back from the last, as the viewer's Enter and Shift+Enter do."""
    out: dict[str, Any] = {}
    for q in ARG_QUERIES:
        steps = [_get(url, f"api/profiles/{P}/search", mode="process", layout="tracks", q=q)]
        st, r = _get(url, f"api/profiles/{P}/search/next", q=q, after=-1, dir=1)
        steps.append((st, r))
        while st == 200 and r["found"] and len(steps) < 200:
            st, r = _get(url, f"api/profiles/{P}/search/next", q=q, after=r["s"], dir=1, leaf=r["leaf"], id=r["id"])
            steps.append((st, r))
        last = steps[-2][1] if len(steps) > 2 else None
        if last is not None and isinstance(last, dict) and last.get("found"):
            steps.append(_get(url, f"api/profiles/{P}/search/next", q=q, after=last["s"], dir=-1, leaf=last["leaf"],
                              id=last["id"]))
        out[q] = steps
    return out


def test_argument_search_after_a_restart_answers_as_the_first_run(ui_workspace: Path, tmp_path: Path) -> None:
    """Build (first server), stop, start again on the same workspace and cache, search by argument:
    200 with the same matches, the same N and the same k of every step."""
    env = clean_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    answers = []
    for _ in range(2):
        proc, url = start_server(ui_workspace, free_port(), env)
        try:
            answers.append(_search_answers(url))
        finally:
            stop_server(proc)
        assert list((tmp_path / "xdg").rglob("*.idx")), "the first server cached the index"
    first, second = answers
    for q in ARG_QUERIES:
        assert all(st == 200 for st, _ in first[q]), (q, first[q][:2])
        assert first[q][0][1]["args"] and first[q][0][1]["n"] > 0, (q, first[q][0])
        assert [st for st, _ in second[q]] == [200] * len(first[q]), (q, second[q][:2])
        assert second[q] == first[q], q
    seq = first["sequential"]
    assert [r["k"] for _, r in seq[1:-2]] == list(range(1, seq[0][1]["n"] + 1))  # every match once, in order


def _every_answer(c: TestClient) -> dict[Any, Any]:
    """The answers of every endpoint the viewer calls, for each grouping mode and layout: what a page
    restored from a URL asks a restarted server (view, area, search, selected event, device trace)."""
    out: dict[Any, Any] = {}
    base = f"/api/profiles/{P}"

    def ask(key: Any, path: str, **params: Any) -> Any:
        r = c.get(base + path, params=params)
        out[key] = (r.status_code, r.json())
        return r.json()

    ov = ask("overview", "")
    d = ov["duration_ns"]
    for mode in ov["modes"]:
        for lay in ("tracks", "names"):
            t = ask(("tracks", mode, lay), "/tracks", mode=mode, layout=lay)
            rows = ",".join(str(r["idx"]) for r in t["rows"])
            for ep in ("window", "counters"):
                ask((ep, mode, lay), f"/{ep}", mode=mode, layout=lay, rows=rows, t0=0, t1=d, px=800)
            ask(("busy", mode, lay), "/busy", mode=mode, layout=lay, groups="", t0=0, t1=d, px=200)
            for ep in ("area", "collectives", "summary", "nonempty"):
                ask((ep, mode, lay), f"/{ep}", mode=mode, layout=lay, t0=d // 4, t1=3 * d // 4)
            for q in ARG_QUERIES + ("nc_exec",):
                ask(("search", mode, lay, q), "/search", mode=mode, layout=lay, q=q)
    ask("flows", "/flows", mode="process", t0=0, t1=d)
    ask("activity", "/activity")
    for q in ARG_QUERIES + ("nc_exec",):
        r = ask(("next", q), "/search/next", q=q, after=-1, dir=1)
        assert r.get("found"), (q, r)
        ask(("next2", q), "/search/next", q=q, after=r["s"], dir=1, leaf=r["leaf"], id=r["id"])
        ask(("event", q), "/event", id=r["id"], leaf=r["leaf"])
        ask(("event-flows", q), "/event/flows", id=r["id"], leaf=r["leaf"], s=r["s"])
    dps = ask("device-profiles", "/device-profiles")["device_profiles"]
    for dp in dps:
        for frame in ("system", "device"):
            o = ask(("device", dp["profile_id"], frame), f"/device/{dp['profile_id']}", frame=frame)
            rows = ",".join(str(r["idx"]) for r in o["rows"])
            ask(("device-window", dp["profile_id"], frame), f"/device/{dp['profile_id']}/window", frame=frame,
                rows=rows, t0=0, t1=(o.get("start_ns") or 0) + o["duration_ns"], px=800)
    # how the profile was prepared differs (built, then read from the cache): not an answer to compare
    for k in ("prepare_s", "first_paint_from", "index"):
        out["overview"][1].pop(k, None)
    return out


@pytest.mark.parametrize("pyramid", [False, True], ids=["events", "pyramid"])
def test_every_answer_of_a_restarted_server_is_the_first_servers(ui_workspace: Path, tmp_path: Path,
                                                                 pyramid: bool) -> None:
    """Windows, tracks, counters, busy shares, areas, collectives, flows, search (names and arguments),
    events and device traces, in every grouping mode and layout: the same from the cache as built
    (with the pyramid: windows answered from its levels, as for large profiles)."""
    cache = tmp_path / "cache"
    opts = {"pyramid_min_events": 0, "raw_budget": 0} if pyramid else {}
    first = _every_answer(TestClient(create_app(ui_workspace, cache_dir=cache, **opts)))
    assert list(cache.glob("*.idx"))
    if pyramid:
        assert list(cache.glob("*.idx/p0_s.npy"))
    second = _every_answer(TestClient(create_app(ui_workspace, cache_dir=cache, **opts)))
    bad = sorted((str(k), v) for k, v in second.items() if v[0] != 200)
    assert not bad, bad[:3]
    assert first.keys() == second.keys()
    assert [k for k in first if first[k] != second[k]] == []
