"""neuron-det on a directory holding several jobs' logs, and on headers that pass the checksum but
hold the wrong types: each job analysed on its own, each bad file named in one line and skipped."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_explorer.contracts import ndet_log as fmt

from .helpers import JOB_ENV, logs_in, make_recorder, neuron_det, seal


def _healthy_job(d: Path, steps: int, env: dict[str, str], pid0: int, n: int = 2) -> None:
    """An n-rank job that ran `steps` all_reduces and a barrier, all completed, every rank exited."""
    recs = [make_recorder(d, rank=r, world=n, pid=pid0 + r, job_env=env) for r in range(n)]
    for rank, rec in enumerate(recs):
        t = 0
        for seq in range(steps):
            rec.exec_end(rank, 0, seq, t, t + 100, 0)
            tok = rec.cc_begin(rank, "all_reduce", seq, "0,1", 64, "float32", t + 200)
            rec.cc_end(tok, t + 300, 0)
            t += 1000
        tok = rec.cc_begin(rank, "barrier", steps, "0,1", 0, "", t)
        rec.cc_end(tok, t + 100, 0)
    for rec in recs:
        rec.write(final=True, reason="exit")


def test_two_healthy_jobs_in_one_directory_are_two_clean_jobs_not_a_culprit(tmp_path: Path) -> None:
    # the same address one after the other (torchrun's default port), and another address alongside
    _healthy_job(tmp_path, 3, JOB_ENV, 100)
    _healthy_job(tmp_path, 6, {**JOB_ENV, "MASTER_PORT": "29501"}, 200)
    _healthy_job(tmp_path, 5, JOB_ENV, 300)
    assert len(logs_in(tmp_path)) == 6
    r = neuron_det("--log-prefix", str(tmp_path), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "culprit" not in r.stdout and "mismatch" not in r.stdout
    assert r.stdout.startswith(f"3 jobs found in {tmp_path} ")
    jobs = [ln for ln in r.stdout.splitlines() if ln.startswith("== job ")]
    assert [j.split(",")[0] for j in jobs] == ["== job 1: 127.0.0.1:29500", "== job 2: 127.0.0.1:29501",
                                               "== job 3: 127.0.0.1:29500"], r.stdout
    assert r.stdout.count("no errors detected ✓") == 3
    meta = json.loads((tmp_path / "t.json").read_text())["metadata"]
    assert [len(j["logs"]) for j in meta["jobs"]] == [2, 2, 2] and meta["clean"]


def test_a_real_culprit_is_still_found_in_its_own_job(tmp_path: Path) -> None:
    _healthy_job(tmp_path, 3, JOB_ENV, 100)
    env = {**JOB_ENV, "TORCHELASTIC_RUN_ID": "job-b"}
    recs = [make_recorder(tmp_path, rank=r, pid=200 + r, job_env=env) for r in range(2)]
    for rank, rec in enumerate(recs):
        for seq in range(3 if rank == 0 else 2):  # rank 1 never enters all_reduce #2
            tok = rec.cc_begin(rank, "all_reduce", seq, "0,1", 64, "float32", 1000 * seq)
            if seq < 2:
                rec.cc_end(tok, 1000 * seq + 10, 0)
    for rec in recs:
        rec.write(final=True, reason="signal:SIGTERM")
    r = neuron_det("--log-prefix", str(tmp_path), "-o", str(tmp_path / "t.json"), "--ranks", "0,1")
    assert r.returncode == 1
    out = r.stdout
    assert "2 jobs found" in out and "127.0.0.1:29500 run job-b" in out
    job1, job2 = out.split("== job 1:")[1].split("== job 2:")
    assert "no errors detected ✓" in job1 and "culprit" not in job1
    assert "culprit: rank 1 never entered all_reduce #2 of group [0, 1]" in job2, out


def test_logs_without_a_job_id_stay_readable(tmp_path: Path) -> None:
    _healthy_job(tmp_path, 2, JOB_ENV, 100)
    for p in logs_in(tmp_path):  # rewrite as the previous format wrote them: no "job" in the header
        log = fmt.read_log(str(p))
        h = {k: v for k, v in log.header.items() if k != "job"}
        p.write_bytes(b"".join(bytes(x) for x in fmt.encode_parts(h, [log.records])))
    r = neuron_det("--log-prefix", str(tmp_path), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "no errors detected ✓"


def _set(h: dict, dotted: str, value) -> dict:
    h = json.loads(json.dumps(h))
    cur = h
    parts = dotted.split(".")
    for p in parts[:-1]:
        cur = cur[p]
    cur[parts[-1]] = value
    return h


BAD_FIELDS = [
    ("ident", 5, "ident=5"),
    ("ident.rank", "1", "ident.rank='1'"),
    ("ident.pid", 1.5, "ident.pid=1.5"),
    ("ident.world_size", True, "ident.world_size=True"),
    ("flush.wall_ns", 10 ** 30, "flush.wall_ns="),
    ("flush.mono_ns", None, "flush.mono_ns=None"),
    ("flush", [], "flush=[]"),
    ("flush.final", "yes", "flush.final='yes'"),
    ("flush.reason", 7, "flush.reason=7"),
    ("start.wall_ns", -1, "start.wall_ns=-1"),
    ("flush_period_us", "1000", "flush_period_us='1000'"),
    ("strings", [1, 2], "strings"),
    ("strings", "abc", "strings"),
    ("models", {"id": 1}, "models="),
    ("models", [{"id": "x", "name": "g"}], "models[0]="),
    ("models", [{"id": 0, "name": 5}], "models[0]="),
    ("device", "cpu", "device='cpu'"),
    ("job", 3, "job=3"),
    ("job.master", ["127.0.0.1"], "job.master="),
    ("job.restart", -4, "job.restart=-4"),
    ("record_count", "2", "record_count is '2'"),
    ("record_count", 2.0, "record_count is 2.0"),
    ("record_size", "64", "unsupported record layout"),
    ("record_dtype", 7, "unsupported record layout"),
    ("record_dtype", [7], "unsupported record layout"),
    ("num_entries", [], "num_entries=[]"),
]


@pytest.mark.parametrize("field,value,needle", BAD_FIELDS, ids=[f"{f}={v!r}" for f, v, _ in BAD_FIELDS])
def test_header_with_a_valid_checksum_but_a_wrong_type_is_named_and_skipped(
        tmp_path: Path, field: str, value, needle: str) -> None:
    _healthy_job(tmp_path, 2, JOB_ENV, 100, n=3)
    victim = logs_in(tmp_path)[1]
    log = fmt.read_log(str(victim))
    victim.write_bytes(seal(_set(log.header, field, value), log.records.tobytes()))
    r = neuron_det("--log-prefix", str(tmp_path), "-o", str(tmp_path / "t.json"))
    assert "Traceback" not in r.stderr, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if victim.name in ln]
    assert len(warn) == 1 and warn[0].startswith("neuron-det: warning: skipping ") and needle in warn[0], r.stderr
    assert r.returncode == 1, r.stdout + r.stderr  # something was skipped
    assert "2 logs analysed, 1 skipped" in r.stderr
    meta = json.loads((tmp_path / "t.json").read_text())["metadata"]
    assert len(meta["logs"]) == 2 and victim.name not in meta["logs"]


@pytest.mark.parametrize("raw", [b"[" * 100000 + b"]" * 100000, b'{"format": "neuron-explorer-ndet", "x": ' +
                                 b"[" * 50000 + b"]" * 50000 + b"}", b"\xff\xfe", b"null", b"5"],
                         ids=["deep-list", "deep-in-object", "not-utf8", "null", "number"])
def test_header_that_is_not_an_object_or_too_deep_is_named_and_skipped(tmp_path: Path, raw: bytes) -> None:
    _healthy_job(tmp_path, 2, JOB_ENV, 100)
    victim = tmp_path / "ndet_crafted.log"
    victim.write_bytes(seal({}, raw_header=raw))
    r = neuron_det("--log-prefix", str(tmp_path), "-o", str(tmp_path / "t.json"))
    assert "Traceback" not in r.stderr and r.returncode == 1, r.stderr
    assert f"skipping {victim}: corrupt header" in r.stderr
    assert "no errors detected ✓" in r.stdout


def test_a_fifo_or_a_device_named_like_a_log_does_not_hang_the_reader(tmp_path: Path) -> None:
    import os

    _healthy_job(tmp_path, 2, JOB_ENV, 100)
    os.mkfifo(tmp_path / "ndet_fifo.log")
    (tmp_path / "ndet_zero.log").symlink_to("/dev/zero")
    r = neuron_det("--log-prefix", str(tmp_path / "ndet_"), "-o", str(tmp_path / "t.json"), timeout=60)
    assert "Traceback" not in r.stderr
    assert "no errors detected ✓" in r.stdout
    for name in ("ndet_fifo.log", "ndet_zero.log"):
        assert f"{name}: not a regular file" in r.stderr or name not in r.stderr, r.stderr
