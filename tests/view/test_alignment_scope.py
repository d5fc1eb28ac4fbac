"""What ``view`` reads to align clocks and name graphs does not depend on what it writes: an
instance filter and ``--ignore-system-profile`` move no kept event, device op or counter sample,
and a run that writes no system events still names its graphs and device profiles by the model
table of ntrace.pb (decision 0090).  Synthetic two-host captures written by the real capture
writer, the real command."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from . import metamorph as mm

HOST_A, HOST_B = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"
SKEW_B = 3_000_000


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> tuple[Path, mm.ParquetOutput]:
    """One job on two hosts (host B's clock 3 ms ahead), and its unfiltered Parquet output."""
    root = tmp_path_factory.mktemp("scope")
    cap = mm.synth_capture(root / "cap", ((HOST_A, 0), (HOST_B, SKEW_B)), (5000, 5001), 200)
    mm.view_ok(cap, "parquet", root / "all")
    out = mm.read_parquet(root / "all")
    assert out.offsets()[HOST_A] == 0 and abs(out.offsets()[HOST_B] + SKEW_B) < 50_000
    return cap, out


def _run(cap: Path, out: Path, *flags: str) -> mm.ParquetOutput:
    mm.view_ok(cap, "parquet", out, *flags)
    return mm.read_parquet(out)


def test_an_instance_filter_without_the_reference_keeps_the_kept_instance_aligned(capture, tmp_path):
    cap, every = capture
    only_b = _run(cap, tmp_path / "b", "--system-trace-filter-instance-id", HOST_B)
    assert only_b.offsets() == {HOST_B: every.offsets()[HOST_B]}
    b = lambda r: r["instance_id"] == HOST_B  # noqa: E731
    assert only_b.keys() == every.keys(b)
    assert only_b.device_keys() == every.device_keys(b)
    assert only_b.counter_keys() == every.counter_keys(lambda i: i == HOST_B)
    meta = [m for m in only_b.metadata if m["instance_id"] == HOST_B]
    assert meta and all(m["clock_offset_method"] == "collectives" for m in meta)


def test_ignore_system_profile_keeps_device_ops_and_counters_aligned(capture, tmp_path):
    cap, every = capture
    dev_only = _run(cap, tmp_path / "d", "--ignore-system-profile")
    assert not dev_only.events
    assert dev_only.offsets() == every.offsets()
    assert dev_only.device_keys() == every.device_keys() and dev_only.device_keys()
    assert dev_only.counter_keys() == every.counter_keys() and dev_only.counter_keys()


def test_ignore_system_profile_names_graphs_and_device_profiles_by_the_model_table(capture, tmp_path):
    cap, every = capture
    dev_only = _run(cap, tmp_path / "d", "--ignore-system-profile")
    assert every.models and dev_only.model_keys() == every.model_keys()
    assert sorted(p["profile_id"] for p in dev_only.profiles) == sorted(p["profile_id"] for p in every.profiles)
    assert all(not p["profile_id"].startswith("123456") for p in dev_only.profiles)  # not the neff hash
    js = tmp_path / "json" / "system_profile.json"
    mm.view_ok(cap, "json", js, "--ignore-system-profile")
    assert {f.name for f in js.parent.iterdir()} - {js.name} == {
        f"device_profile_model_{p['profile_id']}.json" for p in every.profiles}


def test_ignore_system_profile_converts_the_device_profiles_of_a_damaged_ntrace(capture, tmp_path):
    """A run that writes no system events reads ntrace.pb only for its tables and collectives:
    when that file is damaged, it says so and still converts the process's device profiles."""
    import shutil

    cap, every = capture
    copy = tmp_path / "cap"
    shutil.copytree(cap, copy)
    victim = sorted(copy.glob(f"{HOST_B}_pid_5001/*/ntrace.pb"))[0]
    victim.write_bytes(victim.read_bytes()[:200])
    code, _, err = mm.view(copy, "parquet", tmp_path / "d", "--ignore-system-profile")
    assert code == 1 and "ntrace.pb" in err and "left out" in err, err
    got = mm.read_parquet(tmp_path / "d")
    assert Counter(p["process_id"] for p in got.profiles) == Counter(p["process_id"] for p in every.profiles)
