"""A real 2-rank capture ingested twice (profiles run-a, run-b) into one workspace, for all UI tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, clean_env, cli, torchrun

from .helpers import add_device_profile


@pytest.fixture(scope="session")
def ui_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("starlette")
    base = tmp_path_factory.mktemp("ui")
    out = base / "capture"
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out))
    torchrun(2, EXAMPLES / "train.py", ["--steps", "5"], env, cwd=base)
    ws = base / "workspace"
    for name in ("run-a", "run-b"):
        p = cli("view", "-d", str(out), "--ingest-only", "--data-path", str(ws), "--display-name", name, check=True)
        assert (ws / name / "ProfileMetadata.parquet").is_file(), p.stderr
    # run-a gets a hand-made device profile (the device tables come from another issue); run-b has none
    add_device_profile(ws / "run-a")
    return ws


@pytest.fixture(scope="session")
def device_ref(ui_workspace: Path) -> dict:
    import duckdb

    r = duckdb.connect().execute(
        f"SELECT instance_id, process_id, nc_idx, model_name, exec_id_first FROM "
        f"read_parquet('{ui_workspace / 'run-a' / 'DeviceProfiles.parquet'}')").fetchall()[0]
    return dict(zip(("instance_id", "process_id", "nc_idx", "model_name", "exec_id"), r))
