"""Capture changes nothing a JAX program can see of ``jax.jit`` (issue 29 item 4): pickling
``jax.jit`` and partials of it, shipping a jitted function to a spawn worker, type names,
``isinstance``, signatures and ``__wrapped__`` are those of an unprofiled run, and the worker's own
capture records what it runs."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import clean_env, run

pytest.importorskip("jax", reason="JAX is not installed (pip install jax jaxlib)")
pytest.importorskip("cloudpickle", reason="the program ships a jitted function with cloudpickle, as Dask does")

from neuron_explorer.analysis.reader import discover, load_session  # noqa: E402

PROGRAM = Path(__file__).resolve().parent / "workloads" / "jit_introspect.py"


@pytest.mark.slow
def test_jax_jit_pickles_introspects_and_runs_in_a_spawn_worker_as_without_capture(tmp_path):
    plain = run([sys.executable, str(PROGRAM)], clean_env(), cwd=tmp_path)
    facts = json.loads(plain.stdout)
    assert facts["pickle_jit"] and facts["pickle_partial"] and facts["type"][0] == "PjitFunction"
    profiled = run([sys.executable, str(PROGRAM)], clean_env(NEURON_RT_INSPECT_ENABLE="1"), cwd=tmp_path)
    assert json.loads(profiled.stdout) == facts
    assert "Traceback" not in profiled.stderr, profiled.stderr
    sessions = [load_session(d) for d in discover(str(tmp_path / "output"))]
    assert len(sessions) == 2  # the program and its spawn worker, each under its own capture
    per_process = []
    for s in sessions:
        names = {m.id: m.name.split("@")[0] for m in s.models}
        ex = s.events["type"] == s.type_id("nc_exec_running")
        per_process.append(Counter(names[int(m)] for m in s.events["a"][ex]))
    # the worker ran `scale` twice: jitted there by the unpickled partial of jax.jit, and the jitted
    # function that came by cloudpickle (made again by the worker's own jax.jit, so recorded)
    assert sorted(per_process, key=len) == [Counter({"scale": 2}), Counter({"shift": 1, "decorated": 1})]
