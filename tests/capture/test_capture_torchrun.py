"""Environment-variable capture of real torchrun/gloo jobs, read back through the files and the CLI."""

import re

import pytest

from ..conftest import EXAMPLES, clean_env, cli, torchrun, train_capture
from .helpers import events_of, sessions, type_counts

pytestmark = pytest.mark.slow

FILES = {"ntrace.pb", "trace_info.pb", "cpu_util.pb", "host_mem.pb"}


def _explicit_counts(stdout: str) -> dict[int, int]:
    return {int(r): int(n) for r, n in re.findall(r"rank (\d+): steps=\d+ explicit_all_reduce=(\d+)", stdout)}


def test_two_rank_compiled_job_gives_one_profile_per_rank_with_real_counts(tmp_path_factory):
    steps = 4  # (the job test_view_outputs and test_parquet_own_writer read too: one launch for all)
    out_dir, stdout = train_capture(tmp_path_factory, "--steps", str(steps), "--no-ddp")
    explicit = _explicit_counts(stdout)
    assert sorted(explicit) == [0, 1]

    rank_dirs = sorted(d for d in out_dir.iterdir())
    assert len(rank_dirs) == 2, rank_dirs  # one per rank, none for the torchrun agent
    for d in rank_dirs:
        assert re.fullmatch(r".+_pid_\d+", d.name)
        (session,) = list(d.iterdir())
        assert FILES <= {f.name for f in session.iterdir()}

    ss = sessions(out_dir)
    assert sorted(s.info.rank for s in ss) == [0, 1]
    for s in ss:
        c = type_counts(s)
        # forward and backward graphs, and the (eager) optimizer step, run once per step
        assert c["nc_exec_running"] == 3 * steps and c["nrt_execute"] == 3 * steps
        assert c["cc_running"] == explicit[s.info.rank]
        assert c["cc_exec_barrier"] == 1
        assert c["model_load"] == 2 and c["nrt_load"] == 2  # the compiled graph and the optimizer
        # forward, backward and step alternate on the core: every execution after the first is a switch
        assert c["nrt_model_switch"] == 3 * steps - 1
        assert c["timestamp_sync_point"] >= 2
        kinds = sorted(m.kind for m in s.models)
        assert kinds == ["backward", "forward", "optimizer"]
        cc = events_of(s, "cc_running")
        col_seq, col_bytes = s.arg("cc_running", "seq"), s.arg("cc_running", "bytes")
        assert sorted(cc[col_seq].tolist()) == list(range(explicit[s.info.rank]))
        assert (cc[col_bytes] > 0).all()
        assert s.strings[int(cc[s.arg("cc_running", "op_str")][0])] == "all_reduce"
        assert s.strings[int(cc[s.arg("cc_running", "group_str")][0])] == "0,1"
        ex = events_of(s, "nc_exec_running")
        assert (ex["end_ns"] >= ex["start_ns"]).all()
        assert set(ex["nc_idx"].tolist()) == {s.info.local_rank}

    r = cli("view", "-d", str(out_dir), "--output-format", "summary-text", check=True)
    for rank in (0, 1):
        assert f"rank {rank}/2" in r.stdout
    rows = re.findall(r"^\s+(\d+)\s+0\s+[\d.]+ s\s+(\d+)\s+[\d.]+\s+\S+ ms\s+\S+ ms\s+(\d+)", r.stdout, re.M)
    assert sorted((int(nc), int(ex), int(cc)) for nc, ex, cc in rows) == [
        (0, 3 * steps, explicit[0] + 1), (1, 3 * steps, explicit[1] + 1)]
    assert "top graph" in r.stdout


def test_ddp_gradient_all_reduces_issued_from_cpp_are_captured(tmp_path_factory):
    steps = 5  # (the job the UI tests read too: one launch for all)
    out_dir, _ = train_capture(tmp_path_factory, "--steps", str(steps))
    for s in sessions(out_dir):
        cc = events_of(s, "cc_running")
        ops = [s.strings[int(i)] for i in cc[s.arg("cc_running", "op_str")]]
        # DDP's reducer all-reduces one bucket per step (the model fits one bucket), plus the final explicit one
        assert ops.count("all_reduce") == steps + 1
        assert "broadcast" in ops  # DDP's initial parameter sync
        assert type_counts(s)["nc_exec_running"] == 3 * steps  # compiled forward and backward, eager SGD step
        # the user's backend, seen through DDPOptimizer's compile_fn wrapper (was reported as "compile_fn")
        assert sorted(m.backend for m in s.models) == ["aot_eager", "aot_eager", "eager"]


def test_capture_time_filters_remove_what_they_name(out_dir):
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir),
                    NEURON_RT_INSPECT_EVENT_FILTER_NC="1",
                    NEURON_RT_INSPECT_EVENT_FILTER_TYPE="hardware,^cc_exec_barrier")
    torchrun(2, EXAMPLES / "train.py", ["--steps", "3", "--no-ddp"], env)
    by_rank = {s.info.rank: s for s in sessions(out_dir)}
    assert by_rank[0].num_events == 0
    c = type_counts(by_rank[1])
    # forward, backward and the eager optimizer step per step, as unfiltered (the step was lost: 6)
    assert c["nc_exec_running"] == 3 * 3 and c["cc_running"] > 0
    assert c["nrt_execute"] == 0 and c["model_load"] == 0 and c["cc_exec_barrier"] == 0
    assert "nrt_execute" not in by_rank[1].info.enabled_event_types


def test_eager_program_still_shows_its_collectives_and_samplers(out_dir, tmp_path):
    script = tmp_path / "eager.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.ones(1000)\n"
        "with torch.inference_mode():\n"
        "    for _ in range(3):\n"
        "        dist.all_reduce(t)\n"
        "dist.broadcast(t, 0)\n"
        "dist.barrier()\n"
        "dist.destroy_process_group()\n")
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir))
    torchrun(2, script, [], env)
    for s in sessions(out_dir):
        c = type_counts(s)
        assert c["nc_exec_running"] == 0  # nothing compiled
        cc = events_of(s, "cc_running")
        ops = [s.strings[int(i)] for i in cc[s.arg("cc_running", "op_str")]]
        assert ops.count("all_reduce") == 3 and ops.count("broadcast") == 1  # inference_mode included
        assert c["cc_exec_barrier"] == 1
        assert (cc[s.arg("cc_running", "bytes")][:3] == 4000).all()
        assert s.cpu is not None and len(s.cpu.ts_ns) >= 1
