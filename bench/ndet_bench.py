"""NDET benchmarks: logging overhead in a training loop, and neuron-det analysis time on big logs.

1. Overhead.  A compiled MLP training step (torch.compile backend=aot_eager forward + loss, autograd
   backward, SGD step; two graph executions per step) runs in fresh subprocesses, interleaved:

   * ``off``        -- no NDET variables;
   * ``ndet``       -- NEURON_RT_DBG_NDET_FLUSH_USEC=1000000 (a 1 s flush), everything else default,
                       which includes the NaN/Inf scan of graph outputs NDET turns on;
   * ``ndet_nonan`` -- the same with NEURON_EXPLORER_NAN_CHECK=0: the cost of the logging alone;
   * ``ndet_nostats`` -- ``ndet`` with NEURON_EXPLORER_STATS=0 (no neuron-monitor counters): the
                       configuration ``bench/ndet_instructions.py`` counts as ``ndet``;
   * ``loaded``     -- no NDET, but the process imports what an NDET process imports (numpy,
                       neuron-explorer's runtime, recorder and monitor modules) and runs two idle
                       threads waking every 0.5 s and 1 s, like the flusher and the publisher; it
                       installs no hook.  Against ``off`` it is the cost of a bigger process that
                       does no per-step work: a difference ``ndet`` shows and ``loaded`` shows too is
                       not NDET's per-step work.

   ``--configs`` picks some of them (``off`` always runs); ``--no-aslr`` runs every worker under
   ``setarch -R`` (one fixed address-space layout per configuration, as the callgrind counts have).

   Each run times N steps after a warm-up (mean step time over the window, so flushes are counted);
   the table shows medians over runs and the ratio against ``off``, and the range of the paired
   CPU ratios (round i against round i; each round starts one configuration further on).  On this
   shared VM identical runs differ by several percent, more than the 1% budget: the instruction
   counts of ``bench/ndet_instructions.py`` are the figures to compare with it.

2. Analysis.  64 synthetic logs of ~20 MB each (327,680 records of 64 bytes) written by the real
   recorder's write path (records built with numpy and handed to ``NdetRecorder.extend_records``):
   a 64-rank data-parallel job (forward, backward, one all_reduce per step) where rank 5 produces a
   NaN and rank 17 never enters the last all_reduce.  ``neuron-det`` runs on them as a subprocess
   (default options, so it also writes the Chrome trace); we record wall time and its peak RSS
   (``os.wait4``), and check that the verdict names rank 17 and rank 5.

Usage::

    python bench/ndet_bench.py            # ~7 minutes on a 2-core machine
    python bench/ndet_bench.py --quick    # fewer runs, smaller logs
    python bench/ndet_bench.py --skip-analysis --runs 7 --steps 6000 \
        --trees before=/path/to/main/src,after=src       # both trees interleaved in one run

Results go to ``bench/results/ndet.json``.
"""

from __future__ import annotations

import argparse
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
from bench import provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "ndet.json")
CONFIGS = ("off", "ndet", "ndet_nonan")
ALL_CONFIGS = CONFIGS + ("ndet_nostats", "loaded")
LABELS = {"off": "NDET off", "ndet": "NDET on, 1 s flush (default NaN check)",
          "ndet_nonan": "NDET on, 1 s flush, NaN check off (logging only)",
          "ndet_nostats": "NDET on, 1 s flush, no monitor counters",
          "loaded": "NDET off, neuron-explorer loaded, 2 idle threads, no hooks",
          "null": "A/A control: NDET on, nothing paused (the method's noise floor)"}


def _env(config: str, log_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NEURON_RT_", "NEURON_EXPLORER_", "NEURON_PROCESS_TAG"))}
    env.update(PYTHONHASHSEED="0", OMP_NUM_THREADS="1", NEURON_EXPLORER_QUIET="1")
    if config == "loaded":
        env["NE_BENCH_LOADED"] = "1"
    elif config != "off":
        env["NEURON_RT_DBG_NDET_FLUSH_USEC"] = "1000000"
        env["NEURON_RT_DBG_NDET_LOG_LOCATION"] = log_dir
    if config == "ndet_nonan":
        env["NEURON_EXPLORER_NAN_CHECK"] = "0"
    if config == "ndet_nostats":
        env["NEURON_EXPLORER_STATS"] = "0"
    return env


def _load_without_hooks() -> None:
    """The ``loaded`` configuration: what an NDET process imports and its two timed threads, idle."""
    import threading

    import numpy  # noqa: F401

    import neuron_explorer.recorders.app_stats  # noqa: F401
    import neuron_explorer.recorders.ndet  # noqa: F401
    import neuron_explorer.runtime.core  # noqa: F401

    for period in (0.5, 1.0):
        stop = threading.Event()  # (never set: the thread idles until the process ends)

        def idle(p=period, ev=stop):
            while not ev.wait(p):
                pass
        threading.Thread(target=idle, daemon=True).start()


def worker(warmup: int, steps: int) -> None:
    """Runs in the subprocess: prints the mean step time in ns as JSON.

    With ``NE_BENCH_SAME_PROCESS=B`` (NDET or a system profile): the timed steps run in blocks of
    B, working and paused (``time_blocks``, ``pauser``), and it prints the training thread's CPU
    time per step of each kind.  ``NE_BENCH_BACKEND`` picks torch.compile's backend.  With
    ``NE_BENCH_NULL=1`` too, nothing is paused: both kinds of block do the same work (the A/A
    control, whose ratio is the method's noise floor)."""
    if os.environ.get("NE_BENCH_LOADED"):
        _load_without_hooks()  # at start-up, before torch, as the .pth autostart loads the package
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    backend = os.environ.get("NE_BENCH_BACKEND", "aot_eager")
    closs = torch.compile(lambda x, y: F.cross_entropy(model(x), y), backend=backend)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = closs(x, y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    block = int(os.environ.get("NE_BENCH_SAME_PROCESS") or 0)
    if block:
        print(json.dumps(time_blocks(step, steps, block, pauser(torch, bool(os.environ.get("NE_BENCH_NULL"))))))
        return
    t0, c0, m0 = time.perf_counter_ns(), time.process_time_ns(), time.thread_time_ns()
    for _ in range(steps):
        step()
    dt, dc, dm = time.perf_counter_ns() - t0, time.process_time_ns() - c0, time.thread_time_ns() - m0
    print(json.dumps({"step_ns": dt / steps, "cpu_ns": dc / steps, "main_cpu_ns": dm / steps}))


def pauser(torch, null: bool, module_call: bool = False):
    """``pause(flag)`` for ``time_blocks``: while set, the execution wrappers and record_function
    regions record nothing (``_fastpath.pause_executions``) and neuron-monitor's device-memory
    optimizer pre-hook is out of torch's table; with ``module_call``, ``nn.Module.__call__`` is
    torch's own too (the eager hooks record a root module's call in Python, which the pause does
    not reach).  With ``null`` (the A/A control) it does nothing."""
    import torch.optim.optimizer as optmod

    from neuron_explorer.runtime import _fastpath

    table = getattr(optmod, "_global_optimizer_pre_hooks", {})
    ours = [(k, f) for k, f in list(table.items())
            if getattr(getattr(f, "fn", None), "__qualname__", "").endswith("snapshot_step")]
    Module = torch.nn.Module
    hooked = Module.__call__
    own = getattr(hooked, "__wrapped__", hooked) if module_call else hooked

    def pause(flag: bool) -> None:
        if null:
            return
        _fastpath.pause_executions(flag)
        if own is not hooked:
            Module.__call__ = own if flag else hooked
        for k, f in ours:
            if flag:
                table.pop(k, None)
            else:
                table[k] = f

    return pause


def time_blocks(step, steps: int, block: int, pause) -> dict:
    """Run ``step`` in blocks of ``block``, in groups of four -- on, paused, paused, on, so that a
    drift in time cancels -- and return the training thread's CPU time per step of each kind."""
    spent = {True: 0, False: 0}
    quads = max(1, steps // (4 * block))
    for i in range(4 * quads):
        paused = i % 4 in (1, 2)
        pause(paused)
        m0 = time.thread_time_ns()
        for _ in range(block):
            step()
        spent[paused] += time.thread_time_ns() - m0
    pause(False)
    n = quads * 2 * block  # steps of each kind
    return {"on_ns": spent[False] / n, "paused_ns": spent[True] / n}


def run_worker(label: str, env: dict[str, str], warmup: int, steps: int, prefix: list[str] | None = None,
                argv: list[str] | None = None, cwd: str | None = None) -> dict:
    """One worker process (``prefix``: e.g. ``setarch -R``; ``argv``: another worker's command line
    than this file's); its JSON line. A worker killed by a signal is run once more, and said so."""
    argv = argv or [sys.executable, __file__, "--worker", str(warmup), str(steps)]
    for _attempt in range(2):
        p = subprocess.run([*(prefix or []), *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
        if p.returncode >= 0:
            break
        print(f"warning: worker {label} died by signal {-p.returncode}; run again", file=sys.stderr)
    if p.returncode != 0:
        raise RuntimeError(f"worker {label} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def overhead(runs: int, warmup: int, steps: int, trees: dict[str, str] | None = None,
             configs: tuple[str, ...] = CONFIGS, aslr: bool = True) -> dict:
    """Interleaved runs of every configuration (and, with ``trees``, of every source tree: the
    same configurations run with ``PYTHONPATH`` set to each, e.g. before and after a change).
    Each run reports its mean wall time and process CPU time per step; the CPU time barely moves
    when other work shares the machine, so it is the figure to compare on a busy VM."""
    trees = trees or {"": os.environ.get("PYTHONPATH", "")}
    configs = ("off",) + tuple(c for c in configs if c != "off")
    keys = [(t, c) for t in trees for c in configs]
    setarch = [] if aslr else ["setarch", os.uname().machine, "-R"]
    wall: dict = {k: [] for k in keys}
    cpu: dict = {k: [] for k in keys}
    main_cpu: dict = {k: [] for k in keys}  # the training thread's own CPU time (the rest: our threads)
    tmp = tempfile.mkdtemp(prefix="ndet-bench-")
    try:
        for i in range(runs):
            # each round starts one configuration further on: a process started right after
            # another ran a few percent slower or faster on this VM, and a fixed order turned that
            # into a bias of the ratios
            for t, c in keys[i % len(keys):] + keys[:i % len(keys)]:
                d = os.path.join(tmp, f"{t}{c}-{i}")
                os.makedirs(d)
                env = _env(c, d)
                if trees[t]:
                    env["PYTHONPATH"] = trees[t]
                got = run_worker(f"{t}{c}", env, warmup, steps, setarch)
                wall[(t, c)].append(got["step_ns"])
                cpu[(t, c)].append(got["cpu_ns"])
                main_cpu[(t, c)].append(got["main_cpu_ns"])
                if c.startswith("ndet") and not any(n.startswith("ndet_") for n in os.listdir(d)):
                    raise RuntimeError(f"{t}{c}: no NDET log was written")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {}
    for t, c in keys:
        w, proc = _over(wall[(t, c)], wall[(t, "off")]), _over(cpu[(t, c)], cpu[(t, "off")])
        out[f"{t}:{c}" if t else c] = {
            "paired_cpu": proc["paired"],  # round i against round i
            "label": LABELS[c] + (f" [{t}]" if t else ""), "median_step_us": w["median_us"],
            "min_step_us": min(wall[(t, c)]) / 1000, "max_step_us": max(wall[(t, c)]) / 1000,
            "runs": len(wall[(t, c)]), "overhead_pct": w["overhead_pct"],
            "median_cpu_us": proc["median_us"], "cpu_overhead_pct": proc["overhead_pct"],
            "main_thread": _over(main_cpu[(t, c)], main_cpu[(t, "off")]),
            "other_threads_us": statistics.median(a - b for a, b in zip(cpu[(t, c)], main_cpu[(t, c)])) / 1000}
    return out


def same_process(runs: int, warmup: int, steps: int, block: int, configs: tuple[str, ...],
                 env_for=_env, labels: dict[str, str] = LABELS, run=None) -> dict:
    """Per NDET configuration, ``runs`` processes that each time their steps with the execution
    wrappers working and paused (``worker``): the wrappers' per-step cost at one memory layout.

    Why: which of the toy step's small tensors share an address modulo 4096 (and so stall each
    other's loads and stores) depends on everything allocated before them; importing numpy or
    neuron-explorer before torch, with no hook at all, moved plain ATen ops by 1.5-4% on this VM.
    Separate processes therefore differ by a few percent whatever they record; one process
    measured both ways does not (docs/decisions/0062).

    ``null`` is the A/A control, interleaved with the rest: the first configuration, nothing paused,
    timed the same way; how far its ratio strays from 1 is how far this method can be trusted.
    ``env_for(config, dir)`` makes a worker's environment (``bench/capture_overhead.py`` passes
    the system profile's), ``labels`` names the configurations, and ``run(label, env, warmup,
    steps)`` runs one worker (default: this file's compiled step; ``bench/eager_overhead.py``
    passes its eager steps)."""
    out = {}
    control = configs[0] if configs else "ndet"  # what the A/A control runs
    configs = tuple(configs) + ("null",)
    ratios: dict[str, list[float]] = {c: [] for c in configs}
    on_us: dict[str, list[float]] = {c: [] for c in configs}
    tmp = tempfile.mkdtemp(prefix="ndet-bench-")
    try:
        for i in range(runs):
            for c in configs[i % len(configs):] + configs[:i % len(configs)]:
                d = os.path.join(tmp, f"{c}-{i}")
                os.makedirs(d)
                env = env_for(control if c == "null" else c, d)
                env["NE_BENCH_SAME_PROCESS"] = str(block)
                if c == "null":
                    env["NE_BENCH_NULL"] = "1"
                got = (run or run_worker)(c, env, warmup, steps)
                ratios[c].append(got["on_ns"] / got["paused_ns"])
                on_us[c].append(got["on_ns"] / 1000)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for c in configs:
        r = ratios[c]
        out[c] = {"label": labels.get(c, LABELS.get(c, c)), "median_ratio": statistics.median(r),
                  "min": min(r), "max": max(r), "n": len(r), "median_step_us": statistics.median(on_us[c]),
                  "overhead_pct": 100.0 * (statistics.median(r) - 1), "ratios": r}
    return out


def _over(xs: list[float], base: list[float]) -> dict:
    """Median of ``xs`` over the median of ``base`` in percent, and the range of the paired ratios."""
    paired = [a / b for a, b in zip(xs, base)]
    return {"median_us": statistics.median(xs) / 1000,
            "overhead_pct": 100.0 * (statistics.median(xs) / statistics.median(base) - 1),
            "paired": {"min": min(paired), "max": max(paired), "n": len(paired)}}


def make_logs(d: str, nlogs: int, records: int) -> int:
    """Write ``nlogs`` synthetic logs of ``records`` records each; returns total bytes."""
    import numpy as np

    from neuron_explorer.contracts import ndet_log as fmt
    from neuron_explorer.recorders.ndet import NdetRecorder
    from neuron_explorer.runtime.config import CaptureConfig
    from neuron_explorer.runtime.core import Runtime
    from neuron_explorer.runtime.identity import ProcessIdentity

    group = ",".join(map(str, range(nlogs)))
    nan_rank, miss_rank = culprits(nlogs)
    steps = records // 3
    total = 0
    for rank in range(nlogs):
        ident = ProcessIdentity(instance_id=f"i-{rank // 32:017x}", hostname="bench", pid=10000 + rank, rank=rank,
                                local_rank=rank % 32, world_size=nlogs, node_rank=rank // 32, process_tag="bench")
        rt = Runtime(CaptureConfig(max_events_per_nc=1), ident=ident)
        for kind in ("forward", "backward"):
            rt.add_model(name=f"train_step_{kind}", neff_name=f"neff_{kind}", graph_hash=kind, backend="aot_eager",
                         kind=kind, nc_idx=rank % 32)
        rec = NdetRecorder(rt, d, 1_000_000, steps * 3, require_framework=False)
        op, g, dt = rec.intern("all_reduce"), rec.intern(group), rec.intern("float32")
        nc = rank % 32
        t = 1_000_000_000 + np.arange(steps, dtype=np.int64) * 1_000_000 + rank * 1000
        block = np.zeros(steps * 3, dtype=fmt.RECORD_DTYPE)
        block["nc"] = nc
        fw, bw, cc = block[0::3], block[1::3], block[2::3]
        seq = np.arange(steps)
        fw["kind"], fw["t0"], fw["t1"], fw["a"], fw["b"] = fmt.KIND_EXEC, t, t + 300_000, 0, 2 * seq
        bw["kind"], bw["t0"], bw["t1"], bw["a"], bw["b"] = fmt.KIND_EXEC, t + 310_000, t + 700_000, 1, 2 * seq + 1
        cc["kind"], cc["t0"], cc["t1"], cc["a"], cc["b"] = fmt.KIND_CC_OP, t + 710_000, t + 900_000, op, seq
        cc["c"], cc["d"], cc["e"] = 4 << 20, dt, g
        if rank == nan_rank:  # a NaN in the middle of the run
            i = 3 * (steps // 2)
            block[i]["ret"] = 1003
            nerr = np.zeros(1, fmt.RECORD_DTYPE)
            nerr[0] = (fmt.KIND_NUMERICAL_ERROR, 0, nc, 1003, block[i]["t0"], block[i]["t1"], 0, block[i]["b"], 12,
                       0, 0)
            block = np.concatenate([block[:i + 1], nerr, block[i + 1:]])
        rec.extend_records(block[:-1])  # the last all_reduce never completes anywhere
        if rank != miss_rank:  # miss_rank never enters it; every other rank is stuck in it (begin record only)
            rec.cc_begin(nc, "all_reduce", steps - 1, group, 4 << 20, "float32", int(t[-1]) + 710_000)
        path = rec.write(final=False, reason="running")
        total += os.path.getsize(path)
    return total


def culprits(nlogs: int) -> tuple[int, int]:
    """(the rank that produces a NaN, the rank that misses the last all_reduce): 5 and 17 of 64."""
    return 5 % nlogs, min(17, nlogs - 1)


def _run_measured(cmd: list[str]) -> tuple[float, int, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    took = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    out, err = p.stdout.read(), p.stderr.read()
    return took, ru.ru_maxrss * 1024, subprocess.CompletedProcess(cmd, p.returncode, out, err)


def analysis(nlogs: int, records: int) -> dict:
    tmp = tempfile.mkdtemp(prefix="ndet-bench-logs-")
    try:
        t0 = time.perf_counter()
        total = make_logs(tmp, nlogs, records)
        gen_s = time.perf_counter() - t0
        trace = os.path.join(tmp, "out", "trace.json")
        os.makedirs(os.path.dirname(trace))
        base = [sys.executable, "-m", "neuron_explorer.ndet.cli", "--log-prefix", os.path.join(tmp, "ndet")]
        _run_measured(base + ["-o", trace])  # warm the page cache the same way for both runs
        took, rss, p = _run_measured(base + ["-o", trace])
        took_small, rss_small, _ = _run_measured(base + ["-o", trace, "--max-trace-events", "0"])
        verdict = [ln.strip() for ln in p.stdout.splitlines() if ln.strip().startswith("culprit")]
        nan_rank, miss_rank = culprits(nlogs)
        ok = any(f"rank {miss_rank} never entered all_reduce" in v for v in verdict) and \
            any(f"rank {nan_rank}: first numerical error" in v for v in verdict)
        return {"logs": nlogs, "records_per_log": records, "bytes_total": total,
                "mb_per_log": total / nlogs / 1e6, "generate_s": gen_s, "neuron_det_s": took,
                "neuron_det_peak_rss_mb": rss / 1e6, "trace_bytes": os.path.getsize(trace),
                "neuron_det_no_trace_window_s": took_small, "peak_rss_no_trace_window_mb": rss_small / 1e6,
                "gb_per_s": total / 1e9 / took, "exit_status": p.returncode, "verdict": verdict,
                "verdict_names_culprits": ok}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-analysis", action="store_true")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per run")
    ap.add_argument("--trees", default=None,
                    help="NAME=SRC,NAME=SRC: run every configuration with PYTHONPATH=SRC of each (same run)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, from {', '.join(ALL_CONFIGS)}")
    ap.add_argument("--no-aslr", action="store_true", help="run every worker under setarch -R")
    ap.add_argument("--same-process", type=int, default=None, metavar="RUNS",
                    help="also time NDET's wrappers on and paused in one process, RUNS processes per NDET "
                         "configuration (0: skip; default 5, 3 with --quick)")
    ap.add_argument("--block", type=int, default=250, help="steps per block of --same-process")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    runs = args.runs or (3 if args.quick else 7)
    res: dict = {**provenance.stamp(),
                 "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                             "platform": platform.platform()},
                 "command": " ".join(["python -m bench.ndet_bench", *sys.argv[1:]])}
    if not args.skip_overhead:
        trees = dict(kv.split("=", 1) for kv in args.trees.split(",")) if args.trees else None
        steps = args.steps or (1500 if args.quick else 4000)
        configs = tuple(args.configs.split(","))
        bad = [c for c in configs if c not in ALL_CONFIGS]
        if bad:
            ap.error(f"--configs: unknown {', '.join(bad)}; accepted: {', '.join(ALL_CONFIGS)}")
        res["aslr"] = not args.no_aslr
        res["overhead"] = overhead(runs, warmup=300, steps=steps, trees=trees, configs=configs, aslr=not args.no_aslr)
        print(f"{'configuration':60s} {'median step':>12s} {'min':>9s} {'max':>9s} {'overhead':>9s} "
              f"{'CPU/step':>10s} {'CPU ovh':>8s} {'main thr':>9s} {'others':>8s}")
        for r in res["overhead"].values():
            print(f"{r['label']:60s} {r['median_step_us']:10.1f}us {r['min_step_us']:7.1f}us {r['max_step_us']:7.1f}us "
                  f"{r['overhead_pct']:+8.2f}% {r['median_cpu_us']:8.1f}us {r['cpu_overhead_pct']:+7.2f}% "
                  f"{r['main_thread']['overhead_pct']:+8.2f}% {r['other_threads_us']:6.2f}us")
    sp_runs = args.same_process if args.same_process is not None else (3 if args.quick else 5)
    if not args.skip_overhead and sp_runs:
        ndet_configs = tuple(c for c in args.configs.split(",") if c.startswith("ndet"))
        # a timed window of ~5 s a process: at 4,000 steps (1.6 s) the A/A control's median strayed
        # 1.6% from 1 in one run and 0.4% in the next
        sp_steps = args.steps or (3000 if args.quick else 12000)
        sp = res["same_process"] = same_process(sp_runs, warmup=300, steps=sp_steps, block=args.block,
                                                configs=ndet_configs)
        print(f"\n{'same process: wrappers working over paused':60s} {'median':>9s} {'min':>8s} {'max':>8s} "
              f"{'runs':>5s}")
        for r in sp.values():
            print(f"{r['label']:60s} {r['median_ratio']:9.4f} {r['min']:8.4f} {r['max']:8.4f} {r['n']:5d}")
    if args.skip_analysis:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
        return
    nlogs, records = (16, 65536) if args.quick else (64, 327_680)
    a = res["analysis"] = analysis(nlogs, records)
    print()
    print(f"{'analysis':52s} {'value':>14s}")
    for k, label, f in (("logs", "logs", "{:d}"), ("mb_per_log", "MB per log", "{:.1f}"),
                        ("neuron_det_s", "neuron-det wall time (s), trace of last 20000/log", "{:.2f}"),
                        ("neuron_det_peak_rss_mb", "  peak RSS (MB)", "{:.0f}"),
                        ("neuron_det_no_trace_window_s", "neuron-det wall time (s), errors-only trace", "{:.2f}"),
                        ("peak_rss_no_trace_window_mb", "  peak RSS (MB)", "{:.0f}"),
                        ("gb_per_s", "throughput (GB/s of logs)", "{:.2f}"),
                        ("verdict_names_culprits", "verdict names the NaN and the missing rank", "{}")):
        print(f"{label:52s} {f.format(a[k]):>14s}")
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
