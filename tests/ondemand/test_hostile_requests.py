"""A malformed or hostile on-demand request changes nothing in the job (issue 32, item 6): the
process answers with one line saying why (or, for a file it cannot trust, not at all), prints
nothing, starts no runtime, and exits as it would have."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from installed import make_installed_python
from test_attach import job_env

from neuron_explorer.contracts import ondemand as od

APPS = Path(__file__).parent / "apps"


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> str:
    return make_installed_python(tmp_path_factory.mktemp("installed"))


def ask(d: Path, pid: int, data: bytes | None, make=None, timeout: float = 8.0) -> od.Answer | None:
    req, ans = Path(od.request_path(d, pid)), Path(od.answer_path(d, pid))
    for p in (req, ans):
        if p.is_symlink() or p.exists():
            p.unlink()
    time.sleep(1.2)  # the watcher sees the file gone (a new one is a new request)
    if make is not None:
        make(req)
    else:
        od.write_private(str(req), data)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ans.exists():
            return od.parse_answer(ans.read_bytes())
        time.sleep(0.1)
    return None


@pytest.mark.slow
def test_hostile_requests_change_nothing(python, tmp_path):
    env = job_env(tmp_path)
    job = subprocess.Popen([python, str(APPS / "idle_job.py"), str(tmp_path / "release")], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid = int(job.stdout.readline())
        d = Path(env["XDG_RUNTIME_DIR"]) / "neuron-explorer" / "on-demand"
        deadline = time.monotonic() + 60
        while not d.is_dir() and time.monotonic() < deadline:
            od.check_private_dir(d, create=True)
        start = od.process_start_time(pid)
        good = od.Request(id="00000000000000aa", pid=pid, start_time=start, steps=5, output_dir=str(tmp_path / "o"))

        def req(**kw) -> bytes:
            return od.encode(od.Request(**{**good.__dict__, **kw}))

        cases = [
            (b"\x00\xff not json", "not JSON"),
            (b'{"format": "neuron-explorer-on-demand/1", "id": "00000000000000bb", "bogus": 1}', "unknown field"),
            (req(pid=pid + 1), "not this one"),
            (req(start_time=start + 1), "not this one"),  # the pid reused by another process
            (req(output_dir="relative/dir"), "absolute path"),
            (req(steps=0), "[1, 1000000]"),
            (req(capture={"NEURON_RT_INSPECT_EVENT_FILTER_TYPE": "no_such_type"}), "no_such_type"),
            (req(capture={"NEURON_RT_INSPECT_ENABLE": "1"}), "is not one of"),
            (req(phase="record"), "no armed request"),
            (req(phase="ndet"), "does not run NDET"),
        ]
        for data, why in cases:
            a = ask(d, pid, data)
            assert a is not None and a.state == "error" and why in a.error, (data[:80], a)
            assert "\n" not in a.error
        # files it cannot trust get no answer at all
        assert ask(d, pid, None, make=lambda p: os.symlink(tmp_path / "elsewhere", p), timeout=3) is None
        assert ask(d, pid, b"{" + b" " * od.MAX_FILE_BYTES + b"}", timeout=3) is None
        assert not (tmp_path / "o").exists()
        (tmp_path / "release").touch()
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0
    assert err == ""  # nothing in the job's output
    done = json.loads(out.splitlines()[-1])
    assert done["runtime"] is False and done["hooked"] is False and done["steps"] > 0  # no runtime, no hook
