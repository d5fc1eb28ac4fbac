"""``attach --ndet``: NDET-enabled processes write their flight recorder log when asked (the
Flight Recorder's dump on demand), for every event type NDET records, and ``neuron-det`` reads it.

A 2-rank DDP job runs with NDET on and a flush period of an hour, so the logs on disk are the ones
the request made; rank 1 stalls before an all-reduce (a hang) and the dump taken during the hang
names it.  A capture request to the same processes is refused with one line: their runtime was
started from the environment."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from installed import make_installed_python
from test_attach import APPS, attach, job_env

from tests.conftest import free_port


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> str:
    return make_installed_python(tmp_path_factory.mktemp("installed"))


@pytest.mark.slow
def test_attach_ndet_dumps_the_flight_recorder_now(python, tmp_path):
    env = job_env(tmp_path)
    logs = tmp_path / "ndet"
    logs.mkdir()
    env.update(NEURON_RT_DBG_NDET_FLUSH_USEC="3600000000", NEURON_RT_DBG_NDET_LOG_LOCATION=str(logs))
    release, out, hang = tmp_path / "release", tmp_path / "ddp", tmp_path / "hang"
    job = subprocess.Popen([python, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                            str(free_port()), str(APPS / "ddp_job.py"), str(release), "0", str(out), str(hang)],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            lines = [Path(f"{out}.{r}").read_text().splitlines() if Path(f"{out}.{r}").exists() else [] for r in (0, 1)]
            if all(len(x) > 5 for x in lines):
                break
            assert job.poll() is None, job.stderr.read()
            time.sleep(0.2)
        pids = [int(x[0].split()[1]) for x in lines]
        assert not any(logs.iterdir())  # nothing written yet: the flush period is an hour
        hang.touch()
        n = len(Path(f"{out}.1").read_text().splitlines())
        time.sleep(3.0)
        assert len(Path(f"{out}.1").read_text().splitlines()) <= n + 1  # rank 1 is stuck
        r = attach(python, env, "--pid", ",".join(map(str, pids)), "--ndet")
        assert r.returncode == 0, r.stdout + r.stderr
        written = re.findall(r"pid (\d+): NDET log written to (\S+)", r.stdout)
        assert sorted(int(p) for p, _ in written) == sorted(pids)
        assert all(Path(p).is_file() and Path(p).parent == logs for _, p in written)
        clean = {k: v for k, v in env.items() if not k.startswith("NEURON_")}
        det = subprocess.run([python, "-m", "neuron_explorer.ndet.cli", "--log-prefix", str(logs), "-o",
                              str(tmp_path / "trace.json")], env=clean, capture_output=True, text=True, timeout=300)
        assert re.search(r"culprit: rank 1 never entered all_reduce #\d+ of group \[0, 1\]; rank 0 stuck in it",
                         det.stdout), det.stdout + det.stderr
        # a capture request: refused in one line each (the runtime runs from the environment)
        r = attach(python, env, "--pid", ",".join(map(str, pids)), "--steps", "2", "-o", str(tmp_path / "o"))
        assert r.returncode == 1 and r.stderr.count("already runs neuron-explorer") == 2, r.stdout + r.stderr
    finally:
        release.touch()
        try:
            job.wait(120)
        finally:
            if job.poll() is None:
                job.kill()
    assert job.returncode == 0
