"""Synthetic multi-instance captures written through the real capture writer.

Each process gets a realistic event mix (forward/backward executions on its core, model switches,
collectives with per-group sequence numbers shared by every rank, sync points), CPU/memory
samples, and each instance a wall-clock skew, so `view`'s alignment has real work to do.

    python -m bench.synth_capture OUT --instances 16 --processes 8 --events 1000000
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from neuron_explorer.capture import writer
from neuron_explorer.capture.store import CoreStore
from neuron_explorer.contracts import events as ev
from neuron_explorer.contracts.layout import make_session_dir
from neuron_explorer.runtime.config import CaptureConfig
from neuron_explorer.runtime.core import Runtime
from neuron_explorer.runtime.identity import ProcessIdentity
from neuron_explorer.util.atomic import atomic_write


def _process_records(n: int, rank: int, world: int, rng: np.random.Generator, t0: int,
                     op_ids: list[int], group_sid: int, dtype_sid: int) -> np.ndarray:
    """~n events: 80% executions (nrt_execute + nc_exec_running), 15% collectives, the rest switches."""
    n_exec = int(n * 0.4)  # each expands to two events
    n_cc = int(n * 0.15)
    n_sw = n - 2 * n_exec - n_cc
    step = 200_000  # ns between executions
    starts = t0 + np.arange(n_exec, dtype=np.int64) * step + rng.integers(0, 5_000, n_exec)
    durs = rng.integers(20_000, 150_000, n_exec)
    models = (np.arange(n_exec) % 2).astype(np.int64)
    ex = np.zeros((n_exec, ev.RECORD_WIDTH), dtype=np.int64)
    ex[:, 0] = ev.NRT_EXECUTE
    ex[:, 1] = starts
    ex[:, 2] = starts + durs
    ex[:, 3] = 1000 + rank
    ex[:, 4] = models
    ex[:, 5] = np.arange(n_exec)
    dev = ex.copy()
    dev[:, 0] = ev.NC_EXEC_RUNNING
    cc_starts = t0 + np.arange(n_cc, dtype=np.int64) * (step * n_exec // max(n_cc, 1)) + 170_000
    cc = np.zeros((n_cc, ev.RECORD_WIDTH), dtype=np.int64)
    cc[:, 0] = ev.CC_RUNNING
    cc[:, 1] = cc_starts + rng.integers(0, 20_000, n_cc)
    cc[:, 2] = cc_starts + 25_000 + rng.integers(0, 2_000, n_cc)  # ends line up across ranks
    cc[:, 3] = 1000 + rank
    cc[:, 4] = np.array(op_ids)[np.arange(n_cc) % len(op_ids)]
    cc[:, 5] = np.arange(n_cc)
    cc[:, 6] = 4 << 20
    cc[:, 7] = dtype_sid
    cc[:, 8] = group_sid
    sw = np.zeros((max(n_sw, 0), ev.RECORD_WIDTH), dtype=np.int64)
    sw[:, 0] = ev.NRT_MODEL_SWITCH
    sw[:, 1] = sw[:, 2] = starts[: len(sw)] if len(sw) <= n_exec else t0
    sw[:, 3] = 1000 + rank
    sw[:, 4] = 1
    out = np.concatenate([ex, dev, cc, sw])
    return out[np.argsort(out[:, 1], kind="stable")]


def write_process(out_dir: str, instance: str, rank: int, world: int, pid: int, n_events: int,
                  skew_ns: int, seed: int, job: dict[str, str] | None = None) -> str:
    """One process's session; ``job``: the launcher variables its trace_info.pb records (what
    tells its job from another, ``contracts.env.JOB_VARIABLES``; default none)."""
    rng = np.random.default_rng(seed)
    cfg = CaptureConfig(output_dir=out_dir, max_events_per_nc=max(n_events, 1))
    ident = ProcessIdentity(instance, instance, pid, rank, rank % 8, world, rank // 8, f"synthetic_{rank}")
    rt = Runtime(cfg, ident)
    base = 1_000_000_000_000
    rt.anchors = [(base, base + skew_ns + 1_790_000_000_000_000_000, "start"),
                  (base + 10**12, base + 10**12 + skew_ns + 1_790_000_000_000_000_000, "stop")]
    for i, kind in enumerate(("forward", "backward")):
        rt.add_model(name=f"train_step_{kind}", neff_name=f"neff_{1234567 + i}", graph_hash=f"{i:016x}",
                     backend="inductor", kind=kind, nc_idx=rank % 8)
    ops = [rt.intern("all_reduce"), rt.intern("all_gather")]
    group = rt.intern(",".join(map(str, range(world))))
    dtype = rt.intern("bfloat16")
    rec = _process_records(n_events, rank, world, rng, base + 1_000_000, ops, group, dtype)
    store = CoreStore(rank % 8, max(n_events, 1))
    store.hold(rec)
    rt.end_reason = "exit"
    d = make_session_dir(out_dir, instance, pid, rt.anchors[0][1])
    cores = {rank % 8: store}
    atomic_write(os.path.join(d, "ntrace.pb"), writer.encode_system_trace(rt, cores))
    atomic_write(os.path.join(d, "trace_info.pb"), writer.encode_trace_info(rt, cores, d, job=job or {}))
    return d


def generate(out_dir: str, instances: int, processes: int, events: int, seed: int = 0) -> int:
    world = instances * processes
    total = 0
    for i in range(instances):
        inst = f"i-{i:017x}"
        skew = (i * 37 % 11 - 5) * 1_000_000  # up to +-5 ms between instances
        for p in range(processes):
            rank = i * processes + p
            write_process(out_dir, inst, rank, world, 10_000 + rank, events, skew, seed + rank)
            total += events
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--events", type=int, default=1_000_000, help="events per process")
    a = ap.parse_args()
    t = time.perf_counter()
    n = generate(a.out, a.instances, a.processes, a.events)
    print(f"wrote {n} events in {time.perf_counter() - t:.1f} s to {a.out}")


if __name__ == "__main__":
    main()
