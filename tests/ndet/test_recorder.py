"""The recorder and the log format, in process (fast)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from neuron_explorer.contracts import ndet_log as fmt
from neuron_explorer.contracts.env import ConfigError
from neuron_explorer.recorders.ndet import NdetRecorder

from ..conftest import clean_env
from .helpers import make_recorder, neuron_det


def test_log_keeps_last_n_events_plus_work_in_flight(tmp_path: Path) -> None:
    rec = make_recorder(tmp_path, num_entries=10)
    for i in range(25):
        rec.exec_begin(0, 0, i, 1000 * i)
        rec.exec_end(0, 0, i, 1000 * i, 1000 * i + 500, 0)
        if i == 12:
            rec.write()  # a flush in between: the history must still keep exactly the last 10
    rec.exec_begin(0, 0, 25, 99_000)  # never ends: a hang
    tok = rec.cc_begin(0, "all_reduce", 7, "0,1", 64, "float32", 99_500)
    path = rec.write()
    log = fmt.read_log(path)
    r = log.records
    done = r[r["state"] == fmt.STATE_COMPLETE]
    assert done["b"].tolist() == list(range(15, 25))
    inflight = r[r["state"] == fmt.STATE_IN_FLIGHT]
    assert len(inflight) == 2 and inflight[0]["b"] == 25
    cc = inflight[1]
    assert cc["kind"] == fmt.KIND_CC_OP and log.strings[cc["a"]] == "all_reduce" and cc["b"] == 7
    assert log.strings[cc["e"]] == "0,1" and cc["c"] == 64
    rec.cc_end(tok, 100_000, 5)
    log = fmt.read_log(rec.write(final=True, reason="exit"))
    last = log.records[log.records["kind"] == fmt.KIND_CC_OP][-1]
    assert last["ret"] == 5 and last["t1"] == 100_000 and last["state"] == fmt.STATE_COMPLETE
    h = log.header
    assert h["flush"]["final"] and h["flush"]["reason"] == "exit" and h["ident"]["rank"] == 0
    assert h["models"][0]["neff_name"] == "neff_1234" and h["kinds"]["2"]["name"] == "numerical_error"
    assert rec.write() is None  # nothing replaces the final state


def test_a_huge_num_entries_costs_only_what_is_recorded(tmp_path: Path) -> None:
    """NEURON_RT_DBG_NDET_NUM_ENTRIES bounds the history; it used to be allocated up front (a
    setting of 10^10 asked for 10^10 records at start-up)."""
    import tracemalloc

    tracemalloc.start()
    try:
        rec = make_recorder(tmp_path, num_entries=10**12)
        for i in range(3000):
            rec.exec_begin(0, 0, i, 1000 * i)
            rec.exec_end(0, 0, i, 1000 * i, 1000 * i + 500, 0)
        path = rec.write()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    done = fmt.read_log(path).records
    assert done[done["state"] == fmt.STATE_COMPLETE]["b"].tolist() == list(range(3000))


def test_file_name_has_date_instance_group_and_pid(tmp_path: Path) -> None:
    rec = make_recorder(tmp_path, rank=3, world=4, pid=4242)
    name = Path(rec.write()).name
    import re

    assert re.fullmatch(r"ndet_\d{8}T\d{9}_i-0123456789abcdef0_gid3_pid4242\.log", name), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_barriers_are_cc_exec_barrier_and_numerical_errors_carry_1003(tmp_path: Path) -> None:
    rec = make_recorder(tmp_path)
    rec.cc_end(rec.cc_begin(0, "barrier", 0, "0,1", 0, "", 10), 20, 0)
    rec.numerical_error(0, 0, 3, 30, 40, 5, 1)
    r = fmt.read_log(rec.write()).records
    assert r[0]["kind"] == fmt.KIND_CC_BARRIER
    assert r[1]["kind"] == fmt.KIND_NUMERICAL_ERROR and r[1]["ret"] == 1003 and r[1]["c"] == 5


def test_reader_rejects_truncated_bitflipped_and_foreign_files(tmp_path: Path) -> None:
    rec = make_recorder(tmp_path)
    for i in range(5):
        rec.exec_end(0, 0, i, i, i + 1, 0)
    data = Path(rec.write()).read_bytes()
    bad = tmp_path / "ndet_bad.log"
    bad.write_bytes(data[:-30])
    with pytest.raises(fmt.LogFormatError, match="truncated"):
        fmt.read_log(str(bad))
    flipped = bytearray(data)
    flipped[-40] ^= 0xFF
    bad.write_bytes(bytes(flipped))
    with pytest.raises(fmt.LogFormatError, match="checksum"):
        fmt.read_log(str(bad))
    bad.write_bytes(b"hello world")
    with pytest.raises(fmt.LogFormatError, match="not an NDET log"):
        fmt.read_log(str(bad))
    bad.write_bytes(b"")
    with pytest.raises(fmt.LogFormatError, match="empty"):
        fmt.read_log(str(bad))


@pytest.mark.parametrize("env,needle", [
    ({"NEURON_RT_DBG_NDET_FLUSH_USEC": "1000", "NEURON_RT_DBG_NDET_LOG_LOCATION": "/nonexistent/ndet"},
     "NEURON_RT_DBG_NDET_LOG_LOCATION='/nonexistent/ndet' is not valid (does not exist)"),
    ({"NEURON_RT_DBG_NDET_FLUSH_USEC": "fast"}, "NEURON_RT_DBG_NDET_FLUSH_USEC='fast' is not valid"),
    ({"NEURON_RT_DBG_NDET_FLUSH_USEC": "1000", "NEURON_RT_DBG_NDET_NUM_ENTRIES": "-5"},
     "NEURON_RT_DBG_NDET_NUM_ENTRIES='-5' is not valid"),
])
def test_bad_settings_fail_the_launch_with_one_line(env: dict, needle: str, tmp_path: Path) -> None:
    env = {"NEURON_RT_DBG_NDET_LOG_LOCATION": str(tmp_path), **env}
    p = subprocess.run([sys.executable, "-c", "print('ran')"], env=clean_env(**env), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "ran" not in p.stdout
    assert needle in p.stderr and "accepted" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_from_env_defaults(tmp_path: Path) -> None:
    rt = make_recorder(tmp_path).rt
    rec = NdetRecorder.from_env(rt, {"NEURON_RT_DBG_NDET_FLUSH_USEC": "5000000"})
    assert rec.log_dir == "/tmp" and rec.num_entries == 20000 and rec.flush_usec == 5_000_000
    with pytest.raises(ConfigError):
        NdetRecorder.from_env(rt, {"NEURON_RT_DBG_NDET_FLUSH_USEC": "0"})


def _job(d: Path, n: int, skip_rank: int | None = None, nbytes_of=lambda r, s: 64) -> None:
    """Synthetic logs of an n-rank job through the real writer (collectives only)."""
    for rank in range(n):
        rec = make_recorder(d, rank=rank, world=n)
        seq = 0
        for step in range(6):
            t = 1_000_000 * step
            rec.exec_end(rank, 0, step, t, t + 1000, 0)
            if rank == skip_rank and step == 3:
                continue
            tok = rec.cc_begin(rank, "all_reduce", seq, ",".join(map(str, range(n))), nbytes_of(rank, seq),
                               "float32", t + 2000)
            seq += 1
            if rank != skip_rank and step == 5:
                continue  # the last one never completes on the ranks that reached it
            rec.cc_end(tok, t + 3000, 0)
        rec.write(final=rank != 0, reason="signal:SIGTERM" if rank != 0 else "running")


@pytest.mark.fast  # a cheap end-to-end check in the fast loop (tests/fastset.py)
def test_majority_vote_names_the_odd_rank_out(tmp_path: Path) -> None:
    _job(tmp_path, 4, nbytes_of=lambda r, s: 128 if (r == 2 and s == 1) else 64)
    r = neuron_det("--log-prefix", str(tmp_path), "-o", str(tmp_path / "t.json"))
    assert "culprit: rank 2: mismatched size in all_reduce #1 of group [0, 1, 2, 3]" in r.stdout, r.stdout
    assert "tie" not in r.stdout


def test_in_flight_collective_is_a_likely_hang_and_the_missing_rank_is_named(tmp_path: Path) -> None:
    _job(tmp_path, 3, skip_rank=2)
    r = neuron_det("--log-prefix", str(tmp_path), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 1
    assert "cc_op_exec (B) NC 0 @" in r.stdout and "likely hang" in r.stdout
    assert "culprit: rank 2 never entered all_reduce #5 of group [0, 1, 2]" in r.stdout, r.stdout
    assert "rank 0 stuck in it since" in r.stdout and "rank 1 stuck in it since" in r.stdout


@pytest.mark.fast  # a cheap end-to-end check in the fast loop (tests/fastset.py)
def test_no_logs_is_a_usage_error(tmp_path: Path) -> None:
    r = neuron_det("--log-prefix", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "no NDET logs" in r.stderr


def test_a_non_utf8_argument_and_model_name_are_written_escaped_not_lost(tmp_path: Path, monkeypatch) -> None:
    # b"caf\xe9" (Latin-1) is not UTF-8: Python keeps the byte as a lone surrogate, which the UTF-8
    # header could not hold; every flush failed ("ndet flush failed") and no log was written
    monkeypatch.setattr(sys, "argv", ["train.py", "data/caf\udce9.csv"])
    rec = make_recorder(tmp_path)
    rec.rt.add_model(name="graph_\udce9", neff_name="neff_5678", graph_hash="ef01", backend="aot_eager",
                     kind="forward", nc_idx=0)
    log = fmt.read_log(rec.write())
    assert log.header["ident"]["argv"] == ["train.py", "data/caf\\xe9.csv"]
    assert "graph_\\xe9" in [m["name"] for m in log.header["models"]]
    r = neuron_det("--log-prefix", str(tmp_path / "ndet"), "-o", str(tmp_path / "trace.json"))
    assert r.returncode in (0, 1) and "not valid" not in r.stderr, r.stderr
