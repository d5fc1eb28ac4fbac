"""``%load_ext neuron_explorer`` and ``%%neuron_profile`` in a real Jupyter kernel, executed with
nbclient as a notebook is run; ``profile()`` in a script (docs/notebook.md)."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

import pytest

import neuron_explorer
from neuron_explorer.notebook import timeline_svg
from tests.conftest import clean_env

CELLS = [
    "import torch\nmodel = torch.nn.Linear(16, 16)\nx = torch.ones(16)",
    "%load_ext neuron_explorer",
    "%%neuron_profile -o {out}\nfor _ in range(3):\n    model(x).sum().backward()",
    "%%neuron_profile -o {out} --no-view\ny = model(x)",
    "print(y.shape)",  # the cell ran in the user's namespace
]


@pytest.mark.slow
def test_a_notebook_profiles_a_cell_and_shows_its_summary_and_timeline(tmp_path, monkeypatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    out = tmp_path / "output"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c.format(out=out)) for c in CELLS]
    # the kernel inherits this environment: PYTHONPATH (the tree under test), no capture variables
    for k in list(os.environ):
        if k.startswith(("NEURON_RT_", "NEURON_EXPLORER_")):
            monkeypatch.delenv(k)
    for k, v in clean_env().items():
        if k.startswith(("NEURON_EXPLORER_", "OMP_")):
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("PYTHONPATH", str(Path(neuron_explorer.__file__).resolve().parents[1]))  # (absolute)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                            ).execute()

    outputs = nb.cells[2].outputs
    result = [o for o in outputs if o.output_type == "execute_result"]
    assert len(result) == 1, outputs
    text, page = result[0].data["text/plain"], result[0].data["text/html"]
    assert text.startswith("neuron-explorer summary: 1 profile(s) on 1 instance(s)"), text
    assert "top graph Linear" in text and "executions" in text
    assert "<svg" in page and "neuron-explorer-timeline" in page and "<rect" in page and "Linear" in page
    sessions = sorted(glob.glob(str(out / "*" / "*" / "ntrace.pb")))
    assert len(sessions) == 2, sessions  # one session per profiled cell, readable by view
    assert f"capture: {os.path.dirname(sessions[0])}" in text
    assert not [o for o in nb.cells[3].outputs if o.output_type == "execute_result"]  # --no-view: nothing shown
    assert nb.cells[4].outputs[0].text == "torch.Size([16])\n"


def test_timeline_svg_draws_the_longest_events_and_escapes_names() -> None:
    evs = [{"ph": "X", "name": f"<op{i}>", "ts": i * 10, "dur": i, "pid": 1, "tid": i % 3} for i in range(5000)]
    svg = timeline_svg(evs, names={("1", "0"): "core 0"})
    assert svg.count("<rect") == 2000 and "2000 of 5000 events" in svg
    assert "&lt;op4999&gt;" in svg and "<op" not in svg and "core 0" in svg
    assert timeline_svg([]).startswith("<p>")


SCRIPT = """
import sys, torch
from neuron_explorer.notebook import profile
m = torch.nn.Linear(8, 8)
m(torch.ones(8))  # before the block: not part of its capture
with profile(sys.argv[1]) as p:
    m(torch.ones(8)).sum().backward()
print(repr(p))
"""


@pytest.mark.slow
def test_profile_in_a_script(tmp_path) -> None:
    from tests.conftest import run

    (tmp_path / "s.py").write_text(SCRIPT)
    p = run([__import__("sys").executable, str(tmp_path / "s.py"), str(tmp_path / "out")], clean_env())
    assert p.stdout.startswith("neuron-explorer summary: 1 profile(s)"), p.stdout
    # one forward in the block: the call before it is not part of the capture
    assert re.search(r"top graph Linear_[0-9a-f]+: 1 executions?,", p.stdout), p.stdout
    (session,) = glob.glob(str(tmp_path / "out" / "*" / "*" / "ntrace.pb"))
    assert p.stdout.rstrip().endswith(f"capture: {os.path.dirname(session)}")
