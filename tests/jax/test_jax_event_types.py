"""The spec's event-type filter on a JAX profile (issue #17, item 2): ``runtime_execute`` is PjRt's
share of each execute call before the computation starts on its core, and each
``block_until_ready`` is a ``kbl_exec_wait``; ``device_exec`` needs a device stream (GPU hosts)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.capture.helpers import events_of, sessions, type_counts
from tests.conftest import clean_env, run

pytest.importorskip("jax", reason="JAX is not installed (pip install jax jaxlib)")

WORKLOADS = Path(__file__).resolve().parent / "workloads"


def test_the_spec_filter_example_and_waits_on_a_jax_profile(tmp_path):
    env = clean_env(NEURON_RT_INSPECT_EVENT_FILTER_TYPE="model_load,nrt_execute,runtime_execute,"
                                                         "nc_exec_running,kbl_exec_wait,device_exec")
    p = run([sys.executable, str(WORKLOADS / "spec_basic.py"), "1", "3"], env, cwd=tmp_path, timeout=180)
    (s,) = sessions(tmp_path / "output")
    counts = type_counts(s)
    assert {"model_load", "nrt_execute", "runtime_execute", "nc_exec_running", "kbl_exec_wait"} <= set(counts)
    assert counts["runtime_execute"] == counts["nrt_execute"] == counts["nc_exec_running"] >= 6
    host, share, core = (events_of(s, n) for n in ("nrt_execute", "runtime_execute", "nc_exec_running"))
    np.testing.assert_array_equal(share["start_ns"], host["start_ns"])
    assert (share["end_ns"] <= host["end_ns"]).all()
    handed = core["start_ns"] > host["start_ns"]  # the core started inside the call: the share ends there
    assert (share["end_ns"][handed] == np.minimum(core["start_ns"], host["end_ns"])[handed]).all()
    waits = events_of(s, "kbl_exec_wait")
    assert len(waits["b"]) == 3  # one block_until_ready per step
    # each names the execution it waited behind: the step's last one, started before the wait ended
    assert set(waits["b"].tolist()) <= set(core["b"].tolist())
    assert "device_exec" not in counts and "device_exec is never recorded here" in p.stderr
