"""analysis.summary: the per-core figures of summary-text/json from hand-made sessions, and the text."""

from __future__ import annotations

import json

import pytest

from neuron_explorer.analysis import align, summary
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb

from .sessions import session, trace_info

MS = 1_000_000


def _core0():
    """Core 0: executions of two graphs at [0,10) [5,15) [30,40) ms (one overlap), a collective,
    a NaN; core 1: one execution."""
    ex = [("nc_exec_running", 0, 10 * MS, 0, {"model_id": 1}), ("nc_exec_running", 5 * MS, 15 * MS, 0, {"model_id": 1}),
          ("nc_exec_running", 30 * MS, 40 * MS, 0, {"model_id": 2}),
          ("cc_running", 16 * MS, 20 * MS, 0, {"op_str": "all_reduce", "group_str": "0,1"}),
          ("numerical_err", 40 * MS, 40 * MS, 0), ("nrt_execute", 0, 41 * MS, 0),
          ("nc_exec_running", 0, 2 * MS, 1, {"model_id": 2})]
    models = [pb.ModelInfo(id=1, name="fwd"), pb.ModelInfo(id=2, name="bwd")]
    return session(ex, models=models, info=trace_info(nd_idx=3, anchors=[(0, 10**18), (50 * MS, 10**18 + 50 * MS)],
                                                      cores=[(0, 4)], rank=1, world_size=2, instance_id="i-a",
                                                      pid=7, end_reason="exit", device_kind="cpu"))


def test_a_cores_busy_time_counts_overlapping_executions_once():
    c = summary.core_summary(_core0(), 0)
    assert c["nc_idx"] == 0 and c["nd_idx"] == 3 and c["executions"] == 3 and c["events"] == 6
    assert c["total_time"] == pytest.approx(0.05)  # the anchors span the process: 0 .. 50 ms
    assert c["busy_pct"] == pytest.approx(100 * 25 / 50)  # [0,15) + [30,40)
    assert c["latency_ns"] == {"p50": 10 * MS, "p90": 10 * MS, "p99": 10 * MS, "max": 10 * MS}
    assert (c["collectives"], c["collective_time"], c["collective_pct"]) == (1, pytest.approx(0.004), pytest.approx(8))
    assert c["numerical_errors"] == 1
    assert c["idle_gaps"] == {"total_s": pytest.approx(0.015), "max_ns": 15 * MS, "median_ns": 7.5 * MS}
    assert [(g["model_name"], g["executions"], g["time_ns"]) for g in c["top_graphs"]] == [("fwd", 2, 20 * MS),
                                                                                         ("bwd", 1, 10 * MS)]


def test_a_core_without_executions_reports_none_instead_of_numbers():
    c = summary.core_summary(session([("nrt_execute", 5, 15, 0)]), 0)
    assert c["executions"] == 0 and c["busy_pct"] == 0.0 and c["latency_ns"]["p50"] is None
    assert c["idle_gaps"] == {"total_s": 0.0, "max_ns": None, "median_ns": None} and c["top_graphs"] == []
    assert summary.core_summary(session([]), 0)["total_time"] == 0.0


def test_a_session_lists_its_cores_and_dropped_events():
    p = summary.session_summary(_core0(), align.InstanceOffset("i-a", -3, 1, 2, "i-b", "collectives"))
    assert (p["instance_id"], p["pid"], p["rank"], p["world_size"]) == ("i-a", 7, 1, 2)
    assert [c["nc_idx"] for c in p["cores"]] == [0, 1] and p["dropped_events"] == {0: 4}
    assert p["clock_offset_ns"] == -3
    bare = summary.session_summary(session([], path="/cap/i-z_pid_9/t"))
    assert (bare["instance_id"], bare["pid"], bare["rank"], bare["cores"]) == ("i-z", 9, -1, [])


def _whole():
    offsets = {"i-a": align.InstanceOffset("i-a", 0, 0, 0, "i-a", "reference"),
               "i-b": align.InstanceOffset("i-b", 2 * MS, 10_000, 5, "i-a", "collectives")}
    st = {"collectives_compared": 3, "last_to_enter": {"0": 1, "1": 2}, "slowest_rank": 1, "spread_ns_median": 2e6,
          "spread_ns_max": 4_000_000, "worst": {"group": "0,1", "seq": 7, "op": "all_reduce", "last_rank": 1,
                                                "spread_ns": 4_000_000}}
    procs = [summary.session_summary(session([], path="/cap/i-b_pid_2/t")), summary.session_summary(_core0())]
    return summary.build(procs, ["one warning"], offsets, st)


def test_the_whole_summary_sorts_processes_and_records_offsets():
    s = _whole()
    assert s["num_profiles"] == 2 and s["instances"] == ["i-a", "i-b"]
    assert [p["instance_id"] for p in s["profiles"]] == ["i-a", "i-b"]
    assert s["clock_offsets"]["i-b"] == {"offset_ns": 2 * MS, "uncertainty_ns": 10_000, "samples": 5,
                                         "reference": "i-a", "method": "collectives"}
    assert s["clock_groups"] == []
    text = summary.render_json(s)
    assert text.endswith("}\n") and json.loads(text) == json.loads(json.dumps(s))


def test_the_text_has_one_row_per_core_then_offsets_stragglers_and_warnings():
    text = summary.render_text(_whole())
    lines = text.splitlines()
    assert lines[0] == "neuron-explorer summary: 2 profile(s) on 2 instance(s)"
    assert "instance i-a  pid 7  rank 1/2  tag   device cpu  ended: exit" in lines
    head = next(i for i, ln in enumerate(lines) if ln.strip().startswith("nc_idx"))
    assert lines[head + 1].split()[:5] == ["0", "3", "0.050", "s", "3"]
    assert lines[head + 2].strip() == "4 oldest event(s) were overwritten (per-core limit)"
    assert "top graph fwd: 2 executions, 20.000 ms total, 10.000 ms mean" in text
    assert "  no runtime events were recorded" in lines  # the process of i-b
    assert "  i-b: +2.000 ms ± 0.010 ms (5 collectives vs i-a)" in lines
    assert "stragglers across ranks (3 collectives compared): slowest rank 1 (last to enter 2 times)" in text
    assert "  worst: all_reduce #7 of group [0,1], rank 1 entered 4.000 ms after the first" in lines
    assert lines[-2:] == ["warnings (1):", "  one warning"] and text.endswith("\n")


def test_groups_aligned_apart_are_named():
    note = summary.groups_note([["i-a", "i-b"], ["i-c"]])
    assert note.startswith("2 groups of instances share no collective") and note.endswith(": i-a, i-b; i-c")
