"""A real 2-rank DDP capture where rank 1's ring overwrote its first steps (it records many more
events per step than rank 0, under a small ring): the summary and ``diff`` number both ranks'
steps as the job's, by their all-reduces' sequence numbers (``analysis.stepalign``), so every
per-step comparison across ranks and across profiles pairs the same step."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import (
    REPO,
    clean_env,
    cli_in_process as cli,  # summaries and diffs in this process: they read the answer (decision 0173)
    ranks,
    shared_dir,
)

PROGRAM = REPO / "tests" / "programs" / "ring_drift.py"
STEPS = 30
pytestmark = pytest.mark.slow


def _capture(cap: Path, **extra: str) -> None:
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(cap),
                    PYTHONPATH=os.environ.get("PYTHONPATH", ""), **extra)
    p = ranks(2, PROGRAM, [str(STEPS), "60"], env)  # plain rank processes: the launcher is not the subject (0193)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count(f"ran {STEPS} steps") == 2


@pytest.fixture(scope="module")
def caps(tmp_path_factory) -> tuple[Path, Path]:
    """(whole, drifted): the same job with the default ring and with a 500-event ring, made once per
    test run whichever xdist worker asks first (``shared_dir``: a module fixture is made once per
    worker that runs one of its tests, decision 0210); the tests only read them."""
    def build(root: Path) -> None:
        _capture(root / "whole")
        _capture(root / "drifted", NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC="500")

    root = shared_dir(tmp_path_factory, "ring_drift_captures", build)[0]
    return root / "whole", root / "drifted"


def test_the_summary_numbers_a_rank_that_lost_its_first_steps_as_the_job(caps, tmp_path):
    out = cli("view", "-d", str(caps[1]), "--output-format", "summary-json", "--output-file", str(tmp_path / "s.json"),
              "--no-progress", env=clean_env(PYTHONPATH=os.environ.get("PYTHONPATH", "")), check=True)
    assert out.returncode == 0
    doc = json.loads((tmp_path / "s.json").read_text())
    lost = {p["rank"]: sum(p["dropped_events"].values()) for p in doc["profiles"]}
    assert lost[1] > 1000 and lost[1] > 10 * lost[0], lost  # the loss is counted, not hidden
    per = {p["rank"]: p for p in doc["steps"]["per_process"]}
    assert sorted(per) == [0, 1]
    # rank 0 kept every step; rank 1 only the last few, which keep the job's numbers
    assert per[0]["number"][0] == 0 and "renumbered_by" not in per[0]
    assert per[1]["renumbered_by"] > 0 and per[1]["number"][0] == per[1]["renumbered_by"]
    for p in per.values():
        assert p["number"][-1] == STEPS - 1 and all(0 <= n < STEPS for n in p["number"])
    both = [r["number"] for r in doc["steps"]["per_step"] if r["ranks"] == 2]
    assert both and min(both) >= per[1]["renumbered_by"] and max(both) == STEPS - 1
    text = cli("view", "-d", str(caps[1]), "--output-format", "summary-text", "--output-file", "-", "--no-progress",
               env=clean_env(PYTHONPATH=os.environ.get("PYTHONPATH", "")), check=True).stdout
    assert f"numbered by their collectives (a capture that lost its first steps): rank 1 +{per[1]['renumbered_by']}" \
        in text, text


def test_diff_pairs_the_same_steps_when_one_side_lost_its_first_ones(caps, tmp_path):
    out = cli("diff", str(caps[0]), str(caps[1]), "--format", "json", "--output-file", str(tmp_path / "d.json"),
              env=clean_env(PYTHONPATH=os.environ.get("PYTHONPATH", "")))
    assert out.returncode == 0, out.stderr
    assert "candidate: step numbers shifted" in out.stderr and "rank 1 by +" in out.stderr, out.stderr
    shift = int(out.stderr.split("rank 1 by +")[1].split()[0].rstrip(","))
    per = json.loads((tmp_path / "d.json").read_text())["step"]["per_step"]
    pairs = list(zip(per["step"], per["rank"]))
    assert sorted(s for s, r in pairs if r == 1) == list(range(shift, STEPS))
    assert sorted(s for s, r in pairs if r == 0) == list(range(STEPS))
