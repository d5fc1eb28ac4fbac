"""Fuzzing neuron-monitor's reader of application stats snapshots: seeded mutations of snapshots
written by the real publisher (``AppStats``) for live processes, a fixed number of runs, the monitor run in
a subprocess under a memory cap.  Whatever a snapshot holds, the monitor must not raise, must keep
printing complete reports, must still report the intact application, and must say (stderr) what
it left out.  ``NEURON_EXPLORER_FUZZ_SCALE`` / ``NEURON_EXPLORER_FUZZ_SEED`` as for the NDET fuzz.
"""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_explorer.recorders.app_stats import AppStats
from tests.fuzzing import HUNT_ONLY, examples, hunt_seed, hunting, json_paths, run_capped, seed as fuzz_seed

FAST_RUNS = 28  # what 4 s gave on an idle machine (decision 0151)
SLOW_RUNS = 85  # what 12 s gave on an idle machine (decision 0151)
MEM_CAP = 768 << 20
SLEEPERS = 6  # live processes the damaged snapshots claim to be (one intact, the rest damaged)

ODD_VALUES = [None, True, -1, 0, 2 ** 31, 2 ** 62, 2 ** 63, 2 ** 64, 10 ** 30, -2 ** 63, 1.5, 1e308, -1e308, "", "x",
              "9" * 40, [], [1, 2], [0, [1, 2, 3]], [400, [1]], {}, {"0": 1}, {"a": {"b": 1}}, [[[[]]]]]

READER = r"""
import sys
from neuron_explorer.monitor.config import parse_config
from neuron_explorer.monitor.monitor import Logger, Monitor
groups = ["neuroncore_counters", "execution_stats", "memory_used", "neuron_runtime_vcpu_usage"]
cfg = parse_config({"period": "100ms", "neuron_runtimes": [{"metrics": [{"type": g} for g in groups]}],
                    "system_metrics": [{"type": "memory_info"}]})
m = Monitor(cfg, stats_dir=sys.argv[1], log=Logger(2), use_nvml=False)
sys.exit(m.run(sys.stdout, max_reports=int(sys.argv[2])))
"""


def mutate(snap: dict, raw: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:  # bytes flipped
        b = bytearray(raw)
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 1:  # truncated
        return raw[:rng.randrange(len(raw))]
    s = json.loads(json.dumps(snap))
    for _ in range(rng.randint(1, 3)):  # fields of another type, out of range, or gone
        path = rng.choice([p for p in json_paths(s, per_list=6) if p and p[0] not in ("pid", "start_time", "format")])
        cur = s
        for p in path[:-1]:
            cur = cur[p]
        if rng.random() < 0.15 and isinstance(cur, dict):
            cur.pop(path[-1], None)
        else:
            cur[path[-1]] = json.loads(json.dumps(rng.choice(ODD_VALUES)))  # a copy: no shared lists
    if kind == 5 and isinstance(snap.get("models"), list) and snap["models"]:
        s["models"] = [dict(snap["models"][0], subgraphs=rng.choice([10 ** 9, 4097, 0]))] * rng.randint(1, 3)
    return json.dumps(s).encode()


def _publish(stats: Path, pid: int, tag: str) -> Path:
    """A real snapshot of a live process, written by the publisher the runtime uses."""
    a = AppStats(tag=tag, pid=pid, instance_id="i-fuzz", nc_indices=[0, 1], stats_dir=stats)
    a.on_model_load(7, "step_graph", 0, 1e9, subgraphs=2, code_bytes=4096, constants_bytes=1 << 20)
    for i in range(50):
        a.on_execution(7, i % 2, 200_000 + i * 1000, 150_000 + i * 1000, "completed" if i % 7 else "timed_out")
    a.on_error("numerical")
    a.set_memory({"application_memory": 1 << 24, "constants": 1 << 20, "dma_buffers": 0, "tensors": 1 << 22},
                 {0: {"constants": 1 << 20, "model_code": 4096, "model_shared_scratchpad": 0, "runtime_memory": 0,
                      "tensors": 1 << 22}})
    return a.publish()


def fuzz(work: Path, runs: int, seed: int) -> int:
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(SLEEPERS)]
    tried = 0
    try:
        for run in range(runs):
            rng = random.Random(seed * 1_000_003 + run)
            stats = work / f"run{run}"
            stats.mkdir(mode=0o700)
            intact = _publish(stats, sleepers[0].pid, "intact")
            damaged = {}
            for p in sleepers[1:]:
                path = _publish(stats, p.pid, f"fuzz{p.pid}")
                raw = path.read_bytes()
                path.write_bytes(mutate(json.loads(raw), raw, rng))
                damaged[p.pid] = path
            r = run_capped([sys.executable, "-c", READER, str(stats), "2"], MEM_CAP)
            where = f"(NEURON_EXPLORER_FUZZ_SEED={seed}, run {run}; files in {stats})"
            assert r.returncode == 0, f"exit {r.returncode} {where}\n{r.stderr[-3000:]}"
            assert "Traceback" not in r.stderr, f"{where}\n{r.stderr[-3000:]}"
            reports = [json.loads(ln) for ln in r.stdout.splitlines()]
            assert len(reports) == 2, f"{where}\n{r.stderr[-3000:]}"
            for rep in reports:
                json.dumps(rep, allow_nan=False)  # strict JSON: no NaN/Infinity reached the output
            seen = {e["address"] for rep in reports for e in rep["neuron_runtime_data"]}
            assert str(intact) in seen, f"the intact application is missing {where}\n{r.stderr[-3000:]}"
            for pid, path in damaged.items():  # used, or said why not
                assert str(path) in seen or str(path) in r.stderr or f"pid {pid}" in r.stderr, \
                    f"{path} neither reported nor named {where}\n{r.stderr[-2000:]}"
            assert all(ln.startswith("neuron-monitor: ") for ln in r.stderr.splitlines()), where
            for p in list(stats.iterdir()):
                p.unlink()
            stats.rmdir()
            tried += len(damaged)
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    return tried


def test_fuzz_monitor_snapshot_reader_fast(tmp_path: Path) -> None:
    assert fuzz(tmp_path, examples(FAST_RUNS), fuzz_seed(1)) >= SLEEPERS - 1


@pytest.mark.slow
@pytest.mark.skipif(not hunting(), reason=HUNT_ONLY)
def test_fuzz_monitor_snapshot_reader_long(tmp_path: Path) -> None:
    """The same corpus as the test above, searched further: a hunt (decision 0151)."""
    assert fuzz(tmp_path, examples(SLOW_RUNS), hunt_seed()) >= SLEEPERS - 1
