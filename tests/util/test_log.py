"""The ``neuron_explorer`` logger tree (util.log, docs/logging.md): today's text on stderr by
default, routed through the user's logging configuration once there is one, filtered by
NEURON_EXPLORER_LOG_LEVEL."""

from __future__ import annotations

import logging
import sys

import pytest

from neuron_explorer.util import log
from tests.conftest import clean_env, run


@pytest.fixture
def tree():
    """The tree's level and the root's handlers as a test leaves them."""
    root = logging.getLogger()
    ours = logging.getLogger(log.ROOT)
    saved = (list(root.handlers), ours.level)
    yield ours
    root.handlers[:] = saved[0]
    ours.setLevel(saved[1])


def test_default_handler_writes_todays_text_in_one_write(tree, capsys) -> None:
    log.get_logger("neuron_explorer.capture.sink").info("neuron-explorer: profile written to /x")
    log.get_logger("view.cli").warning("neuron-explorer: warning: w")
    assert capsys.readouterr().err == "neuron-explorer: profile written to /x\nneuron-explorer: warning: w\n"
    assert log.get_logger("view.cli").name == "neuron_explorer.view.cli"


def test_a_user_handler_takes_the_messages_and_ours_steps_aside(tree, capsys) -> None:
    seen: list[tuple[str, int, str]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((record.name, record.levelno, record.getMessage()))

    logging.getLogger().addHandler(Keep())
    log.get_logger(__name__).error("neuron-det: error: e")
    assert capsys.readouterr().err == ""
    assert seen == [(f"neuron_explorer.{__name__}", logging.ERROR, "neuron-det: error: e")]
    tree.setLevel(logging.CRITICAL)  # the user's level for our tree filters too
    log.get_logger(__name__).error("neuron-det: error: e")
    assert len(seen) == 1


@pytest.mark.parametrize("text,level", [(None, None), ("", None), ("debug", logging.DEBUG), (" WARNING ", 30),
                                        ("warn", 30), ("Error", 40), ("critical", 50), ("15", 15)])
def test_parse_level(text, level) -> None:
    assert log.parse_level(text) == level


@pytest.mark.parametrize("text", ["loud", "-1", "1e3", "99999", "INFO,DEBUG"])
def test_parse_level_rejects_with_the_accepted_forms(text) -> None:
    with pytest.raises(ValueError, match="NEURON_EXPLORER_LOG_LEVEL=.*accepted: DEBUG, INFO"):
        log.parse_level(text)


USER_PROGRAM = """
import logging, sys
if sys.argv[1] != "-":
    logging.basicConfig(filename=sys.argv[1], format="%(name)s|%(levelname)s|%(message)s")
import torch
torch.nn.Linear(4, 4)(torch.ones(4))
"""


@pytest.mark.slow
def test_a_profiled_program_routes_our_messages_through_its_logging_config(tmp_path) -> None:
    """A real profiled PyTorch program: the start-up warning (before the program configured
    anything) is on stderr as today; once it called basicConfig, the end's "profile written to"
    goes to its log file with our logger's name, not to stderr.  NEURON_EXPLORER_LOG_LEVEL=WARNING
    leaves the info line out and keeps the warning."""
    prog = tmp_path / "train.py"
    prog.write_text(USER_PROGRAM)
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"),
                    XLA_IR_DEBUG="banana")
    del env["NEURON_EXPLORER_QUIET"]
    warning = "neuron-explorer: warning: XLA_IR_DEBUG='banana' is not 0 or 1; neuron-explorer takes it as off\n"
    logfile = tmp_path / "user.log"
    p = run([sys.executable, str(prog), str(logfile)], env)
    assert p.stderr == warning
    lines = logfile.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"neuron_explorer.capture.sink|INFO|neuron-explorer: profile written to {tmp_path / 'out'}"), lines
    p = run([sys.executable, str(prog), "-"], {**env, "NEURON_EXPLORER_LOG_LEVEL": "warning"})
    assert p.stderr == warning
    p = run([sys.executable, str(prog), "-"], {**env, "NEURON_EXPLORER_LOG_LEVEL": "loud"})
    assert p.stderr.startswith("neuron-explorer: warning: NEURON_EXPLORER_LOG_LEVEL='loud' is not a level")
    assert f"neuron-explorer: profile written to {tmp_path / 'out'}" in p.stderr


def test_line_logger_makes_one_record_per_line(tree, capsys) -> None:
    s = log.LineLogger("neuron_explorer.monitor.metrics")
    print("neuron-monitor-prometheus: skipping line 1: x", file=s, flush=True)
    s.write("a\nb")
    assert capsys.readouterr().err == "neuron-monitor-prometheus: skipping line 1: x\na\n"
    s.write("\n")
    assert capsys.readouterr().err == "b\n"
