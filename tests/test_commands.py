"""What every command shares (docs/commands.md): ``--version``, ``python -m``, one line naming the
pip command when an extra is missing (before any work), shell completion."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from neuron_explorer import __version__
from tests.conftest import clean_env

# (python -m module, program name --version answers with)
COMMANDS = [("neuron_explorer", "neuron-explorer"), ("neuron_explorer.ndet", "neuron-det"),
            ("neuron_explorer.monitor", "neuron-monitor"),
            ("neuron_explorer.monitor.prometheus_exporter", "neuron-monitor-prometheus.py"),
            ("neuron_explorer.monitor.cloudwatch_exporter", "neuron-monitor-cloudwatch.py")]


def _main(module: str):
    if module == "neuron_explorer":
        from neuron_explorer.cli import main
    elif module == "neuron_explorer.ndet":
        from neuron_explorer.ndet.cli import main
    elif module == "neuron_explorer.monitor":
        from neuron_explorer.monitor.cli import main
    elif module.endswith("prometheus_exporter"):
        from neuron_explorer.monitor.companions import prometheus as main
    else:
        from neuron_explorer.monitor.companions import cloudwatch as main
    return main


@pytest.mark.parametrize("module,prog", COMMANDS)
def test_every_command_answers_version(module, prog, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", [prog, "--version"])
    with pytest.raises(SystemExit) as e:
        _main(module)(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"{prog} {__version__}\n"


def test_python_m_runs_every_command() -> None:
    """Each in its own interpreter, as a user types it."""
    for module, prog in COMMANDS:
        p = subprocess.run([sys.executable, "-m", module, "--version"], env=clean_env(), capture_output=True,
                           text=True, timeout=60)
        assert (p.returncode, p.stdout, p.stderr) == (0, f"{prog} {__version__}\n", ""), module


def _one_line(err: str, extra: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].endswith(f"install it with: pip install 'neuron-explorer[{extra}]'"), lines[0]
    return lines[0]


def test_view_ui_without_the_ui_extra_says_so_before_ingesting(tmp_path, capsys, monkeypatch) -> None:
    from neuron_explorer.cli import main

    monkeypatch.setitem(sys.modules, "starlette", None)
    ws, capture = tmp_path / "ws", tmp_path / "output"
    capture.mkdir()
    assert main(["view", "--ui", "-d", str(capture), "--data-path", str(ws)]) == 2
    line = _one_line(capsys.readouterr().err, "ui")
    assert line.startswith("neuron-explorer: error: view --ui needs the 'ui' extra (")
    assert not ws.exists() or os.listdir(ws) == []  # nothing ingested


def test_view_scheduler_without_the_cluster_extra(tmp_path, capsys, monkeypatch) -> None:
    from neuron_explorer.cli import main

    monkeypatch.setitem(sys.modules, "distributed", None)
    assert main(["view", "-d", str(tmp_path), "--scheduler", "tcp://127.0.0.1:8786"]) == 2
    assert _one_line(capsys.readouterr().err, "cluster").startswith(
        "neuron-explorer: error: view --scheduler needs the 'cluster' extra")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name,missing", [("prometheus", "prometheus_client"), ("cloudwatch", "boto3")])
def test_companions_without_the_monitor_extra(name, missing, capsys, monkeypatch) -> None:
    from neuron_explorer.monitor import companions

    monkeypatch.setitem(sys.modules, missing, None)
    monkeypatch.setattr(sys, "argv", [f"neuron-monitor-{name}.py"])
    args = ["--namespace", "n", "--region", "us-east-1"] if name == "cloudwatch" else []
    assert getattr(companions, name)(args) == 2
    assert _one_line(capsys.readouterr().err, "monitor").startswith(
        f"neuron-monitor-{name}.py: error: neuron-monitor-{name}.py needs the 'monitor' extra")


def test_python_m_prometheus_exporter_without_the_extra() -> None:
    code = ("import runpy, sys; sys.modules['prometheus_client'] = None; sys.argv = ['x']; "
            "runpy.run_module('neuron_explorer.monitor.prometheus_exporter', run_name='__main__', alter_sys=True)")
    p = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    _one_line(p.stderr, "monitor")


def test_shell_completion_through_argcomplete(tmp_path) -> None:
    pytest.importorskip("argcomplete")
    out = tmp_path / "completions"
    for module, line, want in [("neuron_explorer.ndet", "neuron-det --lo", {"--log-prefix "}),
                               ("neuron_explorer", "neuron-explorer view --output-f",
                                {"--output-format", "--output-file"})]:
        env = clean_env(_ARGCOMPLETE="1", COMP_LINE=line, COMP_POINT=str(len(line)),
                        _ARGCOMPLETE_STDOUT_FILENAME=str(out))
        p = subprocess.run([sys.executable, "-m", module], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert set(out.read_text().split("\x0b")) == want
