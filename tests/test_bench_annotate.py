"""``bench/capture_instructions.py --annotate`` lists by function what the per-step slope is made
of: the steps' part of each run (the dump at their end) and the exit's, not the exit's alone."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import capture_instructions as ci  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("callgrind_annotate") is None, reason="valgrind is not installed")


def _callgrind_file(path: str, part: int, costs: dict[str, int]) -> None:
    """A callgrind output file of one part with the given exclusive costs."""
    total = sum(costs.values())
    body = "".join(f"fn=({i}) {name}\n{i} {ir}\n" for i, (name, ir) in enumerate(costs.items(), 1))
    with open(path, "w") as f:
        f.write(f"# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 7\ncmd: python\npart: {part}\n\n"
                f"positions: line\nevents: Ir\nsummary: {total}\n\nfl=(1) step.c\n{body}\ntotals: {total}\n")


def test_the_listing_covers_the_steps_and_the_exit(tmp_path):
    cg = str(tmp_path / "cg.system.300")
    _callgrind_file(cg + ".1", 1, {"ew_call": 30_000, "ring_push": 1_500, "both": 200})  # the steps
    _callgrind_file(cg, 2, {"ex_expand": 700, "both": 50})  # the exit
    ci._annotate(cg)
    assert ci._functions(cg + ".txt") == {"step.c:ew_call": 30_000, "step.c:ring_push": 1_500,
                                           "step.c:both": 250, "step.c:ex_expand": 700}


def test_a_run_without_the_steps_dump_lists_its_one_part(tmp_path):
    cg = str(tmp_path / "cg.plain.100")
    _callgrind_file(cg, 1, {"main": 9_000})
    ci._annotate(cg)
    assert ci._functions(cg + ".txt") == {"step.c:main": 9_000}
