"""A small real capture shared by the tests of hostile input, and a runner that bounds what a
command may cost (memory, time) and measures what it did cost."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..conftest import EXAMPLES, clean_env, shared_dir, torchrun


@pytest.fixture(scope="session")
def small_capture(tmp_path_factory) -> Path:
    """Two ranks of a real torchrun job (collectives, so string arguments; device profiles, so
    .ntff and .neff files): every capture file kind, a few KB each.  Made once per run, whichever
    xdist worker asks first (``shared_dir``): the tests copy it before changing anything."""
    def build(d: Path) -> None:
        out = d / "output"
        env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                        NEURON_RT_INSPECT_DEVICE_PROFILE="1")
        torchrun(2, EXAMPLES / "train.py", ["--steps", "2", "--no-ddp"], env)
        sessions = sorted(p.parent for p in out.glob("*/*/trace_info.pb"))
        assert len(sessions) == 2
        for s in sessions:
            for kind in ("ntrace.pb", "trace_info.pb", "cpu_util.pb", "host_mem.pb", "*.ntff", "*.neff"):
                assert list(s.glob(kind)), f"{s} has no {kind}"

    return shared_dir(tmp_path_factory, "view_small_capture", build)[0] / "output"


def damaged_session(src: Path) -> Path:
    """One more session whose trace_info.pb is garbage: every run must skip it with one warning."""
    d = src / "i-damaged_pid_4242" / "20260101T000000Z"
    d.mkdir(parents=True)
    (d / "trace_info.pb").write_bytes(b"\xff" * 64)
    (d / "ntrace.pb").write_bytes(b"\x0a\xff\xff\xff\xff\x0f")
    return d


def copy_capture(src: Path, dst: Path) -> tuple[Path, Path, Path]:
    """A copy of a two-profile capture: (root, the session to damage, the intact session)."""
    shutil.copytree(src, dst, symlinks=True)
    victim, intact = sorted(p.parent for p in dst.glob("*/*/trace_info.pb"))
    return dst, victim, intact


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    maxrss: int  # bytes: the peak resident memory of the command's process
    seconds: float
    timed_out: bool = False


# Measures one command from a small process of its own: Linux keeps the peak RSS of the process
# that forks across fork and exec, so a child forked from pytest (hundreds of MB) would report
# pytest's peak, not its own.  The launcher's child starts from the launcher's few MB.
# (-S: no site-packages, so the launcher itself is never profiled by the autostart .pth.)
LAUNCHER = """
import json, os, sys
report, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as f:
    json.dump({"status": status, "maxrss": usage.ru_maxrss * 1024}, f)
"""


def run_bounded(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 60,
                address_space: int = 2 << 30, preexec=None) -> Run:
    """Run ``cmd`` with its address space capped (a runaway allocation fails in the command instead
    of taking the machine) and a timeout (a read that blocks is killed), and measure its own peak
    RSS (``wait4`` in a small launcher, see ``LAUNCHER``)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if preexec is not None:
            preexec()

    env = dict(clean_env() if env is None else env)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".json") as report:
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, report.name, *cmd], env=env, stdout=out, stderr=err,
                             preexec_fn=limit, start_new_session=True)
        timed_out = False
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, signal.SIGKILL)  # the launcher and the command
            p.wait()
        out.seek(0)
        err.seek(0)
        result = json.loads(report.read() or "{}")
        status = os.waitstatus_to_exitcode(result["status"]) if "status" in result else -signal.SIGKILL
        return Run(status, out.read().decode(errors="backslashreplace"), err.read().decode(errors="backslashreplace"),
                   result.get("maxrss", 0), time.monotonic() - t0, timed_out)


def neuron_explorer(*args: str, **kw) -> Run:
    return run_bounded([sys.executable, "-m", "neuron_explorer", *args], **kw)
