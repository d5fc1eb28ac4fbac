"""Instructions per training step, unprofiled against the system profile, counted with callgrind.

Wall-clock ratios on a small, shared VM move by +-10-15% between identical runs, far more than the
1% capture budget.  Instruction counts do not: this script runs the training step of
``bench/capture_overhead.py`` (compiled forward + AOTAutograd backward + SGD, two instrumented
graph calls per step) under ``valgrind --tool=callgrind`` and takes the slope between a short and a
long run::

    instructions/step = (Ir(long) - Ir(short)) / (long - short)

so interpreter start-up, imports, compilation and the fixed part of the exit cancel, while every
per-step cost stays in -- the hooks' hot path and also the share of the final profile write that
grows with the number of recorded events.  Start-up runs uninstrumented (``--instr-atstart=no``;
``callgrind_control -i on`` after the warm-up steps), and address-space randomisation is off
(``setarch -R``): CPython's type-attribute cache is indexed by addresses, and with randomisation
identical runs differ by up to ~2%.  Without it, repetitions in one batch usually agree to tens of
instructions a step (once by ~4k), but a different build or install path (another memory layout,
and so, most likely, another hit rate of that cache) moves a configuration's slope by up to ~5k a
step, and an unused 1,500-byte environment variable moved ``plain`` on the compiled step by +8.6k
(docs/decisions/0178-*.md): compare configurations within one batch (``--repeat N`` gives the
median of N slopes and their range), and read a difference of a few thousand as layout.

Configurations (each a fresh interpreter, started as a user starts it):

* ``plain``  -- no profiler variable set;
* ``system`` -- ``NEURON_RT_INSPECT_ENABLE=1`` (the ``.pth`` file starts the runtime) with the
  timer-driven threads off: CPU/memory samplers, the neuron-monitor publisher and the periodic
  flush.  Valgrind runs the main thread ~50x slower, so a timer thread would run ~50x more often per
  step than it does for real; those threads are measured in wall time instead (see
  ``docs/decisions/0003-measuring-capture-overhead.md``);
* ``system_stats`` -- as ``system`` but with the neuron-monitor counters on and their publisher's
  period stretched (``NEURON_EXPLORER_STATS_PERIOD_MS``), so the per-execution feed is counted
  and the publisher is not;
* ``system_py`` -- as ``system`` with ``NEURON_EXPLORER_PURE_PYTHON=1``: the Python execution
  wrapper instead of the C one (``runtime/_fastpath.c``), to show what the C wrapper saves;
* ``system_pykernels`` -- as ``system`` with ``NEURON_EXPLORER_CPP_KERNELS=0``: the collectives'
  Python kernels, so the torch-ABI extension is not loaded at torch's import (decision 0223);
* ``ndet`` -- NDET alone (``NEURON_RT_DBG_NDET_FLUSH_USEC``, flush period stretched like the
  capture's), with its default NaN/Inf scan of graph outputs; ``ndet_nonan`` -- the same with
  ``NEURON_EXPLORER_NAN_CHECK=0``: the logging alone.

* ``ondemand_idle`` -- ``plain`` with the on-demand watcher on (``NEURON_EXPLORER_ON_DEMAND`` unset;
  every other configuration sets it to 0): the idle cost of ``neuron-explorer attach`` (issue 32).
  Its thread wakes once a second, not once a step: under valgrind a step takes ~50x longer, so
  the slope charges each step ~50x the polls it meets for real (docs/decisions/0108-*.md).

* ``plain_thread`` -- ``plain`` with one idle Python thread (waiting on an event) started before
  the warm-up: what glibc and libstdc++ charge a process for having a second thread at all (locked
  mutexes, ``pthread_once`` and atomic reference counts once ``__libc_single_threaded`` is false).
  ``plain`` runs one thread (``OMP_NUM_THREADS=1``); the profile's samplers and flush are threads,
  and so is torch's intra-op pool at its default settings (docs/decisions/0222-*.md).

* ``torch_profiler`` / ``jax_profiler`` (``--peer``) -- the same-run peer: ``torch.profiler``
  (CPU activities) or ``jax.profiler.trace`` entered before counting starts and left at the end,
  so its stop and export are counted.

``--workload`` picks the execution path: ``compiled`` (this step, ``--backend aot_eager`` or
``inductor``), ``eager_mlp`` / ``eager_block`` (the eager steps of ``bench/eager_overhead.py``) or
``jax`` (the ``jax.jit`` step of ``bench/jax_overhead.py``).

Usage::

    python bench/capture_instructions.py                 # plain + system, 200/600 steps (~6 min)
    python bench/capture_instructions.py --workload eager_block --short 10 --long 30 --peer
    python bench/capture_instructions.py --configs plain,system,system_stats
    python bench/capture_instructions.py --annotate      # also keep and diff callgrind_annotate output
    python bench/capture_instructions.py --short 100 --long 300 --jobs 1
    python bench/capture_instructions.py --configs plain,ndet --repeat 3   # median of 3 slopes

Results go to ``bench/results/capture_instructions.json`` (the compiled ``aot_eager`` step) or
``bench/results/capture_instructions_<path>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results", "capture_instructions.json")

CONFIGS = ("plain", "system", "system_stats", "system_py", "system_pykernels", "ndet", "ndet_nonan", "torch_profiler",
           "jax_profiler", "ondemand_idle", "plain_thread")
#: configurations that record nothing (no profile expected)
UNPROFILED = ("plain", "torch_profiler", "ondemand_idle", "plain_thread")
# execution paths: the compiled step (--backend aot_eager or inductor), the eager steps of
# bench/eager_overhead.py, the jax.jit step of bench/jax_overhead.py
WORKLOADS = ("compiled", "eager_mlp", "eager_block", "jax")
PEER = {"compiled": "torch_profiler", "eager_mlp": "torch_profiler", "eager_block": "torch_profiler",
        "jax": "jax_profiler"}


def tag(workload: str, backend: str) -> str:
    """The name of a workload's figures: ``compiled_aot_eager``, ``eager_mlp``, ``jax``, ..."""
    return f"compiled_{backend}" if workload == "compiled" else workload


def results_path(workload: str, backend: str) -> str:
    """``capture_instructions.json`` for the original compiled aot_eager step, else one per path."""
    t = tag(workload, backend)
    return RESULTS if t == "compiled_aot_eager" else RESULTS.replace(".json", f"_{t}.json")


def _python() -> str:
    """The interpreter this script runs on, as valgrind can start it.  ``sys.executable`` itself
    when it is a binary: a venv's ``python`` is a symlink to the base interpreter, and only
    started by the venv's path does it read ``pyvenv.cfg`` and import the venv's packages (the
    real path imported whatever ``neuron_explorer`` the base install had, or failed).  A script
    (a pyenv shim: valgrind would count bash) gives way to the binary it runs:
    ``sys._base_executable``, whose packages the worker checks (``_check_tree``)."""
    exe = sys.executable
    try:
        with open(exe, "rb") as f:
            if f.read(4) == b"\x7fELF":
                return exe
    except OSError:
        pass
    return getattr(sys, "_base_executable", None) or os.path.realpath(exe)


def _check_tree() -> None:
    """In the worker: stop when ``neuron_explorer`` would come from another checkout than this
    script's (the counts would measure that code)."""
    import importlib.util

    spec = importlib.util.find_spec("neuron_explorer")
    where = os.path.dirname(os.path.abspath(spec.origin)) if spec and spec.origin else "nowhere"
    want = os.path.join(ROOT, "src", "neuron_explorer")
    if os.path.realpath(where) != os.path.realpath(want):
        sys.exit(f"capture_instructions: this interpreter imports neuron_explorer from {where}, not {want}: "
                 f"set PYTHONPATH={os.path.join(ROOT, 'src')}")


# JAX runs its computations on XLA's thread pools, asynchronously to the caller; under valgrind the
# threads are serialised and the pool's spinning and work stealing follow the scheduler, so two
# identical runs differed by +1.06M and -62k instructions per call.  Counting turns Eigen's
# intra-op parallelism off.  The computation still runs on a pool thread of the CPU client
# (``ThreadPoolAsyncWorkRunner``), asynchronously to the caller (jax 0.10: async dispatch off
# applies to "non-parallel computations" only): the worker waits for it before counting starts
# and at the end (docs/decisions/0187-*.md).  CPU-time figures keep JAX's defaults.
JAX_SERIAL = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
              "JAX_CPU_ENABLE_ASYNC_DISPATCH": "false"}

# At exit, glibc's ``malloc_consolidate`` (and ``unlink_chunk``) merges the freed fastbin chunks.
# How much it finds jumped by 3.4-4.5M instructions between runs of one configuration, which moved
# a 200-step slope by up to 22k a step, 3% of the jitted call.  JAX runs turn fastbins off, every
# configuration alike, so freed chunks are merged as they are freed and counted where that happens.
# Over one batch each configuration's exit then held to 0.1M (docs/decisions/0190-*.md).
JAX_MALLOC = {"GLIBC_TUNABLES": "glibc.malloc.mxfast=0"}


# Between two computations the CPU client's idle pool workers look for work (Eigen's
# ``ThreadPoolTempl::MaybeGetTask``: local and global steals, a spin, then parking) for as long as
# valgrind's scheduler runs them, not as the program asks: 33-44k instructions a call in one batch,
# plain and system alike, which moved a configuration's slope by +-10k (the capture's own cost is
# ~7k).  A JAX run's count leaves out their inclusive cost (recorded apart as ``ir_pool_idle``);
# the computation that a worker then runs stays in (decision 0187).
POOL_IDLE = {"jax": ("::MaybeGetTask(",)}
_INCL = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+(?:\*\s+)?(\S.*)$")


def _idle_ir(path: str, marks: tuple[str, ...]) -> int:
    """The inclusive instructions of the functions named by ``marks`` in one callgrind file (the
    largest entry of each: a function's recursion levels are listed apart, the outer one holds all)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--auto=no", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    best = dict.fromkeys(marks, 0)
    for line in out.splitlines():
        m = _INCL.match(line)
        if m is None:
            continue
        for mark in marks:
            if mark in m.group(2):
                best[mark] = max(best[mark], int(m.group(1).replace(",", "")))
    return sum(best.values())


# CPython 3.11's type-attribute cache is one direct-mapped table of 4,096 entries, indexed by the
# type's version tag and the attribute name's address: two (type, name) pairs a step uses that share
# an entry evict each other, and each miss walks the type's MRO (``find_name_in_mro``, ~350
# instructions).  Which pairs share one depends on the order in which types got their tags and
# where names were allocated, so on thread timing during start-up: on the Inductor step identical
# runs of one configuration made 33-60 misses a step, 11-21k instructions, plain and system alike
# (none of them a type modified per step: no version tag changes between steps).  A run's count
# records the misses of its steps' part (calls and inclusive instructions), and the summary gives
# the slopes without them beside the slopes as counted (decision 0202).
_MRO_WALK = "find_name_in_mro"
_CFN = re.compile(r"^c?fn=\((\d+)\)(?: (.*))?$")


def _mro_walks(path: str) -> tuple[int, int]:
    """(calls, inclusive instructions) of the type-attribute cache's misses (``find_name_in_mro``)
    in one callgrind file: the ``calls=`` lines under a ``cfn=`` naming it, and the cost line after
    each (names are compressed: ``(id) name`` the first time, ``(id)`` after)."""
    names: dict[str, str] = {}
    n = ir = 0
    target = False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(("fn=", "cfn=")):
                m = _CFN.match(line.rstrip("\n"))
                if m is None:
                    continue
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                if line[0] == "c":
                    target = names.get(m.group(1), "").split("'")[0] == _MRO_WALK
            elif line.startswith("calls="):
                cost = next(f, "").split()
                if target:
                    n += int(line[6:].split()[0])
                    ir += int(cost[1]) if len(cost) > 1 else 0
                target = False
    return n, ir


def _env(config: str, out_dir: str, workload: str = "compiled") -> dict[str, str]:
    env = {}
    for k, v in os.environ.items():
        if k.startswith(("NEURON_RT_INSPECT_", "NEURON_RT_DBG_NDET_", "NEURON_EXPLORER_")) or \
                k == "NEURON_PROCESS_TAG":
            continue
        env[k] = v
    # NEURON_EXPLORER_STATS=0 in every run but system_stats: without it, the plain and peer runs start
    # neuron-monitor discovery's watcher thread (torch's entry point), which the profiled runs do not
    # have; under valgrind its polling costs ~7k instructions per step, and a monitor running on the
    # host makes the plain run record its executions (found by the ndet2 branch)
    # NEURON_EXPLORER_ON_DEMAND=0 likewise (the same watcher thread takes `attach` requests), but in
    # ondemand_idle: plain with the thread waiting for a request, the idle cost of issue 32
    env.update(PYTHONHASHSEED="0", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", NEURON_EXPLORER_QUIET="1",
               NEURON_EXPLORER_STATS="0", NEURON_EXPLORER_ON_DEMAND="0")
    if workload == "jax":
        env.update(JAX_SERIAL)
        env.update(JAX_MALLOC)
    if os.environ.get("NE_CG_INDUCTOR_CACHE"):
        # one compile cache per batch, filled by _warm before any count (see there)
        env["TORCHINDUCTOR_CACHE_DIR"] = os.environ["NE_CG_INDUCTOR_CACHE"]
    if platform.machine() in ("x86_64", "AMD64"):
        # valgrind cannot decode AVX-512: Inductor compiles its kernels with -march=native (gcc runs
        # outside valgrind and sees the host's AVX-512); AVX2 is what valgrind's CPU offers to ATen too
        env.setdefault("TORCHINDUCTOR_CPP_MARCH", "x86-64-v3")
        env.setdefault("ATEN_CPU_CAPABILITY", "avx2")
    if config == "ondemand_idle":
        del env["NEURON_EXPLORER_ON_DEMAND"]
        env["NEURON_EXPLORER_ON_DEMAND_DIR"] = os.path.join(out_dir, "on-demand")
    elif config.endswith("_profiler"):
        env["PEER_TRACE_DIR"] = out_dir
    elif config.startswith("ndet"):
        # NDET alone, its flush thread stretched like the capture's periodic flush (see above)
        env.update(NEURON_RT_DBG_NDET_FLUSH_USEC="100000000000", NEURON_RT_DBG_NDET_LOG_LOCATION=out_dir,
                   NEURON_EXPLORER_INSTANCE_ID="bench")
        if config == "ndet_nonan":
            env["NEURON_EXPLORER_NAN_CHECK"] = "0"
    elif config not in ("plain", "plain_thread"):
        # the user's settings (samplers on, so the device-memory hook is installed and counted);
        # only the samplers' and the flush's timers are stretched, as explained above
        env.update(
            NEURON_RT_INSPECT_ENABLE="1",
            NEURON_RT_INSPECT_OUTPUT_DIR=out_dir,
            NEURON_EXPLORER_SAMPLE_PERIOD_MS="100000000",
            NEURON_EXPLORER_FLUSH_PERIOD_MS="100000000",
            # the memory hook's gradient snapshot every 16 steps whatever the load (decision 0118)
            NEURON_EXPLORER_GRAD_SNAPSHOT_MAX_MS="100000000",
            NEURON_EXPLORER_INSTANCE_ID="bench",
        )
        if config == "system_py":
            env["NEURON_EXPLORER_PURE_PYTHON"] = "1"
        if config == "system_pykernels":  # the collectives' Python kernels: the extension not loaded at import
            env["NEURON_EXPLORER_CPP_KERNELS"] = "0"
        if config == "system_stats":
            del env["NEURON_EXPLORER_STATS"]
            env["NEURON_EXPLORER_STATS_PERIOD_MS"] = "100000000"
            env["NEURON_EXPLORER_STATS_DIR"] = os.path.join(out_dir, "stats")
    return env


def _build(workload: str, backend: str):
    """(step, sync) of a workload; sync waits for asynchronous work (JAX) to finish."""
    if workload == "jax":
        from bench.jax_overhead import build_step

        return build_step(int(os.environ.get("NE_JAX_SIZE", "128")))
    import torch

    torch.set_num_threads(1)
    if workload == "compiled":
        from bench.capture_overhead import _build_step

        return _build_step(torch, backend), None
    from bench.eager_overhead import build_step

    return build_step(torch, workload.split("_", 1)[1]), None


def _peer(config: str):
    """The same-run peer profiler as a context manager (a null context for the other configs)."""
    import contextlib

    if config == "torch_profiler":
        from torch.profiler import ProfilerActivity, profile

        @contextlib.contextmanager
        def exported():
            # its trace exported as a user does (our final write is counted too)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                yield
            prof.export_chrome_trace(os.path.join(os.environ["PEER_TRACE_DIR"], "trace.json"))

        return exported()
    if config == "jax_profiler":
        import jax

        return jax.profiler.trace(os.environ["PEER_TRACE_DIR"])
    return contextlib.nullcontext()


def worker(steps: int, backend: str, workload: str = "compiled", config: str = "plain") -> None:
    """Compile, then run ``steps`` training steps (what callgrind counts)."""
    sys.path.insert(0, ROOT)
    _check_tree()
    if config == "plain_thread":
        import threading

        threading.Thread(target=threading.Event().wait, name="idle", daemon=True).start()
    step, sync = _build(workload, backend)
    for _ in range(3 if workload == "eager_block" else 10):  # compile, let lazily built paths settle
        step()
    with _peer(config):
        # the peer's start is a one-time cost: it runs before counting starts; its stop and
        # export grow with the steps recorded and are counted
        step()
        if sync is not None:
            # JAX dispatches asynchronously even with JAX_CPU_ENABLE_ASYNC_DISPATCH=false: the
            # warm-up's computations, among them the first one with oneDNN's one-time sgemm code
            # generation (~80M instructions on a pool thread), would otherwise run while counting
            # starts, early or late as the wall clock falls (docs/decisions/0187-*.md)
            sync()
        go = os.environ.get("NE_CG_GO")
        if go:
            # instrumentation is off until here (--instr-atstart=no): say so, and keep running code
            # (callgrind takes callgrind_control's request only while the program executes) until
            # the parent has switched it on
            # Each look is counted once the parent has switched counting on, and how many come
            # before it answers depends on the machine's load: ``os.access`` answers False with no
            # exception, 2.0k instructions a look (``os.path.exists`` on a missing file made an
            # OSError and decoded its message, 8.2k: ~60 extra looks moved a 20-step slope by 14k
            # a step); a look also sleeps, which callgrind needs to take the parent's request
            print("ready", flush=True)
            while not os.access(go, os.F_OK):
                time.sleep(0.002)
        for _ in range(steps):
            step()
        if sync is not None:
            sync()
        if go:
            # the steps' count apart from the exit's (callgrind_control --dump): a fixed part that
            # moves between identical runs (JAX's teardown) then shows where it is
            print("done", flush=True)
            while not os.access(go + ".end", os.F_OK):
                time.sleep(0.002)


_TOTAL = re.compile(rb"^(?:summary|totals):\s*(\d+)", re.M)
_TOTALS = re.compile(rb"^(?:summary|totals):((?:\s+\d+)+)", re.M)
_EVENTS = re.compile(rb"^events:\s*(.+)$", re.M)


def cycle_estimate(ev: dict[str, float]) -> float:
    """Valgrind's cache simulation turned into one number (KCachegrind's "cycle estimation"):
    instructions, plus 10 per first-level miss and 100 per last-level miss (and, with the branch
    simulation, 15 per mispredicted conditional or indirect branch). A model, not this CPU:
    it says whether a difference in instructions understates a difference in time."""
    l1 = ev.get("I1mr", 0) + ev.get("D1mr", 0) + ev.get("D1mw", 0)
    ll = ev.get("ILmr", 0) + ev.get("DLmr", 0) + ev.get("DLmw", 0)
    return ev.get("Ir", 0) + 10 * l1 + 100 * ll + BRANCH_MISS_CYCLES * (ev.get("Bcm", 0) + ev.get("Bim", 0))


BRANCH_MISS_CYCLES = 15  # a mispredicted branch (--branch-sim): a pipeline refill on current x86 cores


def _callgrind(config: str, steps: int, backend: str, work: str, annotate: bool, aslr_off: bool,
               workload: str = "compiled", rep: int = 0, cache_sim: bool = False) -> dict:
    sfx = f"{steps}" if rep == 0 else f"{steps}.r{rep}"
    out_dir = os.path.join(work, f"{config}_{sfx}")
    os.makedirs(out_dir, exist_ok=True)
    cg = os.path.join(work, f"cg.{config}.{sfx}")
    go = os.path.join(work, f"go.{config}.{sfx}")
    # Start-up, imports and compilation run uninstrumented (5-10x faster under valgrind); counting
    # starts after the warm-up steps and runs to the end of the process, so the exit write is in.
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", "--instr-atstart=no",
           *(["--cache-sim=yes", "--branch-sim=yes"] if cache_sim else []),
           _python(), os.path.abspath(__file__), "--worker", str(steps), "--backend", backend,
           "--workload", workload, "--config", config]
    if aslr_off:
        # CPython's type-attribute cache is indexed by the attribute name's address: with address
        # randomisation its hit rate, and so the count, moves by up to ~2% between identical runs
        cmd = ["setarch", os.uname().machine, "-R"] + cmd
    env = _env(config, out_dir, workload)
    env["NE_CG_GO"] = go
    t0 = time.time()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=err)
        line = p.stdout.readline()
        if line.strip() == b"ready":
            subprocess.run(["callgrind_control", "-i", "on", str(p.pid)], check=True, capture_output=True,
                           timeout=600)
            open(go, "w").close()
            if p.stdout.readline().strip() == b"done":
                subprocess.run(["callgrind_control", "--dump=steps", str(p.pid)], check=True,
                               capture_output=True, timeout=600)
            open(go + ".end", "w").close()
        p.stdout.read()
        rc = p.wait(timeout=3600)
        if rc != 0 or line.strip() != b"ready":
            err.seek(0)
            raise RuntimeError(f"{config} {steps}: exit {rc}\n{err.read().decode(errors='replace')[-3000:]}")
    with open(cg, "rb") as f:
        data = f.read()
    m = _TOTAL.search(data)
    if m is None:
        raise RuntimeError(f"no total in {cg}")
    res = {"config": config, "steps": steps, "rep": rep, "ir": int(m.group(1)), "seconds": round(time.time() - t0, 1),
           "file": cg}
    if os.path.exists(cg + ".1"):  # the dump at the steps' end: ir is then steps + exit
        with open(cg + ".1", "rb") as f:
            m1 = _TOTAL.search(f.read())
        if m1 is not None:
            res["ir_exit"] = res["ir"]
            res["ir_steps"] = int(m1.group(1))
            res["ir"] = res["ir_steps"] + res["ir_exit"]
    if workload in POOL_IDLE:
        idle = {part: _idle_ir(path, POOL_IDLE[workload]) for part, path in
                (("ir_steps", cg + ".1"), ("ir_exit", cg)) if part in res or part == "ir_exit"}
        res["ir_pool_idle"] = sum(idle.values())
        res["ir_with_pool_idle"] = res["ir"]
        res["ir"] -= res["ir_pool_idle"]
        for part, v in idle.items():
            if part in res:
                res[part] -= v
    steps_part = cg + ".1" if "ir_steps" in res else cg
    res["type_cache_misses"], res["ir_type_cache_misses"] = _mro_walks(steps_part)
    names, vals = _EVENTS.search(data), _TOTALS.search(data)
    if cache_sim and names and vals:
        res["events"] = dict(zip(names.group(1).decode().split(), map(int, vals.group(1).split())))
    if config.startswith("ndet") or config.endswith("_profiler"):
        res["profile_written"] = any(fs for _, _, fs in os.walk(out_dir))
    elif config not in UNPROFILED:
        res["profile_written"] = any("ntrace.pb" in fs for _, _, fs in os.walk(out_dir))
    if annotate:
        _annotate(cg)
    return res


def _annotate(cg: str) -> None:
    """``cg.txt``: callgrind_annotate's exclusive listing of the steps' part (``cg.1``, the dump at
    their end) followed by the exit's (``cg``), as ``_functions`` reads them.  (The exit's alone is
    ~0.1% of the per-step slope: a diff of it found no function above ~1.4k a step.)"""
    with open(cg + ".txt", "w") as f:
        for part in ([cg + ".1"] if os.path.exists(cg + ".1") else []) + [cg]:
            a = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", part],
                               capture_output=True, text=True)
            f.write(a.stdout)


def _warm(configs: list[str], backend: str, workload: str, work: str) -> None:
    """Fill the batch's Inductor compile cache: one uninstrumented run of each configuration.
    The counted runs compile in their uncounted warm-up, but with an empty cache the first runs
    (the long ones go first) also paid for work Inductor finishes later (its compile workers,
    cache writes): 0.994x ours and 0.816x torch.profiler on a fresh cache."""
    for c in configs:
        out_dir = os.path.join(work, f"warm_{c}")
        os.makedirs(out_dir, exist_ok=True)
        subprocess.run([_python(), os.path.abspath(__file__), "--worker", "2", "--backend", backend,
                        "--workload", workload, "--config", c], env=_env(c, out_dir, workload), cwd=ROOT,
                       check=True, capture_output=True, timeout=1800)


def _functions(path: str) -> dict[str, int]:
    """Exclusive Ir per function from callgrind_annotate listings (``_annotate``: one or more, each
    from its header on), summed over the listings."""
    out: dict[str, int] = {}
    line_re = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$")
    started = False
    with open(path) as f:
        for line in f:
            if line.startswith("Profile data file"):
                started = False  # the next listing's header
            elif "file:function" in line:
                started = True
            elif started:
                m = line_re.match(line)
                name = m.group(2).strip() if m else ""
                if m and name != "PROGRAM TOTALS" and not name.startswith("=>"):
                    out[name] = out.get(name, 0) + int(m.group(1).replace(",", ""))
    return out


def _diff(runs: dict, short: int, long_: int, config: str, top: int) -> list[tuple[str, float]]:
    """Per-step exclusive Ir by function: (config slope) - (plain slope), largest first."""
    def slope(c):
        a = _functions(runs[(c, short)]["file"] + ".txt")
        b = _functions(runs[(c, long_)]["file"] + ".txt")
        return {k: (b.get(k, 0) - a.get(k, 0)) / (long_ - short) for k in set(a) | set(b)}

    p, s = slope("plain"), slope(config)
    d = {k: s.get(k, 0) - p.get(k, 0) for k in set(p) | set(s)}
    return sorted(((k, v) for k, v in d.items() if abs(v) >= 1), key=lambda kv: -abs(kv[1]))[:top]


def _cache_slopes(all_runs: dict, configs: list[str], short: int, long_: int, reps: int) -> dict | None:
    """Per configuration, the median per-step slope of each simulated cache event and of the cycle
    estimate (None when a run has no cache events)."""
    out = {}
    for c in configs:
        per_rep = []
        for r in range(reps):
            a, b = all_runs[(c, short, r)].get("events"), all_runs[(c, long_, r)].get("events")
            if not a or not b:
                return None
            d = {k: (b[k] - a.get(k, 0)) / (long_ - short) for k in b}
            d["cycle_estimate"] = cycle_estimate(d)
            per_rep.append(d)
        out[c] = {k: statistics.median(x[k] for x in per_rep) for k in per_rep[0]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="plain,system", help=f"comma-separated, from {', '.join(CONFIGS)}")
    ap.add_argument("--short", type=int, default=200, help="steps of the short run")
    ap.add_argument("--long", type=int, default=600, help="steps of the long run")
    ap.add_argument("--backend", default="aot_eager")
    ap.add_argument("--jobs", type=int, default=2, help="valgrind runs at a time")
    ap.add_argument("--repeat", type=int, default=1,
                    help="count each (configuration, length) this many times; the slope is the median of the "
                         "repetitions' slopes (a run's count moves by up to ~1M instructions between identical runs)")
    ap.add_argument("--annotate", action="store_true", help="print the per-function difference against plain")
    ap.add_argument("--top", type=int, default=40, help="functions shown with --annotate")
    ap.add_argument("--aslr", action="store_true", help="leave address-space randomisation on (noisier)")
    ap.add_argument("--keep", default=None, help="directory to keep the callgrind files in")
    ap.add_argument("--workload", default="compiled", choices=WORKLOADS,
                    help="execution path: compiled (--backend), eager_mlp, eager_block, jax")
    ap.add_argument("--peer", action="store_true", help="add the same-run peer profiler (torch/jax.profiler)")
    ap.add_argument("--cache-sim", action="store_true",
                    help="also simulate the caches and the branch predictor (valgrind --cache-sim=yes "
                         "--branch-sim=yes): misses and mispredictions per step, and a cycle estimate")
    ap.add_argument("--out", default=None, help="default: results/capture_instructions[_<path>].json")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--config", default="plain", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        worker(a.worker, a.backend, a.workload, a.config)
        return 0
    a.out = a.out or results_path(a.workload, a.backend)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    aslr_off = not a.aslr and shutil.which("setarch") is not None
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        ap.error(f"unknown configuration {bad[0]!r}")
    if "plain" not in configs:
        configs.insert(0, "plain")
    if a.peer and PEER[a.workload] not in configs:
        configs.append(PEER[a.workload])
    work = a.keep or tempfile.mkdtemp(prefix="ne-cg-")
    os.makedirs(work, exist_ok=True)
    reps = max(1, a.repeat)
    if a.workload == "compiled":
        os.environ["NE_CG_INDUCTOR_CACHE"] = os.path.join(work, "inductor-cache")
        _warm(configs, a.backend, a.workload, work)
    # repetition-major, so a run cut short still has whole repetitions of every configuration
    jobs = [(c, n, r) for r in range(reps) for n in (a.long, a.short) for c in configs]
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futs = {j: pool.submit(_callgrind, j[0], j[1], a.backend, work, a.annotate, aslr_off,
                                 a.workload, j[2], a.cache_sim) for j in jobs}
        all_runs = {j: f.result() for j, f in futs.items()}
    runs = {(c, n): v for (c, n, r), v in all_runs.items() if r == 0}
    span = a.long - a.short
    slopes = {c: [(all_runs[(c, a.long, r)]["ir"] - all_runs[(c, a.short, r)]["ir"]) / span for r in range(reps)]
              for c in configs}
    per_step = {c: statistics.median(v) for c, v in slopes.items()}
    # the same slopes of the steps alone (the count up to the dump at the steps' end) and of the exit
    parts = {}
    for part in ("ir_steps", "ir_exit"):
        if all(part in r for r in all_runs.values()):
            parts[part] = {c: [(all_runs[(c, a.long, r)][part] - all_runs[(c, a.short, r)][part]) / span
                               for r in range(reps)] for c in configs}
    base = per_step["plain"]
    print(f"instructions per step (callgrind slope, {a.short} -> {a.long} steps, {tag(a.workload, a.backend)}"
          + (f", median of {reps} repetitions" if reps > 1 else "") + "):")
    for c in configs:
        extra = per_step[c] - base
        spread = f"   repetitions {min(slopes[c]):,.0f}..{max(slopes[c]):,.0f}" if reps > 1 else ""
        print(f"  {c:15s} {per_step[c]:14,.0f}   ratio {per_step[c] / base:.4f}   {extra:+12,.0f}/step{spread}")
        if parts:
            st, ex = (statistics.median(parts[k][c]) for k in ("ir_steps", "ir_exit"))
            print(f"  {'':15s} steps {st:14,.0f}   exit {ex:+12,.0f}/step   "
                  f"(exit by repetition: {', '.join(f'{x:,.0f}' for x in parts['ir_exit'][c])})")
    # the type-attribute cache's misses in the steps' part, per step, and the slopes without them
    def run_slope(c: str, r: int, key: str) -> float:
        return (all_runs[(c, a.long, r)][key] - all_runs[(c, a.short, r)][key]) / span

    misses = {c: [run_slope(c, r, "type_cache_misses") for r in range(reps)] for c in configs}
    miss_ir = {c: [run_slope(c, r, "ir_type_cache_misses") for r in range(reps)] for c in configs}
    no_miss = {c: [s - m for s, m in zip(slopes[c], miss_ir[c])] for c in configs}
    print("type-attribute cache misses per step (layout, decision 0202), and the slope without them:")
    for c in configs:
        print(f"  {c:15s} misses {', '.join(f'{x:.1f}' for x in misses[c])}   "
              f"instructions {', '.join(f'{x:,.0f}' for x in miss_ir[c])}   "
              f"without: {statistics.median(no_miss[c]):14,.0f}   "
              f"ratio {statistics.median(no_miss[c]) / statistics.median(no_miss['plain']):.4f}")
    cache = _cache_slopes(all_runs, configs, a.short, a.long, reps) if a.cache_sim else None
    if cache:
        print("simulated caches and branches per step (median; cycle estimate = Ir + 10 x L1 misses + 100 x LL "
              f"misses + {BRANCH_MISS_CYCLES} x mispredictions):")
        for c in configs:
            ev = cache[c]
            print(f"  {c:15s} L1 misses {ev['I1mr'] + ev['D1mr'] + ev['D1mw']:10,.0f}   "
                  f"LL misses {ev['ILmr'] + ev['DLmr'] + ev['DLmw']:8,.0f}   "
                  f"mispredicted {ev.get('Bcm', 0) + ev.get('Bim', 0):9,.0f}   "
                  f"cycle estimate {ev['cycle_estimate']:14,.0f}"
                  f"   ratio {ev['cycle_estimate'] / cache['plain']['cycle_estimate']:.4f}")
    for c in configs:
        if c not in UNPROFILED and not runs[(c, a.long)].get("profile_written"):
            print(f"  warning: {c} wrote no profile", file=sys.stderr)
    if a.annotate:
        for c in configs:
            if c == "plain":
                continue
            print(f"\nper-step exclusive instructions, {c} minus plain (callgrind_annotate):")
            for name, v in _diff(runs, a.short, a.long, c, a.top):
                print(f"  {v:+10,.0f}  {name}")
    res = {
        **provenance.stamp(),
        "command": "python bench/capture_instructions.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "workload": tag(a.workload, a.backend), "peer": PEER[a.workload] if PEER[a.workload] in configs else None,
        "load_average_at_end": list(os.getloadavg()),
        "python": _python(), "backend": a.backend, "aslr_off": aslr_off, "short": a.short, "long": a.long,
        "per_step": per_step, "ratio": {c: per_step[c] / base for c in configs},
        "repeat": reps, "per_step_repetitions": slopes,
        "spread": {c: {"min": min(v), "max": max(v), "range_pct": 100 * (max(v) - min(v)) / statistics.median(v)}
                   for c, v in slopes.items()},
        "ratio_repetitions": {c: [x / y for x, y in zip(slopes[c], slopes["plain"])] for c in configs},
        **({"pool_idle_left_out": list(POOL_IDLE[a.workload]),
            "per_step_with_pool_idle": {c: statistics.median(
                (all_runs[(c, a.long, r)]["ir_with_pool_idle"] - all_runs[(c, a.short, r)]["ir_with_pool_idle"]) / span
                for r in range(reps)) for c in configs}} if a.workload in POOL_IDLE else {}),
        **({"per_step_parts": parts} if parts else {}),
        "type_cache_misses_per_step": misses, "type_cache_miss_instructions_per_step": miss_ir,
        "per_step_without_type_cache_misses": {c: statistics.median(v) for c, v in no_miss.items()},
        "ratio_without_type_cache_misses": {c: statistics.median(no_miss[c]) / statistics.median(no_miss["plain"])
                                            for c in configs},
        "ratio_repetitions_without_type_cache_misses": {c: [x / y for x, y in zip(no_miss[c], no_miss["plain"])]
                                                         for c in configs},
        **({"cache_per_step": cache} if cache else {}),
        "runs": [{k: v for k, v in r.items() if k != "file"} for r in all_runs.values()],
        "seconds": round(time.time() - t0, 1),
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    if a.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0




if __name__ == "__main__":
    sys.exit(main())
