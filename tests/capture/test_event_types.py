"""The event types the spec lists beyond the core ones (issue #17, item 2): each is produced where
this substrate has a mechanism for it, and a filter naming one that cannot exist here warns."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from neuron_explorer.contracts import events as ev
from tests.capture.helpers import events_of, expand_rows, sessions, type_counts
from tests.conftest import clean_env, free_port, run, shared_dir

WORKLOAD = Path(__file__).parent / "workloads" / "waits.py"


def _capture(out: Path, types: str | None = None) -> tuple[object, str]:
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                    MASTER_PORT=str(free_port()))
    if types is not None:
        env["NEURON_RT_INSPECT_EVENT_FILTER_TYPE"] = types
    p = run([sys.executable, str(WORKLOAD)], env)
    (s,) = sessions(out)
    return s, p.stderr


def test_the_spec_filter_example_yields_all_three_types(tmp_path):
    s, err = _capture(tmp_path / "o", "model_load,nrt_execute,runtime_execute")
    counts = type_counts(s)
    assert set(counts) == {"model_load", "nrt_execute", "runtime_execute"}, counts
    assert counts["runtime_execute"] == counts["nrt_execute"] >= 3
    host, share = events_of(s, "nrt_execute"), events_of(s, "runtime_execute")
    # on a CPU the runtime runs the graph on the calling thread: its share is the whole call
    np.testing.assert_array_equal(share["start_ns"], host["start_ns"])
    np.testing.assert_array_equal(share["end_ns"], host["end_ns"])
    np.testing.assert_array_equal(share["b"], host["b"])  # the execution ids
    assert "never recorded" not in err


def test_waits_and_completion_notifications_are_recorded(tmp_path):
    s, _ = _capture(tmp_path / "o")
    waits = events_of(s, "kbl_exec_wait")
    ops = [s.strings[i] for i in waits["c"]]
    # two Work.wait calls (torch.distributed's own and the program's) name the all_reduce and its
    # sequence number; torch.neuron.synchronize names the core's latest execution
    assert ops.count("all_reduce") == 2, ops
    assert sorted(waits["d"][np.array(ops) == "all_reduce"].tolist()) == [0, 1]
    sync = waits["c"] == 0
    assert sync.sum() == 1 and waits["b"][sync][0] == len(events_of(s, "nc_exec_running")["b"]) - 1
    assert (waits["end_ns"] >= waits["start_ns"]).all()
    notes = events_of(s, "hw_notify")
    cc = events_of(s, "cc_running")
    assert len(notes["a"]) == len(cc["a"]) == 2
    assert notes["a"].tolist() == [0, 0]  # status: success
    # each notification is the instant its collective's completion reached the host
    assert sorted(notes["start_ns"].tolist()) == sorted(cc["end_ns"].tolist())
    assert (notes["start_ns"] == notes["end_ns"]).all()


def _nrt_execute_only(tmp_path_factory) -> tuple[Path, str]:
    """The capture filtered to ``nrt_execute,kmgr_exec_core`` (the second is never recorded on this
    host: only nrt_execute is kept) and its stderr, made once per test run for the two tests that
    read it (``shared_dir``, decision 0210)."""
    d, err = shared_dir(tmp_path_factory, "event_types_nrt_execute_only",
                        lambda d: _capture(d / "o", "nrt_execute,kmgr_exec_core")[1])
    return d / "o", err


def test_a_filter_naming_a_type_no_host_here_produces_warns_in_one_line(tmp_path_factory):
    out, err = _nrt_execute_only(tmp_path_factory)
    (s,) = sessions(out)
    lines = [ln for ln in err.splitlines() if "kmgr_exec_core" in ln]
    assert len(lines) == 1 and "never recorded here" in lines[0], err
    assert set(type_counts(s)) == {"nrt_execute"}


def test_device_exec_warns_only_on_a_host_without_a_gpu(tmp_path):
    assert ev.unproducible(["device_exec"], has_gpu=True) == []
    assert "no GPU" in ev.unproducible(["device_exec"], has_gpu=False)[0]
    assert len(ev.unproducible(["kmgr_exec_core", "nrt_execute", "hardware"], has_gpu=True)) == 1


def _pairs(starts, mids, dev=None):
    rows = []
    for i, (s, m) in enumerate(zip(starts, mids)):
        d0, d1 = dev[i] if dev is not None else (0, 0)
        rows.append((ev.EXEC_PAIR, s, s + 10, 9, m, i, i % 2, d0, d1))  # ret: a runtime share has none
    return np.array(rows, dtype=np.int64).reshape(-1, ev.RECORD_WIDTH)


def test_runtime_rows_expand_the_same_whatever_order_the_drain_has():
    rng = np.random.default_rng(3)
    starts = np.cumsum(rng.integers(20, 30, 100))
    mids = rng.integers(0, 3, 100)
    block = _pairs(starts, mids)
    out, _ = expand_rows(block, 0, runtime_rows=True)
    out_reversed, _ = expand_rows(block[::-1].copy(), 0, runtime_rows=True)
    np.testing.assert_array_equal(out, out_reversed)
    kinds = out[:, 0]
    assert (kinds == ev.RUNTIME_EXECUTE).sum() == (kinds == ev.NRT_EXECUTE).sum() == 100
    # each execution reads nrt_execute, runtime_execute, nc_exec_running
    i = np.flatnonzero(kinds == ev.NRT_EXECUTE)
    assert (kinds[i + 1] == ev.RUNTIME_EXECUTE).all() and (kinds[i + 2] == ev.NC_EXEC_RUNNING).all()
    plain, _ = expand_rows(block, 0)
    assert not (plain[:, 0] == ev.RUNTIME_EXECUTE).any()


def test_the_runtime_share_ends_where_a_separately_measured_core_span_starts():
    # host call [s, s+10]; the core starts 4 ns in (JAX, a device queue), or not at all measured
    block = _pairs([100, 200, 300], [0, 0, 0], dev=[(104, 130), (0, 0), (195, 230)])
    out, _ = expand_rows(block, 0, runtime_rows=True)
    share = out[out[:, 0] == ev.RUNTIME_EXECUTE]
    assert share[:, 1].tolist() == [100, 200, 300]
    # handed to the core 4 ns in; synchronous; the core started before the call (no share cut)
    assert share[:, 2].tolist() == [104, 210, 310]


def test_view_warns_when_its_type_filter_names_a_type_no_capture_holds(tmp_path, tmp_path_factory):
    from tests.conftest import cli_in_process as cli  # view's warning, read in this process (decision 0173)

    out, _ = _nrt_execute_only(tmp_path_factory)  # a capture of nrt_execute alone (one launch for both tests)
    p = cli("view", "-d", str(out), "--output-format", "summary-json", "--output-file",
            str(tmp_path / "s.json"), "--system-trace-filter-event-type", "nrt_execute,kmgr_exec_core,device_exec")
    lines = [ln for ln in p.stderr.splitlines() if "never recorded" in ln]
    # device_exec may be in captures from GPU hosts: only kmgr_exec_core is named
    assert len(lines) == 1 and "kmgr_exec_core" in lines[0], p.stderr
    assert p.returncode == 0
