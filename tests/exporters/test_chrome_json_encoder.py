"""`view`'s JSON events rendered in C (``_pqenc.chrome_events``, ``chrome_flows``) are byte-identical
to the Python path they replace (one dict per event, ``dumps_bytes`` each): over fuzzed chunks (names
with quotes, backslashes, unicode and control characters, huge and negative numbers, events with and
without args and extra_json), over edge timestamps, with either JSON backend, and over a real capture
(tests/view/test_json_identical.py)."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import orjson
import pyarrow as pa
import pytest

from neuron_explorer.analysis.events import ProcessEvents
from neuron_explorer.exporters import _pqenc, chrome_json
from neuron_explorer.exporters.chrome_trace import ChromeTraceWriter
from neuron_explorer.exporters.interface import ProcessTarget
from neuron_explorer.util import jsonfast

NASTY = ["", "a", 'q"uote', "back\\slash", "sl/ash", "é", "日本", "\U0001F600", "ctl\x00\x01\x1f\x7f", "tab\tnl\n",
         "\u2028\u2029", "\ud7ff\ue000\uffff", "x" * 300]
INT_EDGES = [0, 1, 999, 1000, 1001, 123_456_789, (1 << 31), (1 << 53) - 1, 1 << 53, (1 << 63) - 1]


@pytest.fixture(params=["orjson", "json"])
def backend(request, monkeypatch):
    """Each test under both backends of ``util.jsonfast`` (the encoders must follow the one in use)."""
    if request.param == "json":
        monkeypatch.setattr(jsonfast, "_orjson", None)
        monkeypatch.setattr(chrome_json, "BACKEND", "json")
    return request.param


def _int(rng: random.Random) -> int:
    """A value of an int64 column: mostly small, often an edge, sometimes anything."""
    r = rng.random()
    if r < 0.5:
        return rng.randrange(-2, 5000)
    if r < 0.8:
        return rng.choice(INT_EDGES) * rng.choice([1, -1])
    return rng.randrange(-(1 << 63), 1 << 63)


def _wrap(x: int) -> int:
    """``x`` modulo 2^64 as an int64 (numpy's arithmetic)."""
    return (x + (1 << 63)) % (1 << 64) - (1 << 63)


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(NASTY) for _ in range(rng.randrange(0, 3)))


def _extra(rng: random.Random, odd: bool) -> str | None:
    """An extra_json object as ``analysis.events`` writes it (compact, ascii-escaped, string and int
    values), or, less often, one it never writes (whitespace, raw UTF-8, repeated keys, base keys,
    floats, nesting, big integers, a lone surrogate, not an object) where ``odd``: the C encoder
    reproduces the first kind and hands a chunk with any of the rest to the Python path."""
    if rng.random() < 0.4:
        return None
    keys = ["prev_model_id", "exec_id", "device_profile", "model_name", "flow_id", "k", *NASTY]
    obj = []
    for _ in range(rng.randrange(0, 5)):
        k = rng.choice(keys)
        r = rng.random()
        v: object = (_text(rng) if r < 0.4 else rng.choice([-1, 0, 7, 10 ** 17, -(10 ** 18) + 1]) if r < 0.8
                     else rng.choice([True, False, None]) if r < 0.9 or not odd else
                     rng.choice([0.5, 1e300, -0.0, [1], {"a": 1}, 10 ** 19, _int(rng)]))
        obj.append((k, v))
    if not odd or rng.random() < 0.8:  # the writer's form
        return "{" + ",".join(json.dumps(k) + ":" + json.dumps(v) for k, v in obj) + "}"
    form = rng.randrange(5)
    if form == 0:
        return "{ " + " , ".join(json.dumps(k, ensure_ascii=False) + " : " + json.dumps(v, ensure_ascii=False)
                                 for k, v in obj) + " }\n"
    if form == 1:
        return '{"s":"\\ud800"}'
    if form == 2:
        return '{"a":"\\u00e9\\/\\ud83d\\ude00\\b\\f\\n\\r\\t","a":-0,"b":0}'
    if form == 3:
        return rng.choice(["[1]", "{}", ' {} ', '{"a":1,}', '{"a":tru}', '{"a":"x'])
    return '{"a":1}{"b":2}'


def _chunk(rng: random.Random, n: int, first_id: int, framework: bool) -> ProcessEvents:
    types = [_text(rng) or "t" for _ in range(3)] + ["nrt_execute", "nc_exec_running", "cc_running"]
    groups = ["neuron_rt", "neuron_hw", "neuron_hw", "neuron_rt", "neuron_hw", "neuron_hw"]
    sources = [_text(rng) for _ in types]
    strings = [""] + [_text(rng) for _ in range(6)]
    base = rng.choice([0, 1 << 40, (1 << 53) - 5000, -(1 << 50)])
    start = np.array([_wrap(base + _int(rng)) if rng.random() < 0.3 else base + rng.randrange(0, 10 ** 7)
                      for _ in range(n)], dtype=np.int64)
    dur = np.array([rng.choice([0, 0, -5, 1, 999, 1000, 1500, rng.randrange(1, 10 ** 9), _int(rng)]) for _ in range(n)],
                   dtype=np.int64)
    ids = np.arange(first_id, first_id + n, dtype=np.int64)

    def col(values):
        return np.array(values, dtype=np.int64)

    flow = col([rng.choice([0, 0, rng.randrange(1, 50), -7, (1 << 62) | rng.randrange(1 << 20), _int(rng)])
                for _ in range(n)])
    cols = {
        "id": ids, "type": col([rng.randrange(len(types)) for _ in range(n)]), "start_ts": start,
        "end_ts": (start.astype(np.uint64) + dur.astype(np.uint64)).astype(np.int64),
        "thread_id": col([rng.choice([1, 2, 77, 1 << 40]) for _ in range(n)]),
        "nc_idx": col([rng.randrange(3) for _ in range(n)]),
        "model_id": col([rng.choice([-1, 0, 1, 5, 1 << 40]) for _ in range(n)]),
        "exec_id": col([rng.choice([-1, _int(rng)]) for _ in range(n)]),
        "seq": col([rng.choice([-1, _int(rng)]) for _ in range(n)]),
        "bytes": col([rng.choice([-1, -1, _int(rng)]) for _ in range(n)]),
        "ret": col([rng.choice([-1, 0, _int(rng)]) for _ in range(n)]),
        "op": col([rng.randrange(len(strings)) for _ in range(n)]),
        "group": col([rng.choice([0, rng.randrange(len(strings))]) for _ in range(n)]),
        "dtype": col([rng.choice([0, rng.randrange(len(strings))]) for _ in range(n)]),
        "flow_id": flow, "device_profile": col([rng.choice([-1, 0, 1]) for _ in range(n)]),
    }
    if framework:  # regions (framework_stream_id == id) and calls they issued, ran-in flows
        fsid = col([rng.choice([-1, int(ids[rng.randrange(n)]), int(ids[i])]) for i in range(n)])
        cols["framework_stream_id"] = fsid
        cols["flow_id2"] = col([rng.choice([0, 1]) for _ in range(n)])
    odd = rng.random() < 0.25
    extra = pa.array([_extra(rng, odd) for _ in range(n)], type=pa.string())
    if rng.random() < 0.3:  # a sliced Arrow array (its offsets start inside the buffer)
        extra = pa.concat_arrays([pa.array(["{}"] * 3, type=pa.string()), extra]).slice(3)
    return ProcessEvents(session=None, index=0, clock_offset_ns=0, n=n, cols=cols,  # type: ignore[arg-type]
                         type_names=types, type_groups=groups, type_sources=sources, strings=strings,
                         model_names={0: _text(rng), 1: "m"}, extra_json=extra, device_profiles=["p0", _text(rng)])


def _render(chunks: list[ProcessEvents], origin: int, tmp_path, enc) -> bytes | str:
    """The piece a JsonProcess writes for ``chunks`` (``enc``: the C module or None), or the error."""
    target = ProcessTarget(index=0, origin_ns=origin, out=str(tmp_path / "o.json"), work=str(tmp_path),
                           device_dir=str(tmp_path), group_label="g")
    w = chrome_json.JsonProcess(target)
    w.trace = ChromeTraceWriter(io.BytesIO(), fragment=True)
    old = chrome_json._pqenc
    chrome_json._pqenc = enc
    try:
        for pe in chunks:
            w.add(pe)
        return w.trace.f.getvalue()  # type: ignore[attr-defined]
    except Exception as e:  # the same error either way (the C encoder hands such chunks back)
        return f"{type(e).__name__}: {e}"
    finally:
        chrome_json._pqenc = old
        w.abort()


@pytest.mark.parametrize("seed", range(40))
def test_fuzzed_chunks_render_the_same_bytes(seed, backend, tmp_path):
    rng = random.Random(seed)
    n = rng.choice([1, 2, 7, 60])
    chunks = [_chunk(rng, n, 0, seed % 2 == 0), _chunk(rng, rng.choice([1, 5]), n, seed % 2 == 0)]
    origin = rng.choice([0, int(chunks[0].cols["start_ts"].min()), -(1 << 62)])
    fast = _render(chunks, origin, tmp_path, _pqenc)
    slow = _render(chunks, origin, tmp_path, None)
    assert fast == slow
    if isinstance(fast, bytes):
        json.loads(b"[" + fast + b"]")  # (and a well-formed list of events)


def test_the_writer_s_extra_json_takes_the_c_path(tmp_path):
    """The fuzz above would pass if every chunk fell back: the form the capture writes must not."""
    rng = random.Random(7)
    pe = _chunk(rng, 50, 0, True)
    pe.extra_json = pa.array(['{"prev_model_id":3,"k":"\\u00e9\\"\\\\\\n","exec_id":-4}', None] * 25,
                             type=pa.string())
    w = chrome_json.JsonProcess(ProcessTarget(index=0, origin_ns=0, out="", work=str(tmp_path),
                                              device_dir=str(tmp_path), group_label="g"))
    try:
        tid = w._tracks(pe, 1, [])
        code = w._flows(pe, tid)
        block = w._encode(pe, 1, tid, code, np.lexsort((code != 1, pe.cols["start_ts"])))
    finally:
        w.abort()
    assert block is not None and b"".join(block).count(b'"prev_model_id":3') == 25


def _us(values: list[int], ascii_floats: bool) -> list[bytes]:
    """``chrome_events``'s ts for each nanosecond value (one event each, origin 0)."""
    n = len(values)
    v = np.array(values, dtype=np.int64)
    z, m = np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    cols = (np.arange(n, dtype=np.int64), v, v, z, z, m, m, m, m, m, m, m, m, z, None, m, z)
    out = _pqenc.chrome_events(n, cols, ([b'""'], [b'""'], [], [], []), 0, b"1", None, None, None,
                               ascii_floats, b"\n")
    return [line.split(b'"ts":')[1].split(b",")[0] for line in b"".join(out).split(b"\n")]


def _edge_ns() -> list[int]:
    exact = 4398046511104 * 1000  # 2^42 microseconds: where the exact decimal path ends
    vals = {0, 1, 9, 10, 99, 100, 999, 1000, 1001, 1010, 1100, 10 ** 15, exact - 1, exact, exact + 1,
            (1 << 53) - 1, 1 << 53, (1 << 53) + 1, (1 << 63) - 1}
    rng = random.Random(1)
    for bits in range(1, 64):
        for _ in range(40):
            vals.add(rng.getrandbits(bits))
    return sorted(vals | {-x for x in vals} | {-(1 << 63)})


def test_timestamps_print_as_python_prints_the_float():
    """ts/dur from integer nanoseconds: the exact decimal below 2^42 us, the shortest float beyond,
    each equal to what the backend prints for ns / 1000.0 (orjson's layout, or repr)."""
    vals = _edge_ns()
    floats = (np.array(vals, dtype=np.int64) / 1000.0).tolist()
    assert _us(vals, False) == [orjson.dumps(f) for f in floats]
    assert _us(vals, True) == [json.dumps(f).encode() for f in floats]


def test_collective_flows_match_the_f_string():
    rng = random.Random(3)
    n = 200
    kind = np.array([rng.randrange(3) for _ in range(n)], dtype=np.int64)
    ids = np.array([_int(rng) for _ in range(n)], dtype=np.int64)
    pids, tids, ts = (np.array([_int(rng) for _ in range(n)], dtype=np.int64) for _ in range(3))
    ts[:len(_edge_ns()[:n])] = _edge_ns()[:n]
    ph = ['"s"', '"t"', '"f","bp":"e"']
    want = b",".join(f'{{"name":"collective","cat":"flow","ph":{ph[k]},"id":"0x{i:x}","pid":{p},'
                     f'"tid":{t},"ts":{s / 1000.0!r}}}'.encode()
                     for k, i, p, t, s in zip(kind.tolist(), ids.tolist(), pids.tolist(), tids.tolist(),
                                              ts.tolist()))
    assert _pqenc.chrome_flows(kind, ids, pids, tids, ts, b",") == want


def test_bad_arguments_raise():
    z = np.zeros(2, dtype=np.int64)
    cols = (z,) * 14 + (None, z, z)
    tabs = ([b'""'], [b'""'], [], [], [])
    with pytest.raises(ValueError):
        _pqenc.chrome_events(3, cols, tabs, 0, b"1", None, None, None, False, b",")  # lengths
    with pytest.raises(ValueError):
        _pqenc.chrome_events(2, cols[:-1] + (z.astype(np.float64),), tabs, 0, b"1", None, None, None, False, b",")
    with pytest.raises(ValueError):
        _pqenc.chrome_events(2, cols, tabs, 0, b"1", np.array([0, 5, 1], dtype=np.int32), b"ab",
                             np.ones(2, dtype=np.uint8), False, b",")  # offsets out of order
    with pytest.raises(ValueError):
        _pqenc.chrome_flows(z, z, z, z, np.zeros(3, dtype=np.int64), b",")
    assert _pqenc.chrome_events(2, (np.array([0, 5]),) + cols[1:], tabs, 0, b"1", None, None, None, False,
                                b",") is None  # (an order index out of range: handed back)
