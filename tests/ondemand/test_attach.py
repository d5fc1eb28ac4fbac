"""``neuron-explorer attach`` on real jobs started with no variable set (issue 32).

The jobs run in an interpreter where this checkout is installed as a wheel installs it
(``tests/monitor/installed.py``): torch's entry point and JAX's plugin start the watcher that takes
requests.  One 2-rank eager DDP job and one ``jax.jit`` job run at once; one ``attach --steps 5``
takes all three processes; each writes one profile of exactly 5 steps, the DDP ranks the same
steps (their all-reduces match one to one), the offline step analysis numbers them as ``attach``
did, and every printed loss equals an untriggered run's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from installed import make_installed_python

from tests.conftest import free_port

APPS = Path(__file__).parent / "apps"


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> str:
    return make_installed_python(tmp_path_factory.mktemp("installed"))


def job_env(tmp_path: Path) -> dict[str, str]:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700, exist_ok=True)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "XDG_", "PYTHONPATH"))}
    e.update(XDG_RUNTIME_DIR=str(xdg), OMP_NUM_THREADS="1")
    return e


class Jobs:
    """The DDP job (torchrun, 2 ranks) and the JAX job, with their per-process step logs."""

    def __init__(self, python: str, env: dict[str, str], d: Path, min_steps: tuple[int, int], released: bool) -> None:
        self.d, self.release = d, d / "release"
        d.mkdir(parents=True, exist_ok=True)
        if released:
            self.release.touch()
        self.logs = [d / "ddp.0", d / "ddp.1", d / "jax"]
        torchrun = [python, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port())]
        self.ddp = subprocess.Popen(torchrun + [str(APPS / "ddp_job.py"), str(self.release), str(min_steps[0]),
                                                str(d / "ddp")], env=env, stdout=subprocess.DEVNULL,
                                    stderr=open(d / "ddp.err", "w"))
        self.jax = subprocess.Popen([python, str(APPS / "jax_job.py"), str(self.release), str(min_steps[1])], env=env,
                                    stdout=open(self.logs[2], "w"), stderr=open(d / "jax.err", "w"))

    def lines(self, i: int) -> list[str]:
        try:
            return self.logs[i].read_text().splitlines()
        except FileNotFoundError:
            return []

    def pids(self) -> list[int]:
        return [int(self.lines(i)[0].split()[1]) for i in range(3)]

    def wait_stepping(self, n: int, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(len(self.lines(i)) > n for i in range(3)):
                return
            assert self.ddp.poll() is None and self.jax.poll() is None, (self.d / "ddp.err").read_text()
            time.sleep(0.2)
        raise AssertionError("the jobs did not start stepping")

    def finish(self, timeout: float = 180) -> tuple[list[dict[int, str]], int, int]:
        self.release.touch()
        rc = self.ddp.wait(timeout), self.jax.wait(timeout)
        losses = [{int(m[1]): m[2] for m in (re.fullmatch(r"step (\d+) loss (\S+)", ln) for ln in self.lines(i)) if m}
                  for i in range(3)]
        return losses, rc[0], rc[1]

    def kill(self) -> None:
        """Release the jobs, then end what is left; torchrun's ranks also exit when it is gone."""
        self.release.touch()
        for p in (self.ddp, self.jax):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def attach(python: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "neuron_explorer", "attach", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def summary(python: str, env: dict, out: Path) -> dict:
    r = subprocess.run([python, "-m", "neuron_explorer", "view", "-d", str(out), "--output-format", "summary-json",
                        "--output-file", str(out / "summary.json")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_attach_captures_the_same_five_steps_and_changes_no_result(python, tmp_path):
    env = job_env(tmp_path)
    jobs = Jobs(python, env, tmp_path / "triggered", (0, 0), released=False)
    try:
        jobs.wait_stepping(3)
        pids = jobs.pids()
        out = tmp_path / "out"
        r = attach(python, env, "--pid", ",".join(map(str, pids)), "--steps", "5", "-o", str(out))
        assert r.returncode == 0, r.stdout + r.stderr
        losses, rc_ddp, rc_jax = jobs.finish()
    finally:
        jobs.kill()
    assert (rc_ddp, rc_jax) == (0, 0)
    # one line per process, its profile and the steps it holds
    said = {int(m[1]): (m[2], int(m[3]), int(m[4])) for m in
            re.finditer(r"pid (\d+): profile written to (\S+) \(steps (-?\d+)-(-?\d+)\)", r.stdout)}
    assert sorted(said) == sorted(pids), r.stdout
    for d, first, last in said.values():
        assert last - first + 1 == 5 and Path(d).is_dir() and Path(d).parent.parent == out
    assert said[pids[0]][1:] == said[pids[1]][1:]  # the ranks: the same step numbers
    s = summary(python, env, out)
    by_pid = {p["pid"]: p for p in s["profiles"]}
    assert sorted(by_pid) == sorted(pids) and all(p["end_reason"] == "window" for p in by_pid.values())
    for pid in pids[:2]:  # each rank: 5 forwards, 5 backwards, 5 optimizer steps, 10 all-reduces
        (core,) = by_pid[pid]["cores"]
        assert sorted(g["executions"] for g in core["top_graphs"]) == [5, 5, 5], core["top_graphs"]
        assert any(g["model_name"].startswith("SGD_") for g in core["top_graphs"])
        assert core["collectives"] == 10  # DDP's bucket and the job's own stop flag, each step
    assert s["stragglers"]["collectives_compared"] == 10  # the same all-reduces on both ranks
    (core,) = by_pid[pids[2]]["cores"]
    assert [(g["model_name"].split("@")[0], g["executions"]) for g in core["top_graphs"]] == [("train_step", 5)]
    assert core["executions"] == 5
    # the offline analysis (analysis.steps) finds the same 5 steps, numbered as attach numbered them
    found = {p["pid"]: (p["method"], p["number"]) for p in s["steps"]["per_process"]}
    for pid in pids:
        first, last = said[pid][1:]
        assert found[pid] == ("optimizer" if pid != pids[2] else "cycle", list(range(first, last + 1)))
    # an untriggered run of as many steps prints the same losses, step by step
    assert len(losses[0]) == len(losses[1])
    base = Jobs(python, env, tmp_path / "untriggered", (len(losses[0]) - 10, len(losses[2]) - 10), released=True)
    try:
        ref, rc_ddp, rc_jax = base.finish()
    finally:
        base.kill()
    assert (rc_ddp, rc_jax) == (0, 0)
    assert ref == losses


@pytest.mark.slow
def test_jobs_tagged_for_neuron_monitor_are_attached_by_their_tag(python, tmp_path):
    """NEURON_PROCESS_TAG starts the runtime at start-up, for neuron-monitor's counters: its rings
    were kept at one event, and `attach` refused every tagged process ("already runs
    neuron-explorer"), `--tag` included (decision 0216)."""
    env = job_env(tmp_path)
    release, out = tmp_path / "release", tmp_path / "out"
    jobs = [subprocess.Popen([python, str(APPS / "idle_job.py"), str(release)], env={**env, "NEURON_PROCESS_TAG": tag},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for tag in ("rank0", "rank1", "other")]
    try:
        pids = [int(p.stdout.readline()) for p in jobs]
        r = attach(python, env, "--tag", "rank[0-1]", "--steps", "3", "-o", str(out))
        assert r.returncode == 0, r.stdout + r.stderr
        said = {int(p): d for p, d in re.findall(r"pid (\d+): profile written to (\S+) \(steps", r.stdout)}
        assert sorted(said) == sorted(pids[:2]), r.stdout
    finally:
        release.touch()
        ends = [p.communicate(timeout=60) for p in jobs]
    assert [p.returncode for p in jobs] == [0, 0, 0], [e for _, e in ends]
    s = summary(python, env, out)
    assert sorted(p["pid"] for p in s["profiles"]) == sorted(pids[:2])
    assert all(p["end_reason"] == "window" for p in s["profiles"])
