"""`view`'s progress bar (issue #17 item 10): drawn on a terminal, under a real pseudo-terminal
(`pty`), once the run has taken longer than its delay (1 s by default; the tests set
NEURON_EXPLORER_PROGRESS_DELAY_S so no test depends on how fast the machine is), never when stderr
is not a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from ..conftest import clean_env
from .test_spec_fidelity_view import _capture


def _view_on_pty(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run view with stderr on a pseudo-terminal; returns (status, what the terminal received)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "neuron_explorer", "view", *args], env=env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not b:
            break
        chunks.append(b)
    os.close(master)
    return p.wait(timeout=120), b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def cap(tmp_path_factory):
    return _capture(tmp_path_factory.mktemp("progress") / "cap")


def test_the_progress_bar_is_drawn_on_a_terminal_once_the_delay_has_passed(cap, tmp_path):
    env = clean_env(NEURON_EXPLORER_PROGRESS_DELAY_S="0")
    code, tty = _view_on_pty(["-d", str(cap), "--output-format", "json", "--output-file", str(tmp_path / "t.json")],
                             env)
    assert code == 0, tty
    bars = [seg for seg in tty.replace("\n", "\r").split("\r") if "writing json [" in seg]
    assert bars and "4/4 processes 100%" in bars[-1], tty
    assert "indexing [" in tty
    last = tty.split("\rneuron-explorer: writing json [")[-1]
    line, rest = last.split("\n", 1)
    assert "4/4 processes 100%" in line and rest.startswith("neuron-explorer: wrote"), tty  # ends its own line


def test_no_progress_bar_when_stderr_is_not_a_terminal(cap, tmp_path):
    env = clean_env(NEURON_EXPLORER_PROGRESS_DELAY_S="0")
    r = subprocess.run([sys.executable, "-m", "neuron_explorer", "view", "-d", str(cap), "--output-format", "json",
                        "--output-file", str(tmp_path / "t.json")], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stderr and "[" not in r.stderr.split("wrote")[0] and "\r" not in r.stderr


def test_no_progress_bar_before_the_delay_even_on_a_terminal(cap, tmp_path):
    env = clean_env(NEURON_EXPLORER_PROGRESS_DELAY_S="3600")
    code, tty = _view_on_pty(["-d", str(cap), "--output-format", "perfetto", "--output-file", str(tmp_path / "t.pf")],
                             env)
    assert code == 0 and "wrote" in tty, tty
    assert "processes" not in tty and "\r" not in tty.replace("\r\n", "\n")


def test_a_bad_progress_delay_is_a_one_line_usage_error(cap, tmp_path):
    r = subprocess.run([sys.executable, "-m", "neuron_explorer", "view", "-d", str(cap), "--output-format", "json",
                        "--output-file", str(tmp_path / "t.json")],
                       env=clean_env(NEURON_EXPLORER_PROGRESS_DELAY_S="soon"),
                       capture_output=True, text=True)
    assert r.returncode == 2 and "NEURON_EXPLORER_PROGRESS_DELAY_S" in r.stderr and "Traceback" not in r.stderr
