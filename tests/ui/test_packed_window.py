"""Packed window answers (decision 0175): ``/window?format=bin`` decodes to exactly the JSON answer,
field for field, for every kind of answer (events, pyramid levels, the tracks layout's name lanes,
an empty window, a window of tens of thousands of items); ids beyond 2^53 and unicode text stay in
the header as JSON has them; a damaged body is refused in one line and never read past its end."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from neuron_explorer.ui import queries, wire

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.ui.app import create_app  # noqa: E402

from .test_packed import fuzz_unpack  # noqa: E402

SYNTH = "synth-8r"


def same_as_json(head: dict, arrays: dict[str, np.ndarray], js: dict) -> None:
    """The unpacked answer holds the JSON answer's keys and values: arrays item for item, as the
    browser's numbers (a double equal to the JSON number; integers stay integers)."""
    assert set(head) | set(arrays) == set(js), (sorted(head), sorted(arrays), sorted(js))
    for k, v in js.items():
        if k in arrays:
            a = arrays[k]
            assert isinstance(v, list) and a.ndim == 1 and len(a) == len(v), k
            assert a.tolist() == v, k
            if a.dtype.kind == "f":  # what JSON had as integers arrives as integral doubles
                assert all(isinstance(x, int) for x in v) or all(isinstance(x, float) for x in v), k
        else:
            assert head[k] == v and type(head[k]) is type(v), k


def both(client: TestClient, q: dict) -> tuple[dict, dict, dict]:
    js = client.get(f"/api/profiles/{SYNTH}/window", params=q)
    bn = client.get(f"/api/profiles/{SYNTH}/window", params={**q, "format": "bin"})
    assert js.status_code == bn.status_code == 200, (js.text, bn.content[:200])
    assert bn.headers["content-type"] == "application/octet-stream"
    head, arrays = wire.unpack(bn.content)
    return js.json(), head, arrays


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestClient, TestClient]:
    """The same small synthetic 8-rank store served twice: from its events (a large raw budget) and
    from its pyramid levels (raw budget 0)."""
    from bench.ui_bench import write_store

    ws = tmp_path_factory.mktemp("pwin")
    write_store(ws / SYNTH, 2, 4, 40_000, seed=4, straggler=3)
    raw = TestClient(create_app(ws, cache_dir=tmp_path_factory.mktemp("c1"), raw_budget=10_000_000))
    lev = TestClient(create_app(ws, cache_dir=tmp_path_factory.mktemp("c2"), pyramid_min_events=0, raw_budget=0))
    return raw, lev


def test_window_packed_equals_json(clients: tuple[TestClient, TestClient]) -> None:
    raw, lev = clients
    dur = raw.get(f"/api/profiles/{SYNTH}").json()["duration_ns"]
    seen: set = set()
    for client in (raw, lev):
        for layout in ("tracks", "names"):
            tr = client.get(f"/api/profiles/{SYNTH}/tracks", params={"mode": "cpu_device", "layout": layout}).json()
            ev = [r["idx"] for r in tr["rows"] if r["kind"] == "events"]
            cn = [r["idx"] for r in tr["rows"] if r["kind"] != "events"]
            rows = ",".join(map(str, ev))
            for t0, t1, px in ((0, dur, 1300), (0, dur, 20000), (dur * 0.3, dur * 0.3 + dur / 512, 977),
                               (dur * 0.5, dur * 0.5 + 3000, 64), (dur + 10, dur + 1e6, 100)):
                js, head, arrays = both(client, {"mode": "cpu_device", "layout": layout, "rows": rows,
                                                 "t0": t0, "t1": t1, "px": px})
                same_as_json(head, arrays, js)
                seen.add((js["level"] if js["level"] in ("raw", None) else "level", len(js["s"]) > 10_000,
                          len(js["s"]) == 0))
            # rows that hold no events (counters only): the empty answer, with its empty lists
            js, head, arrays = both(client, {"mode": "cpu_device", "layout": layout, "rows": ",".join(map(str, cn[:3])),
                                             "t0": 0, "t1": dur, "px": 50})
            same_as_json(head, arrays, js)
    # the answers above covered the events, a pyramid level, a huge window and an empty one
    assert {s[0] for s in seen} >= {"raw", "level"}, seen
    assert any(s[1] for s in seen) and any(s[2] for s in seen), seen
    # errors are JSON whatever form was asked
    bad = raw.get(f"/api/profiles/{SYNTH}/window", params={"rows": "999999", "t0": 0, "t1": 10, "px": 5,
                                                           "format": "bin"})
    assert bad.status_code == 400 and "error" in bad.json()
    bad = raw.get(f"/api/profiles/{SYNTH}/window", params={"rows": "0", "t0": 0, "t1": 10, "px": 5, "format": "csv"})
    assert bad.status_code == 400 and "format" in bad.json()["error"]


def test_packed_keeps_string_ids_unicode_and_exact_numbers() -> None:
    """What a real store seldom has: ids beyond 2^53 (sent as strings, ``wire.ids``), unicode text in
    the header, integers beyond 2^31 and 2^53 (f8, rounded as the browser's JSON.parse rounds them)."""
    ids = np.array([(1 << 60) + 7, 3], dtype=np.int64)
    ans = {"t0": 0.5, "level": "raw", "coarse": False, "name": "всё_ok_計算_🚀", "row": np.array([0, 300], np.int64),
           "s": np.array([-5, (1 << 40) + 1], np.int64), "e": np.array([1 << 53, (1 << 62) + 1], np.int64),
           "c": np.array([1, 70000], np.int64), "d": np.array([0.25, 1e300]), "id": wire.ids(ids),
           "leaf": np.array([], np.int64)}
    js = orjson.loads(orjson.dumps(ans, option=orjson.OPT_SERIALIZE_NUMPY))
    head, arrays = wire.unpack(wire.packed(ans, queries.WINDOW_ARRAYS).encode())
    assert head["id"] == [str((1 << 60) + 7), "3"] and "id" not in arrays
    assert arrays["row"].dtype == np.int16 and arrays["c"].dtype == np.int32 and arrays["s"].dtype == np.float64
    assert head["name"] == "всё_ok_計算_🚀"
    # as a double, the way JSON.parse reads the number: equal to float(the JSON integer)
    assert arrays["e"].tolist() == [float(x) for x in js["e"]]
    assert arrays["leaf"].size == 0 and js["leaf"] == []
    same_as_json(head, {k: v for k, v in arrays.items() if k != "e"}, {k: v for k, v in js.items() if k != "e"})


def test_damaged_window_bodies_are_refused_in_one_line(clients: tuple[TestClient, TestClient]) -> None:
    raw, _ = clients
    dur = raw.get(f"/api/profiles/{SYNTH}").json()["duration_ns"]
    tr = raw.get(f"/api/profiles/{SYNTH}/tracks", params={"mode": "cpu_device"}).json()["rows"]
    rows = ",".join(str(r["idx"]) for r in tr if r["kind"] == "events")
    body = raw.get(f"/api/profiles/{SYNTH}/window", params={"mode": "cpu_device", "rows": rows, "t0": 0,
                                                             "t1": dur / 64, "px": 300, "format": "bin"}).content
    assert wire.unpack(body)[1]["s"].size > 0
    fuzz_unpack(body, 175, hot=8 + int.from_bytes(body[4:8], "little"))
