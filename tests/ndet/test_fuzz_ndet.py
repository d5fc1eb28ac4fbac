"""Fuzzing ``neuron-det`` with damaged NDET logs: seeded mutations, a fixed number of batches, all in one
subprocess under a memory cap (``fuzz_det_driver.py``: ``neuron-det``'s ``main`` once per batch).
Whatever a log holds, ``neuron-det`` must not raise, must stay under the cap, must name every file
it skips, and must still analyse every intact log.

The mutations that matter most re-seal the checksum after changing the header or the records
(a buggy or crafted writer): plain byte flips only exercise the CRC check.  Fast by default
(``FAST_RUNS`` batches); the slow variant runs on the logs of a real torchrun job.
``NEURON_EXPLORER_FUZZ_SCALE`` multiplies both; a failure prints the seed that reproduces it.
"""
from __future__ import annotations

import json
import random
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer.contracts import ndet_log as fmt

from ..fuzzing import examples, json_paths, run_capped, seed as fuzz_seed
from .helpers import JOB_ENV, logs_in, make_recorder, skip_job

FAST_RUNS = 16  # batches of BATCH damaged logs: what 4 s gave on an idle machine (decision 0151)
SLOW_RUNS = 48  # on the real job's logs: what 12 s gave
MEM_CAP = 768 << 20  # bytes of address space for one neuron-det run
BATCH = 12  # damaged files per run, beside the intact logs
DRIVER = Path(__file__).with_name("fuzz_det_driver.py")

ODD_VALUES = [None, True, False, -1, 0, 1, 2 ** 31, 2 ** 62, 2 ** 63, -2 ** 63, 2 ** 64, 10 ** 30, 1.5, 1e308, -1e308,
              "", "x", "9" * 60, [], [1, 2], {}, {"a": 1}, [[[[]]]], "\u0000", "ndet"]
EXTREMES = [0, -1, 1, 2 ** 31 - 1, 2 ** 62, 2 ** 63 - 1, -2 ** 63, 65535, 255]


def _split(data: bytes) -> tuple[dict, bytes]:
    (hlen,) = struct.unpack_from("<I", data, len(fmt.MAGIC))
    h0 = len(fmt.MAGIC) + 4
    return json.loads(data[h0:h0 + hlen]), data[h0 + hlen:-(len(fmt.TRAILER) + 8)]


def _seal(hb: bytes, records: bytes) -> bytes:
    body = fmt.MAGIC + struct.pack("<I", len(hb)) + hb + records
    return body + fmt.TRAILER + struct.pack("<II", zlib.crc32(body) & 0xFFFFFFFF, 0)


def _set_path(obj, path, value, delete: bool):
    cur = obj
    for p in path[:-1]:
        cur = cur[p]
    if delete and isinstance(cur, dict):
        cur.pop(path[-1], None)
    else:
        cur[path[-1]] = value


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One damaged variant of a log, chosen among byte-level and checksum-preserving mutations."""
    kind = rng.randrange(8)
    if kind == 0:  # flip bytes anywhere (the CRC should catch it)
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == 1:  # truncate
        return data[:rng.randrange(len(data))]
    if kind == 2:  # insert garbage
        i = rng.randrange(len(data))
        return data[:i] + rng.randbytes(rng.randint(1, 64)) + data[i:]
    header, records = _split(data)
    if kind in (3, 4):  # a header field of another type, or gone; checksum re-sealed
        for _ in range(rng.randint(1, 3)):
            path = rng.choice([p for p in json_paths(header) if p])
            _set_path(header, path, json.loads(json.dumps(rng.choice(ODD_VALUES))), delete=rng.random() < 0.2)
        return _seal(json.dumps(header).encode(), records)
    if kind == 5:  # the header's text damaged, checksum re-sealed
        hb = bytearray(json.dumps(header).encode())
        for _ in range(rng.randint(1, 4)):
            hb[rng.randrange(len(hb))] = rng.randrange(256)
        return _seal(bytes(hb), records)
    if kind == 6:  # record fields at their extremes (times, string ids, kinds, states), re-sealed
        rec = np.frombuffer(records, dtype=fmt.RECORD_DTYPE).copy()
        if len(rec):
            for _ in range(rng.randint(1, 6)):
                i = rng.randrange(len(rec))
                name = rng.choice(fmt.RECORD_DTYPE.names)
                info = np.iinfo(rec.dtype[name])
                rec[name][i] = max(info.min, min(info.max, rng.choice(EXTREMES)))
        return _seal(json.dumps(header).encode(), rec.tobytes())
    # kind 7: random record bytes, or a record count that does not match, re-sealed
    if rng.random() < 0.5 and records:
        b = bytearray(records)
        for _ in range(rng.randint(1, 32)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return _seal(json.dumps(header).encode(), bytes(b))
    header["record_count"] = rng.choice([0, 1, len(records) // 64 + 1, 2 ** 40, -3])
    return _seal(json.dumps(header).encode(), records)


def fuzz(corpus: list[Path], work: Path, runs: int, seed: int) -> int:
    """Run ``runs`` batches; returns the number of damaged files tried.  ``neuron-det`` analyses every
    batch in one capped process (``fuzz_det_driver.py``), each batch through the console script's
    ``main`` as its own run would."""
    originals = {p.name: p.read_bytes() for p in corpus}
    fuzzed = [f"ndet_fuzz_{i}.log" for i in range(BATCH)]
    for run in range(runs):
        rng = random.Random(seed * 1_000_003 + run)
        d = work / f"run{run}"
        d.mkdir()
        for name, data in originals.items():
            (d / name).write_bytes(data)
        for name in fuzzed:
            (d / name).write_bytes(mutate(originals[rng.choice(sorted(originals))], rng))
    p = run_capped([sys.executable, str(DRIVER), str(work), *map(str, range(runs))], MEM_CAP, timeout=120 + 5 * runs)
    tried = 0
    for run in range(runs):
        d, trace, result = work / f"run{run}", work / f"trace{run}.json", work / f"result{run}.json"
        where = f"(seed {seed}, run {run}: NEURON_EXPLORER_FUZZ_SEED={seed}; files kept in {d})"
        assert result.exists(), f"the capped process ended in this batch (exit {p.returncode}) {where}\n" \
                                f"{p.stderr[-3000:]}"
        r = json.loads(result.read_text())
        assert r["returncode"] in (0, 1), f"exit {r['returncode']} {where}\n{r['stderr'][-3000:]}"
        assert "Traceback" not in r["stderr"] and "MemoryError" not in r["stderr"], f"{where}\n{r['stderr'][-3000:]}"
        assert all(ln.startswith("neuron-det: ") for ln in r["stderr"].splitlines()), f"{where}\n{r['stderr'][-3000:]}"
        meta = json.loads(trace.read_text())["metadata"]
        analysed = set(meta["logs"])
        assert set(originals) <= analysed, f"an intact log was not analysed {where}\n{r['stderr'][-3000:]}"
        for name in fuzzed:
            assert name in analysed or name in r["stderr"], f"{name} neither analysed nor named {where}"
        for f in d.iterdir():  # nothing of ours was deleted or rewritten
            if f.name in originals:
                assert f.read_bytes() == originals[f.name], where
        # keep the disk use flat: a passing batch is not needed any more
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
        trace.unlink()
        tried += BATCH
    assert p.returncode == 0, p.stderr[-3000:]
    return tried


def _synthetic_job(d: Path) -> list[Path]:
    """Logs of a 3-rank job through the real writer: executions, collectives (one run inside an
    execution, as a compiled collective is), a barrier, a NaN, a collective still in flight (the
    begin record) and a model table with the graph's load times."""
    d.mkdir(parents=True, exist_ok=True)
    recs = [make_recorder(d, rank=r, world=3, pid=500 + r, job_env=JOB_ENV) for r in range(3)]
    for rank, rec in enumerate(recs):
        rec.rt.models[0].load_span = (10, 400, 900)
        for step in range(8):
            t = 1_000_000 * step
            rec.exec_end(rank, 0, step, t, t + (400 if step == 2 else 100), 0)
            tok = rec.cc_begin(rank, "all_reduce", step, "0,1,2", 64 * (step + 1), "float32", t + 200)
            if step < 7 or rank == 2:
                rec.cc_end(tok, t + 300, 0 if step != 5 else 5)
        rec.numerical_error(rank, 0, 3, 3_000_000, 3_000_100, 4, 1)
        tok = rec.cc_begin(rank, "barrier", 0, "0,1,2#7", 0, "", 9_000_000)
        rec.cc_end(tok, 9_000_500, 0)
        rec.write(final=rank != 1, reason="exit" if rank != 1 else "running")
    return logs_in(d)


def test_fuzz_neuron_det_fast(tmp_path: Path) -> None:
    seed = fuzz_seed(1)
    corpus = _synthetic_job(tmp_path / "corpus")
    assert len(corpus) == 3
    (tmp_path / "work").mkdir()
    assert fuzz(corpus, tmp_path / "work", examples(FAST_RUNS), seed) >= BATCH


@pytest.mark.slow
def test_fuzz_neuron_det_on_a_real_job(tmp_path_factory, tmp_path: Path) -> None:
    seed = fuzz_seed(2)
    d, rc = skip_job(tmp_path_factory)  # a real 2-rank torchrun/gloo job with a culprit to find (read only)
    assert rc != 0
    corpus = logs_in(d)
    assert len(corpus) == 2
    (tmp_path / "work").mkdir()
    assert fuzz(corpus, tmp_path / "work", examples(SLOW_RUNS), seed) >= BATCH


def test_a_group_of_ranks_beyond_any_int_is_shown_as_written(tmp_path: Path) -> None:
    """A collective whose group string is a 60-digit "rank" (found by the slow fuzz, seed 2): the trace
    is written, the group shown as its text, not as a rank list the JSON writer cannot encode."""
    from .helpers import load_trace, neuron_det

    (tmp_path / "logs").mkdir()
    rec = make_recorder(tmp_path / "logs", rank=0)
    tok = rec.cc_begin(0, "all_reduce", 0, "9" * 60, 64, "float32", 1_000)
    rec.cc_end(tok, 2_000, 5)
    rec.write(final=True, reason="exit")
    r = neuron_det("--log-prefix", str(tmp_path / "logs"), "-o", str(tmp_path / "t.json"))
    assert r.returncode in (0, 1), r.stderr
    assert "Traceback" not in r.stderr
    ccs = [e for e in load_trace(tmp_path / "t.json") if e.get("args", {}).get("op") == "all_reduce"]
    assert ccs and all(e["args"]["group"] in ("9" * 60, []) for e in ccs), ccs
