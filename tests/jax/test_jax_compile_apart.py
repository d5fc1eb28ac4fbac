"""A JAX function's compile is its model's load, never part of an execution (issue 29 item 11c:
the first execution held its 4.7 s compile, so summary-text said the mean `update` took 50 ms and
was 97% compile).  docs/decisions/0077-jax-compile-apart.md."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import clean_env, run

pytest.importorskip("jax", reason="JAX is not installed (pip install jax jaxlib)")

from neuron_explorer.analysis.reader import discover, load_session  # noqa: E402

PROGRAM = Path(__file__).resolve().parent / "workloads" / "compile_heavy.py"


def _spans(s, name: str, model_id: int) -> np.ndarray:
    sel = (s.events["type"] == s.type_id(name)) & (s.events["a"] == model_id)
    return np.stack([s.events["start_ns"][sel], s.events["end_ns"][sel]], axis=1)


@pytest.mark.slow
def test_no_execution_of_a_jitted_function_holds_its_compile(tmp_path):
    run([sys.executable, str(PROGRAM)], clean_env(NEURON_RT_INSPECT_ENABLE="1"), cwd=tmp_path)
    (d,) = discover(str(tmp_path / "output"))
    s = load_session(d)
    (model,) = [m for m in s.models if m.name.startswith("heavy@")]
    loads = _spans(s, "model_load", model.id)
    backend = _spans(s, "nrt_load", model.id)
    assert len(loads) == len(backend) == 2  # the first call, and the call on a new shape
    for (ls, le), (bs, be) in zip(sorted(map(tuple, loads)), sorted(map(tuple, backend))):
        assert ls <= bs <= be <= le  # the backend compile within the load
    for kind in ("nrt_execute", "nc_exec_running"):
        execs = _spans(s, kind, model.id)
        assert len(execs) == 5
        for es, ee in execs:  # every execution lies outside every load: none holds a compile
            assert all(ee <= ls or es >= le for ls, le in loads), (kind, es, ee, loads)
    # and the loads are the compiles of the calls: each ends where its execution starts
    starts = sorted(_spans(s, "nrt_execute", model.id)[:, 0])
    assert {int(le) for _, le in loads} <= {int(x) for x in starts}
