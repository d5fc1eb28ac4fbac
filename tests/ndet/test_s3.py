"""`neuron-det --log-prefix s3://...` against moto's S3 server on 127.0.0.1: the same verdict as on
the local directory, for a directory URL and a file-name prefix; a bad URL is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..view.cluster_util import MotoS3
from .helpers import JOB_ENV, logs_in
from .test_jobs_and_headers import _healthy_job

pytest.importorskip("moto")


def neuron_det(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "neuron_explorer.ndet.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_neuron_det_reads_logs_from_s3(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _healthy_job(logs, 3, JOB_ENV, 100)
    (logs / "notes.txt").write_text("not a log")
    assert len(logs_in(logs)) == 2
    s3 = MotoS3(tmp_path)
    try:
        s3.s3.create_bucket(Bucket="runs")
        s3.upload_dir(logs, "runs", "job1/ndet")
        local = neuron_det(s3.env(), "--log-prefix", str(logs), "-o", str(tmp_path / "local.json"))
        remote = neuron_det(s3.env(), "--log-prefix", "s3://runs/job1/ndet/", "-o", str(tmp_path / "s3.json"))
        pre = neuron_det(s3.env(), "--log-prefix", "s3://runs/job1/ndet/ndet_", "-o", str(tmp_path / "pre.json"))
        none = neuron_det(s3.env(), "--log-prefix", "s3://runs/job2/", "-o", str(tmp_path / "n.json"))
        bad = neuron_det(s3.env(), "--log-prefix", "s3://no-such-bucket/x/", "-o", str(tmp_path / "b.json"))
    finally:
        s3.close()
    assert local.returncode == 0, local.stderr
    for r in (remote, pre):
        assert r.returncode == 0, r.stderr
        assert r.stdout == local.stdout and "no errors detected ✓" in r.stdout
    meta = json.loads((tmp_path / "s3.json").read_text())["metadata"]
    assert meta["log_prefix"] == "s3://runs/job1/ndet/" and meta["clean"]
    assert [len(j["logs"]) for j in meta["jobs"]] == [2]
    assert none.returncode == 2 and "no NDET logs or Flight Recorder dumps match --log-prefix 's3://runs/job2/'" \
        in none.stderr
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "no such bucket" in bad.stderr, bad.stderr
