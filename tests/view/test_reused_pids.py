"""A process is its instance, pid and capture session (decision 0092): two runs that reused a pid
on one host (containers start their processes under the same pids) stay two processes in Perfetto,
JSON and Parquet.  Synthetic captures by the real writer, the real command."""

from __future__ import annotations

import shutil
from collections import Counter

from neuron_explorer.contracts.tracks import Grouping, group_pids

from . import metamorph as mm

HOUR = 3600 * 10**9
A = "i-0aaaaaaaaaaaaaaa1"


def test_sessions_of_one_pid_are_two_rows_labelled_by_session():
    procs = [(A, 5000, 0, "/o/a/20260101T000000000Z"), (A, 5000, 0, "/o/b/20260101T010000000Z"),
             (A, 5001, 1, "/o/a/20260101T000000001Z")]
    shown = group_pids(procs, Grouping())
    assert [p for p, _ in shown] == [5000, 5000 + (1 << 22), 5001]
    assert [label for _, label in shown] == [f"{A} pid 5000 rank 0 (session 20260101T000000000Z)",
                                             f"{A} pid 5000 rank 0 (session 20260101T010000000Z)",
                                             f"{A} pid 5001 rank 1"]
    by_instance = group_pids(procs, Grouping(("instance_id",)))  # grouped by instance: one row, as asked
    assert {p for p, _ in by_instance} == {1}


def test_two_runs_under_the_same_pids_stay_apart_in_every_format(tmp_path):
    root = tmp_path / "out"
    for name, t0 in (("first", 0), ("again", HOUR)):
        mm.synth_capture(tmp_path / name, ((A, t0),), (5000, 5001), 120)
        shutil.copytree(tmp_path / name, root / name)
    mm.view_ok(root, "parquet", tmp_path / "pq")
    pq = mm.read_parquet(tmp_path / "pq")
    want = {(m["instance_id"], m["process_id"], m["session"]): m["group_pid"] for m in pq.metadata}
    assert len(pq.metadata) == len(want) == len(set(want.values())) == 4
    js = tmp_path / "json" / "t.json"
    mm.view_ok(root, "json", js)
    pf = tmp_path / "perfetto" / "t.pftrace"
    mm.view_ok(root, "perfetto", pf)
    assert mm.read_json(js).pids == want
    assert mm.read_perfetto(pf, 0).pids == want
    # Parquet: an event's process is its id >> 32 (ProfileMetadata.process_index)
    assert Counter(r["id"] >> 32 for r in pq.events) == {m["process_index"]: m["events"] for m in pq.metadata}
    for table in (pq.counters, pq.models, pq.profiles):
        assert {(r["instance_id"], r["process_id"], r["session"]) for r in table} == set(want)
