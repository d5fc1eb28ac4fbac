"""`neuron-det -o` writes its trace the way `view` writes outputs (issue #13, item 2): a FIFO or a
device is written through and stays what it was, a symlink keeps pointing at the file it names,
and no name beside the output (such as ``<out>.tmp``) is overwritten."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from .helpers import neuron_det
from .test_recorder import _job


def _logs(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    _job(logs, 2)
    return logs


def test_a_fifo_trace_output_is_written_through(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    fifo = tmp_path / "trace.pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader():
        with open(fifo, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=reader, daemon=True)  # (blocked for good if the FIFO was replaced)
    t.start()
    r = neuron_det("--log-prefix", str(logs), "-o", str(fifo))
    assert r.returncode in (0, 1), r.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    t.join(60)
    assert json.loads(got[0])["traceEvents"]


def test_a_symlinked_trace_output_replaces_the_target_and_nothing_beside_it(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "t.json"
    link.symlink_to(real)
    (tmp_path / "t.json.tmp").write_text("mine")  # the old code truncated this name and renamed it over t.json
    r = neuron_det("--log-prefix", str(logs), "-o", str(link))
    assert r.returncode in (0, 1), r.stderr
    assert link.is_symlink() and json.loads(real.read_text())["traceEvents"]
    assert (tmp_path / "t.json.tmp").read_text() == "mine"


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_a_device_trace_output_stays_a_device(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    dev = tmp_path / "null"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    r = neuron_det("--log-prefix", str(logs), "-o", str(dev))
    assert r.returncode in (0, 1), r.stderr
    assert stat.S_ISCHR(os.lstat(dev).st_mode)
