"""``NeuronConfig(precache_node_info=...)`` (issue #17, item 9): by default each graph's node info
(for an Inductor graph, its generated module and kernels, which the op recorder times) is gathered
when the profile starts, after warm-up, instead of inside the graph's first profiled execution;
``False`` leaves it to that execution.  Either way the device profile holds the same kernels."""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer.analysis.reader import discover, load_session
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb
from tests.conftest import clean_env, run

WORKLOAD = Path(__file__).parent / "workloads" / "precache.py"


def _ops(session_dir: str) -> list[str]:
    names = []
    for path in glob.glob(f"{session_dir}/*.ntff"):
        t = pb.DeviceTrace()
        t.ParseFromString(Path(path).read_bytes())
        names += [t.strings[i] for i in np.frombuffer(t.ops.name, "<i4")]
    return names


@pytest.mark.slow
def test_node_info_is_ready_before_the_profiled_iteration_unless_turned_off(tmp_path):
    p = run([sys.executable, str(WORKLOAD), str(tmp_path / "out")], clean_env(), timeout=600)
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["precached"]["ready_before_first_profiled_execution"] is True
    assert report["lazy"]["ready_before_first_profiled_execution"] is False
    for name, flag in (("precached", "1"), ("lazy", "0")):
        (sdir,) = discover(str(tmp_path / "out" / name))
        s = load_session(sdir)
        assert s.info.config["precache_node_info"] == flag
        kernels = [n for n in _ops(sdir) if n.startswith("cpp_")]
        assert kernels, _ops(sdir)  # the Inductor kernels were timed in both sessions
