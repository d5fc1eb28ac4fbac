"""The one-process benchmarks (``--same-process``) compare blocks of steps with the profiler's
hooks working and paused: their figure means something only if the paused steps really record
nothing and the working ones record what a user's steps do."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from .capture.helpers import sessions, type_counts
from .conftest import clean_env, shared_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = """
import sys, torch
sys.path.insert(0, {root!r})
from bench import eager_overhead, ndet_bench
torch.set_num_threads(1)
step = eager_overhead.build_step(torch, "mlp")
pause = ndet_bench.pauser(torch, null={null}, module_call=True)
for phase, n in ((False, 3), (True, {paused}), (False, 2)):
    pause(phase)
    for _ in range(n):
        step()
print("ok")
"""


def _profile(tmp_path, name: str, paused: int, null: bool = False):
    out = tmp_path / name
    p = subprocess.run([sys.executable, "-c", SCRIPT.format(root=ROOT, paused=paused, null=null)],
                       env=clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out)),
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-3000:]
    (s,) = sessions(out)
    return type_counts(s)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Counter:
    """Five steps, nothing paused: once per test run for both tests (``shared_dir``: whichever xdist
    worker asks first)."""
    return Counter(shared_dir(tmp_path_factory, "bench_pause_plain", lambda d: dict(_profile(d, "five", paused=0)))[1])


@pytest.mark.parametrize("null", [False, True], ids=["paused", "a-a-control"])
def test_eager_steps_in_paused_blocks_record_nothing_and_the_others_record_as_a_user_s(tmp_path, plain, null):
    mixed = _profile(tmp_path, "mixed", paused=4, null=null)  # the same five, four paused ones between
    assert plain["nrt_execute"] == 15  # a root module call, its backward, an optimizer step: per step
    assert plain["framework_op"] >= 5  # the step's record_function region at least
    for kind in ("nrt_execute", "nc_exec_running", "framework_op"):
        # the A/A control pauses nothing: its four extra steps are recorded like the others
        assert mixed[kind] == plain[kind] * (9 if null else 5) // 5, (kind, plain, mixed)
