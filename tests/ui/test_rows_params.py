"""ui.params (what a request may ask for) and ui.rows (the drawn rows of each grouping mode), in
process: no server, no profile.  (Stored groupings to modes: test_stored_grouping.py.)"""

from __future__ import annotations

import random

import pytest

from neuron_explorer.ui import params as pm, rows as rw
from tests.fuzzing import examples, seed


@pytest.mark.parametrize("text,want", [(None, []), ("", []), ("3", [3]), ("1,2,5-7", [1, 2, 5, 6, 7]),
                                       (" 4 , ,2", [4, 2]), ("-1", [-1]), ("9-9", [9])])
def test_row_lists_keep_their_order(text, want):
    assert pm.parse_rows(text) == want


@pytest.mark.parametrize("text,error", [("5-3", "bad row range"), (f"0-{pm.MAX_ROWS + 1}", "bad row range"),
                                        (f"0-{pm.MAX_ROWS},1", "too many rows"), ("x", "invalid literal"),
                                        ("1-2-3", "invalid literal")])
def test_bad_row_lists_are_refused_before_any_query(text, error):
    with pytest.raises(ValueError, match=error):  # (BadRequest is a ValueError: both answer 400)
        pm.parse_rows(text)


def test_numbers_are_finite_and_within_2_to_the_62():
    assert pm.number({"t": "1.5e3"}, "t") == 1500.0 and pm.number({}, "t", 7.0) == 7.0
    for bad, why in (("nan", "not valid"), ("inf", "not valid"), ("1e19", "not valid"), ("abc", "not a number")):
        with pytest.raises(pm.BadRequest, match=why):
            pm.number({"t": bad}, "t")
    with pytest.raises(pm.BadRequest, match="missing parameter t"):
        pm.number({}, "t")


@pytest.mark.parametrize("text,want", [(" 42 ", 42), ("-7", -7), ("12.0", 12), ("1e3", 1000),
                                       (str(2**63 - 1), 2**63 - 1)])
def test_integers_are_exact(text, want):
    assert pm.integer({"id": text}, "id") == want


@pytest.mark.parametrize("text,why", [("12.5", "an integer within"), ("1e300", "an integer within"),
                                      (str(2**63), "a 64-bit integer"), ("x", "is not an integer")])
def test_integers_refuse_fractions_and_overflow(text, why):
    with pytest.raises(pm.BadRequest, match=why):
        pm.integer({"id": text}, "id")
    assert pm.integer({"id": ""}, "id", 5) == 5


def test_window_arguments():
    assert pm.window_args("0", "10.5", "100") == (0.0, 10.5, 100)
    for args, why in (((5, 5, 10), "need finite t0 < t1"), ((0, float("inf"), 10), "need finite"),
                      ((-(2.0**63), 0, 10), "must lie within"), ((0, 1, 0), "px must be in 1..20000"),
                      ((0, 1, pm.MAX_PX + 1), "px must be"), (("a", 1, 1), "must be numbers")):
        with pytest.raises(pm.BadRequest, match=why):
            pm.window_args(*args)
    assert pm.ns_per_px(0, 100, 10) == 10.0 and pm.ns_per_px(0, 1e-20, 1) == 1e-9


def test_one_line_of_a_failure():
    assert pm.one_line(ValueError("first\nsecond")) == "first"
    assert pm.one_line(ValueError("x" * 500)) == "x" * 300
    assert pm.one_line(KeyError()) == "KeyError"
    assert pm.one_line(UnicodeDecodeError("utf-8", b"col \xff", 4, 5, "bad")) == "col \ufffd"


def _leaf(i, inst, pid, tid, nc, name, group, n=1):
    return rw.Leaf(i, inst, pid, tid, nc, "neuron_rt", name, n, 0, 10, 5, group)


LEAVES = [_leaf(0, "i-a", 7, 70, 0, "nrt_execute", "software", 3), _leaf(1, "i-a", 7, 70, 0, "nc_exec_running",
                                                                         "hardware", 3),
          _leaf(2, "i-a", 7, 71, 1, "nc_exec_running", "hardware", 2), _leaf(3, "i-a", 8, 80, 1, "cc_running",
                                                                             "hardware", 4),
          _leaf(4, "i-a", 7, 70, 0, "aaa_custom", "software", 1)]
COUNTERS = [("i-a", 8, "cpu_util.cpu0", "percent"), ("i-a", 7, "cpu_util.cpu0", "percent"),
            ("i-a", 7, "cpu_util.process", "percent"), ("i-a", 7, "host_mem.host_used", "bytes"),
            ("i-a", 7, "device_mem.nc0.gradients", "bytes"), ("i-a", 7, "device_mem.nc0.parameters", "bytes"),
            ("i-a", 7, "device_mem.tensors", "bytes")]
RANKS = {("i-a", 7): 1, ("i-a", 8): 0}


def _shape(mode, layout="names"):
    return [(r.kind, "/".join(r.group), r.label) for r in rw.build_rows(mode, LEAVES, COUNTERS, RANKS, {}, layout)]


def test_cpu_vs_device_rows_put_host_threads_above_their_cores_by_rank():
    assert _shape("cpu_device") == [
        ("counter", "i-a/Counters", "CPU utilization (host)"),
        ("counter", "i-a/Counters", "Host memory (used / available)"),
        ("counter", "i-a/Counters", "Device memory · nd 0"),
        ("events", "i-a/pid 8 rank 0/Device", "cc_running · NC 1"),  # rank 0 first, whatever its pid
        ("counter", "i-a/pid 7 rank 1", "CPU utilization (process)"),
        ("events", "i-a/pid 7 rank 1/CPU", "nrt_execute · tid 70"),
        ("events", "i-a/pid 7 rank 1/CPU", "aaa_custom · tid 70"),  # names outside NAME_ORDER come after
        ("events", "i-a/pid 7 rank 1/Device", "nc_exec_running · NC 0"),
        ("counter", "i-a/pid 7 rank 1/Device", "Device memory · NC 0"),  # right under its core's rows
        ("events", "i-a/pid 7 rank 1/Device", "nc_exec_running · NC 1"),
    ]


def test_the_host_cpu_row_is_read_from_the_lowest_pid_of_the_instance():
    rows = rw.build_rows("instance", LEAVES, COUNTERS, RANKS, {})
    cpu = next(r for r in rows if r.label == "CPU utilization (host)")
    assert cpu.series == [("i-a", 7, "cpu_util.cpu0")] and cpu.to_json(0)["series"] == ["cpu_util.cpu0"]
    mem = next(r for r in rows if r.label.startswith("Device memory · NC 0"))
    assert mem.label == "Device memory · NC 0 · pid 7 rank 1" and mem.style == "stack"
    assert sorted(s[2] for s in mem.series) == ["device_mem.nc0.gradients", "device_mem.nc0.parameters"]


def test_each_layout_of_each_mode_draws_every_leaf_once():
    for mode in rw.MODES:
        for layout in rw.LAYOUTS:
            rows = rw.build_rows(mode, LEAVES, COUNTERS, RANKS, {}, layout)
            leaves = sorted(i for r in rows if r.kind == "events" for i in r.leaves)
            assert leaves == [0, 1, 2, 3, 4], (mode, layout)
            assert sum(r.count for r in rows if r.kind == "events") == 13
            assert len({r.key for r in rows}) == len(rows)


def test_the_tracks_layout_merges_names_into_one_track_per_thread_or_core():
    got = [(g, label) for kind, g, label in _shape("cpu_device", "tracks") if kind == "events"]
    assert got == [("i-a/pid 8 rank 0/Device", "NC 1"), ("i-a/pid 7 rank 1/CPU", "thread 70"),
                   ("i-a/pid 7 rank 1/Device", "NC 0"), ("i-a/pid 7 rank 1/Device", "NC 1")]
    nc = [label for kind, _, label in _shape("neuroncore", "tracks") if kind == "events"]
    assert nc == ["NC 0", "NC 1"]


def test_unknown_modes_and_layouts_are_bad_requests():
    with pytest.raises(pm.BadRequest, match="unknown grouping mode 'gpu'; one of cpu_device, neuroncore"):
        rw.build_rows("gpu", [], [], {}, {})
    with pytest.raises(pm.BadRequest, match="unknown layout 'grid'"):
        rw.build_rows("thread", [], [], {}, {}, "grid")
    assert rw.build_rows("thread", [], [], {}, {}) == []


def test_core_memory_counter_names():
    assert rw.core_memory("device_mem.nc12.optimizer_state") == (12, "optimizer_state")
    assert rw.core_memory("device_mem.tensors") is None and rw.core_memory("cpu_util.cpu0") is None
    assert rw.name_key("nrt_load") < rw.name_key("nc_exec_running") < rw.name_key("aaa")


def test_a_processes_cgroup_limit_goes_on_its_own_memory_tracks_only():
    """ProfileMetadata's memory_limit_* (decision 0186): the process's RSS / VMS track and, on a CPU
    device, its cores' device memory tracks carry the limit; the host's tracks and other processes'
    do not; a GPU's device memory is not bounded by a cgroup; no limit or an odd row: nothing."""
    counters = COUNTERS + [("i-a", 7, "host_mem.process_rss", "bytes"), ("i-a", 8, "host_mem.process_rss", "bytes"),
                           ("i-a", 8, "device_mem.nc1.tensors", "bytes")]
    meta = [{"instance_id": "i-a", "process_id": 7, "device_kind": "cpu", "memory_limit_bytes": 4 << 30,
             "memory_limit_source": "cgroup v2 memory.max", "memory_limit_cgroup": "/pods/a"},
            {"instance_id": "i-a", "process_id": 8, "device_kind": "cpu", "memory_limit_bytes": 0},
            {"instance_id": "i-a", "process_id": "x", "memory_limit_bytes": 5}, {"memory_limit_bytes": 5}]
    limits = rw.memory_limits(meta)
    assert list(limits) == [("i-a", 7)]
    want = {"bytes": 4 << 30, "source": "cgroup v2 memory.max", "cgroup": "/pods/a"}
    for mode in rw.MODES:
        rows = rw.build_rows(mode, LEAVES, counters, RANKS, {}, "tracks", limits)
        got = {r.label: r.to_json(0).get("limit") for r in rows if r.kind == "counter"}
        dev = next(v for k, v in got.items() if k.startswith("Device memory · NC 0"))
        assert dev == want, (mode, got)
        assert all(v is None for k, v in got.items() if "NC 1" in k or "host" in k), (mode, got)
        if "Host memory (process RSS / VMS)" in got:
            procs = {r.group[-1]: r.limit for r in rows if r.label == "Host memory (process RSS / VMS)"}
            assert procs == {"pid 7 rank 1": want, "pid 8 rank 0": None}, (mode, procs)
    gpu = rw.memory_limits([dict(meta[0], device_kind="cuda:A100")])
    rows = rw.build_rows("thread", LEAVES, counters, RANKS, {}, "tracks", gpu)
    assert [r.label for r in rows if r.limit] == ["Host memory (process RSS / VMS)"]
    assert all(r.limit is None for r in rw.build_rows("thread", LEAVES, counters, RANKS, {}, "tracks"))


def test_fuzz_memory_limits_of_any_metadata_rows_never_raise():
    """ProfileMetadata is a file: its memory_limit_* and keys may hold anything (another tool's
    dataset, a damaged one); a limit comes only from a positive integer with a usable key."""
    rnd = random.Random(seed(1860))
    values = [None, 0, -5, 1, 4 << 30, 1.5, "12", "x", b"\xff", [], {}, True, float("nan"), float("inf"), 2 ** 80,
              "cpu", "cuda:A"]
    for i in range(examples(2000)):
        meta = [{k: rnd.choice(values) for k in ("instance_id", "process_id", "device_kind", "memory_limit_bytes",
                                                 "memory_limit_source", "memory_limit_cgroup") if rnd.random() < 0.8}
                for _ in range(rnd.randrange(4))]
        try:
            got = rw.memory_limits(meta)
        except Exception as e:  # noqa: BLE001
            raise AssertionError((i, meta)) from e
        for (inst, pid), lim in got.items():
            assert isinstance(inst, str) and isinstance(pid, int) and lim["bytes"] > 0, (i, meta, got)
            assert isinstance(lim["source"], str) and isinstance(lim["cgroup"], str), (i, meta, got)
        rows = rw.build_rows("thread", LEAVES, COUNTERS, RANKS, {}, "tracks", got)
        assert all(r.limit is None or r.limit["bytes"] > 0 for r in rows)


def test_the_main_threads_shares_are_drawn_on_the_process_cpu_row():
    """Decision 0203: a capture with the main thread's run and wait shares shows them with the
    process's CPU, on one row; the host's CPU row does not take them."""
    counters = COUNTERS + [("i-a", 7, "cpu_util.main_thread_wait", "percent"),
                           ("i-a", 7, "cpu_util.main_thread", "percent")]
    rows = rw.build_rows("cpu_device", LEAVES, counters, RANKS, {})
    proc = [r for r in rows if r.label.startswith("CPU utilization (process)")]
    assert len(proc) == 1 and [s[2] for s in proc[0].series] == [
        "cpu_util.process", "cpu_util.main_thread", "cpu_util.main_thread_wait"]
    host = next(r for r in rows if r.label == "CPU utilization (host)")
    assert [s[2] for s in host.series] == ["cpu_util.cpu0"]
