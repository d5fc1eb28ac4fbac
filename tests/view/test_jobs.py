"""Collectives carry their job (decision 0091): the capture records the launcher's rendezvous, and
``view`` tells jobs apart by it and by their runs, so two jobs converted together share no
collective flow and neither is aligned onto the other; hosts are aligned per group of hosts that
share collectives."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer.analysis import align, jobs

from ..conftest import clean_env
from . import metamorph as mm

HOUR = 3600 * 10**9
A, B, C, D = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2", "i-0ccccccccccccccc3", "i-0ddddddddddddddd4"


def _life(inst: str, start: int, end: int, **job: str) -> jobs.ProcessLife:
    return jobs.ProcessLife(inst, jobs.rendezvous(job, f"host-of-{inst}"), start, end)


def test_runs_of_one_rendezvous_are_jobs_in_the_order_each_host_ran_them():
    rdv = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    lives = [_life(A, 0, 100, **rdv), _life(A, 10, 90, **rdv),  # run 1 on A: two ranks alive together
             _life(B, 5_000, 5_100, **rdv),  # run 1 on B (B's clock far ahead)
             _life(A, 200, 300, **rdv), _life(B, 5_200, 5_300, **rdv),  # run 2
             _life(A, 210, 290, MASTER_ADDR="10.0.0.9", MASTER_PORT="29500")]  # another rendezvous
    j = jobs.assign(lives)
    assert j[0] == j[1] == j[2] and j[3] == j[4] and len({j[0], j[3], j[5]}) == 3


def test_a_loopback_rendezvous_belongs_to_its_host():
    lo = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    j = jobs.assign([_life(A, 0, 100, **lo), _life(B, 0, 100, **lo), _life(A, 0, 100, MASTER_ADDR="localhost")])
    assert len(set(j)) == 3
    assert jobs.rendezvous({}, "h1") == "" and jobs.rendezvous({"MASTER_ADDR": "10.0.0.1"}, "h1") == \
        jobs.rendezvous({"MASTER_ADDR": "10.0.0.1"}, "h2")
    assert jobs.rendezvous(lo, "h1") != jobs.rendezvous(lo, "h2")


def _times(keys, end0: int, skew: int) -> align.Times:
    keys = np.asarray(keys, dtype=np.int64)
    end = end0 + keys * 1_000_000 + skew
    return keys, end - 1000, end


def test_each_group_of_linked_hosts_is_aligned_to_its_own_first_host():
    k1, k2 = np.arange(50), np.arange(1000, 1050)  # two jobs' collectives
    offs = align.estimate_offsets({A: [_times(k1, 0, 0)], B: [_times(k1, 0, 3_000)],
                                   C: [_times(k2, HOUR, 0)], D: [_times(k2, HOUR, -1_000)],
                                   "i-lonely": [_times(np.arange(5000, 5010), 0, 0)]})
    assert {k: (o.offset_ns, o.method, o.reference) for k, o in offs.items()} == {
        A: (0, "reference", A), B: (-3_000, "collectives", A), C: (0, "reference", C),
        D: (1_000, "collectives", C), "i-lonely": (0, "none", "i-lonely")}
    assert align.clock_groups(offs) == [[A, B], [C, D], ["i-lonely"]]
    assert align.clock_groups({A: offs[A], B: offs[B]}) == []


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> dict[str, Path]:
    """One job on hosts A and B (B 3 ms ahead); the same job (same rendezvous, same pids) run again
    an hour later; another job on hosts C and D an hour later.  Every one has the same groups,
    ops and sequence numbers."""
    root = tmp_path_factory.mktemp("jobs")
    job = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "4"}
    first = mm.synth_capture(root / "first", ((A, 0), (B, 3_000_000)), (5000, 5001), 200, job=job)
    again = mm.synth_capture(root / "again", ((A, HOUR), (B, HOUR + 3_000_000)), (5000, 5001), 200, job=job)
    other = mm.synth_capture(root / "other", ((C, HOUR), (D, HOUR + 1_000_000)), (6000, 6001), 200,
                             job=dict(job, MASTER_ADDR="10.0.0.3"))
    return {"first": first, "again": again, "other": other}


def _together(tmp: Path, *srcs: Path) -> Path:
    import shutil

    root = tmp / "together"
    for s in srcs:
        shutil.copytree(s, root / s.name)
    return root


def _cc_flows(out: mm.ParquetOutput) -> list[set]:
    groups: dict = {}
    for r in out.events:
        if r["name"] == "cc_running":
            for f in r["flow_id"]:
                groups.setdefault(f, []).append(r)
    return [{(r["instance_id"], r["process_id"]) for r in g} for g in groups.values()]


def test_two_jobs_on_other_hosts_an_hour_apart_keep_their_times_and_flows(captures, tmp_path):
    apart = {}
    for name in ("first", "other"):
        mm.view_ok(captures[name], "parquet", tmp_path / name)
        apart.update(mm.read_parquet(tmp_path / name).offsets())
    src = _together(tmp_path, captures["first"], captures["other"])
    code, _, err = mm.view(src, "parquet", tmp_path / "both")
    assert code == 0, err
    both = mm.read_parquet(tmp_path / "both")
    assert both.offsets() == apart and abs(apart[B] + 3_000_000) < 50_000 and abs(apart[D] + 1_000_000) < 50_000
    assert "2 groups of instances share no collective" in err and f"{A}, {B}; {C}, {D}" in err
    flows = _cc_flows(both)
    assert flows and all(len({i for i, _ in f}) == 2 for f in flows)
    assert not [f for f in flows if {i for i, _ in f} & {A, B} and {i for i, _ in f} & {C, D}]


def test_the_same_job_run_again_under_the_same_rendezvous_and_pids_is_another_job(captures, tmp_path):
    src = _together(tmp_path, captures["first"], captures["again"])
    mm.view_ok(src, "parquet", tmp_path / "pq")
    out = mm.read_parquet(tmp_path / "pq")
    assert abs(out.offsets()[B] + 3_000_000) < 50_000
    flows: dict = {}
    for r in out.events:
        if r["name"] == "cc_running":
            for f in r["flow_id"]:
                flows.setdefault(f, []).append(r["start_ts"])
    # each flow joins the 4 ranks of one run: its collectives all lie within one hour
    assert flows and all(len(v) == 4 and max(v) - min(v) < HOUR // 2 for v in flows.values())
    assert Counter(len(v) for v in flows.values()) == {4: len(flows)}


JOB_SCRIPT = """
import os
os.environ["MASTER_PORT"] = "23456"  # set by the program itself, before it would init its process group
import torch
torch.nn.Linear(4, 4)(torch.randn(2, 4))
"""


def test_the_capture_records_the_launchers_rendezvous_when_it_writes(tmp_path):
    from neuron_explorer.analysis.reader import discover, load_session

    script = tmp_path / "job.py"
    script.write_text(JOB_SCRIPT)
    out = tmp_path / "out"
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out), MASTER_ADDR="10.1.2.3",
                    SLURM_JOB_ID="4242", WORLD_SIZE="1")
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    (path,) = discover(str(out))
    job = dict(load_session(path).info.job)
    assert job == {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "23456", "SLURM_JOB_ID": "4242", "WORLD_SIZE": "1"}
