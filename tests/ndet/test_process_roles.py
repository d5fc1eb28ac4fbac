"""A log that ended by a signal: an idle pool worker that its pool ended is no error, a rank killed by
its launcher (or any process cut short mid-work) still is.  Each log records its process's role and
whether its parent was alive (header ``process``, format version 2)."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neuron_explorer.contracts import ndet_log as fmt
from neuron_explorer.recorders.ndet import process_facts
from neuron_explorer.util.procs import multiprocessing_child

from ..conftest import free_port
from .helpers import WORKLOADS, logs_in, make_recorder, ndet_env, neuron_det

POOL_JOB = WORKLOADS / "pool_job.py"
SPAWN_ARGV = ["/usr/bin/python3", "-B", "-c",
              "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=6, pipe_handle=13)",
              "--multiprocessing-fork"]


def test_a_spawned_multiprocessing_child_is_known_from_its_command_line() -> None:
    assert multiprocessing_child(SPAWN_ARGV)
    assert multiprocessing_child(["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(7)",
                                  "--multiprocessing-fork"])
    assert not multiprocessing_child(["python", "train.py", "--multiprocessing-fork"])  # a script's own flag
    assert not multiprocessing_child(["python", "-c", "import time; time.sleep(3)"])
    assert not multiprocessing_child(["python", "-m", "torch.distributed.run", "train.py"])
    assert not multiprocessing_child([])


@pytest.mark.parametrize("rank,had_group,spawned,role", [
    (-1, False, False, "main"),
    (3, False, False, "rank"),  # RANK in its environment (torchrun)
    (-1, False, True, "multiprocessing-child"),  # a pool worker
    (0, True, True, "rank"),  # mp.spawn's rank: it made a process group
])
def test_the_role_a_log_records(rank: int, had_group: bool, spawned: bool, role: str) -> None:
    import os

    facts = process_facts(rank, had_group, os.getppid(), spawned)
    assert facts["role"] == role
    assert facts["ppid"] == os.getppid() and facts["parent_alive"] is True
    assert process_facts(rank, had_group, 1 if os.getppid() != 1 else 2, spawned)["parent_alive"] is False


def _job(d: Path, reason: str, process: dict | None, in_flight: bool = False) -> None:
    """A parent's log (pid 100, a normal exit) and its child's (pid 101, ended by ``reason``)
    through the real writer; each ``process`` header then set as a real process of that role writes
    it (``process`` None: the child's log is a version-1 log, without the field)."""
    parent, child = (make_recorder(d, rank=0, world=1, pid=pid, job_env={}) for pid in (100, 101))
    for rec in (parent, child):
        rec.exec_end(0, 0, 0, 1000, 2000, 0)
    if in_flight:
        child.exec_begin(0, 0, 1, 3000)
    main = {"role": "main", "name": "", "ppid": 1, "parent_alive": True}
    for rec, why, proc in ((parent, "exit", main), (child, reason, process)):
        path = rec.write(final=True, reason=why)
        log = fmt.read_log(path)
        h = {k: v for k, v in log.header.items() if k != "process"}
        h["ident"] = {**h["ident"], "rank": -1}  # neither is a rank (the logs are named as rank 0's)
        if proc is None:
            h["version"] = 1
        else:
            h["process"] = proc
        Path(path).write_bytes(b"".join(bytes(x) for x in fmt.encode_parts(h, [log.records])))


CHILD = {"role": "multiprocessing-child", "name": "SpawnPoolWorker-1", "ppid": 100, "parent_alive": True}


def test_an_idle_pool_worker_ended_by_its_parent_is_clean(tmp_path: Path) -> None:
    _job(tmp_path, "signal:SIGTERM", CHILD)
    r = neuron_det("--log-prefix", str(tmp_path), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 0 and r.stdout.strip() == "no errors detected ✓", r.stdout + r.stderr
    meta = json.loads((tmp_path / "t.json").read_text())["metadata"]
    assert meta["clean"] is True


@pytest.mark.parametrize("why,reason,process,in_flight", [
    ("a rank killed by its launcher", "signal:SIGTERM", {**CHILD, "role": "rank"}, False),
    ("a worker cut short mid-execution", "signal:SIGTERM", CHILD, True),
    ("a worker whose parent was gone", "signal:SIGTERM", {**CHILD, "parent_alive": False}, False),
    ("a worker ended by another signal", "signal:SIGHUP", CHILD, False),
    ("a process of its own", "signal:SIGTERM", {**CHILD, "role": "main", "name": ""}, False),
    ("a log that does not say (version 1)", "signal:SIGTERM", None, False),
])
def test_other_signal_endings_are_still_reported(tmp_path: Path, why: str, reason: str, process: dict | None,
                                                 in_flight: bool) -> None:
    _job(tmp_path, reason, process, in_flight=in_flight)
    r = neuron_det("--log-prefix", str(tmp_path), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 1 and "no errors detected" not in r.stdout, (why, r.stdout)
    assert "pid 101 (ndet_" in r.stdout and f"ended by {reason} at" in r.stdout, (why, r.stdout)


def test_a_bad_process_field_is_named_and_the_log_skipped(tmp_path: Path) -> None:
    _job(tmp_path, "signal:SIGTERM", {**CHILD, "parent_alive": "yes"})
    r = neuron_det("--log-prefix", str(tmp_path), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 1 and r.stdout.strip() == "no errors detected ✓"
    assert "bad header field process.parent_alive='yes'; accepted: true or false" in r.stderr


# --------------------------------------------------------------------------------- real processes


def _run_pool_job(tmp_path: Path, *args: str, timeout: float = 240) -> tuple[subprocess.CompletedProcess, Path]:
    d = tmp_path / "ndet"
    d.mkdir()
    p = subprocess.run([sys.executable, str(POOL_JOB), *args], env=ndet_env(d), capture_output=True, text=True,
                       timeout=timeout, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    return p, d


def _headers(d: Path) -> dict[int, dict]:
    return {h["ident"]["pid"]: h for h in (fmt.read_log(str(p)).header for p in logs_in(d))}


def _pool_pids(stdout: str) -> list[int]:
    return [int(x) for x in re.search(r"POOL_PIDS \[([\d, ]+)\]", stdout).group(1).split(",")]


@pytest.mark.slow
def test_a_clean_program_with_a_process_pool_is_reported_clean(tmp_path: Path) -> None:
    p, d = _run_pool_job(tmp_path, "pool")
    heads = _headers(d)
    workers = _pool_pids(p.stdout)
    assert len(heads) == 3 and set(workers) < set(heads), heads.keys()
    for pid in workers:  # what the verdict has to judge: workers that Pool.__exit__ ended with SIGTERM
        h = heads[pid]
        assert h["version"] == 2 and h["flush"]["final"] and h["flush"]["reason"] == "signal:SIGTERM", h["flush"]
        assert h["process"]["role"] == "multiprocessing-child" and h["process"]["parent_alive"]
        assert h["process"]["name"].startswith("SpawnPoolWorker-")
    r = neuron_det("--log-prefix", str(d), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 0 and r.stdout.strip() == "no errors detected ✓", r.stdout + r.stderr


@pytest.mark.slow
def test_a_pool_worker_ended_in_the_middle_of_an_execution_is_reported(tmp_path: Path) -> None:
    p, d = _run_pool_job(tmp_path, "busy", str(tmp_path))
    (worker,) = _pool_pids(p.stdout)
    r = neuron_det("--log-prefix", str(d), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 1 and "no errors detected" not in r.stdout, r.stdout + r.stderr
    assert re.search(rf"pid {worker} \(ndet_.*\): 1 finding\nnrt_execute \(B\)", r.stdout), r.stdout
    assert re.search(rf"pid {worker} \(ndet_.*\): ended by signal:SIGTERM at", r.stdout), r.stdout


@pytest.mark.slow
def test_pool_workers_of_torchrun_ranks_neither_take_their_ranks_nor_spoil_the_verdict(tmp_path: Path) -> None:
    d = tmp_path / "ndet"
    d.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), str(POOL_JOB), "rank-pool"]
    p = subprocess.run(cmd, env=ndet_env(d), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    heads = _headers(d)
    ranks = sorted(h["ident"]["rank"] for h in heads.values() if h["process"]["role"] == "rank")
    workers = [h for h in heads.values() if h["process"]["role"] == "multiprocessing-child"]
    assert ranks == [0, 1] and len(workers) == 4, [(h["ident"], h["process"]) for h in heads.values()]
    # a worker inherits its rank's RANK variable, but the rank is the parent's: its log has none
    assert all(h["ident"]["rank"] == -1 for h in workers)
    assert sorted(p.name.split("_gid")[1].split("_")[0] for p in logs_in(d)) == ["-"] * 4 + ["0", "1"]
    r = neuron_det("--log-prefix", str(d), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 0 and r.stdout.strip() == "no errors detected ✓", r.stdout + r.stderr
    assert "more than one log" not in r.stderr, r.stderr


@pytest.mark.slow
def test_a_multiprocessing_rank_ended_by_sigterm_is_still_reported(tmp_path: Path) -> None:
    """torch.multiprocessing.spawn's ranks are multiprocessing children too, but ranks: one ended
    with SIGTERM while idle and while its parent lives is still called out."""
    d = tmp_path / "ndet"
    d.mkdir()
    p = subprocess.Popen([sys.executable, str(POOL_JOB), "spawn", str(free_port())], env=ndet_env(d),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        ready = {}
        deadline = time.monotonic() + 180
        while len(ready) < 2 and time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            m = re.match(r"READY (\d) (\d+)", line)
            if m:
                ready[int(m.group(1))] = int(m.group(2))
        assert len(ready) == 2, p.stderr.read()[-3000:] if p.poll() is not None else "ranks not ready"
        import os

        os.kill(ready[1], signal.SIGTERM)
        p.communicate(timeout=120)  # spawn's join ends rank 0 too, then raises
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    heads = _headers(d)
    for rank, pid in ready.items():
        h = heads[pid]
        assert h["process"]["role"] == "rank" and h["ident"]["rank"] == rank, h["process"]
        assert h["flush"]["reason"] == "signal:SIGTERM" and h["process"]["parent_alive"], h["flush"]
    r = neuron_det("--log-prefix", str(d), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 1 and "no errors detected" not in r.stdout, r.stdout + r.stderr
    assert re.search(r"rank 1 \(ndet_.*\): ended by signal:SIGTERM at", r.stdout), r.stdout
    assert "not an error" not in r.stdout, r.stdout
