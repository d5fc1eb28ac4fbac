"""Every program of tests/programs/ under every setting a user can turn on, alone and all at once:
the program's output, exit status and traceback stay those of its unprofiled run, and every tool
counts exactly what the program ran (issue 29).

One test per (program, setting, check); the program runs once per (program, setting) whatever the
number of checks and workers (``runner.CellCache``).  The cells of ``cells.DEFAULT_PROGRAM`` run in
the default suite, the others are ``slow``.  Cells broken by a known issue carry
``xfail(strict=True)`` naming the issue 29 item (``cells.KNOWN``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .cells import DEFAULT_PROGRAM, KNOWN, PROGRAMS, REFERENCE_SETTING, SETTINGS, known_failures
from .checks import CHECKS, Ctx
from .runner import CellCache

SETTING = {s.name: s for s in SETTINGS}


def _params():
    for p in PROGRAMS:
        for s in SETTINGS:
            if not s.runs(p):
                continue
            for c in CHECKS:
                if not c.applies(p, s):
                    continue
                marks = [] if p.name == DEFAULT_PROGRAM else [pytest.mark.slow]
                known = known_failures(p.name, s.name, c.name)
                if known:
                    marks.append(pytest.mark.xfail(
                        strict=all(k.strict for k in known),
                        reason="; ".join(k.reason for k in known)))
                yield pytest.param(p, s, c, id=f"{p.name}-{s.name}-{c.name}", marks=marks)


@pytest.fixture(scope="session")
def cells(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> CellCache:
    """Cell results for the whole run: under xdist the workers share the directory above their own
    base temporary directory, so a cell one worker ran is read, not rerun, by the other.
    ``MATRIX_CELLS_DIR`` names a directory that keeps them across runs instead."""
    kept = os.environ.get("MATRIX_CELLS_DIR")
    if kept:  # results kept across runs, to study the cells again without running them
        return CellCache(Path(kept))
    base = tmp_path_factory.getbasetemp()
    root = base.parent if hasattr(request.config, "workerinput") else base
    return CellCache(Path(root) / "matrix-cells")


@pytest.mark.parametrize("program,setting,check", list(_params()))
def test_matrix(cells: CellCache, program, setting, check) -> None:
    base = cells.get(program, None)
    cell = cells.get(program, setting)
    ref = cells.get(program, SETTING[REFERENCE_SETTING]) if check.needs_reference else None
    check.run(Ctx(program, setting, cell, base, ref))


def test_the_covering_design_keeps_every_pair_and_every_known_limit() -> None:
    """Decision 0150: the cells dropped for the suite's time leave every program under the capture
    by both paths and under all tools at once, every device program under both device modes, every
    type filter on a program with collectives, and a cell for each documented limit (``KNOWN``)."""
    ran = {(p.name, s.name) for p in PROGRAMS for s in SETTINGS if s.runs(p)}
    torch_or_jax = [p.name for p in PROGRAMS if p.name != "jax_in_process"]
    for prog in torch_or_jax:
        assert {(prog, "system"), (prog, "all"), (prog, "pure_python")} <= ran, prog
    for prog in ("cnn", "ddp", "compiled_inductor", "compiled_aot_eager", "own_profiler", "jax"):
        modes = {SETTING[s].device for p, s in ran if p == prog and SETTING[s].device}
        assert modes == {"model", "session"}, (prog, modes)
    for s in SETTINGS:
        assert s.type_filter is None or ("ddp", s.name) in ran, s.name
        assert any(set_ == s.name for _, set_ in ran), s.name
    for k in KNOWN:
        assert any(k.matches(p, s, c.name) for p, s in ran for c in CHECKS
                   if c.applies(next(x for x in PROGRAMS if x.name == p), SETTING[s])), k.reason
