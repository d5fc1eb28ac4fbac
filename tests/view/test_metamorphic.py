"""Metamorphic checks on ``view`` (issue 29's harness): relations between runs of the real command
that must hold whatever the capture holds.

1. A processing-time filter gives exactly the unfiltered output filtered by the same predicate
   (every stable column of every event, flows, region links, device ops, counter samples,
   ProfileMetadata, the exit status), for the spec's example filters and for random ones drawn
   from the capture's own cores, event types and instances (seeded).
2. Parquet, Perfetto and JSON of one capture hold the same events (instance, process, track, name,
   start, end), processes under the same pids, counter samples and device-profile ops; summary-json's
   totals are the Parquet counts.
3. Converting captures together gives the union of converting each: no event lost or duplicated;
   timestamps equal, except where clock alignment has something new to align (one job's hosts
   captured apart), where each instance moves by the offset the run reports.

Captures: two real 2-rank jobs over gloo, their ranks plain processes (``conftest.ranks``; DDP, eager
and ``torch.compile`` aot_eager, ``record_function`` regions, model-mode device profiles), and
synthetic multi-host ones written by the real capture writer (``bench.synth_capture``: two instances
with clock skew, colliding pids, device profiles, CPU/memory samples).  Readers are independent of the exporters
(``metamorph``).  Every run passes ``--output-format``: the default output is not what these checks
are about.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from ..conftest import clean_env, ranks, shared_dir
from . import metamorph as mm

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("metamorph_job.py")
HOUR = 3600 * 10**9
# one job on two hosts, the second's wall clock 3 ms ahead; pids shared by both hosts
HOST_A, HOST_B = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2"
SKEW_B = 3_000_000
PIDS = (5000, 5001)
SYNTH_EVENTS = 400


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict[str, Path]:
    """Two real jobs captured with model-mode device profiles: eager DDP and compiled DDP.  Made once
    per run whichever xdist worker asks first (``shared_dir``); each worker converts a copy of its own."""
    def build(root: Path) -> None:
        for mode in ("eager", "compiled"):
            d = root / mode
            env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(d),
                            NEURON_RT_INSPECT_DEVICE_PROFILE="1")
            ranks(2, JOB, ["--mode", mode], env)  # plain rank processes: no launcher's import of torch (0183)
            assert len(list(d.glob("*/*/ntrace.pb"))) == 2 and list(d.glob("*/*/*.ntff"))

    shared = shared_dir(tmp_path_factory, "metamorphic_real", build)[0]
    root = tmp_path_factory.mktemp("metamorph_real")
    for mode in ("eager", "compiled"):
        shutil.copytree(shared / mode, root / mode, symlinks=True)
    return {mode: root / mode for mode in ("eager", "compiled")}


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> dict[str, Path]:
    """Synthetic captures: one job's two hosts captured apart (``host_a``, ``host_b``) and together
    (``multihost``, the same files); the same job run again an hour later on the same hosts under
    the same pids (``rerun``: pids repeat across runs in containers); and two more hosts running
    another job an hour later (``later``)."""
    root = tmp_path_factory.mktemp("metamorph_synth")
    job = {"MASTER_ADDR": HOST_A, "MASTER_PORT": "29500", "WORLD_SIZE": "4"}  # the job's rendezvous, on host A
    a = mm.synth_capture(root / "host_a", ((HOST_A, 0),), PIDS, SYNTH_EVENTS, world=4, job=job)
    b = mm.synth_capture(root / "host_b", ((HOST_B, SKEW_B),), PIDS, SYNTH_EVENTS, world=4, first_rank=2, job=job)
    both = root / "multihost"
    shutil.copytree(a, both, dirs_exist_ok=True)
    shutil.copytree(b, both, dirs_exist_ok=True)
    rerun = mm.synth_capture(root / "rerun", ((HOST_A, HOUR), (HOST_B, HOUR + SKEW_B)), PIDS, SYNTH_EVENTS, job=job)
    later = mm.synth_capture(root / "later", (("i-0ccccccccccccccc3", HOUR), ("i-0ddddddddddddddd4", HOUR + 1_000_000)),
                             (6000, 6001), SYNTH_EVENTS)
    return {"host_a": a, "host_b": b, "multihost": both, "later": later, "rerun": rerun}


class Converted:
    """A capture's unfiltered outputs, converted once and read on first use."""

    def __init__(self, src: Path, work: Path) -> None:
        self.src, self.work = src, work
        self._pq = self._json = self._pf = self._summary = None

    @property
    def pq(self) -> mm.ParquetOutput:
        if self._pq is None:
            mm.view_ok(self.src, "parquet", self.work / "pq")
            self._pq = mm.read_parquet(self.work / "pq")
        return self._pq

    @property
    def json(self) -> mm.TraceOutput:
        if self._json is None:
            mm.view_ok(self.src, "json", self.work / "json" / "system_profile.json")
            self._json = mm.read_json(self.work / "json" / "system_profile.json")
        return self._json

    @property
    def perfetto(self) -> mm.TraceOutput:
        if self._pf is None:
            mm.view_ok(self.src, "perfetto", self.work / "perfetto" / "system_profile.pftrace")
            self._pf = mm.read_perfetto(self.work / "perfetto" / "system_profile.pftrace", self.json.origin_ns)
        return self._pf

    @property
    def summary(self) -> dict:
        if self._summary is None:
            self._summary = json.loads(mm.view_ok(self.src, "summary-json", None))
        return self._summary


_converted: dict[Path, Converted] = {}


def converted(src: Path) -> Converted:
    if src not in _converted:
        work = src.parent / f"{src.name}.converted"
        work.mkdir(exist_ok=True)
        _converted[src] = Converted(src, work)
    return _converted[src]


CAPTURES = ("eager", "compiled", "multihost")


@pytest.fixture(scope="module", params=CAPTURES)
def capture(request) -> tuple[str, Converted]:
    name = request.param
    srcs = request.getfixturevalue("synth" if name == "multihost" else "real")
    return name, converted(srcs[name])


# ---------------------------------------------------------------------------------------- 2: formats agree

def test_json_and_perfetto_hold_exactly_the_parquet_events(capture):
    name, c = capture
    want = mm.projected(c.pq.events)
    assert want
    for fmt, got in (("json", c.json.events), ("perfetto", c.perfetto.events)):
        assert mm.per_name_track(got) == mm.per_name_track(want), f"{name}: {fmt} counts per name and track"
        assert got == want, f"{name}: {fmt} " + mm._diff(got, want, "events", lambda k: k[3])


def test_every_format_shows_each_process_under_the_pid_parquet_records(capture):
    name, c = capture
    shown = {(m["instance_id"], m["process_id"]): m["group_pid"] for m in c.pq.metadata}
    assert shown == c.json.pids == c.perfetto.pids
    assert len(set(shown.values())) == len(shown)  # colliding pids (multihost) are told apart
    assert {(r["instance_id"], r["process_id"]) for r in c.pq.events} == set(shown)


def test_counter_samples_agree_across_formats(capture):
    name, c = capture
    want = Counter((r["instance_id"], r["process_id"], r["counter"], r["ts"]) for r in c.pq.counters)
    assert want
    assert c.json.counters == want
    assert c.perfetto.counters == want


def test_device_profiles_agree_across_formats(capture):
    """Each device profile's ops: DeviceProfiles' count, DeviceProfileEvents, and the
    device_profile_model_<id>.json / .pftrace written beside the trace."""
    name, c = capture
    _ = c.json, c.perfetto  # (the runs that write the device files)
    assert c.pq.profiles
    for p in c.pq.profiles:
        pid = p["profile_id"]
        ops = Counter((r["name"], r["track"]) for r in c.pq.device_events if r["profile_id"] == pid)
        assert sum(ops.values()) == p["ops"] > 0, pid
        assert mm.device_json_ops(c.work / "json" / f"device_profile_model_{pid}.json") == ops, pid
        assert mm.device_perfetto_ops(c.work / "perfetto" / f"device_profile_model_{pid}.pftrace") == ops, pid
    written = {f.name for f in (c.work / "json").iterdir()} - {"system_profile.json"}
    assert written == {f"device_profile_model_{p['profile_id']}.json" for p in c.pq.profiles}


def test_summary_json_totals_are_the_parquet_counts(capture):
    name, c = capture
    assert mm.summary_counts(c.summary) == mm.parquet_counts(c.pq.events)
    assert mm.summary_devices(c.summary) == mm.parquet_devices(c.pq)
    assert c.summary["num_profiles"] == len(c.pq.metadata)
    assert {k: v["offset_ns"] for k, v in c.summary["clock_offsets"].items()} == c.pq.offsets()
    per_proc = Counter((r["instance_id"], r["process_id"]) for r in c.pq.events)
    assert {(m["instance_id"], m["process_id"]): m["events"] for m in c.pq.metadata} == per_proc


def test_the_event_summary_table_counts_the_events(capture):
    """SystemProfileEventSummary (what the UI paints a cold profile from) is exactly the events'
    counts, first starts, last ends, total and longest durations per track key and time bucket."""
    name, c = capture
    assert c.pq.event_summary
    assert mm.event_summary_problem(c.pq) == ""


def test_both_parquet_writers_write_the_same_rows(capture):
    """Our own SystemProfileEvents writer and Arrow's (NEURON_EXPLORER_PARQUET_WRITER=arrow) give
    the same rows, values and flows."""
    name, c = capture
    out = c.work / "pq-arrow"
    mm.view_ok(c.src, "parquet", out, NEURON_EXPLORER_PARQUET_WRITER="arrow")
    arrow = mm.read_parquet(out)
    assert sorted(map(repr, arrow.events)) == sorted(map(repr, c.pq.events))
    assert arrow.flow_groups() == c.pq.flow_groups() and arrow.region_links() == c.pq.region_links()


# ---------------------------------------------------------------------------------------- 1: filters

def _run_filter(c: Converted, f: mm.Filter, tag: str) -> dict[str, str]:
    """Run ``f`` to Parquet; what differs from the unfiltered output filtered (``compare_filtered``)."""
    out = c.work / f"filtered-{tag}"
    code, _, err = mm.view(c.src, "parquet", out, *f.flags())
    assert out.is_dir(), f"{f}: no output written (exit {code}): {err}"
    return mm.compare_filtered(c.pq, mm.read_parquet(out), f, code)


def _spec_filters(c: Converted) -> list[mm.Filter]:
    """The spec's and README's example filters, each core and each instance of the capture, and
    the two profile switches."""
    cores = sorted({r["nc_idx"] for r in c.pq.events})
    insts = sorted(c.pq.offsets())
    out = [mm.Filter(types=t) for t in ("nrt_execute", "nrt_execute,nrt_load", "hardware", "software",
                                        "hardware,^cc_exec", "software,^model_load",
                                        "hardware,tensor_read,tensor_write", "framework_op",
                                        "^framework_op,^hw_notify", "numerical_err")]
    out += [mm.Filter(cores=(str(n), (n,))) for n in cores]
    out += [mm.Filter(cores=(f"0-{max(cores) + 1}", tuple(range(max(cores) + 2))))]
    out += [mm.Filter(instances=(i,)) for i in insts] + [mm.Filter(instances=("i-nothere",))]
    out += [mm.Filter(cores=("0,1", (0, 1)), types="nrt_execute,cc_running"), mm.Filter(ignore_device=True),
            mm.Filter(ignore_system=True)]
    return out


def test_spec_filters_give_the_unfiltered_output_filtered(capture):
    name, c = capture
    bad = {}
    for i, f in enumerate(_spec_filters(c)):
        p = mm.unexplained(_run_filter(c, f, f"spec{i}"), f, c.pq)
        if p:
            bad[str(f)] = p
    assert not bad, f"{name}: " + json.dumps(bad, indent=1)


DRAWS = 6
OTHER_FORMATS = ("json", "perfetto", "summary-json")


@pytest.mark.parametrize("draw", range(DRAWS))
def test_random_filters_give_the_unfiltered_output_filtered_in_every_format(capture, draw):
    """A seeded random filter (over the capture's own cores, types and instances): the Parquet
    output is the unfiltered one filtered, and so is one more format's (the expected Parquet
    projected to its events, or counted as summary-json counts)."""
    name, c = capture
    rng = random.Random(f"{name}-{draw}")
    f = mm.draw_filter(rng, c.pq)
    problems = mm.unexplained(_run_filter(c, f, f"random{draw}"), f, c.pq)
    assert not problems, f"{name}: {f}: {problems}"
    fmt = rng.choice(OTHER_FORMATS)
    kept = [r for r in c.pq.events if f.keeps(r)]
    known_times = "times" in mm.KNOWN and mm.KNOWN["times"][0](f, c.pq)
    if fmt == "summary-json":
        code, out, err = mm.view(c.src, fmt, None, *f.flags())
        assert code == f.expected_exit(c.pq), err
        summ = json.loads(out)
        assert mm.summary_counts(summ) == mm.parquet_counts(kept), f"{name}: {f}"
        filtered_pq = c.work / f"filtered-random{draw}"  # (the same run to Parquet: its device profile names)
        names = {k[0]: k[1] for k in mm.parquet_devices(mm.read_parquet(filtered_pq))}
        want_dev = Counter((k[0], names.get(k[0]), *k[2:])
                           for k in mm.parquet_devices(c.pq, f.keeps_profile).elements())
        assert mm.summary_devices(summ) == want_dev, f"{name}: {f}"
        return
    path = c.work / f"random{draw}-{fmt}" / ("t.json" if fmt == "json" else "t.pftrace")
    code, _, err = mm.view(c.src, fmt, path, *f.flags())
    assert code == f.expected_exit(c.pq), err
    want = mm.projected(kept)
    # the device profiles beside it: the ones the same run writes to Parquet, under the same names
    written = {q["profile_id"] for q in mm.read_parquet(c.work / f"filtered-random{draw}").profiles}
    beside = {p.name for p in path.parent.iterdir()} - {path.name}
    assert beside == {f"device_profile_model_{n}{path.suffix}" for n in written}, f"{name}: {f}: {fmt}"
    if fmt == "json":
        got = mm.read_json(path).events
    else:  # the run's time origin depends on the processes kept: line the first events up
        got = mm.rebased(mm.read_perfetto(path, 0).events, want)
    assert mm.per_name_track(got) == mm.per_name_track(want), f"{name}: {f}: {fmt}"
    if not known_times:
        assert got == want, f"{name}: {f}: {fmt}: " + mm._diff(got, want, "events", lambda k: k[3])


# Cases these checks found broken (decision 0089), fixed by decisions 0090-0092. A case found
# broken later is a strict xfail naming its cause, with its entry in metamorph.KNOWN.

@pytest.mark.parametrize("types", ["framework_op,nc_exec_running", "^nrt_execute"])
def test_a_type_filter_without_nrt_execute_keeps_executions_linked_to_their_regions(real, types):
    c = converted(real["eager"])
    f = mm.Filter(types=types)
    assert _run_filter(c, f, f"links-{types}") == {}


def test_an_instance_filter_keeps_the_clock_alignment_of_the_whole_capture(synth):
    c = converted(synth["multihost"])
    assert c.pq.offsets()[HOST_B] != 0  # (the unfiltered run aligned host B)
    assert _run_filter(c, mm.Filter(instances=(HOST_B,)), "instance-b") == {}


def test_ignore_system_profile_keeps_device_profiles_and_counters_aligned(synth):
    c = converted(synth["multihost"])
    assert _run_filter(c, mm.Filter(ignore_system=True), "no-system") == {}


def test_ignore_system_profile_keeps_the_graphs_and_the_device_profile_names(real):
    c = converted(real["compiled"])
    assert _run_filter(c, mm.Filter(ignore_system=True), "no-system-models") == {}


# ---------------------------------------------------------------------------------------- 3: union

def _together(tmp: Path, *srcs: Path) -> Converted:
    """The captures copied into one directory (as when runs share NEURON_RT_INSPECT_OUTPUT_DIR)."""
    root = tmp / "together"
    for s in srcs:
        shutil.copytree(s, root / s.name)
    return converted(root)


def _shifted(out: mm.ParquetOutput, shift: dict[str, int]) -> mm.ParquetOutput:
    """``out`` with each instance's event, device-op and counter times moved by ``shift[instance]``."""
    def mv(rows, cols):
        return [dict(r, **{k: r[k] + shift.get(r["instance_id"], 0) for k in cols}) for r in rows]

    return dataclasses.replace(out, events=mv(out.events, ("start_ts", "end_ts")), counters=mv(out.counters, ("ts",)),
                               device_events=mv(out.device_events, ("start_ts", "end_ts")), event_summary=[])


def _assert_union(together: Converted, parts: list[mm.ParquetOutput], flows: bool = True) -> None:
    T = together.pq
    ids = [r["id"] for r in T.events]
    assert len(ids) == len(set(ids)) == sum(len(p.events) for p in parts), "events lost or duplicated"
    assert T.keys() == sum((p.keys() for p in parts), Counter())
    assert T.device_keys() == sum((p.device_keys() for p in parts), Counter())
    assert T.counter_keys() == sum((p.counter_keys() for p in parts), Counter())
    assert T.region_links() == sum((p.region_links() for p in parts), Counter())
    assert T.model_keys() == sum((p.model_keys() for p in parts), Counter())
    assert mm.event_summary_problem(T) == ""
    if flows:
        assert T.flow_groups() == sum((p.flow_groups() for p in parts), Counter())

    def procs(o):
        return Counter((m["instance_id"], m["process_id"], m["rank"], m["events"], m["start_wall_ns"])
                       for m in o.metadata)
    assert procs(T) == sum((procs(p) for p in parts), Counter())


def test_two_jobs_on_one_host_converted_together_are_the_union(real, tmp_path):
    """Eager and compiled jobs captured into one directory: the same events, times included (one
    host: nothing to align), device ops, counters, region links and processes; every format
    counts the union per name and track.  (Collective flows: the next test.)"""
    parts = [converted(real[m]) for m in ("eager", "compiled")]
    t = _together(tmp_path, real["eager"], real["compiled"])
    _assert_union(t, [p.pq for p in parts], flows=False)
    exec_flows = [k for k in t.pq.flow_groups().elements() if not {e[0] for e in k} & set(mm.COLLECTIVES)]
    assert Counter(exec_flows) == sum((Counter(k for k in p.pq.flow_groups().elements()
                                               if not {e[0] for e in k} & set(mm.COLLECTIVES))
                                       for p in parts), Counter())
    for fmt in ("json", "perfetto"):
        got = getattr(t, fmt).events
        assert got == sum((getattr(p, fmt).events for p in parts), Counter()), fmt
    assert mm.summary_counts(t.summary) == mm.parquet_counts(parts[0].pq.events + parts[1].pq.events)


def test_collective_flows_never_join_two_jobs(real, tmp_path):
    t = _together(tmp_path, real["eager"], real["compiled"])
    pids = {m: {mm_["process_id"] for mm_ in converted(real[m]).pq.metadata} for m in ("eager", "compiled")}
    mixed = [k for k in t.pq.flow_groups()
             if {e[7] for e in k} & pids["eager"] and {e[7] for e in k} & pids["compiled"]]
    assert not mixed, f"{len(mixed)} flows join both jobs, e.g. {[(e[0], e[7], e[14], e[15]) for e in mixed[0]]}"


def test_one_job_captured_apart_on_two_hosts_converted_together_is_the_union_aligned(synth, tmp_path):
    """Host A's and host B's captures of one job: apart, each host is its own reference (offset
    0); together, host B moves by the offset the run reports (estimated from collectives, close to
    the 3 ms skew), and nothing else changes: the union up to that shift.  Collectives of the job
    get flows across both hosts only together."""
    a, b = converted(synth["host_a"]), converted(synth["host_b"])
    assert a.pq.offsets() == {HOST_A: 0} and b.pq.offsets() == {HOST_B: 0}
    t = _together(tmp_path, synth["host_a"], synth["host_b"])
    offs = t.pq.offsets()
    assert offs[HOST_A] == 0 and abs(offs[HOST_B] + SKEW_B) < 50_000, offs
    _assert_union(t, [a.pq, _shifted(b.pq, offs)], flows=False)
    cc = [k for k in t.pq.flow_groups() if k[0][0] == "cc_running"]
    assert cc and all({e[6] for e in k} == {HOST_A, HOST_B} and len(k) == 4 for k in cc)
    apart = sum((Counter(k for k in p.flow_groups().elements() if k[0][0] != "cc_running")
                 for p in (a.pq, _shifted(b.pq, offs))), Counter())
    assert Counter(k for k in t.pq.flow_groups().elements() if k[0][0] != "cc_running") == apart
    # the same as converting the one directory holding both hosts
    assert t.pq.keys() == converted(synth["multihost"]).pq.keys()


def test_two_jobs_on_different_hosts_converted_together_keep_their_times(synth, tmp_path):
    a, b = converted(synth["multihost"]), converted(synth["later"])
    t = _together(tmp_path, synth["multihost"], synth["later"])
    apart = {**a.pq.offsets(), **b.pq.offsets()}
    assert t.pq.offsets() == apart, f"clock offsets together {t.pq.offsets()}, apart {apart}"
    _assert_union(t, [a.pq, b.pq], flows=False)


def test_two_runs_that_reused_pids_stay_apart_in_every_format(synth, tmp_path):
    t = _together(tmp_path, synth["multihost"], synth["rerun"])
    sessions = len(t.pq.metadata)
    assert sessions == 8 and len(t.pq.events) == 2 * len(converted(synth["multihost"]).pq.events)
    assert len(set(t.json.pids.values())) == sessions, f"JSON process rows {t.json.pids}"
    assert len(set(t.perfetto.pids.values())) == sessions, f"Perfetto process rows {t.perfetto.pids}"
    assert t.json.pids == t.perfetto.pids == {(m["instance_id"], m["process_id"], m["session"]): m["group_pid"]
                                              for m in t.pq.metadata}
    # Parquet (decision 0092): an event's session is its id >> 32 (ProfileMetadata.process_index);
    # counter samples and graphs name their session
    assert Counter(r["id"] >> 32 for r in t.pq.events) == {m["process_index"]: m["events"] for m in t.pq.metadata}
    assert len({(r["instance_id"], r["process_id"], r["session"]) for r in t.pq.counters}) == sessions
    assert len({(r["instance_id"], r["process_id"], r["session"]) for r in t.pq.models}) == sessions
