"""Fuzzing the on-demand request and answer parsers (``contracts.ondemand``): seeded mutations of
valid files.  Whatever a file holds, the parser returns a request (answer) whose fields are in
range, or raises ``RequestError`` with one line; nothing else.  ``NEURON_EXPLORER_FUZZ_SCALE`` /
``NEURON_EXPLORER_FUZZ_SEED`` as for the other fuzz tests (tests/fuzzing.py)."""

from __future__ import annotations

import json
import os
import random

from neuron_explorer.contracts import ondemand as od
from tests.fuzzing import examples, json_paths, seed as fuzz_seed

ODD = [None, True, False, -1, 0, 1, 2 ** 31, 2 ** 62, 2 ** 63, 2 ** 64, 10 ** 30, 1.5, float("nan"), 1e308, -1e308,
       "", "x", "arm", "record", "ndet", "../../etc", "/tmp/x\0y", "9" * 5000, "\udcff", [], [1, 2], [[1, 2]] * 3,
       [[-1, 5]], {}, {"a": 1}, {od.CAPTURE_VARS[0]: "model"}, {"NEURON_RT_INSPECT_ENABLE": "1"}, [[[[]]]]]


PARSER_CASES = 50_000  # mutations of each file kind: what 3 s gave on an idle machine (decision 0151)
ENDPOINT_CASES = 12_000  # calls: what 2 s gave


def valid() -> tuple[bytes, bytes]:
    req = od.Request(id="0123456789abcdef", pid=4242, start_time=123456, phase="record", steps=5,
                     output_dir="/tmp/out", capture={od.CAPTURE_VARS[3]: "nrt_execute"}, offset=-3, start=40)
    ans = od.Answer(id="0123456789abcdef", state="done", pid=4242, step=41, arm_wall_ns=10 ** 18,
                    boundaries=[(1, 10 ** 18), (2, 10 ** 18 + 5)], session_dir="/tmp/out/x", first_step=40,
                    last_step=44)
    return od.encode(req), od.encode(ans)


def mutate(raw: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:
        b = bytearray(raw)
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 1:
        return raw[:rng.randrange(len(raw))]
    if kind == 2:
        return rng.choice([b"[" * 100000, b'{"format":' * 5000, b"\xff\xfe", b"", b"null", b"1e999999",
                           raw + b" " * (od.MAX_FILE_BYTES + 1)])
    doc = json.loads(raw)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in json_paths(doc) if p]
        if not paths:
            break
        path = rng.choice(paths)
        cur = doc
        for p in path[:-1]:
            cur = cur[p]
        if rng.random() < 0.15 and isinstance(cur, dict):
            cur.pop(path[-1], None)
        elif rng.random() < 0.1 and isinstance(cur, dict):
            cur[rng.choice(["extra", "__proto__", "x" * 300])] = 1
        else:
            cur[path[-1]] = json.loads(json.dumps(rng.choice(ODD)))
    return json.dumps(doc).encode("utf-8", "surrogatepass")


def check_request(r: od.Request) -> None:
    assert r.phase in ("arm", "record", "ndet") and 0 < r.pid < 1 << 31
    assert r.steps is None or 1 <= r.steps <= od.MAX_STEPS
    assert r.duration_s is None or 0 < r.duration_s <= od.MAX_DURATION_S
    assert r.phase == "ndet" or (r.steps is None) != (r.duration_s is None)
    assert r.phase == "ndet" or os.path.isabs(r.output_dir)
    assert set(r.capture) <= set(od.CAPTURE_VARS) and all(isinstance(v, str) for v in r.capture.values())


def test_fuzz_request_and_answer_parsers():
    s = fuzz_seed(30)
    rng = random.Random(s)
    req, ans = valid()
    check_request(od.parse_request(req))
    assert od.parse_answer(ans).boundaries == [(1, 10 ** 18), (2, 10 ** 18 + 5)]
    for _ in range(examples(PARSER_CASES)):
        for raw, parse in ((req, od.parse_request), (ans, od.parse_answer)):
            data = mutate(raw, rng)
            try:
                got = parse(data)
            except od.RequestError as e:
                assert "\n" not in str(e) and len(str(e)) < 400, (s, str(e))
                continue
            except Exception as e:  # pragma: no cover - the failure this test looks for
                raise AssertionError(f"seed {s}: {type(e).__name__}: {e} for {data[:200]!r}") from e
            if parse is od.parse_request:
                check_request(got)
            else:
                assert got.state in od.ANSWER_STATES and len(got.boundaries) <= od.MAX_BOUNDARIES


def test_read_private_refuses_what_is_not_a_small_file_of_ours(tmp_path):
    d = od.check_private_dir(tmp_path / "od", create=True)
    assert (os.stat(d).st_mode & 0o777) == 0o700
    big = d / "big.request"
    big.write_bytes(b"x" * (od.MAX_FILE_BYTES + 1))
    fifo = d / "fifo.request"
    os.mkfifo(fifo)
    link = d / "link.request"
    os.symlink("/etc/hostname", link)
    for p, why in ((big, "more than"), (fifo, "not a regular file"), (link, "cannot open")):
        try:
            od.read_private(str(p))
        except od.RequestError as e:
            assert why in str(e)
        else:
            raise AssertionError(p)
    os.chmod(d, 0o755)
    try:
        od.check_private_dir(d)
    except od.EndpointError:
        pass
    else:
        raise AssertionError("a directory others can enter is not private")


def test_fuzz_control_endpoint_calls(tmp_path):
    """neuron-monitor's control endpoint (``monitor.control``): whatever the body, a call answers
    with a status and a JSON object, or raises ``RequestError`` (a 400); it writes a request file
    only for a request ``parse_request`` accepts for a live process of this user."""
    from neuron_explorer.monitor.control import ControlServer

    s = fuzz_seed(31)
    rng = random.Random(s)
    srv = ControlServer("127.0.0.1", 0, "t" * 32, tmp_path / "od")
    try:
        req, _ = valid()
        good = {"Content-Type": "application/json", od.TOKEN_HEADER: "t" * 32}
        bodies = [{"pids": [os.getpid()]}, {"tag": "x"}, {"pid": 1}, {"request": json.loads(req)}]
        for _ in range(examples(ENDPOINT_CASES)):
            path = rng.choice(od.RELAY_PATHS + ("/v1/x", "/"))
            body = json.dumps(rng.choice(bodies)).encode()
            data = mutate(body, rng)
            try:
                code, obj = srv.handle(path, good, data)
            except od.RequestError:
                continue
            except Exception as e:  # pragma: no cover - the failure this test looks for
                raise AssertionError(f"seed {s}: {path} {data[:200]!r}: {type(e).__name__}: {e}") from e
            assert isinstance(code, int) and isinstance(obj, dict)
        assert srv.handle("/v1/targets", {**good, od.TOKEN_HEADER: "u" * 32}, b"{}")[0] == 403
        assert not any(p.name.endswith(od.REQUEST_SUFFIX) for p in (tmp_path / "od").iterdir())
    finally:
        srv.httpd.server_close()
