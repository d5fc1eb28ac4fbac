"""``tests.inproc.run_tool`` answers as the tool's own process would: exit status, both streams
(written through ``sys`` or straight to the descriptors), its environment only for the call, and
a traceback for an exception that escapes (decision 0173)."""

from __future__ import annotations

import os
import sys

import pytest

from .inproc import TOOLS, run_tool


def _fake_main(argv: list[str]) -> int:
    print("out via sys", os.environ.get("INPROC_PROBE"))
    print("err via sys", file=sys.stderr)
    os.write(1, b"out via fd 1\n")
    os.write(2, b"err via fd 2\n")
    if argv == ["raise"]:
        raise ValueError("the tool's bug")
    if argv == ["exit"]:
        sys.exit(3)
    return len(argv)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(TOOLS, "fake", (__name__, "_fake_main"))
    monkeypatch.delenv("INPROC_PROBE", raising=False)
    return "fake"


def test_both_streams_in_order_and_the_returned_status(fake):
    r = run_tool(fake, ["a", "b"], {"INPROC_PROBE": "set"})
    assert r.returncode == 2
    assert r.stdout == "out via sys set\nout via fd 1\n"
    assert r.stderr == "err via sys\nerr via fd 2\n"
    assert "INPROC_PROBE" not in os.environ  # the tool's environment was the call's only


def test_sys_exit_and_an_escaping_exception_are_statuses(fake):
    assert run_tool(fake, ["exit"], {}).returncode == 3
    r = run_tool(fake, ["raise"], {})
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr and "ValueError: the tool's bug" in r.stderr


def test_the_real_command_line_answers_usage_errors_as_its_process_does():
    r = run_tool("neuron_explorer", ["view", "--no-such-flag"], dict(os.environ))
    assert r.returncode == 2 and "unrecognized arguments: --no-such-flag" in r.stderr and r.stdout == ""


def test_a_root_handler_another_test_added_does_not_silence_the_tool(fake):
    import logging

    from neuron_explorer.util.log import get_logger

    def _warn(argv: list[str]) -> int:
        get_logger(__name__).warning("neuron-explorer: warning: said once")
        return 0

    stray = logging.StreamHandler()
    logging.getLogger().addHandler(stray)
    try:
        globals()["_warning_main"] = _warn
        TOOLS[fake] = (__name__, "_warning_main")
        r = run_tool(fake, [], {})
        assert stray in logging.getLogger().handlers  # put back after the call
    finally:
        logging.getLogger().removeHandler(stray)
        globals().pop("_warning_main", None)
    assert r.stderr == "neuron-explorer: warning: said once\n"
