"""The suite's own scheduling aid (tests/cpu_report.py): costliest test files first, each file whole."""

from __future__ import annotations

import json

from . import cpu_report


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


def test_the_costliest_files_come_first_each_whole_and_in_its_own_order():
    ids = ["a.py::t1", "b.py::t1", "a.py::t2", "c.py::t1", "b.py::t2", "d.py::t1"]
    items = [_Item(i) for i in ids]
    cpu_report.costliest_modules_first(items, {"b.py": 50.0, "c.py": 5.0, "a.py": 5.0})  # d.py: unknown, 0
    assert [i.nodeid for i in items] == ["b.py::t1", "b.py::t2", "a.py::t1", "a.py::t2", "c.py::t1", "d.py::t1"]


def test_a_missing_or_damaged_record_orders_nothing(tmp_path, monkeypatch):
    for text in (None, "{not json", json.dumps([1, 2]), json.dumps({"a.py": "slow", "b.py": 2})):
        path = tmp_path / "costs.json"
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(cpu_report, "COSTS", path)
        costs = cpu_report.module_costs()
        assert costs == ({"b.py": 2.0} if text and text.startswith('{"a.py"') else {})

