"""`view` and `check` from and to s3:// URLs, against moto's S3 server on 127.0.0.1: the same
dataset, warnings and exit code as a local run; the output rules (never replace what we did not
write, never look complete before the end) hold on object storage too."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from neuron_explorer.contracts.dataset import EVENT_OVERVIEW, table_file

from ..conftest import cli, shared_dir
from .cluster_util import Cluster, MotoS3, dataset_facts, files_under
from .test_cluster import damaged_session, run_and_kill, synth, warning_lines

pytest.importorskip("moto")
pytestmark = pytest.mark.slow


@pytest.fixture
def s3(tmp_path):
    m = MotoS3(tmp_path)
    yield m
    m.close()


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> tuple[Path, Path, str]:
    """Made once per run whichever xdist worker asks first (``shared_dir``); its tests only read it."""
    def build(root: Path) -> str:
        src = synth(root, 30_000)
        damaged_session(src)
        local = cli("view", "-d", str(src), "--output-file", str(root / "local"))
        assert local.returncode == 1, local.stderr[-3000:]
        return local.stderr

    root, stderr = shared_dir(tmp_path_factory, "s3_capture", build)
    return root / "cap", root / "local", stderr


def s3_files(local: Path) -> list[str]:
    """What an s3:// output holds of a local output's files: all but the events overview, which
    finalize cannot make without the events files it uploaded (the viewer falls back to the
    per-process summaries; docs/ui-event-overview.md)."""
    return [f for f in files_under(local) if f != table_file(EVENT_OVERVIEW)]


def as_url(facts: dict, src: Path) -> dict:
    """The facts of the local run with the capture named by its URL (in the warnings)."""
    return dict(facts, warnings=[(m.replace(str(src), "s3://caps/fleet"),) for (m,) in facts["warnings"]])


def test_view_from_and_to_s3(tmp_path, s3, capture):
    src, local, local_err = capture
    s3.s3.create_bucket(Bucket="caps")
    s3.upload_dir(src, "caps", "fleet")
    p = cli("view", "-d", "s3://caps/fleet", "--output-file", "s3://caps/out", env=s3.env())
    assert p.returncode == 1, p.stderr[-3000:]
    assert warning_lines(p.stderr) == warning_lines(local_err.replace(str(src), "s3://caps/fleet"))
    assert "wrote s3://caps/out " in p.stderr
    got = s3.download_dir("caps", "out", tmp_path / "got")
    assert files_under(got) == s3_files(local)  # the marker is there, the pending marker gone
    assert dataset_facts(str(got)) == as_url(dataset_facts(str(local)), src)
    paths = duckdb.sql(f"select distinct session_path from '{got}/ProfileMetadata.parquet'").fetchall()
    assert paths and all(r[0].startswith("s3://caps/fleet/i-") for r in paths), paths

    # the same output prefix again: ours, replaced (an object of an earlier run that this run does
    # not write is removed; our tables only)
    s3.s3.put_object(Bucket="caps", Key="out/SystemProfileEvents/instance=gone/process=1/part-9.parquet", Body=b"x")
    again = cli("view", "-d", "s3://caps/fleet", "--output-file", "s3://caps/out", env=s3.env())
    assert again.returncode == 1, again.stderr[-3000:]
    assert s3.keys("caps", "out") == s3_files(local)

    # an object we did not write: refused before anything is written or deleted
    s3.s3.put_object(Bucket="caps", Key="out/notes.txt", Body=b"mine")
    # (below a table's name too: the old check looked at the first component only, and finalize
    # deleted what it did not write below our table names; issue 29 item 8)
    s3.s3.put_object(Bucket="caps", Key="out/SystemProfileEvents/README.md", Body=b"mine")
    before = s3.keys("caps", "out")
    refused = cli("view", "-d", "s3://caps/fleet", "--output-file", "s3://caps/out", env=s3.env())
    assert refused.returncode == 2, refused.stderr
    assert ("2 files not written by neuron-explorer view (SystemProfileEvents/README.md, notes.txt)"
            in refused.stderr), refused.stderr
    assert s3.keys("caps", "out") == before
    # nor over the captures
    inside = cli("view", "-d", "s3://caps/fleet", "--output-file", "s3://caps/fleet/i-00000000000000000_pid_10000",
                 env=s3.env())
    assert inside.returncode == 2 and "overlaps the capture session" in inside.stderr, inside.stderr

    # a local output from s3 input, and s3 output from local input
    loc = cli("view", "-d", "s3://caps/fleet", "--output-file", str(tmp_path / "l"), env=s3.env())
    assert loc.returncode == 1 and dataset_facts(str(tmp_path / "l")) == as_url(dataset_facts(str(local)), src)
    up = cli("view", "-d", str(src), "--output-file", "s3://caps/out2", "--jobs", "2", env=s3.env())
    assert up.returncode == 1 and s3.keys("caps", "out2") == s3_files(local), up.stderr[-3000:]
    got2 = s3.download_dir("caps", "out2", tmp_path / "got2")
    assert dataset_facts(str(got2)) == dataset_facts(str(local))


def test_check_on_s3(s3, capture):
    src, _, _ = capture
    s3.s3.create_bucket(Bucket="caps")
    s3.upload_dir(src, "caps", "fleet")
    p = cli("check", "-d", "s3://caps/fleet", env=s3.env())
    assert p.returncode == 1
    assert p.stdout.count("ok: s3://caps/fleet/i-0") == 4, p.stdout
    assert ("error: s3://caps/fleet/i-damaged_pid_4242/20260101T000000Z/trace_info.pb: "
            "not a valid capture file (no TraceInfo header") in p.stdout
    empty = cli("check", "-d", "s3://caps/nothing", env=s3.env())
    assert empty.returncode == 1 and "no profile found" in empty.stdout
    nob = cli("check", "-d", "s3://no-such-bucket/x", env=s3.env())
    assert nob.returncode == 1 and "no such bucket" in nob.stdout and "Traceback" not in nob.stderr


def test_check_takes_the_endpoint_flag_over_the_environment(s3, capture):
    src, _, _ = capture
    s3.s3.create_bucket(Bucket="caps2")
    s3.upload_dir(src, "caps2", "fleet")
    env = s3.env()
    env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"  # nothing listens there: the flag must win
    p = cli("check", "-d", "s3://caps2/fleet", "--endpoint-url", s3.endpoint, env=env)
    assert p.stdout.count("ok: s3://caps2/fleet/i-0") == 4, p.stdout + p.stderr


def test_bad_urls_and_endpoints_are_one_line(s3, tmp_path):
    for args, words in ((["-d", "s3://Bad_Bucket/x"], "not a valid bucket name"),
                        (["-d", "s3://caps/a/../b"], "'.' or '..'"),
                        (["-d", "s3://caps/x", "--endpoint-url", "ftp://h"], "--endpoint-url='ftp://h' is not valid"),
                        (["-d", "s3://no-such-bucket/x"], "no such bucket")):
        p = cli("view", *args, "--output-file", str(tmp_path / "o"), env=s3.env())
        lines = p.stderr.strip().splitlines()
        assert p.returncode in (1, 2) and len(lines) == 1 and words in lines[0], p.stderr


def test_cluster_run_on_s3_and_a_lost_run_never_looks_complete(tmp_path, s3):
    """A cluster whose workers read and write S3; then a run whose worker is killed with no
    retries allowed: the prefix keeps the pending marker, never the completion marker."""
    src = synth(tmp_path, 600_000)
    local = cli("view", "-d", str(src), "--output-file", str(tmp_path / "local"), timeout=600)
    assert local.returncode == 0, local.stderr[-3000:]
    s3.s3.create_bucket(Bucket="caps")
    s3.upload_dir(src, "caps", "fleet")
    c = Cluster(2, env=s3.vars, log_dir=tmp_path)
    try:
        p = cli("view", "-d", "s3://caps/fleet", "--output-file", "s3://caps/out", "--scheduler", c.address,
                env=s3.env(), timeout=600)
    finally:
        c.close()
    assert p.returncode == 0, p.stderr[-3000:]
    got = s3.download_dir("caps", "out", tmp_path / "got")
    assert dataset_facts(str(got)) == dataset_facts(str(tmp_path / "local"))

    killed, rc, err, _ = run_and_kill("s3://caps/fleet", "s3://caps/out", tmp_path, view_env=s3.env(), after=0.1,
                                      cluster_env={**s3.vars, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"})
    assert killed and rc == 1, err[-3000:]
    keys = s3.keys("caps", "out")
    assert ".neuron-explorer-view.pending.json" in keys and ".neuron-explorer-view.json" not in keys, keys
    # the next run may replace a pending output, and completes it
    again = cli("view", "-d", "s3://caps/fleet", "--output-file", "s3://caps/out", env=s3.env(), timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert s3.keys("caps", "out") == s3_files(tmp_path / "local")
