"""``attach --device-profile`` (issue 32): the request's device profile mode is recorded.

An eager PyTorch job started with no variable set.  ``attach --steps 2 --device-profile model
--filter-type ...`` gets one device trace per graph holding its first execution in the window,
and only the event types asked; then ``attach --steps 3 --device-profile session`` (no filter: every
type, though the first request started the runtime) gets a device trace holding exactly the
window's executions (the 3 forwards, backwards and optimizer steps the host profile holds, nothing
of the margin profiled before the window's start was known), with the graphs' ``.neff`` files.
The job's losses equal an untriggered run's."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from installed import make_installed_python
from test_attach import attach, job_env, summary

from neuron_explorer.analysis.reader import load_device_trace, load_session
from neuron_explorer.contracts.layout import session_ntff_name

APPS = Path(__file__).parent / "apps"


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> str:
    return make_installed_python(tmp_path_factory.mktemp("installed"))


def run_job(python: str, env: dict, release: Path, min_steps: int = 0) -> subprocess.Popen:
    return subprocess.Popen([python, str(APPS / "idle_job.py"), str(release), str(min_steps)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_attach_session_device_profile_holds_the_window(python, tmp_path):
    env = job_env(tmp_path)
    job = run_job(python, env, tmp_path / "release")
    try:
        pid = int(job.stdout.readline())
        # first a model-mode window keeping executions only, then a session-mode one keeping all
        # (the runtime the first request started records every type: each window filters its own)
        out2 = tmp_path / "out2"
        r2 = attach(python, env, "--pid", str(pid), "--steps", "2", "--device-profile", "model",
                    "--filter-type", "nrt_execute,nc_exec_running", "-o", str(out2))
        assert r2.returncode == 0, r2.stdout + r2.stderr
        out = tmp_path / "out"
        r = attach(python, env, "--pid", str(pid), "--steps", "3", "--device-profile", "session", "-o", str(out))
        assert r.returncode == 0, r.stdout + r.stderr
        (tmp_path / "release").touch()
        stdout, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0 and err == ""
    done = json.loads(stdout.splitlines()[-1])
    m = re.search(r"profile written to (\S+) \(steps (-?\d+)-(-?\d+)\)", r.stdout)
    assert m and int(m[3]) - int(m[2]) + 1 == 3, r.stdout
    d = Path(m[1])
    ntffs = sorted(p.name for p in d.glob("*.ntff"))
    assert ntffs == [session_ntff_name(0, 0)], ntffs  # session mode: one per core
    assert sorted(d.glob("*.neff")), list(d.iterdir())  # the graphs' code beside it
    s = summary(python, env, out)
    (p,) = s["profiles"]
    (core,) = p["cores"]
    assert sorted(g["executions"] for g in core["top_graphs"]) == [3, 3, 3], core["top_graphs"]
    (dev,) = p["device_profiles"]
    assert dev["mode"] == "session" and dev["executions"] == core["executions"] == 9 and dev["ops"] > 0, dev
    ses = load_session(str(d))
    regions = (ses.events["type"] == ses.type_id("framework_op")).sum()
    assert regions > 3, regions  # the optimizer's record_function regions besides the step mark
    # the very executions of the host profile: the same ids, none of the margin before the window
    trace = load_device_trace(str(d / ntffs[0])).trace
    ex = ses.events["type"] == ses.type_id("nc_exec_running")
    host = sorted(ses.events[ses.arg("nc_exec_running", "exec_id")][ex].tolist())
    assert sorted(e.exec_id for e in trace.executions) == host, (trace.executions, host)
    # model mode: each graph's first execution inside the window, one file per graph
    m2 = re.search(r"profile written to (\S+) \(steps", r2.stdout)
    d2 = Path(m2[1])
    ses = load_session(str(d2))
    ex = ses.events["type"] == ses.type_id("nc_exec_running")
    col = ses.events[ses.arg("nc_exec_running", "exec_id")][ex]
    firsts = {}
    for mid, eid in zip(ses.events[ses.arg("nc_exec_running", "model_id")][ex].tolist(), col.tolist()):
        firsts[mid] = min(eid, firsts.get(mid, eid))
    kept = {ses.type_names[t] for t in set(ses.events["type"].tolist())}
    assert kept <= {"nrt_execute", "nc_exec_running", "framework_op"}, kept  # (framework_op: the step mark)
    got = [load_device_trace(str(f)).trace.executions for f in sorted(d2.glob("*.ntff"))]
    assert len(got) == 3 and all(len(e) == 1 for e in got), got
    assert sorted(e[0].exec_id for e in got) == sorted(firsts.values()), (got, firsts)
    # an untriggered run of as many steps prints the same losses
    base = run_job(python, env, tmp_path / "release", done["steps"])
    ref, _ = base.communicate(timeout=120)
    assert json.loads(ref.splitlines()[-1])["losses"] == done["losses"]

