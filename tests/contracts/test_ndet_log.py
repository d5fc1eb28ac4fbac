"""contracts.ndet_log: the NDET log file written with ``encode_parts`` and read back, and each way a file
can be refused (a one-line ``LogFormatError`` naming the file).  (Logs a recorder wrote, cut and
bit-flipped: tests/ndet/test_recorder.py.)"""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest

from neuron_explorer.contracts import ndet_log as fmt


def _header(**extra) -> dict:
    return {"format": fmt.FORMAT_NAME, "version": fmt.FORMAT_VERSION, "record_size": fmt.RECORD_DTYPE.itemsize,
            "record_dtype": fmt.dtype_description(), "strings": ["", "all_reduce", "0,1"], **extra}


def _records(n: int, start: int = 0) -> np.ndarray:
    r = np.zeros(n, dtype=fmt.RECORD_DTYPE)
    r["kind"] = fmt.KIND_CC_OP
    r["t0"] = np.arange(start, start + n) * 1000
    r["t1"] = r["t0"] + 500
    r["b"] = np.arange(start, start + n)
    r["e"] = 2
    r["ret"] = -7
    r["nc"] = 65535
    return r


def _write(path, header: dict, blocks) -> None:
    path.write_bytes(b"".join(bytes(p) for p in fmt.encode_parts(header, blocks)))


def test_records_and_header_round_trip(tmp_path):
    p = tmp_path / "ndet_x.log"
    ring, in_flight = _records(3), _records(2, start=10)
    in_flight["state"] = fmt.STATE_IN_FLIGHT
    _write(p, _header(ident={"rank": 1}, note="é日"), [ring, np.zeros(0, fmt.RECORD_DTYPE), in_flight])
    log = fmt.read_log(str(p))
    assert log.header["record_count"] == 5 and log.header["note"] == "é日" and log.ident == {"rank": 1}
    assert np.array_equal(log.records, np.concatenate([ring, in_flight]))
    assert log.strings == ["", "all_reduce", "0,1"] and log.path == str(p)
    assert fmt.read_header(str(p)) == log.header and fmt.sniff(str(p))


def test_the_records_start_on_an_8_byte_boundary(tmp_path):
    for pad in range(9):  # header lengths with every remainder
        p = tmp_path / f"l{pad}"
        _write(p, _header(x="y" * pad), [_records(1)])
        data = p.read_bytes()
        (hlen,) = struct.unpack_from("<I", data, len(fmt.MAGIC))
        assert (len(fmt.MAGIC) + 4 + hlen) % 8 == 0
        assert len(data) == len(fmt.MAGIC) + 4 + hlen + 64 + len(fmt.TRAILER) + 8


def test_a_log_without_records_is_a_log(tmp_path):
    p = tmp_path / "empty.log"
    _write(p, _header(), [])
    log = fmt.read_log(str(p))
    assert log.header["record_count"] == 0 and len(log.records) == 0


def _sealed(header_bytes: bytes, records: bytes = b"") -> bytes:
    body = fmt.MAGIC + struct.pack("<I", len(header_bytes)) + header_bytes + records
    return body + fmt.TRAILER + struct.pack("<II", zlib.crc32(body), 0)


def _good(tmp_path) -> bytes:
    p = tmp_path / "good.log"
    _write(p, _header(), [_records(2)])
    return p.read_bytes()


@pytest.mark.parametrize("damage,why", [
    (lambda b: b"", "empty file"),
    (lambda b: b"NOTNDET!" + b[8:], "not an NDET log (bad magic)"),
    (lambda b: b"NDETLOG2" + b[8:], "NDET log format version b'2' is not supported"),
    (lambda b: b[:10], "truncated in the header"),
    (lambda b: b[:40], "truncated"),
    (lambda b: b[:-1], "truncated"),
    (lambda b: b + b"\0", "has trailing bytes"),
    (lambda b: b[:-16] + b"NDETEND2" + b[-8:], "trailer missing"),
    (lambda b: b[:-60] + bytes([b[-60] ^ 1]) + b[-59:], "checksum mismatch"),
    (lambda b: _sealed(b"{not json"), "corrupt header"),
    (lambda b: _sealed(json.dumps({"format": "other"}).encode()), "not a neuron-explorer-ndet header"),
    (lambda b: _sealed(json.dumps({**_header(), "record_size": 32}).encode()), "unsupported record layout"),
    (lambda b: _sealed(json.dumps({**_header(), "record_dtype": [["kind", "u1"]]}).encode()),
     "unsupported record layout"),
    (lambda b: _sealed(json.dumps({**_header(), "record_count": -1}).encode()), "record_count is -1"),
    (lambda b: _sealed(json.dumps({**_header(), "record_count": 0, "strings": [1]}).encode()),
     "strings is not a list of strings"),
])
def test_damaged_files_are_refused_with_the_reason(tmp_path, damage, why):
    p = tmp_path / "bad.log"
    p.write_bytes(damage(_good(tmp_path)))
    with pytest.raises(fmt.LogFormatError) as e:
        fmt.read_log(str(p))
    assert str(e.value).startswith(f"{p}: ") and why in str(e.value) and "\n" not in str(e.value)


def test_only_regular_files_are_read(tmp_path):
    with pytest.raises(fmt.LogFormatError, match="not a regular file"):
        fmt.read_log(str(tmp_path))
    with pytest.raises(fmt.LogFormatError, match="cannot read"):
        fmt.read_log(str(tmp_path / "missing"))
    assert not fmt.sniff(str(tmp_path)) and not fmt.sniff(str(tmp_path / "missing"))


def test_every_kind_names_its_argument_slots():
    assert set(fmt.KINDS) == {fmt.KIND_EXEC, fmt.KIND_CC_OP, fmt.KIND_NUMERICAL_ERROR, fmt.KIND_CC_BARRIER}
    for k in fmt.CC_KINDS:
        assert fmt.KINDS[k]["args"]["b"] == "seq" and fmt.KINDS[k]["args"]["e"] == "group_str"
    assert all(set(v["args"]) <= set("abcde") for v in fmt.KINDS.values())
