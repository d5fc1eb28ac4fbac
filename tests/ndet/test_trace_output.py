"""`neuron-det -o` writes its trace the way `view` writes outputs (issue #13, item 2): a FIFO or a
device is written through and stays what it was, a symlink keeps pointing at the file it names,
and no name beside the output (such as ``<out>.tmp``) is overwritten."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ..conftest import clean_env
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


# ---------------------------------------------------------------- issue 29 item 10: the default trace.json

TORCH_TRACE = '{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "traceEvents": [\n  ]\n}\n'


def _det_in(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "neuron_explorer.ndet.cli", *args], env=clean_env(), cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_without_o_a_trace_json_another_tool_wrote_is_refused_and_kept(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "trace.json").write_text(TORCH_TRACE)  # what torch.profiler's export_chrome_trace names it
    r = _det_in(work, "--log-prefix", str(logs))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "trace.json" in lines[0] and "not written by neuron-det" in lines[0] and "-o" in lines[0], lines[0]
    assert (work / "trace.json").read_text() == TORCH_TRACE
    assert sorted(p.name for p in work.iterdir()) == ["trace.json"]  # no temporary file either
    # named with -o, the same file is the user's choice: replaced
    r = _det_in(work, "--log-prefix", str(logs), "-o", "trace.json")
    assert r.returncode in (0, 1), r.stderr
    assert json.loads((work / "trace.json").read_text())["metadata"]["tool"] == "neuron-det"


def test_without_o_a_trace_json_neuron_det_wrote_is_replaced(tmp_path: Path) -> None:
    logs = _logs(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    r = _det_in(work, "--log-prefix", str(logs))
    assert r.returncode in (0, 1), r.stderr
    first = json.loads((work / "trace.json").read_text())
    (work / "trace.json").write_text(json.dumps(first, indent=1))  # the same trace, rewritten by another program
    assert _det_in(work, "--log-prefix", str(logs)).returncode == 2
    (work / "trace.json").unlink()
    assert _det_in(work, "--log-prefix", str(logs)).returncode in (0, 1)
    r = _det_in(work, "--log-prefix", str(logs))  # its own earlier trace: replaced
    assert r.returncode in (0, 1), r.stderr
    assert json.loads((work / "trace.json").read_text())["traceEvents"] == first["traceEvents"]
    assert sorted(p.name for p in work.iterdir()) == ["trace.json"]


def test_without_o_a_view_json_trace_named_trace_json_is_not_taken_for_ours(tmp_path: Path) -> None:
    from neuron_explorer.exporters.chrome_trace import HEADER

    logs = _logs(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    doc = HEADER + b'],"metadata":{"clock_offsets":{}}}'  # the same writer, for view: no "tool" of ours
    (work / "trace.json").write_bytes(doc)
    assert _det_in(work, "--log-prefix", str(logs)).returncode == 2
    assert (work / "trace.json").read_bytes() == doc
