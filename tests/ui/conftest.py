"""A real 2-rank capture ingested twice (profiles run-a, run-b) into one workspace, for all UI tests;
both workspaces are made once per run and shared by the xdist workers (``tests.conftest.shared_dir``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import clean_env, cli, shared_dir, train_capture

from .helpers import add_device_profile


@pytest.fixture(scope="session")
def ui_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Made once per run, whichever worker asks first (``shared_dir``): the UI tests only read it."""
    pytest.importorskip("starlette")

    def build(base: Path) -> None:
        out, _ = train_capture(tmp_path_factory, "--steps", "5")
        ws = base / "workspace"
        for name in ("run-a", "run-b"):
            p = cli("view", "-d", str(out), "--ingest-only", "--data-path", str(ws), "--display-name", name,
                    check=True)
            assert (ws / name / "ProfileMetadata.parquet").is_file(), p.stderr
        # run-a gets a hand-made device profile (the device tables come from another issue); run-b has none
        add_device_profile(ws / "run-a")

    return shared_dir(tmp_path_factory, "ui_workspace", build)[0] / "workspace"


@pytest.fixture(scope="session")
def device_ref(ui_workspace: Path) -> dict:
    import duckdb

    r = duckdb.connect().execute(
        f"SELECT instance_id, process_id, nc_idx, model_name, exec_id_first FROM "
        f"read_parquet('{ui_workspace / 'run-a' / 'DeviceProfiles.parquet'}')").fetchall()[0]
    return dict(zip(("instance_id", "process_id", "nc_idx", "model_name", "exec_id"), r))


EAGER_REGIONS = """
import torch
from torch.profiler import record_function

model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
x = torch.randn(4, 8)
with torch.no_grad():
    for _ in range(3):
        with record_function("my_region"):
            model(x)
"""


@pytest.fixture(scope="session")
def eager_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real eager capture (NEURON_RT_INSPECT_ENABLE=1, no code change) whose forwards run inside a
    ``record_function("my_region")``, ingested as profile ``eager``: each ``nrt_execute`` is in two
    flows, its region's and its ``nc_exec_running``'s."""
    import subprocess
    import sys

    pytest.importorskip("starlette")

    def build(base: Path) -> None:
        out = base / "capture"
        script = base / "job.py"
        script.write_text(EAGER_REGIONS)
        p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=base,
                           env=clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out)))
        assert p.returncode == 0, p.stderr[-3000:]
        ws = base / "workspace"
        p = cli("view", "-d", str(out), "--ingest-only", "--data-path", str(ws), "--display-name", "eager",
                check=True)
        assert (ws / "eager" / "ProfileMetadata.parquet").is_file(), p.stderr

    return shared_dir(tmp_path_factory, "ui_eager_workspace", build)[0] / "workspace"
