"""contracts.tracks: which track an event is drawn on, and what processes and tracks are called.
(Reused pids: tests/view/test_reused_pids.py; random grouping flags: test_spec_fidelity_fuzz.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from neuron_explorer.contracts import tracks as tr
from neuron_explorer.contracts.events import EVENT_TYPES


def test_collectives_cores_and_host_threads_get_their_own_kind_of_track():
    kinds = {t.name: tr.track_kind(t.name, t.group) for t in EVENT_TYPES}
    assert kinds["cc_running"] == kinds["cc_exec_barrier"] == tr.COLLECTIVE
    assert kinds["nc_exec_running"] == kinds["numerical_err"] == tr.CORE
    assert kinds["nrt_execute"] == kinds["framework_op"] == kinds["kbl_exec_wait"] == tr.HOST
    got = tr.kinds_of_types([t.name for t in EVENT_TYPES], [t.group for t in EVENT_TYPES])
    assert got.tolist() == [kinds[t.name] for t in EVENT_TYPES]
    assert [tr.on_device(k) for k in (tr.HOST, tr.CORE, tr.COLLECTIVE)] == [False, True, True]


def test_track_and_process_names():
    assert [tr.track_name(k, 3) for k in (tr.HOST, tr.CORE, tr.COLLECTIVE)] == \
        ["3/neuron_rt", "nc_3/neuron_hw", "nc_3/cc"]
    assert tr.process_label(42, 1, "i-0abc") == "i-0abc pid 42 rank 1"
    assert tr.process_label(42, -1) == "pid 42"


@pytest.mark.parametrize("primary,secondary,error", [
    ("", None, "is not valid"), ("instance_id,", None, "is not valid"), ("thread_id", None, "unknown field"),
    (None, "nc_idx,nc_idx", "names a field twice"), (None, "core", "unknown field 'core'"),
])
def test_bad_grouping_flags_are_one_line_usage_errors(primary, secondary, error):
    with pytest.raises(tr.GroupingError, match=error):
        tr.Grouping.parse(primary, secondary)


def test_grouping_parse_and_texts():
    g = tr.Grouping.parse(None, None)
    assert g == tr.Grouping() and (g.primary_text, g.secondary_text) == ("instance_id,process_id", "cpu_vs_device")
    assert g.by_process and g.per_session
    h = tr.Grouping.parse(" instance_id ", "thread_id,trace_event_source")
    assert h.primary == ("instance_id",) and h.secondary == ("thread_id", "trace_event_source")
    assert not h.by_process and not h.per_session and h != g
    assert h.group_label("i-1", 7, 0) == "i-1" and g.group_label("i-1", 7, 0) == "i-1 pid 7 rank 0"
    assert tr.Grouping(("process_id",)).group_label("i-1", 7, -1) == "pid 7"


def test_a_pid_shared_by_groups_is_shown_shifted_past_every_pid_shown():
    procs = [("i-b", 7, 0), ("i-a", 7, 1), ("i-a", 7 + tr.PID_SPACE, 2)]  # a crafted pid in the way
    shown = tr.group_pids(procs, tr.Grouping())
    assert [p for p, _ in shown] == [7 + 2 * tr.PID_SPACE, 7, 7 + tr.PID_SPACE]
    assert [label for _, label in shown] == ["i-b pid 7 rank 0", "i-a pid 7 rank 1",
                                             f"i-a pid {7 + tr.PID_SPACE} rank 2"]


def test_sessions_of_one_pid_are_told_apart_in_their_labels():
    procs = [("i-a", 7, 0, "/cap/i-a_pid_7/20240101T000000000Z"), ("i-a", 7, 0, "/cap/i-a_pid_7/20240101T000100000Z/")]
    shown = tr.group_pids(procs, tr.Grouping())
    assert shown == [(7, "i-a pid 7 rank 0 (session 20240101T000000000Z)"),
                     (7 + tr.PID_SPACE, "i-a pid 7 rank 0 (session 20240101T000100000Z)")]


def test_grouped_by_instance_the_groups_are_numbered():
    procs = [("i-b", 1, 0), ("i-a", 2, 1), ("i-b", 3, 2)]
    assert tr.group_pids(procs, tr.Grouping(("instance_id",))) == [(2, "i-b"), (1, "i-a"), (2, "i-b")]


def test_secondary_labels_make_one_track_per_distinct_value_tuple():
    tid = np.array([5, 5, 6, 5])
    nc = np.array([0, 1, 0, 0])
    src = ["neuron_rt", "neuron_hw", "neuron_rt", ""]
    idx, labels = tr.secondary_labels(("instance_id", "thread_id", "trace_event_source"), "i-a", 9, tid, nc, src)
    assert labels == ["i-a / tid 5 / unknown", "i-a / tid 5 / neuron_hw", "i-a / tid 5 / neuron_rt",
                      "i-a / tid 6 / neuron_rt"]
    assert idx.tolist() == [2, 1, 3, 0]
    idx, labels = tr.secondary_labels(("process_id",), "i-a", 9, tid, nc, src)
    assert idx.tolist() == [0, 0, 0, 0] and labels == ["pid 9"]


def test_label_tids_are_stable_31_bit_ids_above_os_thread_ids():
    a, b = tr.label_tid("i-a / tid 5"), tr.label_tid("i-a / tid 6")
    assert a == tr.label_tid("i-a / tid 5") and a != b
    assert all(0x4000_0000 <= t < 0x8000_0000 for t in (a, b))
