"""Capture overhead of the system profile on a small compiled training step.

A compiled MLP training step (``torch.compile`` forward + loss, autograd backward, SGD step; about
0.4 ms/step on a 2-core CPU with one intra-op thread) runs in three configurations:

* ``unprofiled``      -- no profiler of any kind;
* ``system_profile``  -- ``NEURON_RT_INSPECT_ENABLE=1`` in the environment at interpreter start (the
                         runtime starts from the ``.pth`` file, exactly as a user gets it), output to
                         a temporary directory;
* ``torch_profiler``  -- ``torch.profiler.profile(activities=[CPU])`` around warm-up and timed steps.

Each run is a fresh subprocess (the runtime activates at interpreter start), the configurations
are interleaved (A B C A B C ...), and each run does warm-up steps and then times N steps with
``time.perf_counter_ns``.  The figure per run is the mean step time over the timed window (so
periodic flushes and sampler wake-ups are counted); the table shows the median over runs, the
min/max and IQR, and the ratio of medians against ``unprofiled``.

Two further measurements, in their own subprocess with the runtime started programmatically
(``neuron_explorer.boot.start(CaptureConfig(...))``):

* the cost of one recorded event: ``Ring.append(tuple)`` + ``Ring.tick()``, the full record the
  execution wrapper builds (execution id, two clock reads, cached thread id, tuple, append), and the
  per-call cost
  of the instrumented compiled callable ``run`` against the bare ``run.__wrapped__``;
* bytes per event on disk: the size of ``ntrace.pb`` and its segments over the number of events,
  from the system-profile runs' sessions read back with ``neuron_explorer.analysis.reader``;
* the periodic flush of 20k, 180k and 300k new events: CPU per new event (the flat cost at any
  capture size is ``bench/flush_cost.py``'s).

Usage::

    python bench/capture_overhead.py             # ~3-4 minutes on a 2-core machine
    python bench/capture_overhead.py --quick     # ~1 minute
    python bench/capture_overhead.py --backend inductor

Results go to ``bench/results/capture_overhead.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import interleave, provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "capture_overhead.json")

CONFIGS = ("unprofiled", "system_profile", "torch_profiler")
LABELS = {
    "unprofiled": "unprofiled",
    "system_profile": "system profile (NEURON_RT_INSPECT_ENABLE=1)",
    "system_profile_nosamplers": "system profile, samplers + monitor feed off",
    "system_profile_device_model": "system + device profile, model mode",
    "system_profile_device_session": "system + device profile, session mode",
    "torch_profiler": "torch.profiler (CPU)",
}

# Model size: the smallest sensible MLP; on the 2-core reference machine the step is ~0.5-0.6 ms with
# aot_eager (Dynamo guards + AOTAutograd runtime wrappers dominate, so shrinking further does not help).
BATCH, D_IN, HIDDEN, D_OUT, LAYERS = 16, 32, 64, 10, 2


# ---------------------------------------------------------------------------------------------
# environment handling


def _clean_env() -> dict[str, str]:
    """The parent's environment without anything that would turn a profiler on."""
    return interleave.clean_env()


def _config_env(config: str, out_dir: str) -> dict[str, str]:
    env = _clean_env()
    if config.startswith("system_profile"):
        env["NEURON_RT_INSPECT_ENABLE"] = "1"
        env["NEURON_RT_INSPECT_OUTPUT_DIR"] = out_dir
        env["NEURON_EXPLORER_INSTANCE_ID"] = "bench"
        if config == "system_profile_nosamplers":
            # no CPU/memory samplers and no neuron-monitor publisher: nothing asks the torch
            # memory source, whose reads of .grad from those threads crash runs (see failures)
            env["NEURON_RT_INSPECT_CPU_UTIL"] = "0"
            env["NEURON_RT_INSPECT_HOST_MEMORY"] = "0"
            env["NEURON_EXPLORER_STATS"] = "0"
        if config.startswith("system_profile_device_"):
            env["NEURON_RT_INSPECT_DEVICE_PROFILE"] = config.rsplit("_", 1)[1]
    return env


# ---------------------------------------------------------------------------------------------
# the workload (runs in the worker subprocess)


def _build_step(torch, backend: str):
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    layers: list = []
    d = D_IN
    for _ in range(LAYERS - 1):
        layers += [nn.Linear(d, HIDDEN), nn.ReLU()]
        d = HIDDEN
    layers.append(nn.Linear(d, D_OUT))
    model = nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(BATCH, D_IN)
    y = torch.randint(0, D_OUT, (BATCH,))

    def loss_fn(x, y):
        return F.cross_entropy(model(x), y)

    closs = torch.compile(loss_fn, backend=backend)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = closs(x, y)
        loss.backward()
        opt.step()
        return loss

    return step


def worker_train(config: str, backend: str, warmup: int, steps: int) -> dict:
    import torch

    torch.set_num_threads(1)
    step = _build_step(torch, backend)
    t_c0 = time.perf_counter_ns()
    step()  # compile
    compile_ns = time.perf_counter_ns() - t_c0

    def timed() -> list[int]:
        for _ in range(warmup):
            step()
        # split the window into chunks to see the spread inside a run
        nchunks = 10
        per = max(1, steps // nchunks)
        chunks = []
        c0 = time.process_time_ns()
        for _ in range(nchunks):
            t0 = time.perf_counter_ns()
            for _ in range(per):
                step()
            chunks.append(time.perf_counter_ns() - t0)
        c1 = time.process_time_ns()
        cpu[:] = [c1 - c0, c0, c1]
        return chunks, per

    cpu = [0, 0, 0]
    prof_events = None
    if config == "torch_profiler":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            chunks, per = timed()
        try:
            prof_events = len(prof.events())
        except Exception:
            prof_events = None
    else:
        chunks, per = timed()
    total = sum(chunks)
    n = per * len(chunks)
    from neuron_explorer.runtime.core import get_runtime

    rt = get_runtime()
    return {
        "config": config,
        "step_ns": total / n,
        "cpu_step_ns": cpu[0] / n,  # process CPU time (all threads) per step: robust to a busy machine
        "wall_step_ns": total / n,
        "window_start_cpu_ns": cpu[1], "end_cpu_ns": cpu[2],  # one-time costs (bench/interleave.py)
        "chunk_step_ns": [c / per for c in chunks],
        "steps": n,
        "warmup": warmup,
        "compile_ns": compile_ns,
        "runtime_active": rt is not None,
        "models": len(rt.models) if rt is not None else 0,
        "torch_profiler_events": prof_events,
        "torch_threads": torch.get_num_threads(),
    }


# ---------------------------------------------------------------------------------------------
# hot-path microbenchmarks (worker subprocess, runtime started programmatically)


def _per_call_ns(fn, n: int, repeats: int) -> float:
    """Best mean ns per call of ``fn(k)`` (fn runs its own loop of k) over short windows.

    The n calls are split into 4*repeats windows and the fastest window is kept: short windows are
    likely to run without being preempted, which matters on a small, busy machine."""
    windows = max(1, 4 * repeats)
    k = max(1, n // windows)
    best = float("inf")
    for _ in range(windows):
        t0 = time.perf_counter_ns()
        fn(k)
        dt = time.perf_counter_ns() - t0
        best = min(best, dt / k)
    return best


def worker_micro(out_dir: str, n: int) -> dict:
    import threading

    from neuron_explorer import boot
    from neuron_explorer.contracts import events as ev
    from neuron_explorer.runtime import clock
    from neuron_explorer.runtime.config import CaptureConfig

    cfg = CaptureConfig(output_dir=out_dir, cpu_util=False, host_memory=False, flush_period_s=3600.0,
                        max_events_per_nc=1_000_000)
    rt = boot.start(cfg, from_env=False)
    res: dict = {}

    # 1. the ring itself
    from neuron_explorer.runtime.ring import Ring

    ring = Ring(0, 10 * n)
    append, tick = ring.append, ring.tick
    now_ns = clock.now_ns
    tid_fn = threading.get_native_id
    rec = (9, 1, 2, 3, 4, 5, 0, 0, 0)

    def empty_loop(k):
        for _ in range(k):
            pass

    def ring_append_tick(k):
        for _ in range(k):
            append(rec)
            tick()

    def full_record(k):
        for i in range(k):
            t0 = now_ns()
            t1 = now_ns()
            append((9, t0, t1, tid_fn(), 1, i, 0, 0, 0))
            tick()

    get_ident = threading.get_ident
    tid_cache = {get_ident(): tid_fn()}

    exec_id = ring.exec_id

    def record_cached_tid(k):  # what the execution wrapper does: no tick, the execution id counts
        for _ in range(k):
            eid = exec_id()
            t0 = now_ns()
            t1 = now_ns()
            append((ev.EXEC_PAIR, t0, t1, tid_cache[get_ident()], 1, eid, 0, 0, 0))

    def clock_loop(k):
        for _ in range(k):
            now_ns()

    def tid_loop(k):
        for _ in range(k):
            tid_fn()

    def ident_loop(k):
        for _ in range(k):
            get_ident()

    reps = 7
    base = _per_call_ns(empty_loop, n, reps)
    res["clock_read_ns"] = _per_call_ns(clock_loop, n, reps) - base
    res["native_tid_ns"] = _per_call_ns(tid_loop, n, reps) - base
    res["get_ident_ns"] = _per_call_ns(ident_loop, n, reps) - base
    res["loop_ns"] = base
    ring.drain()
    res["ring_append_tick_ns"] = _per_call_ns(ring_append_tick, n, reps) - base
    ring.drain()
    res["full_record_ns"] = _per_call_ns(full_record, n, reps) - base
    ring.drain()
    res["record_cached_tid_ns"] = _per_call_ns(record_cached_tid, n, reps) - base
    ring.drain()

    # 2. the instrumented compiled call vs the bare compiled callable
    import torch

    torch.set_num_threads(1)
    from neuron_explorer.integrations.torch import graphs as torch_graphs

    captured: list = []
    orig_wrap = torch_graphs.wrap_graph

    def spy(*a, **kw):
        r = orig_wrap(*a, **kw)
        captured.append(r)
        return r

    torch_graphs.wrap_graph = spy
    try:
        x = torch.ones(4)
        xg = torch.ones(4, requires_grad=True)

        def tiny(x):
            return x + 1

        ctiny = torch.compile(tiny, backend="aot_eager")
        ctiny(x)
        ctiny(x)
        ctrain = torch.compile(lambda x: x * 2, backend="aot_eager")
        ctrain(xg)
        ctrain(xg)
    finally:
        torch_graphs.wrap_graph = orig_wrap

    m = max(2000, n // 20)
    if captured and hasattr(captured[0], "__wrapped__"):
        run = captured[0]
        bare = run.__wrapped__

        def call_run(k):
            for _ in range(k):
                run(x)

        def call_bare(k):
            for _ in range(k):
                bare(x)

        def call_dynamo(k):
            for _ in range(k):
                ctiny(x)

        # interleave to share drift
        wr, br, dy = [], [], []
        for _ in range(reps):
            wr.append(_per_call_ns(call_run, m, 1))
            br.append(_per_call_ns(call_bare, m, 1))
            dy.append(_per_call_ns(call_dynamo, m, 1))
        res["compiled_call_bare_ns"] = min(br)
        res["compiled_call_wrapped_ns"] = min(wr)
        res["compiled_call_dynamo_ns"] = min(dy)
        res["wrapper_overhead_ns"] = min(wr) - min(br)
        res["wrapper_overhead_median_ns"] = statistics.median(w - b for w, b in zip(wr, br))
        res["compiled_calls_timed"] = m
        if len(captured) >= 2:
            # a training graph (outputs carry grad_fn; backward instrumented after the first call)
            run_t, bare_t = captured[1], captured[1].__wrapped__

            def call_run_t(k):
                for _ in range(k):
                    run_t(xg)

            def call_bare_t(k):
                for _ in range(k):
                    bare_t(xg)

            wr, br = [], []
            for _ in range(reps):
                wr.append(_per_call_ns(call_run_t, m, 1))
                br.append(_per_call_ns(call_bare_t, m, 1))
            res["train_call_bare_ns"] = min(br)
            res["train_call_wrapped_ns"] = min(wr)
            res["train_wrapper_overhead_ns"] = min(wr) - min(br)
    else:
        res["wrapper_overhead_ns"] = None
        res["note"] = "could not capture the instrumented callable (integrations.torch.graphs.wrap_graph changed?)"

    # 3. the wrapper around a trivial function, with and without a grad_fn on its output.  A graph
    # whose outputs carry no grad_fn (backward graphs, inference graphs) retries the backward
    # instrumentation on every call; this isolates that cost.
    try:
        core = rt.core()
        model = rt.add_model(name="nop", neff_name="nop", graph_hash="0", backend="none", kind="forward",
                             nc_idx=core.nc)
        plain = torch.ones(4)
        with_grad = torch.ones(4, requires_grad=True) * 2  # grad_fn=MulBackward0, no _forward_cls

        def nop_plain(*a):
            return plain

        def nop_grad(*a):
            return with_grad

        from neuron_explorer.integrations.torch import Installed, installed

        inst = installed() or Installed(rt)
        w_plain = orig_wrap(inst, torch, core, model, nop_plain)
        w_grad = orig_wrap(inst, torch, core, model, nop_grad)
        w_grad()

        def c(fn):
            def loop(k):
                for _ in range(k):
                    fn()
            return loop

        bare_nop = _per_call_ns(c(nop_plain), n, reps)
        res["wrapper_nop_no_gradfn_ns"] = _per_call_ns(c(w_plain), n, reps) - bare_nop
        res["wrapper_nop_gradfn_done_ns"] = _per_call_ns(c(w_grad), n, reps) - bare_nop
    except Exception as e:  # internal API moved: report, do not fail the benchmark
        res["wrapper_nop_error"] = f"{type(e).__name__}: {e}"

    # 4. the background work: one host sample, and the periodic flush as the store grows
    try:
        from neuron_explorer.capture.samplers import HostSampler

        hs = HostSampler(os.getpid(), 0.1, True, True)
        hs.start()
        hs._stop.set()
        ts = []
        for _ in range(50):
            t0 = time.perf_counter_ns()
            hs.sample()
            ts.append(time.perf_counter_ns() - t0)
        hs.stop()
        res["host_sample_us"] = statistics.median(ts) / 1e3
        res["host_sampler_cpu_share_at_100ms"] = statistics.median(ts) / 1e8
    except Exception as e:
        res["host_sample_error"] = f"{type(e).__name__}: {e}"
    try:
        core = rt.core()
        rt.flush(final=False)  # what the steps above recorded: written before the series
        flushes = []
        for add in (10_000, 90_000, 150_000):
            t = now_ns()
            tid = tid_fn()
            for i in range(add):
                # as the execution wrapper records: the execution id also counts the record's two events
                core.ring.append((ev.EXEC_PAIR, t + i, t + i + 1, tid, 0, core.ring.exec_id(), 0, 0, 0))
            t0 = time.perf_counter_ns()
            rt.flush(final=False)
            dt = time.perf_counter_ns() - t0
            # a flush appends a segment of what came since the last one (decision 0111): its cost
            # is per new event, whatever the capture holds (bench/flush_cost.py: up to 1e8 stored)
            flushes.append({"records_added": add, "events_added": 2 * add, "flush_ms": dt / 1e6,
                            "ns_per_new_event": dt / (2 * add),
                            # share of wall time spent flushing at the default period (this
                            # process stretches its own to keep the timer out of the figures above)
                            "duty_cycle_at_default_period": (dt / 1e9) / CaptureConfig.flush_period_s})
        res["periodic_flush"] = flushes
    except Exception as e:
        res["periodic_flush_error"] = f"{type(e).__name__}: {e}"

    res["ring_records"] = ring.produced()
    return res


# ---------------------------------------------------------------------------------------------
# parent


def _run_worker(args: list[str], env: dict[str, str], timeout: float = 300) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"worker {args} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("BENCH_RESULT "):
            return json.loads(line[len("BENCH_RESULT "):])
    raise RuntimeError(f"worker {args} printed no result:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def _session_stats(out_dir: str) -> dict | None:
    from neuron_explorer.analysis.reader import discover, load_session

    sessions = discover(out_dir)
    if not sessions:
        return None
    s = load_session(sessions[0])
    files = {f: os.path.getsize(os.path.join(sessions[0], f)) for f in sorted(os.listdir(sessions[0]))}
    # the events are in ntrace.pb and, since incremental writes (decision 0111), its segments
    # ntrace_nc<core>_<n>.pb: ntrace.pb alone holds the tables and the last flush's rows
    size = sum(n for f, n in files.items() if f.startswith("ntrace"))
    n = s.num_events
    types = s.events["type"]
    counts = {}
    for tid in sorted(set(int(t) for t in types)):
        counts[s.type_names[tid]] = int((types == tid).sum())
    return {"event_bytes": size, "events": n, "bytes_per_event": size / n if n else None,
            "event_counts": counts, "files": files}


def _spread(xs: list[float]) -> dict:
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "q1": q[0], "q3": q[2],
            "iqr": q[2] - q[0], "n": len(xs)}


def _machine() -> dict:
    import torch

    cpu_model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import neuron_explorer

        nev = getattr(neuron_explorer, "__version__", "")
    except Exception:
        nev = ""
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "neuron_explorer": nev,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="aot_eager", help="torch.compile backend (aot_eager, inductor, ...)")
    ap.add_argument("--runs", type=int, default=None, help="runs per configuration (default 5; --quick 3)")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps per run (default 10000, a ~5 s window; --quick 3000)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps per run (default 300; --quick 100)")
    ap.add_argument("--quick", action="store_true", help="fewer, shorter runs (~1 minute)")
    ap.add_argument("--no-samplers-config", action="store_true",
                    help="add a 4th configuration: system profile with the CPU/memory samplers off")
    ap.add_argument("--device-configs", action="store_true",
                    help="add system + device profile runs (model and session modes)")
    ap.add_argument("--micro-n", type=int, default=None, help="iterations of the hot-path microbenchmarks")
    ap.add_argument("--same-process", type=int, default=None, metavar="RUNS",
                    help="also time the system profile's hooks working and paused in one process, RUNS processes "
                         "(beside an A/A control; 0: skip; default 5, 3 with --quick)")
    ap.add_argument("--out", default=RESULTS, help="where to write the JSON results")
    ap.add_argument("--keep", action="store_true", help="keep the temporary profile directories")
    # worker modes (internal)
    ap.add_argument("--worker", choices=("train", "micro"), help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    runs = a.runs or (3 if a.quick else 5)
    steps = a.steps or (3000 if a.quick else 10000)
    warmup = a.warmup if a.warmup is not None else (100 if a.quick else 300)
    micro_n = a.micro_n or (50_000 if a.quick else 200_000)

    if a.worker == "train":
        interleave.mark_start()
        interleave.report(worker_train(a.config, a.backend, warmup, steps))
        return 0
    if a.worker == "micro":
        r = worker_micro(a.dir, micro_n)
        print("BENCH_RESULT " + json.dumps(r), flush=True)
        return 0

    configs = list(CONFIGS)
    if a.no_samplers_config:
        configs.insert(2, "system_profile_nosamplers")
    if a.device_configs:
        configs[2:2] = ["system_profile_device_model", "system_profile_device_session"]
    t_start = time.time()
    load0 = list(os.getloadavg())
    tmp = tempfile.mkdtemp(prefix="ne_bench_")
    per_config: dict[str, list[dict]] = {c: [] for c in configs}
    sessions: list[dict] = []
    failures: list[dict] = []
    print(f"capture_overhead: backend={a.backend} runs={runs} x {len(configs)} configs, "
          f"warmup={warmup}, timed steps={steps}", file=sys.stderr)
    try:
        for i in range(runs):
            for c in configs:
                out_dir = os.path.join(tmp, f"{c}_{i}")
                try:
                    r = interleave.run_one([sys.executable, os.path.abspath(__file__), "--worker", "train", "--config",
                                            c, "--backend", a.backend, "--steps", str(steps), "--warmup", str(warmup)],
                                           _config_env(c, out_dir))
                except interleave.WorkerFailed as e:  # a crash is a finding: kept, left out of the medians
                    failures.append({"config": c, "round": i, "returncode": e.returncode, "stderr": e.stderr})
                    per_config[c].append(None)
                    print(f"  run {i + 1}/{runs} {c:<26} FAILED ({e.returncode})", file=sys.stderr)
                    continue
                if c.startswith("system_profile"):
                    if not r["runtime_active"]:
                        raise RuntimeError("the system-profile run did not start the runtime (is the .pth installed?)")
                    st = _session_stats(out_dir)
                    if st is None:
                        raise RuntimeError(f"the system-profile run wrote no session under {out_dir}")
                    r["session"] = st
                    if c == "system_profile":
                        sessions.append(st)
                elif r["runtime_active"]:
                    raise RuntimeError(f"the {c} run had the neuron-explorer runtime active")
                per_config[c].append(r)
                print(f"  run {i + 1}/{runs} {c:<26} {r['step_ns'] / 1e3:8.2f} us/step", file=sys.stderr)
        micro = _run_worker(["--worker", "micro", "--dir", os.path.join(tmp, "micro"),
                             "--micro-n", str(micro_n)], _clean_env())
        sp_runs = a.same_process if a.same_process is not None else (3 if a.quick else 5)
        same = _same_process(sp_runs, a.backend, warmup, 3000 if a.quick else 12000) if sp_runs else None
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"profiles kept in {tmp}", file=sys.stderr)

    all_runs = per_config
    configs = [c for c in configs if any(r is not None for r in all_runs[c])]
    if "unprofiled" not in configs:
        raise RuntimeError(f"every unprofiled run failed: {failures[-1]}")
    all_runs = {c: all_runs[c] for c in configs}
    cpu_summary = interleave.summarize(all_runs, base="unprofiled")
    per_config = {c: [r for r in rs if r is not None] for c, rs in all_runs.items()}
    summary: dict[str, dict] = {}
    base_med = statistics.median(r["step_ns"] for r in per_config["unprofiled"])
    cpu_base_med = statistics.median(r["cpu_step_ns"] for r in per_config["unprofiled"])
    for c in configs:
        xs = [r["step_ns"] for r in per_config[c]]
        sp = _spread(xs)
        # paired ratios: run i of this config against run i of unprofiled (same slot in the interleave)
        paired = [r["step_ns"] / u["step_ns"] for r, u in zip(all_runs[c], all_runs["unprofiled"]) if r and u]
        cpu = _spread([r["cpu_step_ns"] for r in per_config[c]])
        summary[c] = {
            "step_ns": sp,
            "ratio_vs_unprofiled": sp["median"] / base_med,
            "paired_ratio": _spread(paired),
            "overhead_ns_per_step": sp["median"] - base_med,
            "cpu_step_ns": cpu,
            "cpu_ratio_vs_unprofiled": cpu["median"] / cpu_base_med,
            "cpu_overhead_ns_per_step": cpu["median"] - cpu_base_med,
            "cpu_paired_ratio": cpu_summary[c]["paired_ratio"],
            "one_time_ns": cpu_summary[c]["one_time_ns"],
            "failed_runs": cpu_summary[c]["failed_runs"],
        }

    ses = sessions[0] if sessions else {}
    bpe = statistics.median(s["bytes_per_event"] for s in sessions) if sessions else None
    main_sys = next((c for c in ("system_profile", "system_profile_nosamplers") if c in summary), None)
    sp_runs = per_config.get(main_sys) or []
    timed_calls_per_step = None
    if ses and sp_runs:
        # compiled calls (forward + backward graphs) per step, from the events really recorded
        execs = ses["event_counts"].get("nrt_execute", 0)
        total_steps = sp_runs[0]["steps"] + sp_runs[0]["warmup"] + 1
        timed_calls_per_step = execs / total_steps
    ovh = summary[main_sys]["overhead_ns_per_step"] if main_sys else None
    result = {
        "benchmark": "capture_overhead",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "commit": provenance.commit(),
        "machine": _machine(),
        "workload": {
            "model": f"MLP {D_IN}-{'-'.join([str(HIDDEN)] * (LAYERS - 1))}-{D_OUT}, batch {BATCH}, cross-entropy, SGD",
            "backend": a.backend, "torch_threads": 1, "runs_per_config": runs, "timed_steps": steps,
            "warmup_steps": warmup, "interleaved": True, "fresh_process_per_run": True,
            "compiled_calls_per_step": timed_calls_per_step,
        },
        "target": {"system_profile_ratio_max": 1.01},
        "configs": summary,
        "runs": per_config,
        "hot_path": micro,
        "same_process": same,
        "on_disk": {
            "bytes_per_event": bpe,
            "example_session": ses,
        },
        "derived": {
            "overhead_ns_per_compiled_call": (ovh / timed_calls_per_step) if timed_calls_per_step else None,
            "cpu_overhead_ns_per_compiled_call": (summary[main_sys]["cpu_overhead_ns_per_step"]
                                                  / timed_calls_per_step) if timed_calls_per_step else None,
            "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "wall_s": round(time.time() - t_start, 1),
        "failures": failures,
        "command": "python bench/capture_overhead.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "load_average_at_start": load0,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    _print_table(result, configs)
    print(f"\nwrote {a.out} ({result['wall_s']} s)")
    return 0


def _same_process(runs: int, backend: str, warmup: int, steps: int) -> dict:
    """The system profile's per-step work at one memory layout: ``bench/ndet_bench.py``'s
    working-over-paused worker (execution wrappers and record_function regions paused, and the
    device-memory optimizer pre-hook out of torch's table, in alternate blocks of one process)
    run with a user's system profile, beside its A/A control (nothing paused).  What it does not
    pause runs in both kinds of block: the compiled root's Module.__call__ gate, the backward gate,
    the samplers' and the flush's threads (those are in the interleaved rows)."""
    from bench import ndet_bench

    def env_for(config: str, out_dir: str) -> dict[str, str]:
        return interleave.system_env(out_dir, NE_BENCH_BACKEND=backend)

    labels = {"system_profile": f"{LABELS['system_profile']}, {backend}",
              "null": "A/A control: system profile on, nothing paused (the method's noise floor)"}
    out = ndet_bench.same_process(runs, warmup=warmup, steps=steps, block=250, configs=("system_profile",),
                                  env_for=env_for, labels=labels)
    print(f"\n{'same process: hooks working over paused':60s} {'median':>9s} {'min':>8s} {'max':>8s} {'runs':>5s}",
          file=sys.stderr)
    for r in out.values():
        print(f"{r['label']:60s} {r['median_ratio']:9.4f} {r['min']:8.4f} {r['max']:8.4f} {r['n']:5d}", file=sys.stderr)
    return out


def _print_table(r: dict, configs: list[str]) -> None:
    m = r["machine"]
    w = r["workload"]
    print(f"\ncapture overhead -- {r['date']} -- {m['cpu_count']} CPUs ({m['cpu_model']}), "
          f"Python {m['python']}, torch {m['torch']}")
    print(f"workload: {w['model']}, backend {w['backend']}, 1 thread; {w['runs_per_config']} interleaved "
          f"runs x {w['timed_steps']} timed steps (+{w['warmup_steps']} warm-up), fresh process per run")
    print()
    hdr = (f"{'configuration':<44} {'median us/step':>14} {'min':>8} {'max':>8} {'IQR':>7} {'ratio':>7} "
           f"{'paired min..max':>15} {'CPU us/step':>11} {'CPU ratio':>9}")
    print(hdr)
    print("-" * len(hdr))
    for c in configs:
        s = r["configs"][c]
        sp = s["step_ns"]
        pr = s["paired_ratio"]
        print(f"{LABELS[c]:<44} {sp['median'] / 1e3:>14.2f} {sp['min'] / 1e3:>8.2f} {sp['max'] / 1e3:>8.2f} "
              f"{sp['iqr'] / 1e3:>7.2f} {s['ratio_vs_unprofiled']:>6.3f}x "
              f"{pr['min']:>7.3f}..{pr['max']:.3f} {s['cpu_step_ns']['median'] / 1e3:>11.2f} "
              f"{s['cpu_ratio_vs_unprofiled']:>8.3f}x")
    print("(ratio: median step time / unprofiled median; paired: run i / unprofiled run i; CPU: process CPU time of "
          "all threads per step, insensitive to other load on the machine)")
    print("one-time costs, median extra CPU ms vs unprofiled (start-up / first step / exit incl. final flush):")
    for c in configs:
        ot = r["configs"][c].get("one_time_ns", {})
        print(f"  {LABELS[c]:<44} " + " / ".join(f"{ot[k]['extra'] / 1e6:+.0f}" if k in ot else "-"
                                                 for k in interleave.ONE_TIME))
    print(f"\ntarget: system profile <= {r['target']['system_profile_ratio_max']:.2f}x of unprofiled")
    hp = r["hot_path"]

    def f(k):
        v = hp.get(k)
        return "n/a" if v is None else f"{v:.0f} ns"

    print("\nhot path (one process, runtime started programmatically)")
    print(f"  perf_counter_ns()                                 {f('clock_read_ns')}")
    print(f"  threading.get_native_id() (a gettid syscall)      {f('native_tid_ns')}")
    print(f"  threading.get_ident()                             {f('get_ident_ns')}")
    print(f"  Ring.append(tuple) + tick                         {f('ring_append_tick_ns')}")
    print(f"  one recorded event as the hooks do it             {f('full_record_ns')}  "
          f"(2 clock reads, get_native_id, tuple, append, tick)")
    print(f"    ... with a cached thread id                     {f('record_cached_tid_ns')}")
    print(f"  compiled call: bare run.__wrapped__               {f('compiled_call_bare_ns')}")
    print(f"  compiled call: instrumented run                   {f('compiled_call_wrapped_ns')}")
    print(f"  => wrapper overhead per compiled call             {f('wrapper_overhead_ns')} "
          f"(median of rounds {f('wrapper_overhead_median_ns')})")
    print(f"  compiled call through Dynamo (guards + run)       {f('compiled_call_dynamo_ns')}")
    if "train_wrapper_overhead_ns" in hp:
        print(f"  training graph: bare / instrumented / overhead    {f('train_call_bare_ns')} / "
              f"{f('train_call_wrapped_ns')} / {f('train_wrapper_overhead_ns')}")
    if "wrapper_nop_no_gradfn_ns" in hp:
        print(f"  wrapper on a no-op, output without grad_fn        {f('wrapper_nop_no_gradfn_ns')}")
        print(f"  wrapper on a no-op, backward already instrumented {f('wrapper_nop_gradfn_done_ns')}")
    if "host_sample_us" in hp:
        print(f"  one CPU+memory host sample (every 100 ms)         {hp['host_sample_us']:.0f} us "
              f"({100 * hp['host_sampler_cpu_share_at_100ms']:.2f}% of one core)")
    for fl in hp.get("periodic_flush", []):
        print(f"  periodic flush of {fl['events_added']:>7} new events        {fl['flush_ms']:.1f} ms "
              f"({fl['ns_per_new_event']:.0f} ns/new event; "
              f"{100 * fl['duty_cycle_at_default_period']:.2f}% of a 2 s period)")
    od = r["on_disk"]
    ses = od.get("example_session") or {}
    if od.get("bytes_per_event"):
        print(f"\non disk: {od['bytes_per_event']:.1f} bytes/event in the event files (ntrace.pb and its segments: "
              f"{ses.get('event_bytes')} bytes / {ses.get('events')} events; {ses.get('event_counts')})")
    d = r["derived"]
    if d.get("overhead_ns_per_compiled_call") is not None:
        print(f"system-profile overhead per compiled call in the step benchmark: "
              f"{d['overhead_ns_per_compiled_call']:.0f} ns wall, {d['cpu_overhead_ns_per_compiled_call']:.0f} ns CPU "
              f"({w['compiled_calls_per_step']:.2f} calls/step)")
    if d.get("load_average_at_end"):
        print(f"load average at end: {', '.join(f'{x:.2f}' for x in d['load_average_at_end'])} "
              f"on {r['machine']['cpu_count']} CPUs")


if __name__ == "__main__":
    sys.exit(main())
