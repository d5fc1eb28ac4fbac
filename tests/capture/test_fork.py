"""A forked child records nothing and never writes its parent's files (profile, NDET log, stats)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neuron_explorer.contracts import ndet_log as ndet_fmt, stats_files

from ..conftest import clean_env, monitor_heartbeat
from .helpers import sessions, type_counts

FORK_CHILD = Path(__file__).parent / "workloads" / "fork_child.py"


@pytest.mark.parametrize("mode,flush_ms", [
    ("os.fork", "600000"),  # only final writes: the child's would be a second session
    pytest.param("os.fork", "200", marks=pytest.mark.slow),  # periodic writes: the child's would replace
    pytest.param("mp-fork", "600000", marks=pytest.mark.slow),
    pytest.param("mp-fork", "200", marks=pytest.mark.slow),
])
def test_a_forked_child_leaves_the_parents_profile_log_and_stats_alone(tmp_path, mode, flush_ms):
    out, ndet, stats = tmp_path / "out", tmp_path / "ndet", tmp_path / "stats"
    ndet.mkdir()
    done = tmp_path / "child_done"
    n, m = 13, 5
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                    NEURON_RT_DBG_NDET_FLUSH_USEC="600000000", NEURON_RT_DBG_NDET_LOG_LOCATION=str(ndet),
                    NEURON_EXPLORER_STATS_DIR=str(stats), NEURON_EXPLORER_STATS_PERIOD_MS="50",
                    NEURON_EXPLORER_FLUSH_PERIOD_MS=flush_ms)
    with monitor_heartbeat(stats):  # a monitor present: the parent publishes every 50 ms (decision 0063)
        p = subprocess.run([sys.executable, str(FORK_CHILD), mode, str(n), str(m), str(done)], env=env,
                           capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"child executed {m}" in p.stdout and "parent done" in p.stdout
    if mode == "os.fork":  # the child outlives the parent: wait for its exit
        deadline = time.time() + 60
        while not done.exists() and time.time() < deadline:
            time.sleep(0.05)
        child_pid = int(done.read_text())
        while os.path.exists(f"/proc/{child_pid}") and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)

    (s,) = sessions(out)  # one profile: the parent's, never a second one written by the child
    assert type_counts(s)["nc_exec_running"] == n
    assert s.info.end_reason == "exit"
    (log,) = list(ndet.iterdir())
    rec = ndet_fmt.read_log(str(log)).records
    assert int((rec["kind"] == ndet_fmt.KIND_EXEC).sum()) == n
    # the parent left its final counters at exit, a monitor being announced (decision 0075): its own
    # n executions; the child never (re)wrote a stats file
    (left,) = [f for f in stats.iterdir() if f.suffix == ".json"]
    assert stats_files.is_final_head(stats_files.read_head(left))
    assert json.loads(left.read_bytes())["executions"]["completed"] == n
