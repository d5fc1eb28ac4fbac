"""Memory insights from the device-memory counters a capture records (decision 0159): device
memory that keeps growing step after step (``memory_growth``), and device memory near its limit
(``memory_near_limit``; on the CPU substrate the limit is the host's memory)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer.analysis import insights
from neuron_explorer.analysis.steps import BREAKDOWN, COUNTS
from tests.conftest import (
    REPO,
    clean_env,
    cli_in_process as cli,  # conversions in this process (decision 0173)
    run,
    shared_dir,
)
from tests.fuzzing import examples, seed

MIB = 1 << 20
EXTRA = ("wall_ns", "collective_ns", "own_ns", "compute_own_ns", "optimizer_ns", "flops")


def _proc(mem: list[int] | np.ndarray, limit: int | None = None, rank: int = -1, pid: int = 7) -> dict:
    """One process's steps of 10 ms each with ``mem`` bytes of device memory at their ends."""
    n = len(mem)
    num = np.arange(n, dtype=np.int64)
    d: dict = {"instance_id": "vm", "pid": pid, "rank": rank, "device_kind": "cpu", "method": "optimizer",
               "boundary": "SGD", "number": num, "start_ns": num * 10_000_000, "end_ns": (num + 1) * 10_000_000}
    for c in BREAKDOWN + COUNTS + EXTRA:
        d[c] = np.zeros(n, dtype=np.int64)
    d.update(wall_ns=np.full(n, 10_000_000), compute_ns=np.full(n, 10_000_000), own_ns=np.full(n, 10_000_000),
             device_mem_bytes=np.asarray(mem, dtype=np.int64), device_mem_growth={"tensors": int(mem[-1] - mem[0])})
    if limit is not None:
        d.update(memory_limit_bytes=limit, memory_limit_source="host memory (CPU substrate)")
    return d


def _found(*procs: dict) -> dict[str, dict]:
    return {i["id"]: i for i in insights.analyse(list(procs))["insights"]}


def test_memory_per_step_holds_each_series_last_sample_and_sums_the_categories():
    ends = np.array([10, 20, 30, 40])
    series = {"device_mem.nc0.tensors": (np.array([15, 25, 26]), np.array([100, 300, 200])),
              "device_mem.nc0.parameters": (np.array([5]), np.array([1000])),
              "device_mem.nc1.tensors": (np.array([35]), np.array([7]))}
    total, growth = insights.memory_per_step(series, ends)
    assert total.tolist() == [1000, 1100, 1200, 1207]
    assert growth == {"tensors": 200 + 7, "parameters": 0}
    total, _ = insights.memory_per_step({"device_mem.nc0.tensors": (np.array([50]), np.array([1]))}, ends)
    assert total.tolist() == [-1, -1, -1, -1]  # no sample yet at any step's end


def test_memory_that_grows_every_step_is_found_with_its_rate_and_the_steps_left():
    limit = 16 << 30
    mem = 200 * MIB + 8 * MIB * np.arange(20)
    found = _found(_proc(mem, limit))
    g = found["memory_growth"]
    assert g["impact_ns_per_step"] is None and g["confidence"]["level"] == "high"
    assert g["confidence"]["p_value"] <= insights.ALPHA and g["confidence"]["steps"] == 18
    figs = g["evidence"]["figures"]
    assert figs["bytes_per_step"] == 8 * MIB and figs["steps"] == [1, 19]
    assert figs["steps_to_limit"] == (limit - int(mem[-1])) // (8 * MIB)
    assert g["title"].startswith("device memory grows by 8.0 MiB per step")
    assert ".detach()" in g["recommendation"] and "memory_near_limit" not in found
    assert g["evidence"]["start_ns"] == 10_000_000 and g["evidence"]["end_ns"] == 200_000_000


def test_memory_that_settles_wobbles_or_grows_little_is_no_finding():
    warm = np.minimum(200 * MIB + 30 * MIB * np.arange(20), 320 * MIB)  # grows for four steps, then flat
    wobble = 200 * MIB + np.where(np.arange(20) % 2, 60 * MIB, 0) + 4 * MIB * np.arange(20)  # up and down
    little = 500 * MIB + 2 * MIB * np.arange(20)  # 36 MiB in all: under 64 MiB
    few = 200 * MIB + 60 * MIB * np.arange(3)  # two steady steps
    for mem in (warm, wobble, little, few):
        assert "memory_growth" not in _found(_proc(mem))
    assert "memory_growth" not in _found(_proc([-1] * 20))  # never sampled
    # (the wobbling one grows 72 MiB, most of it late, but rises in only 9 of its 18 changes)
    assert int(wobble[-1] - wobble[1]) > insights.MEMORY_GROWTH_MIN_BYTES


def test_the_process_growing_most_is_named_and_tested_as_one_picked_of_many():
    flat = _proc(np.full(12, 300 * MIB), rank=0, pid=1)
    grows = _proc(300 * MIB + 16 * MIB * np.arange(12), rank=1, pid=2)
    g = _found(flat, grows)["memory_growth"]
    assert g["evidence"]["ranks"] == [1] and g["confidence"]["ranks"] == 1 and g["confidence"]["ranks_total"] == 2
    assert abs(g["confidence"]["p_value"] - 2 * 0.5 ** 10) < 1e-5  # (3 significant digits)


def test_memory_near_its_limit_is_found_and_below_it_or_without_a_limit_is_not():
    limit = 1 << 30
    near = _found(_proc(np.full(12, int(0.95 * limit)), limit))["memory_near_limit"]
    assert near["title"] == "device memory reaches 95% of its limit" and near["impact_ns_per_step"] is None
    assert near["evidence"]["figures"]["memory_limit_bytes"] == limit and near["confidence"]["steps"] == 12
    assert "micro-batch" in near["recommendation"]
    assert "memory_near_limit" not in _found(_proc(np.full(12, int(0.8 * limit)), limit))
    assert "memory_near_limit" not in _found(_proc(np.full(12, int(0.95 * limit))))


def test_a_cgroup_limit_is_named_in_the_finding_with_its_cgroup():
    """Decision 0182: the limit a container's cgroup sets is the one the finding names."""
    limit = 4 << 30
    p = _proc(np.full(12, int(0.93 * limit)), limit)
    p.update(memory_limit_source="cgroup v1 memory.limit_in_bytes", memory_limit_cgroup="/jobs/j1")
    near = _found(p)["memory_near_limit"]
    assert near["title"] == "device memory reaches 93% of its cgroup's memory limit (4.00 GiB)"
    figs = near["evidence"]["figures"]
    assert figs == {"device_mem_bytes": int(0.93 * limit), "memory_limit_bytes": limit,
                    "memory_limit_source": "cgroup v1 memory.limit_in_bytes", "memory_limit_cgroup": "/jobs/j1"}
    assert "container (cgroup)" in near["recommendation"]


def test_the_cpu_limit_is_the_cgroups_when_recorded_and_lower_else_the_hosts():
    from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb
    from neuron_explorer.view.process import HOST_LIMIT_SOURCE, cpu_memory_limit

    host = 24 << 30
    m = pb.HostMem(memory_limit=3 << 30, memory_limit_source="cgroup v2 memory.max", memory_limit_cgroup="/c")
    assert cpu_memory_limit(host, m) == {"memory_limit_bytes": 3 << 30, "memory_limit_source": "cgroup v2 memory.max",
                                         "memory_limit_cgroup": "/c"}
    hosts = {"memory_limit_bytes": host, "memory_limit_source": HOST_LIMIT_SOURCE}
    assert cpu_memory_limit(host, pb.HostMem()) == hosts  # none recorded (an older capture too)
    assert cpu_memory_limit(host, None) == hosts
    for lim, src in ((-5, "cgroup v2 memory.max"), (host, "cgroup v2 memory.max"), (1 << 62, "cgroup v2 memory.max"),
                     (3 << 30, "anything else"), (3 << 30, "")):  # damaged: not what a capture writes
        assert cpu_memory_limit(host, pb.HostMem(memory_limit=lim, memory_limit_source=src)) == hosts, (lim, src)
    odd = cpu_memory_limit(host, pb.HostMem(memory_limit=1, memory_limit_source="cgroup v1 memory.limit_in_bytes",
                                            memory_limit_cgroup="/a\nb\x1b" + "x" * 5000))
    assert odd["memory_limit_cgroup"].isprintable() and len(odd["memory_limit_cgroup"]) <= 1024


def test_the_recommendation_follows_the_category_that_grew():
    mem = 200 * MIB + 8 * MIB * np.arange(20)
    p = _proc(mem)
    p["device_mem_growth"] = {"tensors": 1 * MIB, "allocator_cache": int(mem[-1] - mem[0])}
    g = _found(p)["memory_growth"]
    assert "expandable_segments" in g["recommendation"]
    assert "memory_limit_bytes" not in g["evidence"]["figures"] and "limit" not in g["title"]


def test_memory_figures_from_damaged_counters_never_raise():
    """Series as a damaged host_mem.pb could hold them (the reader checks shapes, not values):
    times unsorted or far apart, values up to int64's extremes, limits of 0 or below."""
    rnd = np.random.default_rng(seed(159))
    for _ in range(examples(300)):
        n = int(rnd.integers(0, 12))
        ends = np.sort(rnd.integers(-10**6, 10**6, n))
        series = {}
        for j in range(int(rnd.integers(0, 4))):
            k = int(rnd.integers(0, 6))
            big = rnd.random() < 0.2
            vals = rnd.integers(0, 2**62 if big else 10**9, k)
            series[f"device_mem.nc{j}.{rnd.choice(['tensors', 'parameters', 'x.y'])}"] = (
                rnd.integers(-10**6, 10**6, k), vals)
        total, growth = insights.memory_per_step(series, ends)
        assert len(total) == n and all(isinstance(v, int) for v in growth.values())
        if n:
            limit = int(rnd.choice([0, -5, 1, 10**9, 2**62]))
            insights.analyse([_proc(total, limit)])


PROGRAM = REPO / "tests" / "programs" / "pathologies.py"


def _sampled_run(mode: str, cap: Path) -> str:
    """``pathologies.py mode 24`` captured into ``cap`` with a 20 ms sampler period; its stdout."""
    return run([sys.executable, str(PROGRAM), mode, "24"],
               clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(cap),
                         NEURON_EXPLORER_SAMPLE_PERIOD_MS="20", PYTHONPATH=os.environ.get("PYTHONPATH", ""))).stdout


def leak_capture(tmp_path_factory) -> tuple[Path, str]:
    """The capture of ``pathologies.py leak 24`` (20 ms sampler period) and its stdout, made once per
    test run for the tests that only read it: here and the Summary page's memory finding in
    ``tests/ui/test_browser_memory_insights.py`` (``shared_dir``, decision 0210)."""
    d, stdout = shared_dir(tmp_path_factory, "pathologies_leak_24", lambda d: _sampled_run("leak", d / "capture"))
    return d / "capture", stdout


@pytest.mark.slow
def test_a_loss_kept_every_step_shows_as_memory_growth_and_its_fix_does_not(tmp_path, tmp_path_factory):
    """``pathologies.py leak`` keeps each step's loss (and its graph); ``noleak`` keeps
    ``loss.item()``.  The growth per step is within 25% of what the graph saved per step (the
    program's own saved-tensors hook); the fixed program's memory is sampled and gets no memory
    finding.  A 20 ms sampler period: a sample in most steps."""
    docs, injected = {}, {}
    leak_cap, leak_out = leak_capture(tmp_path_factory)  # the Summary page's test reads the same run
    caps = {"leak": leak_cap, "noleak": tmp_path / "noleak"}
    env = clean_env(PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    for mode in ("leak", "noleak"):
        cap = caps[mode]
        stdout = leak_out if mode == "leak" else _sampled_run(mode, cap)
        injected[mode] = int(re.search(r"INJECTED_BYTES (\d+)", stdout).group(1))  # type: ignore[union-attr]
        out = cli("view", "-d", str(cap), "--output-format", "summary-json", "--output-file", "-", "--no-progress",
                  env=env, check=True)
        docs[mode] = json.loads(out.stdout)
    found = {i["id"]: i for i in docs["leak"]["insights"]}
    assert "memory_growth" in found, docs["leak"]["insights"]
    g = found["memory_growth"]
    figs = g["evidence"]["figures"]
    assert abs(figs["bytes_per_step"] - injected["leak"]) <= 0.25 * injected["leak"], (figs, injected)
    assert max(figs["growth_by_category"], key=lambda c: figs["growth_by_category"][c]) == "tensors"
    assert figs["memory_limit_bytes"] > 0 and figs["steps_to_limit"] > 0 and g["confidence"]["level"] == "high"
    per = docs["leak"]["steps"]["per_process"][0]
    assert per["memory_limit_source"] == "host memory (CPU substrate)"
    assert injected["noleak"] == 0
    flat = docs["noleak"]["steps"]["per_process"][0]["device_mem_bytes"]
    assert sum(m >= 0 for m in flat) >= 12
    assert not {"memory_growth", "memory_near_limit"} & {i["id"] for i in docs["noleak"]["insights"]}
    text = cli("view", "-d", str(caps["leak"]), "--output-format", "summary-text", "--output-file", "-",
               "--no-progress", env=env, check=True).stdout
    assert re.search(r"device memory grows by \d+\.\d MiB per step", text), text
    assert re.search(r"evidence: rank\(s\) -1, steps 1\.\.23,", text), text  # (the growing span)
