"""``bench/capture_instructions.py --workload jax`` counts the steps' computations and nothing of
the warm-up's, and leaves out the idle pool workers' search for work.  JAX dispatches a jitted call
to a pool thread of XLA's CPU client and returns before it has run (even with
``JAX_CPU_ENABLE_ASYNC_DISPATCH=false``), so the warm-up's calls, among them the first with
oneDNN's one-time kernel generation, ran while counting started, early or late as the wall clock
fell (decision 0187).  The worker waits for them before it says ready."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import capture_instructions as ci  # noqa: E402

pytest.importorskip("jax")


def test_the_warm_up_has_finished_when_counting_starts(tmp_path, monkeypatch, capsys):
    from bench.jax_overhead import build_step

    log: list[tuple[str, bool]] = []
    step0, sync0 = build_step(16)
    state = next(c.cell_contents for c in step0.__closure__ if isinstance(c.cell_contents, list))

    def step():
        log.append(("step", state[0].is_ready()))  # were the calls before this one all done?
        step0()

    def sync():
        log.append(("sync", True))
        sync0()

    monkeypatch.setattr(ci, "_build", lambda workload, backend: (step, sync))
    monkeypatch.setattr(ci, "_check_tree", lambda: None)
    go = tmp_path / "go"
    go.touch()
    (tmp_path / "go.end").touch()  # the parent's answers, given beforehand
    monkeypatch.setenv("NE_CG_GO", str(go))
    ci.worker(5, "aot_eager", "jax", "plain")
    assert capsys.readouterr().out.split() == ["ready", "done"]
    warm = 11  # the warm-up's 10 calls and the one inside the peer's context
    assert [k for k, _ in log] == ["step"] * warm + ["sync"] + ["step"] * 5 + ["sync"]
    # counting starts with every warm-up computation done
    assert log[warm + 1] == ("step", True)


def test_the_idle_workers_search_is_left_out_with_what_it_calls(tmp_path):
    if shutil.which("callgrind_annotate") is None:
        pytest.skip("valgrind is not installed")
    get = "Eigen::ThreadPoolTempl<tsl::thread::EigenEnvironment>::MaybeGetTask(tsl::thread::EigenEnvironment::Task*)"
    cg = tmp_path / "cg.plain.50"
    cg.write_text(
        "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 7\ncmd: python\npart: 1\n\n"
        "positions: line\nevents: Ir\nsummary: 5800\n\nfl=(1) pool.cc\n"
        f"fn=(1) WorkerLoop(int)\n1 100\ncfn=(2) {get}\ncalls=5 1\n1 700\ncfn=(3) Execute()\ncalls=1 1\n1 5000\n"
        "fn=(2)\n1 200\ncfn=(4) GlobalSteal()\ncalls=3 1\n1 500\n"
        "fn=(4)\n1 500\nfn=(3)\n1 5000\n\ntotals: 5800\n")
    # the search (200) and the steals it made (500); the computation a worker runs (5000) stays
    assert ci._idle_ir(str(cg), ci.POOL_IDLE["jax"]) == 700
    assert ci._idle_ir(str(cg), ("::Nothing(",)) == 0


def test_every_jax_configuration_allocates_without_fastbins(tmp_path):
    """glibc's teardown consolidation of fastbins jumped by 3.4-4.5M instructions between runs of
    one configuration, a slope of up to 22k a step (decision 0190): JAX runs turn fastbins off,
    the unprofiled run and the peer as much as the profiled ones; other workloads keep glibc's
    defaults."""
    configs = ("plain", "system", "jax_profiler")
    tunables = {c: ci._env(c, str(tmp_path), "jax").get("GLIBC_TUNABLES") for c in configs}
    assert set(tunables.values()) == {"glibc.malloc.mxfast=0"}
    assert "GLIBC_TUNABLES" not in ci._env("plain", str(tmp_path), "compiled")
