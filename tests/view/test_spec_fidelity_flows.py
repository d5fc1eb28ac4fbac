"""Flow arrows in `view`'s Chrome JSON, read the way Perfetto's JSON importer and Chrome's trace viewer
read them (issue #17 item 4).

`import_flows` applies the importers' rules: events in timestamp order (file order among equal ones);
an `X` slice is open on its (pid, tid) from `ts` to `ts + dur`; flow events v2 ride on a slice
(`bind_id` with `flow_out` begins a flow at it, `flow_in` ends it there, both is a step); flow events
v1 are events of their own keyed by (`id`, `cat`, `name`): `s` begins at the innermost slice open on
its thread at its `ts`, `t` steps there, `f` with `bp: e` ends there.  An end or step of a flow that
has not begun, or a flow event with no slice to bind to, is an error, as the importers count them.
The arrows found are compared with the flows of the Parquet output of the same capture."""

from __future__ import annotations

import json
from collections import defaultdict

import duckdb
import pytest

from ..conftest import cli_in_process as cli  # conversions in this process (decision 0173)
from .test_spec_fidelity_view import _capture


def import_flows(events: list[dict]) -> dict:
    """{flow key: [(name, pid, tid, ts) of each bound slice, in order]}; raises AssertionError on
    a flow event the importers would drop."""
    order = sorted(range(len(events)), key=lambda i: (events[i].get("ts", 0), i))
    stacks: dict[tuple, list] = defaultdict(list)  # (pid, tid) -> open slices [(end, slice)]
    flows: dict = {}
    ended: set = set()

    def top(pid, tid, ts):
        st = stacks[(pid, tid)]
        while st and st[-1][0] <= ts:
            st.pop()
        return st[-1][1] if st else None

    def bind(key, sl, begin: bool, end: bool, what: str):
        assert sl is not None, f"{what}: no slice to bind to"
        if begin and not end:
            assert key not in flows, f"{what}: flow {key} begins twice"
            flows[key] = [sl]
            return
        assert key in flows and key not in ended, f"{what}: flow {key} continues without a start"
        flows[key].append(sl)
        if end and not begin:
            ended.add(key)

    for i in order:
        e = events[i]
        ph, pid, tid, ts = e.get("ph"), e.get("pid"), e.get("tid"), e.get("ts")
        if ph == "X":
            top(pid, tid, ts)
            sl = (e["name"], pid, tid, ts)
            stacks[(pid, tid)].append((ts + e["dur"], sl))
            if "bind_id" in e:
                fo, fi = bool(e.get("flow_out")), bool(e.get("flow_in"))
                assert fo or fi, "a bind_id without a direction"
                bind(("v2", int(e["bind_id"], 16)), sl, fo, fi, f"{e['name']} at {ts}")
        elif ph in ("s", "t", "f"):
            if ph == "f":
                assert e.get("bp") == "e", "an f event binds to the next slice unless bp is e"
            key = ("v1", int(e["id"], 16), e.get("cat"), e.get("name"))
            bind(key, top(pid, tid, ts), ph == "s", ph == "f", f"flow event {ph} at {ts}")
    open_flows = [k for k in flows if k not in ended]
    assert not open_flows, f"{len(open_flows)} flows never end, e.g. {open_flows[:3]}"
    return flows


def _arrows_vs_parquet(cap, tmp_path) -> tuple[int, int]:
    """Compare the JSON's arrows with the Parquet flows of the same capture; returns (execution
    flows, collective flows) checked."""
    assert cli("view", "-d", str(cap), "--output-format", "json",
               "--output-file", str(tmp_path / "t.json")).returncode == 0
    assert cli("view", "-d", str(cap), "--output-file", str(tmp_path / "pq")).returncode == 0
    trace = json.loads((tmp_path / "t.json").read_text())
    origin = trace["metadata"]["origin_ns"]
    flows = import_flows(trace["traceEvents"])
    pids = {(i, p): g for i, p, g in duckdb.sql(
        f"select instance_id, process_id, group_pid from '{tmp_path}/pq/ProfileMetadata.parquet'").fetchall()}
    rows = duckdb.sql(f"""select flow_id[1], name, instance_id, process_id, start_ts, trace_event_source from
                          read_parquet('{tmp_path}/pq/SystemProfileEvents/**/*.parquet')
                          where len(flow_id) > 0 and end_ts > start_ts order by flow_id[1], start_ts,
                          name = 'nc_exec_running'""").fetchall()
    want: dict[int, list] = defaultdict(list)
    ran_want: dict[int, list] = defaultdict(list)  # execution flow -> the regions that ran inside it
    for f, name, inst, pid, start, source in rows:
        (ran_want if source == "framework" else want)[f].append((name, pids[(inst, pid)],
                                                                   round((start - origin) / 1000.0, 3)))
    # a region inside an execution is in its flow (Parquet); JSON draws it as a "ran" arrow from the
    # call (a v1 arrow binds to the innermost slice open at the call's start: the call, or on a CPU
    # its runtime_execute, which spans the same time)
    calls = {v[1:]: f for f, vs in want.items() for v in vs if v[0] == "nrt_execute"}
    ran_got: dict[int, list] = defaultdict(list)
    for key, chain in list(flows.items()):
        if key[0] == "v1" and key[2:] == ("framework", "ran"):
            (cn, cp, _ct, cts), (rn, rp, _rt, rts) = chain
            assert cn in ("nrt_execute", "runtime_execute"), chain
            ran_got[calls[(cp, round(cts, 3))]].append((rn, rp, round(rts, 3)))
            del flows[key]
    assert {f: sorted(v) for f, v in ran_got.items()} == {f: sorted(v) for f, v in ran_want.items()}
    want = {f: v for f, v in want.items() if len(v) > 1}
    got = {}
    for key, chain in flows.items():
        fid = key[1]
        # (the importer rules above already hold each chain to time order: compare the members)
        got[fid] = sorted((n, p, round(t, 3)) for n, p, _tid, t in chain)
        assert chain[0][0] != "nc_exec_running", "an execution's arrow starts at its host call"
    assert got == {f: sorted(v) for f, v in want.items()}
    n_exec = sum(1 for v in want.values() if v[0][0] == "nrt_execute")
    assert all(sorted(n for n, _, _ in v) == ["nc_exec_running", "nrt_execute"]
               for v in want.values() if v[0][0] in ("nrt_execute", "nc_exec_running"))
    return n_exec, len(want) - n_exec


def test_json_flows_bind_each_host_call_to_its_execution_and_chain_each_collective_across_ranks(tmp_path):
    cap = _capture(tmp_path / "cap")  # 2 instances x 2 processes, collectives on every rank
    n_exec, n_cc = _arrows_vs_parquet(cap, tmp_path)
    assert n_exec == 4 * 120 and n_cc > 0


def test_the_importer_rules_catch_a_flow_that_ends_before_it_starts():
    ok = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0, "bind_id": "0x5", "flow_out": True},
          {"ph": "X", "name": "b", "pid": 1, "tid": 2, "ts": 1.5, "dur": 2.0, "bind_id": "0x5", "flow_in": True}]
    assert import_flows(ok) == {("v2", 5): [("a", 1, 1, 1.0), ("b", 1, 2, 1.5)]}
    with pytest.raises(AssertionError, match="without a start"):
        import_flows([dict(ok[0], ts=2.0), ok[1]])
    with pytest.raises(AssertionError, match="no slice"):
        import_flows([{"ph": "s", "id": "0x1", "cat": "flow", "name": "c", "pid": 1, "tid": 1, "ts": 1.0}])
    with pytest.raises(AssertionError, match="never end"):
        import_flows(ok[:1])


@pytest.mark.slow
def test_json_flows_of_a_real_torchrun_capture_read_as_the_importers_read_them(small_capture, tmp_path):
    n_exec, n_cc = _arrows_vs_parquet(small_capture, tmp_path)
    assert n_exec > 0 and n_cc > 0
