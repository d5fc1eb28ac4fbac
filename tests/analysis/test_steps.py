"""``analysis.steps`` on hand-made event columns: the three rules, numbering and the breakdown."""

from __future__ import annotations

import numpy as np

from neuron_explorer.analysis.steps import BREAKDOWN, Steps, find_steps

NAMES = {"nc_exec_running": 0, "cc_running": 1, "kbl_exec_wait": 2, "model_load": 3, "framework_op": 4,
         "nrt_execute": 5}
STRINGS = ["", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "ProfilerStep#7",
           "ProfilerStep#8", "neuron_explorer.step#40", "Optimizer.zero_grad#SGD.zero_grad"]
MODELS = [(0, "Net_fwd", "forward", 100.0), (1, "Net_fwd_bwd", "backward", 200.0), (2, "SGD_x", "optimizer", 0.0)]


def cols(rows):
    """rows: (type, start, end, model_id, label, bytes)."""
    a = np.asarray(rows, dtype=np.int64).reshape(-1, 6)
    return dict(typ=a[:, 0], start=a[:, 1], end=a[:, 2], model_id=a[:, 3], label=a[:, 4], nbytes=a[:, 5])


def one_step(t: int) -> list:
    """data 10, forward 20, backward 30 (a 10-long all-reduce inside, 5 sticking out), optimizer 5."""
    return [(4, t, t + 10, -1, 1, -1),
            (0, t + 10, t + 30, 0, -1, -1),
            (0, t + 30, t + 60, 1, -1, -1), (1, t + 55, t + 65, -1, -1, 4096),
            (0, t + 65, t + 70, 2, -1, -1)]


def run(rows, strings=STRINGS) -> Steps:
    c = cols(rows)
    return find_steps(c["typ"], c["start"], c["end"], c["model_id"], c["label"], c["nbytes"], NAMES, strings, MODELS)


def test_optimizer_steps_partition_the_wall_time():
    rows = [r for k in range(4) for r in one_step(1000 + 100 * k)]
    st = run(rows)
    assert st.method == "optimizer" and st.boundary == "SGD_x"
    assert st.number.tolist() == [0, 1, 2, 3]
    assert st.end_ns.tolist() == [1070, 1170, 1270, 1370]
    assert st.start_ns.tolist() == [1000, 1070, 1170, 1270]
    c = st.columns
    total = sum(c[k] for k in BREAKDOWN)
    assert (total == c["wall_ns"]).all()
    assert c["compute_ns"][1] == 55 and c["exposed_collective_ns"][1] == 5
    assert c["data_loading_ns"][1] == 10 and c["idle_ns"][1] == 30  # 1070..1100 is nothing
    assert c["collective_ns"][1] == 10 and c["own_ns"][1] == 90 and c["compute_own_ns"][1] == 50
    assert c["optimizer_ns"][1] == 5 and c["executions"][1] == 3 and c["graphs"][1] == 3
    assert c["flops"][1] == 300.0 and c["small_collectives"][1] == 1 and c["collective_bytes"][1] == 4096


def test_mark_sets_the_base_and_profiler_steps_win():
    rows = [r for k in range(3) for r in one_step(1000 + 100 * k)] + [(4, 1075, 1076, -1, 4, -1)]
    assert run(rows).number.tolist() == [39, 40, 41]  # the boundary ending after the mark is 40
    rows += [(4, 1000, 1070, -1, 2, -1), (4, 1070, 1170, -1, 3, -1)]
    st = run(rows)
    assert st.method == "profiler_step" and st.number.tolist() == [7, 8]
    assert st.start_ns.tolist() == [1000, 1070] and st.end_ns.tolist() == [1070, 1170]


def test_cycle_without_optimizer_and_none():
    rows = [(0, t, t + 5, 0, -1, -1) for t in range(0, 50, 10)]
    rows += [(0, t + 5, t + 7, 1, -1, -1) for t in range(0, 50, 10)]
    st = find_steps(*cols(rows).values(), NAMES, STRINGS, MODELS[:2])
    assert st.method == "cycle" and st.boundary == "Net_fwd" and len(st) == 5
    empty = cols([])
    none = find_steps(*empty.values(), NAMES, STRINGS, MODELS)
    assert none.method == "none" and len(none) == 0 and Steps.from_json(none.to_json()).method == "none"


def test_json_round_trip():
    st = run([r for k in range(2) for r in one_step(100 * k)])
    back = Steps.from_json(st.to_json())
    assert back.number.tolist() == st.number.tolist() and back.columns["flops"].tolist() == st.columns["flops"].tolist()
    assert back.shifted(5).start_ns.tolist() == (st.start_ns + 5).tolist()
