"""`neuron-explorer check` explains an empty capture by its cause, never by advising a mode that
was already on."""

from __future__ import annotations

import subprocess
import sys

from ..conftest import clean_env, cli_in_process as cli  # check's answer, read in this process (decision 0173)

NOTHING_IN_THE_PROFILED_BLOCK = """
import torch
from torch.profiler import profile, ProfilerActivity
from neuron_explorer.torch import NeuronConfig, ProfileMode, NeuronProfiler

model = torch.nn.Linear(8, 8)
neuron_config = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir="./profile_output")
exporter = NeuronProfiler(neuron_config)
with torch.no_grad():
    model(torch.randn(2, 8))  # warm-up, before the session
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=neuron_config,
             on_trace_ready=exporter.export_trace) as prof:
    torch.neuron.synchronize()  # the model call was forgotten
"""


def _run(tmp_path, text: str, **env) -> None:
    script = tmp_path / "job.py"
    script.write_text(text)
    p = subprocess.run([sys.executable, str(script)], env=clean_env(**env), cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]


def test_an_empty_profiler_session_with_device_mode_on_is_explained_not_advised(tmp_path):
    _run(tmp_path, NOTHING_IN_THE_PROFILED_BLOCK)
    r = cli("check", "-d", str(tmp_path / "profile_output"))
    assert "set NEURON_RT_INSPECT_DEVICE_PROFILE=1 or ProfileMode.DEVICE" not in r.stdout, r.stdout
    assert ("device profiling was on (ProfileMode.DEVICE) but no device trace was written: no module, compiled "
            "graph or collective ran between the torch.profiler start and stop") in r.stdout, r.stdout
    assert "1 warning(s)" in r.stdout or "2 warning(s)" in r.stdout


def test_an_env_capture_that_ran_nothing_names_the_variable_and_the_cause(tmp_path):
    out = tmp_path / "out"
    _run(tmp_path, "import torch\nprint(torch.ones(2) + 1)\n", NEURON_RT_INSPECT_ENABLE="1",
         NEURON_RT_INSPECT_OUTPUT_DIR=str(out), NEURON_RT_INSPECT_DEVICE_PROFILE="model")
    r = cli("check", "-d", str(out))
    assert "ProfileMode.DEVICE for device traces" not in r.stdout, r.stdout
    assert ("device profiling was on (NEURON_RT_INSPECT_DEVICE_PROFILE=model) but no device trace was written: "
            "no module, compiled graph or collective ran while the runtime was on") in r.stdout, r.stdout


def test_device_profiling_is_still_advised_when_it_was_off(tmp_path):
    out = tmp_path / "out"
    _run(tmp_path, "import torch\nm = torch.nn.Linear(4, 4)\nm(torch.randn(2, 4))\n", NEURON_RT_INSPECT_ENABLE="1",
         NEURON_RT_INSPECT_OUTPUT_DIR=str(out))
    r = cli("check", "-d", str(out))
    assert r.returncode == 0 and "ProfileMode.DEVICE for device traces" in r.stdout and "0 warning(s)" in r.stdout
