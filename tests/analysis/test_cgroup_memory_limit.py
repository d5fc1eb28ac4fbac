"""``memory_near_limit`` against the limit of the process's own cgroup (decision 0182): a real
PyTorch program run in a child cgroup limited to 4 GiB (tests/cgroups.py) holds 92% of it in
filled tensors; the capture records the cgroup's limit (it is below the host's memory) and
``view``'s summary names ``memory_near_limit`` with that limit as its evidence.  Skipped, with the
reason, where no cgroup can be made (no memory controller, a read-only cgroup file system)."""

from __future__ import annotations

import json
import os
import re

import pytest

from neuron_explorer.analysis.reader import discover, load_session
from tests.cgroups import LIMIT, fill_capture
from tests.conftest import clean_env, cli_in_process as cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory):
    cap, info = fill_capture(tmp_path_factory)
    if "skip" in info:
        pytest.skip(info["skip"])
    return cap, info


def test_the_capture_records_the_cgroups_limit_below_the_hosts_memory(capture) -> None:
    cap, info = capture
    (sd,) = discover(str(cap))
    mem = load_session(sd).mem
    assert mem is not None and mem.memory_limit == LIMIT, mem
    want = "cgroup v2 memory.max" if info["kind"] == "v2" else "cgroup v1 memory.limit_in_bytes"
    assert mem.memory_limit_source == want
    assert mem.memory_limit_cgroup.endswith(info["cgroup_name"]), (mem.memory_limit_cgroup, info)


def test_summary_names_memory_near_limit_with_the_cgroup_limit_as_evidence(capture) -> None:
    cap, info = capture
    env = clean_env(PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    doc = json.loads(cli("view", "-d", str(cap), "--output-format", "summary-json", "--output-file", "-",
                         "--no-progress", env=env, check=True).stdout)
    found = {i["id"]: i for i in doc["insights"]}
    assert "memory_near_limit" in found, (info["stdout"], [(i["id"], i["title"]) for i in doc["insights"]])
    near = found["memory_near_limit"]
    figs = near["evidence"]["figures"]
    held = int(re.search(r"HELD (\d+)", info["stdout"]).group(1))  # type: ignore[union-attr]
    assert figs["memory_limit_bytes"] == LIMIT and figs["memory_limit_source"].startswith("cgroup "), figs
    assert figs["memory_limit_cgroup"].endswith(info["cgroup_name"]), figs
    # what the process held, seen by the device-memory counters (named tensors and the C heap's growth)
    assert held <= figs["device_mem_bytes"] <= held + (128 << 20), (figs, held)
    assert near["title"] == (f"device memory reaches {100 * figs['device_mem_bytes'] / LIMIT:.0f}% of its cgroup's "
                             f"memory limit ({LIMIT / (1 << 30):.2f} GiB)"), near["title"]
    assert "container (cgroup)" in near["recommendation"]
    assert near["evidence"]["end_ns"] > near["evidence"]["start_ns"] > 0
    per = doc["steps"]["per_process"][0]
    assert per["memory_limit_bytes"] == LIMIT and per["memory_limit_source"] == figs["memory_limit_source"]
    text = cli("view", "-d", str(cap), "--output-format", "summary-text", "--output-file", "-", "--no-progress",
               env=env, check=True).stdout
    assert re.search(r"device memory reaches 9\d% of its cgroup's memory limit \(4\.00 GiB\)", text), text
