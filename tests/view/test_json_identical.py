"""`view --output-format json` writes the same bytes with its C encoder as with the Python path it
replaced (one dict per event: what ``chrome_json._render`` still does when the C module is absent),
over a real capture (an eager PyTorch program with ``record_function`` regions on two threads:
framework flows, host calls, extra attributes) and a synthetic two-rank one written through the
real capture writer (collectives and their cross-rank flows; on one rank alone, none), with either
JSON backend."""

from __future__ import annotations

import pytest

from neuron_explorer.exporters import chrome_json
from neuron_explorer.util import jsonfast
from neuron_explorer.view.pipeline import ViewOptions, run

from ..capture.test_framework_regions import regions_capture

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    from bench.synth_capture import generate

    real = regions_capture(tmp_path_factory)  # the capture the region tests read (one launch per run)
    synth = tmp_path_factory.mktemp("synth") / "cap"
    generate(str(synth), 1, 2, 3_000)
    alone = tmp_path_factory.mktemp("alone") / "cap"
    generate(str(alone), 1, 1, 2_000)  # (one rank: collectives whose flows have one slice, no arrow)
    return {"real": real, "synth": synth, "alone": alone}


def _view(src, dst, monkeypatch, c: bool) -> bytes:
    with monkeypatch.context() as m:
        if not c:
            m.setattr(chrome_json, "_pqenc", None)
        run(ViewOptions(directory=str(src), output_format="json", output_file=str(dst), progress=False, jobs=1))
    return dst.read_bytes()


@pytest.mark.parametrize("backend", ["orjson", "json"])
@pytest.mark.parametrize("which", ["real", "synth", "alone"])
def test_c_encoder_writes_the_python_path_s_bytes(captures, which, backend, tmp_path, monkeypatch):
    if backend == "json":
        monkeypatch.setattr(jsonfast, "_orjson", None)
        monkeypatch.setattr(chrome_json, "BACKEND", "json")
    fast = _view(captures[which], tmp_path / "c.json", monkeypatch, True)
    slow = _view(captures[which], tmp_path / "py.json", monkeypatch, False)
    assert fast == slow
    # (what the comparison covers)
    if which == "real":
        assert b'"cat":"framework","ph":"s"' in fast and b'"flow_out":true' in fast and b'"s":"t"' in fast
    elif which == "synth":
        assert b'"cat":"flow","ph":"s"' in fast and b'"prev_model_id":' in fast
    else:
        assert b'"cc_running"' in fast and b'"cat":"flow"' not in fast
