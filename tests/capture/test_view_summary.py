"""`neuron-explorer view --output-format summary-*` on good and bad capture directories."""

import json
import os
import subprocess
import sys

import pytest

from ..conftest import (
    clean_env,
    cli_in_process as cli,  # conversions in this process (decision 0173)
    shared_dir,
)

WORKLOAD = os.path.join(os.path.dirname(__file__), "workloads", "loop.py")


@pytest.fixture(scope="module")
def two_profiles(tmp_path_factory):
    """Made once per run whichever xdist worker asks first (``shared_dir``); the tests read it or a copy."""
    def build(root):
        for inst in ("i-0aaa1111bbbb2222c", "i-0ddd3333eeee4444f"):
            env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(root),
                            NEURON_EXPLORER_INSTANCE_ID=inst)
            subprocess.run([sys.executable, WORKLOAD, "exit", "4"], env=env, check=True, capture_output=True)

    return shared_dir(tmp_path_factory, "view_summary_two_profiles", build)[0]


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_summary_json_lists_every_profile_in_a_fixed_order(two_profiles):
    r = cli("view", "-d", str(two_profiles), "--output-format", "summary-json", check=True)
    s = json.loads(r.stdout)
    assert [p["instance_id"] for p in s["profiles"]] == ["i-0aaa1111bbbb2222c", "i-0ddd3333eeee4444f"]
    for p in s["profiles"]:
        (core,) = p["cores"]
        assert core["nc_idx"] == 0 and core["nd_idx"] == 0 and core["executions"] == 4
        assert 0 < core["busy_pct"] <= 100 and core["latency_ns"]["p50"] > 0
        assert core["top_graphs"][0]["executions"] == 4
    assert s["warnings"] == []


def test_summary_text_to_a_file(two_profiles, tmp_path):
    out = tmp_path / "summary.txt"
    cli("view", "-d", str(two_profiles), "--output-format", "summary-text", "--output-file", str(out), check=True)
    text = out.read_text()
    assert text.index("i-0aaa1111bbbb2222c") < text.index("i-0ddd3333eeee4444f")
    assert "nc_idx" in text and "busy %" in text and "p99" in text


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_a_corrupt_file_is_named_and_the_rest_still_processed(two_profiles, tmp_path, damage):
    root = _copy(two_profiles, tmp_path / "cap")
    victim_dir = sorted(root.iterdir())[0]
    (session,) = list(victim_dir.iterdir())
    victim = session / "ntrace.pb"
    data = victim.read_bytes()
    victim.write_bytes({"empty": b"", "truncated": data[: len(data) // 2], "garbage": os.urandom(300)}[damage])
    r = cli("view", "-d", str(root), "--output-format", "summary-json")
    assert r.returncode == 1  # something was skipped
    err_lines = [ln for ln in r.stderr.splitlines() if "ntrace.pb" in ln]
    assert len(err_lines) == 1 and str(victim) in err_lines[0]
    s = json.loads(r.stdout)
    assert [p["instance_id"] for p in s["profiles"]] == ["i-0ddd3333eeee4444f"]
    assert len(s["warnings"]) == 1 and str(victim) in s["warnings"][0]


def test_a_damaged_sampler_file_is_a_warning_not_a_skip(two_profiles, tmp_path):
    root = _copy(two_profiles, tmp_path / "cap")
    (session,) = list(sorted(root.iterdir())[0].iterdir())
    (session / "cpu_util.pb").write_bytes(b"\xff\xff\xff")
    r = cli("view", "-d", str(root), "--output-format", "summary-json")
    assert r.returncode == 1
    s = json.loads(r.stdout)
    assert len(s["profiles"]) == 2 and "cpu_util.pb" in s["warnings"][0]


def test_missing_or_empty_directory_says_what_a_capture_looks_like(tmp_path):
    r = cli("view", "-d", str(tmp_path / "nope"), "--output-format", "summary-text")
    assert r.returncode == 2 and "no such directory" in r.stderr and "_pid_" in r.stderr
    (tmp_path / "empty").mkdir()
    r = cli("view", "-d", str(tmp_path / "empty"), "--output-format", "summary-text")
    assert r.returncode == 2 and "no profiles found" in r.stderr and "ntrace.pb" in r.stderr


def test_a_capture_without_system_events_is_summarized(tmp_path):
    out = tmp_path / "out"
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                    NEURON_RT_INSPECT_SYSTEM_PROFILE="0")
    subprocess.run([sys.executable, WORKLOAD, "exit", "2"], env=env, check=True, capture_output=True)
    (session,) = [p for p in out.glob("*/*")]
    assert not (session / "ntrace.pb").exists() and (session / "trace_info.pb").exists()
    r = cli("view", "-d", str(out), "--output-format", "summary-json", check=True)
    (p,) = json.loads(r.stdout)["profiles"]
    assert p["cores"][0]["executions"] == 0
