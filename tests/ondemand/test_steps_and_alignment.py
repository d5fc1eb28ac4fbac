"""The pieces of on-demand capture that decide which steps a window holds, without processes:
the in-process step counter (``ondemand.StepCounter``, the offline rules of ``analysis.steps``) and
the command's alignment of several targets' counts (``attach.align``)."""

from __future__ import annotations

import numpy as np

from neuron_explorer.attach import align
from neuron_explorer.contracts import events as ev, ondemand as od
from neuron_explorer.ondemand import StepCounter


def pairs(*execs: tuple[int, int, int]) -> np.ndarray:
    """EXEC_PAIR rows for (model id, t0, t1)."""
    rows = np.zeros((len(execs), ev.RECORD_WIDTH), dtype=np.int64)
    for i, (mid, t0, t1) in enumerate(execs):
        rows[i, :6] = (ev.EXEC_PAIR, t0, t1, 1, mid, i)
    return rows


def test_optimizer_steps_count_the_optimizer_stepped_most_often():
    kinds = ["forward", "backward", "optimizer", "optimizer"]  # a GAN: two optimizers, one steps twice
    c = StepCounter(by_optimizer=True)
    c.add(pairs((0, 0, 1), (1, 1, 2), (2, 2, 3), (3, 3, 4), (3, 4, 5)), kinds)
    c.add(pairs((0, 10, 11), (1, 11, 12), (2, 12, 13), (3, 13, 14), (3, 14, 15)), kinds)
    assert c.ends() == [4, 5, 14, 15]


def test_root_steps_are_the_root_graph_executed_most_often_not_a_backward():
    kinds = ["forward", "backward", "forward"]
    c = StepCounter(by_optimizer=False)
    # the backward runs as often as the step; graph 2 (an eval) once; ties: the longer total
    assert c.add(pairs((0, 0, 5), (1, 5, 9), (2, 9, 10), (0, 10, 15), (1, 15, 19)), kinds)
    assert c.ends() == [5, 15]
    assert not c.add(pairs((2, 20, 21)), kinds)  # a graph that is not the step's: nothing moves
    assert c.add(pairs((0, 30, 35)), kinds) and c.ends() == [5, 15, 35]


def ans(arm: int, bounds: list[tuple[int, int]], step: int) -> od.Answer:
    return od.Answer(id="0" * 16, state="armed", arm_wall_ns=arm, boundaries=bounds, step=step)


def test_alignment_numbers_the_step_in_progress_at_one_instant_alike():
    # two ranks of one job, 100 ns steps ending within 3 ns of each other; rank b armed 2 steps later
    a = ans(0, [(i, 100 * i + 1) for i in range(1, 9)], 8)
    b = ans(250, [(i, 100 * (i + 2) + 3) for i in range(1, 7)], 6)
    got = align({0: a, 1: b})
    assert got is not None
    offs, period = got
    assert period == 100
    # step k of rank a ends at 100k+1; rank b's local count j ends at 100(j+2)+3: the same step k = j + 2
    assert offs[0] == 0 and offs[1] == 2
    assert align({0: ans(500, [], 0), 1: ans(0, [(1, 100)], 1)}) is None  # not enough boundaries yet
