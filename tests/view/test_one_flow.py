"""`view` has one flow whatever runs its tasks (decision 0099): an engine that only calls and maps
gets every step that touches the captures or the output, in one order, and the run's warnings,
output and errors are the same as on the default engine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from neuron_explorer.view import pipeline, tasks
from neuron_explorer.view.options import OutputError, ViewError, ViewOptions

from ..conftest import EXAMPLES
from .conftest import damaged_session


class Recording(pipeline.LocalEngine):
    """This process's engine, noting each task it is given (``local``: as a cluster when False)."""

    def __init__(self, local: bool = True) -> None:
        super().__init__(jobs=1)
        self.local = local
        self.ran: list[str] = []

    def call(self, fn, *args):
        self.ran.append(fn.__name__)
        return super().call(fn, *args)

    def map(self, fn, items, prog, *args):
        self.ran.extend(fn.__name__ for _ in items)
        return super().map(fn, items, prog, *args)


class FullDisk(Recording):
    """The finalize task fails as a full disk makes it fail on a worker."""

    def call(self, fn, *args):
        if fn is tasks.finalize:
            self.ran.append(fn.__name__)
            raise tasks.TaskOSError(args[1], "No space left on device")
        return super().call(fn, *args)


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    """Two instances of two processes, and a session whose files are garbage (one warning)."""
    sys.path.insert(0, str(EXAMPLES.parent))
    from bench.synth_capture import generate

    src = tmp_path_factory.mktemp("flow") / "cap"
    generate(str(src), instances=2, processes=2, events=3000)
    damaged_session(src)
    return src


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_an_engine_runs_every_step_and_the_run_is_the_default_one(capture, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ref = pipeline.run(ViewOptions(str(capture), output_file="ref", progress=False))
    ref_err = capsys.readouterr().err
    engine = Recording()
    got = pipeline.run(ViewOptions(str(capture), output_file="got", progress=False), engine)
    assert capsys.readouterr().err == ref_err and "skipped" in ref_err
    assert engine.ran == ["discover", "prepare_output"] + ["index"] * 5 + ["convert"] * 4 + ["finalize", "cleanup"]
    assert (got.output, ref.output) == ("got", "ref")  # the names given, on this machine
    assert (got.warnings, got.events, got.profiles) == (ref.warnings, ref.events, ref.profiles)
    assert len(got.warnings) == 1 and got.events > 0 and got.profiles == 4
    assert _files(tmp_path / "got") == _files(tmp_path / "ref")
    assert sorted(os.listdir(tmp_path)) == ["got", "ref"]  # no work area left


def test_a_summary_runs_no_output_task_on_the_engine(capture, tmp_path):
    engine = Recording(local=False)
    res = pipeline.run(ViewOptions(str(capture), output_format="summary-json",
                                   output_file=str(tmp_path / "deep" / "s.json"), progress=False), engine)
    assert "prepare_output" not in engine.ran and "finalize" not in engine.ran and res.output is None
    assert res.text and (tmp_path / "deep").is_dir()  # checked and made here, where the caller writes it


@pytest.mark.parametrize("local", [True, False])
def test_a_failed_write_is_one_output_error_and_leaves_nothing(capture, tmp_path, monkeypatch, local):
    monkeypatch.chdir(tmp_path)
    engine = FullDisk(local=local)
    with pytest.raises(OutputError) as e:
        pipeline.run(ViewOptions(str(capture), output_file="pq", progress=False), engine)
    # on this machine the name typed; elsewhere the path the engine resolved
    named = "pq" if local else os.path.realpath(tmp_path / "pq")
    assert str(e.value) == f"cannot write {named}: No space left on device"
    assert engine.ran[-2:] == ["finalize", "cleanup"] and os.listdir(tmp_path) == []


def test_a_cluster_cannot_write_standard_output(capture):
    engine = Recording(local=False)
    with pytest.raises(ViewError, match="cluster's workers cannot write"):
        pipeline.run(ViewOptions(str(capture), output_format="json", output_file="-", progress=False), engine)
    assert engine.ran == []
