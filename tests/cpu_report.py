"""Per-test CPU time: what each test costs the machine, not how long it waited.

``--durations`` ranks tests by wall time, which on a loaded host says more about the load than
about the test, and which hides a test that waits (a pinned job, a server's poll) behind one that
burns both cores.  The suite's length on 2 cores is bound by the CPU it needs (issue 30), so this
plugin adds each test's CPU seconds (user + system, of the runner and of every child process it
waited for: torchrun and its ranks, Chromium, view's workers) to its teardown report, and the
controller prints the costliest ones after ``--durations``.  ``--cpu-report FILE`` also writes
them all as JSON (test id -> CPU seconds, wall seconds, when it ended (epoch seconds) and the
pid of the worker that ran it): the figures to compare between runs, and the timeline of each
worker, which shows how long the run's tail kept a core idle.

Module- or session-scoped fixtures are counted on the test that first needs them, as
``--durations`` counts their set-up.  A child the test leaves running (a server torn down by a
later fixture) is counted where it is waited for.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

_START = pytest.StashKey[tuple[float, float]]()
_KEY = "cpu_report"


def _now() -> tuple[float, float]:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system, t.elapsed


def add_option(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", metavar="FILE", default=None,
                     help="write each test's CPU seconds (its own and its children's) as JSON to FILE")


class _Meter:
    """In every process that runs tests: the figures, added to each teardown report."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        item.stash[_START] = _now()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        start = item.stash.get(_START, None)
        if call.when == "teardown" and start is not None:
            cpu, wall = _now()
            report.user_properties.append((_KEY, (round(cpu - start[0], 3), round(wall - start[1], 3),
                                                  round(time.time(), 3), os.getpid())))
        return report


class _Collector:
    """On the controller (or the only process): gathers the figures the teardown reports carry."""

    def __init__(self) -> None:
        self.costs: dict[str, tuple[float, float]] = {}
        self.ends: dict[str, tuple[float, int]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == _KEY:
                self.costs[report.nodeid] = (float(value[0]), float(value[1]))
                self.ends[report.nodeid] = (float(value[2]), int(value[3]))

    def pytest_terminal_summary(self, terminalreporter, config: pytest.Config) -> None:
        if not self.costs:
            return
        path = config.getoption("--cpu-report")
        if path:
            rows = {k: {"cpu_s": c, "wall_s": w, "end": self.ends[k][0], "pid": self.ends[k][1]}
                    for k, (c, w) in self.costs.items()}
            Path(path).write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
        if config.getoption("durations", None) is None:
            return
        shown = max(int(config.getoption("durations") or 0), 0) or len(self.costs)
        ranked = sorted(self.costs.items(), key=lambda kv: kv[1][0], reverse=True)[:shown]
        total = sum(c for c, _ in self.costs.values())
        terminalreporter.write_sep("=", f"costliest {len(ranked)} tests in CPU seconds "
                                        f"(all tests: {total:.0f} CPU-s)")
        for nodeid, (cpu, wall) in ranked:
            terminalreporter.write_line(f"{cpu:7.2f} CPU-s {wall:7.2f}s wall  {nodeid}")


def register(config: pytest.Config) -> None:
    """Called from the suite's ``pytest_configure``."""
    config.pluginmanager.register(_Meter(), "cpu_report_meter")
    if not hasattr(config, "workerinput"):  # xdist workers only send their reports
        config.pluginmanager.register(_Collector(), "cpu_report_collector")


# ---- the order of the modules (decision 0172)

COSTS = Path(__file__).with_name("module_costs.json")


def module_costs() -> dict[str, float]:
    """Each test file's wall seconds in a recorded full run (``tests/module_costs.json``); a file
    missing from it (new, or renamed since) costs nothing, and a damaged record orders nothing."""
    try:
        data = json.loads(COSTS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}


def costliest_modules_first(items: list[pytest.Item], costs: dict[str, float]) -> None:
    """Reorder ``items`` in place: whole test files, the costliest first, each file's tests
    together and in their own order (a file's module fixtures are set up once per worker that
    runs it, and torn down as soon as the next test is from another file).

    Under ``--dist worksteal`` each worker starts on a contiguous share of this order and an idle
    one takes the later half of the longest queue: long files first leave the short ones to even
    out the end of the run, where in the alphabetical order the browser and cluster files came
    last and kept one worker busy after the others had run out."""
    files: dict[str, list[pytest.Item]] = {}
    for it in items:
        files.setdefault(it.nodeid.split("::", 1)[0], []).append(it)
    ranked = sorted(files, key=lambda f: -costs.get(f, 0.0))  # (stable: equal costs keep their order)
    items[:] = [it for f in ranked for it in files[f]]


def order_option(parser: pytest.Parser) -> None:
    parser.addoption("--file-order", choices=("cost", "name"), default="cost",
                     help="with pytest-xdist workers: run the costliest test files first (cost, from "
                          "tests/module_costs.json) or in name order (name)")


def reorder(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Called from the suite's ``pytest_collection_modifyitems``: with xdist workers only (alone,
    the order changes nothing but the output's)."""
    workers = getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput")
    if workers and config.getoption("--file-order") == "cost":
        costliest_modules_first(items, module_costs())


def record_module_costs(report: str) -> dict[str, float]:
    """``tests/module_costs.json`` rewritten from a ``--cpu-report`` file of a full run:
    ``python -m tests.cpu_report REPORT.json``."""
    rows = json.loads(Path(report).read_text())
    costs: dict[str, float] = {}
    for nodeid, row in rows.items():
        f = nodeid.split("::", 1)[0]
        costs[f] = costs.get(f, 0.0) + float(row["wall_s"] if isinstance(row, dict) else row[1])
    out = {f: round(c, 1) for f, c in sorted(costs.items())}
    COSTS.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    import sys

    print(f"{COSTS}: {len(record_module_costs(sys.argv[1]))} test files")
