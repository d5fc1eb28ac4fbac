"""The application metric groups of neuron-monitor (``monitor.apps.AppTracker``) computed from
hand-made snapshots, on a fake clock, and what the companions publish from them
(``monitor.metrics.ReportTracker``).  Each figure is a difference of two cumulative snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_explorer.contracts import stats_histogram as histogram
from neuron_explorer.monitor import apps
from neuron_explorer.monitor.metrics import ReportTracker
from neuron_explorer.monitor.monitor import RUNTIME_GROUPS

S = 1_000_000_000


class Clock:
    """Stands in for the ``time`` module of ``monitor.apps``: moves only when told."""

    def __init__(self, mono: float = 1.0, wall: float = 1.7e9) -> None:  # (snapshots below start at 1 s)
        self.mono, self.wall = mono, wall

    def monotonic(self) -> float:
        return self.mono

    def monotonic_ns(self) -> int:
        return int(self.mono * S)

    def time(self) -> float:
        return self.wall


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(apps, "time", c)
    monkeypatch.setattr(apps, "_NCPU", 4)
    return c


def snap(mono_s: float, *, cores=None, executions=None, errors=None, latencies=(), memory=None, models=(),
         cpu=(0.0, 0.0), rss=0, nc_indices=()) -> dict:
    return {"pid": 4242, "start_time": None, "created_mono_ns": 10 * S, "mono_ns": int(mono_s * S),
            "device_kind": "cpu", "nc_indices": list(nc_indices), "cores": cores or {},
            "executions": executions or {}, "errors": errors or {},
            "latency": {"total": histogram.histogram_from_values(latencies),
                        "device": histogram.histogram_from_values(latencies)},
            "memory": memory if memory is not None else {}, "models": list(models), "final": True,
            "cpu_times": list(cpu), "rss_bytes": rss}


def tracker(first: dict) -> apps.AppTracker:
    """A tracker of an application that has exited: every figure comes from its snapshots."""
    t = apps.AppTracker(pid=4242, path=Path("/nonexistent/4242.json"), tag="train", start_time=None,
                        groups={g: 1.0 for g in RUNTIME_GROUPS}, latest=first, exited=True)
    t.prime(from_start=False)
    return t


def test_core_utilization_is_busy_time_over_the_period(clock):
    t = tracker(snap(1, cores={"0": {"busy_ns": S // 2, "flops": 0.0, "flops_known": True}}))
    t.latest = snap(3, cores={"0": {"busy_ns": 3 * S // 2, "flops": 4e9, "flops_known": True},
                              "2": {"busy_ns": 10 * S, "flops": 0.0}}, nc_indices=[0, 1, 2])
    got = t.neuroncore_counters()
    assert got["period"] == 2.0
    assert got["neuroncores_in_use"] == {"0": {"neuroncore_utilization": 50.0, "flops": 2_000_000_000},
                                         "1": {"neuroncore_utilization": 0.0, "flops": None},
                                         "2": {"neuroncore_utilization": 100.0, "flops": None}}  # capped at 100
    assert got["error"] == "flops unknown for cores whose graphs have no flop count"
    again = t.neuroncore_counters()  # nothing new published since
    assert again["period"] == 0.0 and again["neuroncores_in_use"]["0"]["neuroncore_utilization"] is None
    assert again["error"] == "the application published no new stats during the period"


def test_a_flop_counter_that_went_back_is_unknown_not_negative(clock):
    t = tracker(snap(1, cores={"0": {"busy_ns": 0, "flops": 9e9, "flops_known": True}}))
    t.latest = snap(2, cores={"0": {"busy_ns": 0, "flops": 1e9, "flops_known": True}})
    assert t.neuroncore_counters()["neuroncores_in_use"]["0"]["flops"] is None


def test_execution_counts_and_latencies_cover_only_the_period(clock):
    t = tracker(snap(1, executions={"completed": 5}, errors={"numerical": 1}, latencies=[1e6] * 3))
    t.latest = snap(2, executions={"completed": 12, "timed_out": 1}, errors={"numerical": 0},
                    latencies=[1e6] * 3 + [1e7] * 2)
    got = t.execution_stats()
    assert got["period"] == 1.0 and got["error"] == ""
    assert got["execution_summary"] == {"completed": 7, "completed_with_err": 0, "completed_with_num_err": 0,
                                        "timed_out": 1, "incorrect_input": 0, "failed_to_queue": 0}
    assert got["error_summary"]["numerical"] == 0  # a counter that went back counts nothing
    total = got["latency_stats"]["total_latency"]
    assert total["p0"] == pytest.approx(0.01, rel=0.06) and total["p100"] == pytest.approx(0.01, rel=0.06)
    assert t.execution_stats()["latency_stats"]["total_latency"] is None  # no execution since


def _model(uuid: str, executions: int, subgraphs: int = 2) -> dict:
    return {"name": "step", "uuid": uuid, "model_id": 1, "nc_idx": 3, "executions": executions,
            "subgraphs": subgraphs, "code_bytes": 100, "constants_bytes": 20}


def test_memory_is_the_resident_size_split_into_the_runtimes_categories(clock):
    mem = {"host": {"constants": 100, "dma_buffers": 50, "tensors": 200},
           "per_core": {"1": {"tensors": 7}, "0": {"constants": 1, "model_code": 2}}}
    t = tracker(snap(1, models=[_model("u1", 2)]))
    t.latest = snap(4, memory=mem, rss=1000, models=[_model("u1", 5), _model("u2", 0, subgraphs=1)])
    got = t.memory_used()
    used = got["neuron_runtime_used_bytes"]
    assert got["period"] == 3.0 and got["error"] == ""  # from the priming (1 s) to its final snapshot
    assert used["host"] == 1000 and used["neuron_device"] == 10
    assert used["usage_breakdown"]["host"] == {"application_memory": 650, "constants": 100, "dma_buffers": 50,
                                               "tensors": 200}
    assert list(used["usage_breakdown"]["neuroncore_memory_usage"]) == ["0", "1"]
    assert [m["is_running"] for m in got["loaded_models"]] == [True, False]
    sg = got["loaded_models"][0]["subgraphs"]
    assert list(sg) == ["sg_00", "sg_01"] and sg["sg_01"]["memory_used_bytes"] is None
    assert sg["sg_00"]["memory_used_bytes"]["neuron_device"] == 120 and sg["sg_00"]["neuroncore_index"] == 3
    assert sg["sg_00"]["neuron_device_index"] == 0  # one device on a CPU host


def test_memory_without_categories_is_the_resident_size_and_says_so(clock):
    t = tracker(snap(1))
    t.latest = snap(2, rss=300, memory={"host": {"tensors": 500}})  # more accounted than resident
    used = t.memory_used()["neuron_runtime_used_bytes"]
    assert used["host"] == 500 and used["usage_breakdown"]["host"]["application_memory"] == 0
    t.latest = snap(3, rss=300)
    assert t.memory_used()["error"] == ("the runtime has not reported its memory categories; host total is the "
                                        "process RSS")


def test_cpu_usage_is_a_share_of_every_host_vcpu(clock):
    t = tracker(snap(1, cpu=(1.0, 0.5)))
    t.latest = snap(3, cpu=(3.0, 1.0))  # 2 s user, 0.5 s system over 2 s on 4 vCPUs
    got = t.neuron_runtime_vcpu_usage()
    assert got == {"period": 2.0, "vcpu_usage": {"user": 25.0, "system": 6.25}, "error": ""}
    assert t.neuron_runtime_vcpu_usage()["error"] == "zero-length period"


def test_an_exited_application_without_cpu_times_says_so(clock):
    t = tracker(snap(1))
    del t.latest["cpu_times"]
    assert t.neuron_runtime_vcpu_usage() == {"period": None, "vcpu_usage": None,
                                             "error": "the application exited without its CPU times"}


def test_a_late_application_is_counted_from_its_start(clock):
    t = apps.AppTracker(pid=4242, path=Path("/nonexistent"), tag="t", start_time=None, groups={},
                        latest=snap(30, executions={"completed": 9}), exited=True)
    t.prime(from_start=True)  # found after it ran: its start (created 10 s) is the baseline
    got = t.execution_stats()
    assert got["period"] == 20.0 and got["execution_summary"]["completed"] == 9


def test_what_the_companions_publish_from_the_groups(clock):
    t = tracker(snap(1, cores={"0": {"busy_ns": 0, "flops": 0.0}}, executions={"completed": 1}))
    t.latest = snap(2, cores={"0": {"busy_ns": S // 4, "flops": 0.0}}, executions={"completed": 4},
                    latencies=[2e6] * 3, rss=10)
    for g in ("neuroncore_counters", "execution_stats", "memory_used"):
        t.collect(g)
    report = {"neuron_runtime_data": [t.entry(RUNTIME_GROUPS)], "system_data": {},
              "instance_info": {"instance_id": "i-0abc", "instance_type": "trn1.2xlarge"}, "neuron_hardware_info": {}}
    pub = ReportTracker()
    samples = {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if v))): s for s in pub.samples(report)}
    util = samples[("neuroncore_utilization_ratio", (("instance_id", "i-0abc"), ("instance_type", "trn1.2xlarge"),
                                                      ("neuroncore", "0"), ("runtime_tag", "train")))]
    assert util.value == 0.25 and util.fresh
    done = [s for (name, labels), s in samples.items() if name == "execution_status_total"
            and ("status_type", "completed") in labels]
    assert [s.value for s in done] == [3.0]
    assert all(not s.fresh for s in pub.samples(report))  # the same report again: nothing new to count


def test_a_report_field_of_the_wrong_type_costs_only_its_own_samples(clock):
    report = {"neuron_runtime_data": [{"pid": 1, "neuron_runtime_tag": "x", "report": {
        "neuroncore_counters": {"neuroncores_in_use": {"0": {"neuroncore_utilization": "high"},
                                                       "1": {"neuroncore_utilization": 40}}},
        "execution_stats": ["not", "an", "object"]}}], "instance_info": None}
    names = [(s.name, s.labels.get("neuroncore"), s.value) for s in ReportTracker().samples(report)]
    assert ("neuroncore_utilization_ratio", "1", 0.4) in names
    assert not any(n == "neuroncore_utilization_ratio" and c == "0" for n, c, _ in names)
