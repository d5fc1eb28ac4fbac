"""A SIGKILL at a random moment loses at most one flush period plus one write (decision 0111).

A child records events at a steady rate through the real capture sink (``sigkill_child.py``) and
is killed at random moments; what its session holds afterwards must be every event from the first
on, with nothing missing in between, and at least every event handed over more than one flush
period plus the longest write before the kill.  The CI test kills three 1.5M-event captures;
``bench/sigkill_capture.py`` runs the same check on 20M events and more.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer.analysis.reader import discover, load_session

from ..conftest import clean_env

CHILD = Path(__file__).with_name("sigkill_child.py")
# the flush thread waits for the interpreter lock held by the producing thread: a wake-up that
# late is the scheduler's, not the write's (checked: the margins the test prints)
SCHEDULING_SLACK_S = 0.25


@dataclass
class Kill:
    survived: int  # events in the session after the kill
    recorded: int  # events handed to the sink before the kill
    promised: int  # events handed over at least one period plus the longest write before it
    margin_s: float  # how much older than the kill the newest surviving event's block was
    warnings: list[str]


def kill_at(tmp: Path, total: int, rate: float, period: float, at: float) -> Kill:
    out, log = tmp / "out", tmp / "log.npy"
    tmp.mkdir(parents=True, exist_ok=True)
    env = clean_env(PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, str(CHILD), str(out), str(total), str(rate), str(period), str(log)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == b"started", p.stderr.read() if p.stderr else ""
        time.sleep(at)
        killed = time.monotonic_ns()
        p.send_signal(signal.SIGKILL)
    finally:
        p.kill()
        p.wait()
    arr = np.load(log, mmap_mode="r")
    k, longest = int(arr[0]), int(arr[1])
    ts, done = np.asarray(arr[2:2 + 2 * k:2]), np.asarray(arr[3:3 + 2 * k:2])
    cutoff = killed - int((period + SCHEDULING_SLACK_S) * 1e9) - longest
    promised = int(done[ts <= cutoff].max()) if (ts <= cutoff).any() else 0
    sessions = discover(str(out))
    if not sessions:
        return Kill(0, int(done.max()) if k else 0, promised, 0.0, [])
    s = load_session(sessions[0])
    a = s.events["a"]
    assert np.array_equal(a, np.arange(len(a))), "events missing in the middle or out of order"
    newest = np.searchsorted(done, len(a), side="left")
    margin = (killed - int(ts[min(newest, k - 1)])) / 1e9 if len(a) else 0.0
    return Kill(len(a), int(done.max()) if k else 0, promised, margin, s.warnings)


def check(tmp: Path, total: int, rate: float, period: float, kills: int, seed: int) -> list[Kill]:
    rng = random.Random(seed)
    results = []
    for i in range(kills):
        at = rng.uniform(1.5 * period + 0.5, total / rate + 0.5)
        r = kill_at(tmp / f"kill{i}", total, rate, period, at)
        print(f"kill at {at:.2f} s: {r.survived} of {r.recorded} events survived, {r.promised} promised, "
              f"newest surviving block {r.margin_s:.2f} s before the kill", file=sys.stderr)
        assert r.survived >= r.promised, r
        assert all("cut short" in w for w in r.warnings), r.warnings
        results.append(r)
    return results


@pytest.mark.slow
def test_a_sigkill_at_random_moments_loses_at_most_one_period_and_one_write(tmp_path):
    results = check(tmp_path, total=1_500_000, rate=500_000, period=0.5, kills=3,
                    seed=int(os.environ.get("NEURON_EXPLORER_FUZZ_SEED", "33")))
    assert any(r.promised > 0 for r in results)  # the bound was exercised, not vacuous
