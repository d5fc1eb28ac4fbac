"""Every `view` output format on a real 2-rank torchrun capture, read back with DuckDB, the perfetto
package's protos and json; processing-time filters; damaged input."""

import json
import os
import re
import shutil

import duckdb
import pytest

from ..capture.helpers import sessions, type_counts
from ..conftest import (
    cli as cli_subprocess,
    cli_in_process as cli,  # conversions in this process (decision 0173)
    train_capture,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """Made once per run for every test of that job (``train_capture``); the tests only read it."""
    out, _ = train_capture(tmp_path_factory, "--steps", "4", "--no-ddp")
    truth = {s.info.rank: (s.pid, named_counts(s)) for s in sessions(out)}
    return out, truth


def named_counts(s) -> dict[str, int]:
    """Events per name as view names them: a framework region (``framework_op``) by its label."""
    counts = dict(type_counts(s))
    tid = s.type_id("framework_op")
    if tid is not None and counts.pop("framework_op", 0):
        for sid in s.events["a"][s.events["type"] == tid].tolist():
            label = s.strings[int(sid)] or "framework_op"
            counts[label] = counts.get(label, 0) + 1
    return counts


def events_glob(d):
    return f"read_parquet('{d}/SystemProfileEvents/**/*.parquet', hive_partitioning=true)"


def test_parquet_counts_match_what_each_rank_did(capture, tmp_path):
    out, truth = capture
    pq = tmp_path / "pq"
    r = cli("view", "-d", str(out), "--output-file", str(pq), check=True)  # parquet is the default
    assert "wrote" in r.stderr
    con = duckdb.connect()
    rows = con.execute(f"""select worker_gid, process_id,
                              count(*) filter (where name = 'nc_exec_running'),
                              count(*) filter (where name = 'cc_running'),
                              count(*) filter (where name = 'nrt_execute')
                       from {events_glob(pq)} group by all order by 1""").fetchall()
    assert [(r_[0], r_[1]) for r_ in rows] == [(0, truth[0][0]), (1, truth[1][0])]
    for rank, _pid, ex, cc, host in rows:
        assert ex == truth[rank][1]["nc_exec_running"] == host
        assert cc == truth[rank][1]["cc_running"]
    cols = [c[0] for c in con.execute(f"describe select * from {events_glob(pq)}").fetchall()]
    for c in ("id", "name", "start_ts", "end_ts", "duration_ns", "trace_event_source", "instance_id", "process_id",
              "thread_id", "nc_idx", "pcore_idx", "worker_gid", "flow_id", "framework_stream_id",
              "extra_attributes_json"):
        assert c in cols
    # each execution's host call and core execution share a flow; each collective's flow spans both ranks
    n_exec_flows = con.execute(f"""select count(*) from (select flow_id[1] f, count(*) c from {events_glob(pq)}
                                where name in ('nrt_execute','nc_exec_running') group by 1)
                                where c = 2""").fetchone()[0]
    assert n_exec_flows == truth[0][1]["nc_exec_running"] + truth[1][1]["nc_exec_running"]
    cc_flows = con.execute(f"""select count(distinct worker_gid) from {events_glob(pq)} where name = 'cc_running'
                           group by flow_id[1]""").fetchall()
    assert cc_flows and all(c == (2,) for c in cc_flows)
    meta = con.execute(f"select worker_gid from {events_glob(pq)} where model_name is not null limit 1").fetchall()
    assert meta
    md = con.execute("select rank, events, clock_offset_method "
                     f"from '{pq}/ProfileMetadata.parquet' order by rank").fetchall()
    assert [m[0] for m in md] == [0, 1] and all(m[2] == "reference" for m in md)
    counters = con.execute(
        f"select distinct counter from read_parquet('{pq}/SystemProfileCounters/**/*.parquet')").fetchall()
    assert ("cpu_util.process",) in counters and ("host_mem.process_rss",) in counters


def test_perfetto_trace_parses_and_holds_both_ranks_slices_flows_and_counters(capture, tmp_path):
    from .test_perfetto_semantics import decode

    out, truth = capture
    path = tmp_path / "system_profile.pftrace"
    cli("view", "-d", str(out), "--output-format", "perfetto", "--output-file", str(path), check=True)
    d = decode(path.read_bytes())
    procs = {u: td for u, td in d.tracks.items() if td.HasField("process")}
    counters = {td.name for td in d.tracks.values() if td.HasField("counter")}
    assert len(procs) == 2
    assert any("neuron_hw" in td.name for td in d.tracks.values())
    assert {"cpu_util.process", "host_mem.process_rss"} <= counters
    assert all(d.counters[u] for u, td in d.tracks.items() if td.HasField("counter"))
    rank_of = {u: int(re.search(r" rank (\d+)", td.name).group(1)) for u, td in procs.items()}
    flows = {}
    by_rank = {}
    for s in d.slices:
        rank = rank_of[d.process_of(s.track)]
        by_rank.setdefault(rank, []).append(s)
        for f in s.flows:
            flows.setdefault(f, set()).add((rank, s.name))
    for rank, evs in by_rank.items():
        c = {}
        for s in evs:
            c[s.name] = c.get(s.name, 0) + 1
        assert c["nc_exec_running"] == truth[rank][1]["nc_exec_running"]
        assert c["cc_running"] == truth[rank][1]["cc_running"]
        ex = [s for s in evs if s.name == "nc_exec_running"][0]
        assert re.search(r"_[0-9a-f]{16}(_bwd)?$", ex.args["model_name"]) and "exec_id" in ex.args
    # (a region that ran inside an execution, such as Optimizer.step#SGD.step, is in its flow too)
    exec_flows = [f for f, m in flows.items() if {"nrt_execute", "nc_exec_running"} <= {n for _, n in m}]
    cc_flows = [f for f, m in flows.items() if {r for r, _ in m} == {0, 1} and {n for _, n in m} == {"cc_running"}]
    assert len(exec_flows) == truth[0][1]["nc_exec_running"] + truth[1][1]["nc_exec_running"]
    assert len(cc_flows) == truth[0][1]["cc_running"]


def test_json_output_is_a_chrome_trace(capture, tmp_path):
    out, truth = capture
    path = tmp_path / "system_profile.json"
    cli("view", "-d", str(out), "--output-format", "json", "--output-file", str(path), check=True)
    doc = json.loads(path.read_text())
    evs = [e for e in doc["traceEvents"] if e.get("name") == "nc_exec_running"]
    assert len(evs) == sum(t[1]["nc_exec_running"] for t in truth.values())
    assert all(e["ph"] == "X" and e["dur"] > 0 and "model_name" in e["args"] for e in evs)
    assert "origin_ns" in doc["metadata"]


def test_processing_filters_remove_exactly_what_they_name(capture, tmp_path):
    out, truth = capture
    con = duckdb.connect()

    def counts(*flags, status=0):
        d = tmp_path / ("pq" + str(abs(hash(flags))))
        r = cli("view", "-d", str(out), "--output-file", str(d), *flags)
        assert r.returncode == status, r.stderr
        return dict(con.execute(f"select name, count(*) from {events_glob(d)} group by 1").fetchall()) \
            if os.path.isdir(d / "SystemProfileEvents") else {}

    assert counts("--system-trace-filter-event-type", "nrt_execute,nrt_load") == {
        "nrt_execute": truth[0][1]["nrt_execute"] + truth[1][1]["nrt_execute"],
        "nrt_load": truth[0][1]["nrt_load"] + truth[1][1]["nrt_load"]}  # compiled graphs and eager optimizer
    core0 = counts("--system-trace-filter-neuron-core", "0")
    assert core0 == {k: v for k, v in truth[0][1].items() if v}
    instance = sessions(out)[0].instance_id
    assert counts("--system-trace-filter-instance-id", "i-nothere", status=1) == {}  # and a warning (item 7)
    assert sum(counts("--system-trace-filter-instance-id", instance).values()) == sum(
        sum(t[1].values()) for t in truth.values())
    assert counts("--ignore-system-profile") == {}


def test_bad_filter_values_fail_with_the_accepted_forms(capture):
    out, _ = capture
    r = cli("view", "-d", str(out), "--system-trace-filter-neuron-core", "x")
    assert r.returncode == 2 and "--system-trace-filter-neuron-core='x'" in r.stderr and "0-3" in r.stderr
    r = cli("view", "-d", str(out), "--system-trace-filter-event-type", "nope")
    assert r.returncode == 2 and "unknown event type 'nope'" in r.stderr


def test_a_corrupt_profile_is_listed_in_the_warnings_table_and_the_rest_written(capture, tmp_path):
    out, truth = capture
    root = tmp_path / "cap"
    shutil.copytree(out, root)
    victim = next(root.glob("*/*/trace_info.pb"))
    victim.write_bytes(victim.read_bytes()[:7])
    pq = tmp_path / "pq"
    r = cli("view", "-d", str(root), "--output-file", str(pq))
    assert r.returncode == 1
    assert str(victim) in r.stderr
    con = duckdb.connect()
    assert con.execute(f"select count(distinct worker_gid) from {events_glob(pq)}").fetchone()[0] == 1
    (msg,) = con.execute(f"select message from '{pq}/ViewWarnings.parquet'").fetchone()
    assert str(victim) in msg


def test_show_profile_schema_lists_tables_and_columns():
    r = cli("view", "--show-profile-schema", check=True)
    assert "SystemProfileEvents" in r.stdout and "extra_attributes_json" in r.stdout
    assert "SystemProfileCounters" in r.stdout and "ProfileMetadata" in r.stdout


def test_ingest_only_writes_into_the_workspace(capture, tmp_path):
    out, _ = capture
    ws = tmp_path / "ws"
    cli("view", "-d", str(out), "--ingest-only", "--data-path", str(ws), "--display-name", "run-a", check=True)
    con = duckdb.connect()
    (name,) = con.execute(f"select distinct display_name from '{ws}/run-a/ProfileMetadata.parquet'").fetchone()
    assert name == "run-a"


def test_parallel_jobs_write_the_same_events(capture, tmp_path):
    out, _ = capture
    con = duckdb.connect()
    rows = {}
    for jobs in ("1", "2"):
        d = tmp_path / f"pq{jobs}"
        cli_subprocess("view", "-d", str(out), "--output-file", str(d), "--jobs", jobs, check=True)
        rows[jobs] = con.execute(f"""select worker_gid, name, count(*), count(distinct id), min(start_ts)
                                     from {events_glob(d)} group by all order by all""").fetchall()
        p = tmp_path / f"trace{jobs}.pftrace"
        cli_subprocess("view", "-d", str(out), "--output-format", "perfetto", "--output-file", str(p), "--jobs", jobs,
                       check=True)
    assert rows["1"] == rows["2"]
    assert (tmp_path / "trace1.pftrace").read_bytes() == (tmp_path / "trace2.pftrace").read_bytes()
