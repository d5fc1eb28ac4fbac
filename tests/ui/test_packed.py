"""Packed answers (decision 0165): ``wire.pack`` / ``unpack`` round-trip every element type and shape,
a damaged body is refused with one line (never read past its end), and ``/busy?format=bin`` carries
the same header and the same shares, byte for byte, as the JSON answer's base64 strings."""

from __future__ import annotations

import base64
import random

import numpy as np
import orjson
import pytest

from neuron_explorer.ui import wire
from tests.fuzzing import examples, seed

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from neuron_explorer.ui.app import create_app  # noqa: E402

SYNTH = "synth-8r"


def test_pack_round_trips_every_type_and_shape() -> None:
    rng = np.random.default_rng(3)
    arrays = {"u1": rng.integers(0, 256, (3, 7)).astype(np.uint8), "empty": np.zeros((0, 5), dtype=np.uint8),
              "i4": rng.integers(-2**31, 2**31 - 1, 11).astype(np.int32), "f8be": rng.normal(size=5).astype(">f8"),
              "f4": rng.normal(size=(2, 2, 3)).astype(np.float32), "u2": np.arange(9, dtype=np.uint16),
              "i1": np.array([-128, 0, 127], dtype=np.int8)}
    header = {"t0": 1.5, "groups": [{"basis": "compute"}], "coarse": False}
    body = wire.pack(header, arrays)
    assert body[:4] == wire.MAGIC
    got_h, got = wire.unpack(body)
    assert got_h == header
    assert list(got) == list(arrays)
    for k, a in arrays.items():
        assert got[k].shape == a.shape, k
        assert np.array_equal(got[k], a), k
        assert got[k].dtype.byteorder in ("<", "=", "|"), k  # little-endian on the wire, whatever was given
    # every array starts at a multiple of 8 from the body's start (a browser typed array views it in place)
    n = int.from_bytes(body[4:8], "little")
    for m in orjson.loads(body[8:8 + n])["arrays"].values():
        assert (wire.data_start(n) + m["offset"]) % 8 == 0
    with pytest.raises(TypeError, match="cannot be packed"):
        wire.pack({}, {"x": np.zeros(2, dtype=np.int64)})


def fuzz_unpack(body: bytes, seed_default: int, hot: int | None = None) -> None:
    """``wire.unpack`` on damaged copies of ``body`` (cut short, or 1 to 6 bytes changed, 70% of them
    in the first ``hot`` bytes when given: the header, where the parser reads): a ValueError of one
    line, or arrays that lie inside the body."""
    rnd = random.Random(seed(seed_default))
    for k in range(examples(400)):
        b = bytearray(body)
        if rnd.random() < 0.3:
            b = b[: rnd.randrange(len(b))]
        for _ in range(rnd.randint(1, 6)):
            if b:
                b[rnd.randrange(min(len(b), hot) if hot and rnd.random() < 0.7 else len(b))] = rnd.randrange(256)
        try:
            h, arrays = wire.unpack(bytes(b))
        except ValueError as e:
            assert "\n" not in str(e), (k, str(e))
            continue
        assert isinstance(h, dict)
        for a in arrays.values():  # what is returned lies inside the body
            assert a.nbytes <= len(b), k


def test_damaged_packed_bodies_are_refused_in_one_line() -> None:
    fuzz_unpack(wire.pack({"px": 4}, {"busy": np.arange(8, dtype=np.uint8).reshape(2, 4), "v": np.ones(3)}), 165)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    from bench.ui_bench import write_store

    ws = tmp_path_factory.mktemp("packed")
    write_store(ws / SYNTH, 2, 4, 24_000, seed=2, straggler=5)
    return TestClient(create_app(ws, cache_dir=tmp_path_factory.mktemp("cache")))


def test_busy_packed_equals_json(client: TestClient) -> None:
    rows = client.get(f"/api/profiles/{SYNTH}/tracks", params={"mode": "cpu_device", "layout": "tracks"}).json()
    procs: dict[tuple, list[int]] = {}
    for r in rows["rows"]:
        if r["kind"] == "events":
            procs.setdefault(tuple(r["group"][:2]), []).append(r["idx"])
    groups = ";".join(",".join(map(str, v)) for v in procs.values())
    dur = client.get(f"/api/profiles/{SYNTH}").json()["duration_ns"]
    for t0, t1, px in ((0, dur, 1300), (dur * 0.3, dur * 0.3 + dur / 4096, 977), (dur * 0.5, dur * 0.5 + 3000, 64)):
        q = {"mode": "cpu_device", "layout": "tracks", "groups": groups, "t0": t0, "t1": t1, "px": px}
        js = client.get(f"/api/profiles/{SYNTH}/busy", params=q)
        bn = client.get(f"/api/profiles/{SYNTH}/busy", params={**q, "format": "bin"})
        assert js.status_code == bn.status_code == 200, (js.text, bn.content[:200])
        assert bn.headers["content-type"] == "application/octet-stream"
        head, arrays = wire.unpack(bn.content)
        j = js.json()
        assert arrays["busy"].shape == arrays["cc"].shape == (len(procs), j["px"])
        assert {k: v for k, v in j.items() if k != "groups"} == {k: v for k, v in head.items() if k != "groups"}
        for i, g in enumerate(j["groups"]):
            assert np.array_equal(np.frombuffer(base64.b64decode(g["busy"]), np.uint8), arrays["busy"][i]), (t0, i)
            assert np.array_equal(np.frombuffer(base64.b64decode(g["cc"]), np.uint8), arrays["cc"][i]), (t0, i)
            assert {k: v for k, v in g.items() if k not in ("busy", "cc")} == head["groups"][i]
        if t0 == 0:
            assert arrays["busy"].all()  # whole profile: every pixel of every rank holds some compute
    # a bad request is a JSON error whatever form was asked; an unknown form is a bad request
    bad = client.get(f"/api/profiles/{SYNTH}/busy", params={"groups": "999999", "t0": 0, "t1": 10, "px": 5,
                                                           "format": "bin"})
    assert bad.status_code == 400 and "error" in bad.json()
    bad = client.get(f"/api/profiles/{SYNTH}/busy", params={"groups": "0", "t0": 0, "t1": 10, "px": 5,
                                                           "format": "xml"})
    assert bad.status_code == 400 and "format" in bad.json()["error"]
