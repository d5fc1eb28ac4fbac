"""`view` flags and outputs as the spec names them and as other tools read them (issue #17 items 1, 3,
5, 7, 8): the grouping flags, real pids, device-profile file names, filters that match nothing and
output directories that do not exist yet.

Captures are synthetic, written through the real capture writer (`bench.synth_capture`, real
`.ntff` files through `capture.device`); every check runs the real `neuron-explorer` command and
reads what it wrote (JSON with `json`, Perfetto with the perfetto package's protos, Parquet with
DuckDB)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from neuron_explorer.capture.device import OpTable, write_device_trace
from neuron_explorer.contracts.tracks import PID_SPACE

from ..conftest import (
    cli as cli_subprocess,
    cli_in_process as cli,  # conversions in this process (decision 0173)
)
from .test_perfetto_semantics import decode

# the synthetic processes' models (bench.synth_capture): (model id, name, neff)
GRAPHS = ((0, "train_step_forward", "neff_1234567"), (1, "train_step_backward", "neff_1234568"))


def _capture(root: Path, instances=("i-aaa", "i-bbb"), pids=(5000, 5001), devices: bool = False) -> Path:
    """Processes of ``pids`` on each instance (the same pids on every instance: they collide), rank
    r on core r % 2; with ``devices``, a model-mode .ntff per graph and process."""
    from bench.synth_capture import write_process

    world = len(instances) * len(pids)
    for i, inst in enumerate(instances):
        for j, pid in enumerate(pids):
            rank = i * len(pids) + j
            d = write_process(str(root), inst, rank, world, pid, 300, 0, rank)
            if devices:
                for mid, name, neff in GRAPHS:
                    t = OpTable()
                    x = t.add_execution(mid, mid, name, neff, 1_000_001_000_000, 1_000_001_100_000)
                    t.add_op(1_000_001_000_000, 1_000_001_050_000, "aten::mm", "compute", x, flops=10.0)
                    write_device_trace(f"{d}/{neff[5:]}_instid_0_vnc_{rank % 8}.ntff", t, instance_id=inst, pid=pid,
                                       nc_idx=rank % 8, mode="model", device_kind="cpu", source="torch")
    return root


@pytest.fixture(scope="module")
def cap(tmp_path_factory) -> Path:
    return _capture(tmp_path_factory.mktemp("spec") / "cap")


def _json(path: Path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


def _one_line(r, code: int, *words: str) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    hits = [ln for ln in lines if all(w in ln for w in words)]
    assert hits, r.stderr
    return hits[0]


# ---- item 1: the grouping flags

def test_the_spec_grouping_flags_run_as_written_and_are_stored_in_the_dataset(cap, tmp_path):
    r = cli("view", "-d", str(cap), "--output-format", "parquet", "--output-file", str(tmp_path / "pq"),
            "--system-trace-primary-group", "instance_id,process_id", "--system-trace-secondary-group", "nc_idx")
    assert r.returncode == 0, r.stderr
    rows = duckdb.sql(f"""select distinct system_trace_primary_group, system_trace_secondary_group
                          from '{tmp_path}/pq/ProfileMetadata.parquet'""").fetchall()
    assert rows == [("instance_id,process_id", "nc_idx")]
    r = cli("view", "-d", str(cap), "--output-file", str(tmp_path / "pq2"))
    rows = duckdb.sql(f"""select distinct system_trace_primary_group, system_trace_secondary_group
                          from '{tmp_path}/pq2/ProfileMetadata.parquet'""").fetchall()
    assert rows == [("instance_id,process_id", "cpu_vs_device")]  # the defaults, recorded


@pytest.mark.parametrize("flag,value,word", [
    ("--system-trace-primary-group", "thread_id", "'thread_id'"),
    ("--system-trace-primary-group", "instance", "'instance'"),
    ("--system-trace-primary-group", "", "not valid"),
    ("--system-trace-secondary-group", "nc_idx,,thread_id", "not valid"),
    ("--system-trace-secondary-group", "nc_idx,nc_idx", "twice"),
])
def test_a_bad_grouping_is_a_one_line_usage_error(cap, tmp_path, flag, value, word):
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", str(tmp_path / "t.json"), flag, value)
    line = _one_line(r, 2, flag, word)
    assert "accepted" in line or "twice" in line
    assert not (tmp_path / "t.json").exists()


def test_primary_group_instance_makes_one_row_per_instance_in_json_and_perfetto(cap, tmp_path):
    args = ("--system-trace-primary-group", "instance_id")
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", str(tmp_path / "t.json"), *args)
    assert r.returncode == 0, r.stderr
    evs = _json(tmp_path / "t.json")
    names = {e["pid"]: e["args"]["name"] for e in evs if e.get("name") == "process_name"}
    assert sorted(names.values()) == ["i-aaa", "i-bbb"]
    assert {e["pid"] for e in evs if e.get("ph") == "X"} == set(names)
    per_row = Counter(names[e["pid"]] for e in evs if e.get("ph") in ("X", "i"))
    assert per_row == {"i-aaa": 600, "i-bbb": 600}  # both processes of each instance in its row
    r = cli("view", "-d", str(cap), "--output-format", "perfetto", "--output-file", str(tmp_path / "t.pftrace"), *args)
    assert r.returncode == 0, r.stderr
    d = decode((tmp_path / "t.pftrace").read_bytes())
    procs = {u: td for u, td in d.tracks.items() if td.HasField("process")}
    assert {td.process.pid for td in procs.values()} == set(names)
    assert {td.process.process_name.split(" [")[0] for td in procs.values()} == {"i-aaa", "i-bbb"}
    per_pid = Counter(d.tracks[d.process_of(s.track)].process.pid for s in d.slices)
    assert sorted(per_pid.values()) == [600, 600]


def test_secondary_group_puts_each_core_on_its_own_track(cap, tmp_path):
    pq = tmp_path / "pq"
    assert cli("view", "-d", str(cap), "--output-file", str(pq)).returncode == 0
    truth = Counter({(f"i-{i}", f"nc_{nc}"): n for i, nc, n in duckdb.sql(
        f"""select right(instance_id, 3), nc_idx, count(*) from read_parquet('{pq}/SystemProfileEvents/**/*.parquet')
            group by all""").fetchall()})
    args = ("--system-trace-primary-group", "instance_id", "--system-trace-secondary-group", "nc_idx")
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", str(tmp_path / "t.json"), *args)
    assert r.returncode == 0, r.stderr
    evs = _json(tmp_path / "t.json")
    rows = {e["pid"]: e["args"]["name"] for e in evs if e.get("name") == "process_name"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e.get("name") == "thread_name"}
    got = Counter((rows[e["pid"]], tracks[(e["pid"], e["tid"])]) for e in evs if e.get("ph") in ("X", "i"))
    assert got == truth
    r = cli("view", "-d", str(cap), "--output-format", "perfetto", "--output-file", str(tmp_path / "t.pftrace"), *args)
    d = decode((tmp_path / "t.pftrace").read_bytes())
    got = Counter((d.tracks[d.process_of(s.track)].process.process_name.split(" [")[0],
                   d.track_name(s.track).split(" #")[0]) for s in d.slices)
    assert got == truth


# ---- item 5: real pids

def test_perfetto_and_json_show_real_pids_and_disambiguate_only_where_instances_collide(cap, tmp_path):
    pq = tmp_path / "pq"
    assert cli("view", "-d", str(cap), "--output-file", str(pq)).returncode == 0
    meta = duckdb.sql(f"select instance_id, process_id, group_pid from '{pq}/ProfileMetadata.parquet'").fetchall()
    # pids 5000 and 5001 run on both instances: the first instance keeps them, the second shows + 2**22
    assert sorted(meta) == [("i-aaa", 5000, 5000), ("i-aaa", 5001, 5001),
                            ("i-bbb", 5000, 5000 + PID_SPACE), ("i-bbb", 5001, 5001 + PID_SPACE)]
    shown = {f"{inst} pid {pid}": g for inst, pid, g in meta}
    assert cli("view", "-d", str(cap), "--output-format", "json",
               "--output-file", str(tmp_path / "t.json")).returncode == 0
    names = {e["pid"]: e["args"]["name"] for e in _json(tmp_path / "t.json") if e.get("name") == "process_name"}
    assert {n.split(" rank")[0]: p for p, n in names.items()} == shown
    assert all(p % PID_SPACE == int(n.split("pid ")[1].split()[0]) for p, n in names.items())
    assert cli("view", "-d", str(cap), "--output-format", "perfetto",
               "--output-file", str(tmp_path / "t.pftrace")).returncode == 0
    d = decode((tmp_path / "t.pftrace").read_bytes())
    procs = {td.process.process_name.split(" rank")[0]: td.process.pid
             for td in d.tracks.values() if td.HasField("process")}
    assert procs == shown


def test_a_single_instance_shows_exactly_the_real_pids(tmp_path):
    cap = _capture(tmp_path / "cap", instances=("i-one",), pids=(4242, 777))
    assert cli("view", "-d", str(cap), "--output-format", "json",
               "--output-file", str(tmp_path / "t.json")).returncode == 0
    evs = _json(tmp_path / "t.json")
    assert {e["pid"] for e in evs if e.get("ph") == "X"} == {4242, 777}


# ---- item 3: device profile names

def test_device_profiles_are_named_by_model_id_made_unique_only_where_they_collide(tmp_path):
    cap = _capture(tmp_path / "cap", instances=("i-one",), pids=(4242, 777), devices=True)
    out = tmp_path / "j"
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", f"{out}/")
    assert r.returncode == 0, r.stderr
    # graph 0 and 1 ran in both processes (on cores 0 and 1): the core tells them apart
    assert sorted(p.name for p in out.glob("device_profile_model_*")) == [
        "device_profile_model_0_nc0.json", "device_profile_model_0_nc1.json",
        "device_profile_model_1_nc0.json", "device_profile_model_1_nc1.json"]
    links = {e["args"]["device_profile"] for e in _json(out / "system_profile.json")
             if e.get("name") == "nc_exec_running" and "device_profile" in e["args"]}
    assert links == {"0_nc0", "0_nc1", "1_nc0", "1_nc1"}  # the system trace names the files
    # one core: no collision, the spec's plain name; the id is the model id of ProfileModels
    r = cli("view", "-d", str(cap), "--output-format", "perfetto", "--output-file", f"{tmp_path}/p/",
            "--system-trace-filter-neuron-core", "1")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "p").glob("device_profile_model_*")) == [
        "device_profile_model_0.pftrace", "device_profile_model_1.pftrace"]
    pq = tmp_path / "pq"
    assert cli("view", "-d", str(cap), "--output-file", str(pq),
               "--system-trace-filter-neuron-core", "1").returncode == 0
    joined = duckdb.sql(f"""select d.profile_id, m.model_id from '{pq}/DeviceProfiles.parquet' d
                            join '{pq}/ProfileModels.parquet' m using (process_id)
                            where m.model_name = d.model_name order by 1""").fetchall()
    assert joined == [("0", 0), ("1", 1)]


def test_device_profiles_of_the_same_pid_on_two_instances_name_the_instance(tmp_path):
    cap = _capture(tmp_path / "cap", instances=("i-aaa", "i-bbb"), pids=(5000,), devices=True)
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", f"{tmp_path}/j/")
    assert r.returncode == 0, r.stderr
    # rank 0 on i-aaa and rank 1 on i-bbb: different cores, so the core is enough
    assert sorted(p.name for p in (tmp_path / "j").glob("device_profile_model_0*")) == [
        "device_profile_model_0_nc0.json", "device_profile_model_0_nc1.json"]
    cap2 = tmp_path / "cap2"
    for inst in ("i-aaa", "i-bbb"):  # same pid, same core on two instances
        _capture(cap2, instances=(inst,), pids=(5000,), devices=True)
    r = cli("view", "-d", str(cap2), "--output-format", "json", "--output-file", f"{tmp_path}/k/")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "k").glob("device_profile_model_0*")) == [
        "device_profile_model_0_i-aaa_pid5000_nc0.json", "device_profile_model_0_i-bbb_pid5000_nc0.json"]


# ---- item 7: filters that match nothing

def test_an_instance_filter_that_matches_nothing_names_the_instances_and_exits_1(cap, tmp_path):
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", str(tmp_path / "t.json"),
            "--system-trace-filter-instance-id", "i-unknown")
    line = _one_line(r, 1, "i-unknown", "matches no instance")
    assert "i-aaa, i-bbb" in line
    # one unknown id among known ones is still named (a typo must not pass unnoticed)
    r = cli("view", "-d", str(cap), "--output-format", "summary-json",
            "--system-trace-filter-instance-id", "i-aaa,i-typo")
    _one_line(r, 1, "i-typo", "matches no instance")
    assert "i-aaa" not in [ln.split(":")[2].strip() for ln in r.stderr.splitlines() if "matches no instance" in ln]


def test_core_and_type_filters_that_match_nothing_name_what_the_capture_holds(cap, tmp_path):
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", str(tmp_path / "t.json"),
            "--system-trace-filter-neuron-core", "5-7")
    assert "cores in the capture: 0, 1" in _one_line(r, 1, "--system-trace-filter-neuron-core", "matches no event")
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", str(tmp_path / "t.json"),
            "--system-trace-filter-event-type", "nrt_load")
    line = _one_line(r, 1, "--system-trace-filter-event-type", "matches no event")
    assert "nc_exec_running" in line and "nrt_execute" in line
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", str(tmp_path / "t.json"),
            "--system-trace-filter-neuron-core", "0", "--system-trace-filter-event-type", "nrt_execute")
    assert r.returncode == 0 and "matches no" not in r.stderr, r.stderr


# ---- item 8: output directories that do not exist yet

def test_output_file_in_directories_that_do_not_exist_creates_them(cap, tmp_path):
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", f"{tmp_path}/new/deeper/")
    assert r.returncode == 0, r.stderr
    assert "system_profile.json" in r.stderr and _json(tmp_path / "new/deeper/system_profile.json")
    r = cli("view", "-d", str(cap), "--output-format", "perfetto", "--output-file", f"{tmp_path}/a/b/run.pftrace")
    assert r.returncode == 0 and (tmp_path / "a/b/run.pftrace").stat().st_size > 0, r.stderr
    r = cli("view", "-d", str(cap), "--output-file", f"{tmp_path}/x/y/pq")
    assert r.returncode == 0 and (tmp_path / "x/y/pq/ProfileMetadata.parquet").exists(), r.stderr
    r = cli("view", "-d", str(cap), "--output-format", "summary-text", "--output-file", f"{tmp_path}/s/t/summary.txt")
    assert r.returncode == 0 and (tmp_path / "s/t/summary.txt").read_text(), r.stderr


def test_output_file_that_cannot_become_a_directory_is_one_line(cap, tmp_path):
    (tmp_path / "plain").write_text("keep")
    r = cli("view", "-d", str(cap), "--output-format", "json", "--output-file", f"{tmp_path}/plain/t.json")
    _one_line(r, 2, "--output-file", "plain")
    assert (tmp_path / "plain").read_text() == "keep"
    r = cli("view", "-d", str(cap), "--output-format", "summary-text", "--output-file", f"{tmp_path}/d/")
    _one_line(r, 2, "summary-text writes one file")


def test_scale_out_steps_name_device_profiles_and_pids_as_view_does(tmp_path):
    from neuron_explorer.view.scale import convert_session, discover, finalize, index_session, plan_offsets

    cap = _capture(tmp_path / "cap", devices=True)  # pids collide across the two instances
    assert cli("view", "-d", str(cap), "--output-file", str(tmp_path / "pq")).returncode == 0
    paths = discover(str(cap), [])
    plan = plan_offsets([index_session(p) for p in paths])
    finalize(str(tmp_path / "mr"), [convert_session(p, str(tmp_path / "mr"), i, plan) for i, p in enumerate(paths)])
    q = "select {} from '{}/{}.parquet' order by all"
    for cols, table in (("instance_id, process_id, group_pid", "ProfileMetadata"),
                        ("instance_id, process_id, profile_id", "DeviceProfiles")):
        want = duckdb.sql(q.format(cols, tmp_path / "pq", table)).fetchall()
        assert duckdb.sql(q.format(cols, tmp_path / "mr", table)).fetchall() == want and len(want) >= 4


# ---- issue 29 item 12: Parquet is the default output; the UI starts with --ui


def _isolated_env(tmp_path: Path) -> dict[str, str]:
    """HOME and XDG_DATA_HOME inside the test, so that an ingestion into the default workspace
    would show (and touch nothing of the machine's)."""
    from ..conftest import clean_env

    return clean_env(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"))


def test_view_as_the_spec_writes_it_writes_parquet_and_starts_no_server(tmp_path):
    import shutil
    import subprocess
    import sys

    work = tmp_path / "work"
    shutil.copytree(_capture(tmp_path / "c", instances=("i-aaa",)), work / "output")
    try:  # the spec's line, run in the directory holding ./output
        r = subprocess.run([sys.executable, "-m", "neuron_explorer", "view", "-d", "./output",
                            "--system-trace-filter-neuron-core", "0"], cwd=work, env=_isolated_env(tmp_path),
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:  # (the old default: the web server, serving until stopped)
        raise AssertionError(f"view started a server instead of writing Parquet: {e.stdout!r} {e.stderr!r}") from e
    assert r.returncode == 0, r.stderr
    assert "http://" not in r.stdout + r.stderr and "wrote system_profile_parquet" in r.stderr, r.stderr
    assert sorted(p.name for p in work.iterdir()) == ["output", "system_profile_parquet"]
    assert not (tmp_path / "data").exists() and not (tmp_path / "home").exists()  # no workspace ingestion
    pq = work / "system_profile_parquet"
    cores = duckdb.sql(f"select distinct nc_idx from '{pq}/SystemProfileEvents/**/*.parquet' "
                       "where nc_idx >= 0").fetchall()
    assert cores == [(0,)]  # the filter applied


@pytest.mark.parametrize("args, words", [
    (["-d", "CAP", "--port", "3002"], "--port is for the System Trace Viewer: add --ui"),
    (["-d", "CAP", "--host", "0.0.0.0"], "--host is for the System Trace Viewer: add --ui"),
    (["-d", "CAP", "--data-path", "WS"], "--data-path names the UI's workspace"),
    (["--ui", "-d", "CAP", "--output-format", "json"], "--ui serves the workspace"),
    (["--ui", "-d", "CAP", "--output-file", "OUT"], "drop --output-file"),
    (["--ui", "--ingest-only", "-d", "CAP"], "drop --ingest-only"),
    ([], "view needs -d DIR"),
])
def test_ui_flags_without_ui_and_outputs_with_ui_are_one_line_usage_errors(cap, tmp_path, args, words):
    args = [str(cap) if a == "CAP" else str(tmp_path / "ws") if a == "WS" else str(tmp_path / "o") if a == "OUT" else a
            for a in args]
    # a process of its own: a flag that wrongly started the UI would serve until the timeout
    r = cli_subprocess("view", *args, env=_isolated_env(tmp_path), timeout=60)
    line = _one_line(r, 2, words)
    assert "--ui" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_view_ui_ingests_the_capture_and_serves_it(cap, tmp_path):
    """The UI started the way the README says (`view --ui -d DIR`): the capture is ingested into the
    workspace and served at the URL printed."""
    import subprocess
    import sys
    import urllib.request

    from ..conftest import free_port
    from ..ui.helpers import stop_server

    ws = tmp_path / "ws"
    env = dict(_isolated_env(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))
    p = subprocess.Popen([sys.executable, "-m", "neuron_explorer", "view", "--ui", "-d", str(cap), "--data-path",
                          str(ws), "--display-name", "run-a", "--port", str(free_port())],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = p.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), (url, p.stderr.read() if p.poll() is not None else "")
        for _ in range(100):
            try:
                profiles = json.loads(urllib.request.urlopen(url + "api/profiles", timeout=5).read())["profiles"]
                break
            except OSError:
                import time

                time.sleep(0.1)
        assert [q["name"] for q in profiles] == ["run-a"] and profiles[0]["processes"] == 4
    finally:
        stop_server(p)
    assert (ws / "run-a" / "ProfileMetadata.parquet").is_file()


def test_help_says_parquet_is_the_default_and_ui_starts_the_viewer():
    text = " ".join(cli("view", "--help", check=True).stdout.split())
    assert "Parquet unless --output-format says otherwise" in text and "parquet (default)" in text
    assert "--ui start the System Trace Viewer" in text
    assert "neuron-explorer view --ui -d ./output" in text
