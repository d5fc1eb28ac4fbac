"""A capture-time type filter keeps every event of the types it keeps (issue 29, item 2).

The promise: a capture taken with ``NEURON_RT_INSPECT_EVENT_FILTER_TYPE`` equals the unfiltered
capture of the same job restricted to the kept types, counted per event name and rank.  Each
recording mechanism produces several types, of both groups (an execution: ``nrt_execute`` and
``nc_exec_running``; a collective: ``cc_running``, ``hw_notify``, ``kbl_exec_wait``), so it must run
when any of them is kept, not only when one particular type is (docs/decisions/0073).

These tests run a deterministic 2-rank gloo job (``workloads/filter_ddp.py``: an eager DDP phase
and a compiled ``aot_eager`` phase; its two ranks started as plain processes, ``conftest.ranks``) once
unfiltered per path (the C extension, the pure-Python fallback) and once per filter, each filter on
one path to keep the launches few (the hardware group on the C path is the matrix's: decision 0152),
and a plain JAX jit loop the same way; the filter logic itself is tested in process in ``test_filters.py``.  NDET,
another tool, keeps what it records whatever the capture's filter.  The counts are keyed finer
than the name where the event says more: by the graph's backend and kind for events naming a model
(an eager optimizer step is not a compiled forward), by the operation for collectives.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer.contracts.env import parse_type_filter

from ..conftest import clean_env, free_port, jit_loop_capture, ranks, run, shared_dir
from ..ndet.helpers import load_trace, ndet_env, neuron_det
from .helpers import sessions

pytestmark = pytest.mark.slow

WORKLOAD = Path(__file__).parent / "workloads" / "filter_ddp.py"
JAX_LOOP = Path(__file__).resolve().parent.parent / "jax" / "workloads" / "jit_loop.py"


def _keyed_counts(out: Path) -> dict[int, Counter]:
    """rank -> Counter of events by name, with the graph's backend and kind for events naming a
    model and the operation for collectives and waits on them."""
    by_rank: dict[int, Counter] = {}
    for s in sessions(out):
        models = {m.id: f"{m.backend} {m.kind}" for m in s.models}
        c: Counter = Counter()
        types = s.events["type"] if s.num_events else np.empty(0, dtype=np.int64)
        for tid in np.unique(types):
            name = s.type_names[int(tid)]
            sel = types == tid
            mcol, ocol = s.arg(name, "model_id"), s.arg(name, "op_str")
            if mcol is None and ocol is None:
                c[name] += int(sel.sum())
                continue
            mids = s.events[mcol][sel].tolist() if mcol else [-1] * int(sel.sum())
            ops = s.events[ocol][sel].tolist() if ocol else [0] * int(sel.sum())
            for mid, op in zip(mids, ops):  # (a wait names a graph or a collective, or neither: a synchronize)
                what = models.get(mid, f"model {mid}") if mid >= 0 else s.strings[op] if op else "sync"
                c[f"{name} [{what}]"] += 1
        assert s.info.rank not in by_rank
        by_rank[s.info.rank] = c
    return by_rank


def _restricted(counts: dict[int, Counter], kept: frozenset[str]) -> dict[int, Counter]:
    return {r: Counter({k: n for k, n in c.items() if k.split(" [")[0] in kept}) for r, c in counts.items()}


def _ddp(out: Path, value: str | None, pure_python: bool) -> tuple[dict[int, Counter], list[str]]:
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out))
    if value is not None:
        env["NEURON_RT_INSPECT_EVENT_FILTER_TYPE"] = value
    if pure_python:
        env["NEURON_EXPLORER_PURE_PYTHON"] = "1"
    p = ranks(2, WORKLOAD, ["3"], env)  # two plain rank processes: torchrun's launcher is not the subject
    printed = re.findall(r"rank \d+: steps=\d+ eager_loss=\S+ compiled_loss=[-\d.]+", p.stdout)
    return _keyed_counts(out), sorted(printed)


PATHS = {"c": False, "python": True}


@pytest.fixture(scope="module")
def unfiltered(tmp_path_factory):
    """The unfiltered capture of the DDP job per path (C extension, pure Python), made once per run
    whichever xdist worker asks first (``shared_dir``: the filters' tests may run on several)."""
    made: dict[str, tuple] = {}

    def get(path: str) -> tuple[dict[int, Counter], list[str]]:
        if path not in made:
            d, printed = shared_dir(tmp_path_factory, f"filter_ddp_unfiltered_{path}",
                                    lambda d: _ddp(d / "out", None, PATHS[path])[1])
            made[path] = _keyed_counts(d / "out"), printed
        return made[path]

    return get


def _check_sanity(full: dict[int, Counter]) -> None:
    """What the comparison relies on: both ranks, and every mechanism at work in both phases."""
    assert sorted(full) == [0, 1]
    for c in full.values():
        for key in ("nc_exec_running [eager forward]", "nc_exec_running [eager backward]",
                    "nc_exec_running [eager optimizer]", "nc_exec_running [aot_eager forward]",
                    "nc_exec_running [aot_eager backward]", "nrt_model_switch [eager optimizer]",
                    "hw_notify [all_reduce]", "kbl_exec_wait [all_reduce]", "cc_exec_barrier [barrier]",
                    "framework_op", "model_load [eager optimizer]"):
            assert c[key] > 0, (key, c)


# each group, a group minus a type and a group plus types, on each path; a single type is checked
# by test_filters.py.  'hardware' and 'hardware,^cc_exec' on the C path are the matrix's cells of
# its DDP program (collectives) and of its compiled_aot_eager program (decision 0152): here they
# would run the same promise on the same kind of job a second time
@pytest.mark.parametrize("path,value", [
    ("c", "software,^model_load"),
    ("python", "software"), ("python", "hardware,tensor_read,tensor_write"),
])
def test_a_filtered_ddp_capture_is_the_unfiltered_one_restricted_to_the_kept_types(unfiltered, tmp_path, path,
                                                                                   value):
    full, full_out = unfiltered(path)
    _check_sanity(full)
    got, got_out = _ddp(tmp_path / "out", value, PATHS[path])
    assert len(got_out) == 2 and got_out == full_out  # the filter changes nothing the program prints
    want = _restricted(full, parse_type_filter(value))
    for rank in (0, 1):
        missing = want[rank] - got[rank]
        extra = got[rank] - want[rank]
        assert not missing and not extra, f"rank {rank}, filter {value!r}: missing {dict(missing)}, " \
                                          f"not kept but recorded {dict(extra)}"


def test_a_filtered_jax_capture_is_the_unfiltered_one_restricted_to_the_kept_types(tmp_path, tmp_path_factory):
    pytest.importorskip("jax", reason="JAX is not installed")

    def capture(value: str) -> dict[int, Counter]:
        out = tmp_path / value.replace(",", "_").replace("^", "not_")
        env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out / "o"),
                        NEURON_RT_INSPECT_EVENT_FILTER_TYPE=value)
        out.mkdir()
        run([sys.executable, str(JAX_LOOP), "4"], env, cwd=out, timeout=180)
        return _keyed_counts(out / "o")

    # unfiltered: the JAX runtime tests' run of the same loop (the variable alone), made once per test run
    full = _keyed_counts(jit_loop_capture(tmp_path_factory, 4)[0] / "output")
    (c,) = full.values()  # one process
    assert c["nc_exec_running [xla jit]"] > 0 and c["nrt_model_switch [xla jit]"] > 0, full
    for value in ("hardware", "runtime_execute", "nrt_model_switch"):
        assert capture(value) == _restricted(full, parse_type_filter(value)), value


def test_ndet_keeps_every_collective_whatever_the_capture_filter_keeps(tmp_path):
    """NDET's flight recorder is another tool: a capture filter with no collective type in it
    (``nrt_execute``) once left the collectives unhooked, and NDET's log without them."""
    logs = tmp_path / "logs"
    logs.mkdir()
    env = ndet_env(logs, NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"),
                   NEURON_RT_INSPECT_EVENT_FILTER_TYPE="nrt_execute", MASTER_PORT=str(free_port()))
    run([sys.executable, str(Path(__file__).parent / "workloads" / "waits.py")], env)
    (s,) = sessions(tmp_path / "out")
    assert set(_keyed_counts(tmp_path / "out")[s.info.rank]) == {"nrt_execute [aot_eager forward]"}
    r = neuron_det("--log-prefix", str(logs), "-o", str(tmp_path / "t.json"))  # in this process (decision 0173)
    assert r.returncode == 0, r.stdout + r.stderr
    cats = Counter(e.get("cat") for e in load_trace(tmp_path / "t.json"))
    assert cats["cc"] == 2 and cats["exec"] >= 3, cats  # waits.py: two all_reduces, three calls of its graph
