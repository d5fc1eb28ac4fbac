"""Interleaved fresh-process runs measured in process CPU time: the one helper every capture
benchmark uses for its CPU-time figures.

Why this shape (``docs/decisions/0044-capture-bench-method.md``): on a shared 2-core VM wall-clock
medians spread by +-8-15%, far more than the 1% budget, while the process CPU time of a run
(``time.process_time_ns``, every thread of the process) barely moves with other load. Each run is
a fresh interpreter (the runtime starts from the environment at interpreter start, as a user gets
it), configurations alternate (A B C A B C ...) so drift is shared, and each run times a window of
several seconds so periodic flushes and sampler wake-ups are inside the per-step figure.

One-time costs are reported apart from the per-step cost, each the median over runs:

* ``startup_cpu_ns`` -- CPU time from process start to the worker's first line (interpreter,
  ``site``, the ``.pth`` hook and the runtime's start);
* ``first_step_cpu_ns`` -- imports, model build and the first step (compilation, ``model_load``);
* ``exit_cpu_ns`` -- from the end of the timed window to process exit, measured by the parent from
  the child's rusage: the final flush of the profile and interpreter teardown.

A worker calls :func:`mark_start` first, :func:`report` last; the parent calls
:func:`run_interleaved` and :func:`summarize`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

PREFIX = "BENCH_RESULT "
PROFILER_PREFIXES = ("NEURON_RT_INSPECT_", "NEURON_RT_DBG_NDET_", "NEURON_EXPLORER_")
_T0: list[int] = []


def clean_env(**extra: str) -> dict[str, str]:
    """The parent's environment with every profiler variable removed, one intra-op thread."""
    # PYTHONDONTWRITEBYTECODE (set on some dev machines and CI images) would make every worker
    # compile this checkout's modules from source, a cost an installed package (pip writes its
    # bytecode) never pays: run_interleaved compiles them once up front instead
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(PROFILER_PREFIXES) and k not in ("NEURON_PROCESS_TAG", "PYTHONDONTWRITEBYTECODE")}
    # faulthandler: a worker that crashes leaves its stack in the results (all configurations alike)
    env.update(PYTHONHASHSEED="0", OMP_NUM_THREADS="1", NEURON_EXPLORER_QUIET="1", PYTHONFAULTHANDLER="1")
    env.update(extra)
    return env


def system_env(out_dir: str, **extra: str) -> dict[str, str]:
    """A user's system profile: only ``NEURON_RT_INSPECT_ENABLE`` and an output directory, so the
    samplers, the periodic flush and the monitor discovery run as they do for a user."""
    return clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=out_dir,
                     NEURON_EXPLORER_INSTANCE_ID="bench", **extra)


# ---------------------------------------------------------------------------------------------
# worker side


def mark_start() -> None:
    """Call first in a worker: the CPU time spent so far is the process's start-up."""
    _T0.append(time.process_time_ns())


def timed_window(step: Callable[[], object], steps: int, warmup: int, *,
                 sync: Callable[[], object] | None = None) -> dict:
    """Run ``warmup`` steps, then ``steps`` timed steps; CPU and wall time of the window."""
    for _ in range(warmup):
        step()
    if sync is not None:
        sync()
    c0, w0 = time.process_time_ns(), time.perf_counter_ns()
    for _ in range(steps):
        step()
    if sync is not None:
        sync()
    c1, w1 = time.process_time_ns(), time.perf_counter_ns()
    return {"cpu_step_ns": (c1 - c0) / steps, "wall_step_ns": (w1 - w0) / steps, "steps": steps,
            "warmup": warmup, "window_cpu_s": (c1 - c0) / 1e9, "window_wall_s": (w1 - w0) / 1e9,
            "window_start_cpu_ns": c0, "end_cpu_ns": c1}


def report(result: dict) -> None:
    """Call last in a worker: print the result line the parent reads."""
    if _T0:
        result.setdefault("startup_cpu_ns", _T0[0])
        if "window_start_cpu_ns" in result:
            result.setdefault("first_step_cpu_ns", result["window_start_cpu_ns"] - _T0[0])
    try:
        from neuron_explorer.runtime.core import get_runtime

        result.setdefault("runtime_active", get_runtime() is not None)
    except Exception:  # the runtime package moved: the figure is still valid
        result.setdefault("runtime_active", None)
    print(PREFIX + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------
# parent side


class WorkerFailed(RuntimeError):
    """A worker process exited with an error or a signal."""

    def __init__(self, returncode: int, stderr: str) -> None:
        super().__init__(f"worker failed ({returncode}):\n{stderr}")
        self.returncode, self.stderr = returncode, stderr


def run_one(argv: list[str], env: dict[str, str], *, cwd: str | None = None, timeout: float = 1800) -> dict:
    """One fresh process; its result dict plus ``exit_cpu_ns`` from the child's rusage."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err)
        t0 = time.monotonic()
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                p.kill()
                raise RuntimeError(f"{argv[-6:]} timed out after {timeout:.0f} s")
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, etext = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if p.returncode != 0:
        raise WorkerFailed(p.returncode, etext[-3000:])
    for line in reversed(text.splitlines()):
        if line.startswith(PREFIX):
            r = json.loads(line[len(PREFIX):])
            total = int((ru.ru_utime + ru.ru_stime) * 1e9)
            r["process_cpu_ns"] = total
            if "end_cpu_ns" in r:
                r["exit_cpu_ns"] = max(0, total - r["end_cpu_ns"])
            return r
    raise RuntimeError(f"worker {argv[-6:]} printed no result:\n{text[-1500:]}\n{etext[-1500:]}")


def run_interleaved(jobs: dict[str, Callable[[int], tuple[list[str], dict[str, str]]]], rounds: int, *,
                    cwd: str | None = None, check: Callable[[str, dict], None] | None = None,
                    label: str = "") -> dict:
    """Run each configuration ``rounds`` times, interleaved; ``jobs[config](round)`` gives the
    command and environment. Returns {"runs": {config: [result, ...]}, "load_average": ...}."""
    for make in jobs.values():
        compile_paths(make(0)[1])
    load0 = os.getloadavg()
    runs: dict[str, list[dict | None]] = {c: [] for c in jobs}
    failures: list[dict] = []
    for i in range(rounds):
        for config, make in jobs.items():
            argv, env = make(i)
            try:
                r = run_one(argv, env, cwd=cwd)
            except WorkerFailed as e:
                # a crashed run is a finding, not noise: kept in the results, left out of the medians
                failures.append({"config": config, "round": i, "returncode": e.returncode, "stderr": e.stderr})
                runs[config].append(None)
                print(f"  {label} round {i + 1}/{rounds} {config:<18} FAILED ({e.returncode})", file=sys.stderr)
                continue
            if check is not None:
                check(config, r)
            runs[config].append(r)
            print(f"  {label} round {i + 1}/{rounds} {config:<18} {r['cpu_step_ns'] / 1e3:9.2f} us CPU/step",
                  file=sys.stderr, flush=True)
    return {"runs": runs, "failures": failures,
            "load_average": {"start": list(load0), "end": list(os.getloadavg())}}


def compile_paths(env: dict[str, str]) -> None:
    """Byte-compile the directories on ``env``'s PYTHONPATH (this checkout's ``src``, a --before
    one): workers then load bytecode, as a pip-installed package does, and no configuration's
    first run pays for compiling another's modules."""
    import compileall

    for d in filter(None, env.get("PYTHONPATH", "").split(os.pathsep)):
        if os.path.isdir(d):
            compileall.compile_dir(d, quiet=2, workers=1)


def spread(xs: list[float]) -> dict:
    """Median, min, max and interquartile range of a list of figures."""
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "iqr": q[2] - q[0], "n": len(xs)}


ONE_TIME = ("startup_cpu_ns", "first_step_cpu_ns", "exit_cpu_ns")


def summarize(runs: dict[str, list[dict | None]], base: str = "plain") -> dict:
    """Per configuration: per-step CPU median, its ratio to ``base`` (medians and paired runs),
    and the one-time costs' medians and their difference from ``base``. Failed runs (``None``) are
    counted in ``failed_runs`` and left out of the medians and of the paired ratios."""
    ok = {c: [r for r in rs if r is not None] for c, rs in runs.items()}
    med = {c: statistics.median(r["cpu_step_ns"] for r in rs) for c, rs in ok.items() if rs}
    out: dict = {}
    for c, all_runs in runs.items():
        rs = ok[c]
        if not rs or base not in med:  # every run failed: only the count is a figure
            out[c] = {"failed_runs": len(all_runs), "ratio": None, "one_time_ns": {}}
            continue
        paired = [r["cpu_step_ns"] / b["cpu_step_ns"] for r, b in zip(all_runs, runs[base])
                  if r is not None and b is not None]
        d = {"cpu_step_ns": spread([r["cpu_step_ns"] for r in rs]), "ratio": med[c] / med[base],
             "paired_ratio": spread(paired), "overhead_ns_per_step": med[c] - med[base],
             "wall_step_ns": spread([r["wall_step_ns"] for r in rs]), "one_time_ns": {}}
        for k in ONE_TIME:
            xs = [r[k] for r in rs if k in r]
            bs = [r[k] for r in ok[base] if k in r]
            if xs and bs:
                d["one_time_ns"][k] = {"median": statistics.median(xs),
                                       "extra": statistics.median(xs) - statistics.median(bs)}
        d["failed_runs"] = len(all_runs) - len(rs)
        out[c] = d
    return out


def print_summary(title: str, summary: dict) -> None:
    """A short table: per-step CPU, ratio, paired range, one-time extras in ms."""
    print(f"\n{title}")
    print(f"  {'configuration':<18}{'CPU us/step':>12}{'ratio':>9}{'paired':>16}"
          f"{'start-up':>11}{'1st step':>11}{'exit':>9}  (one-time: extra ms vs plain)")
    for c, d in summary.items():
        if d.get("ratio") is None:
            print(f"  {c:<18}every run failed ({d['failed_runs']})")
            continue
        ot = d["one_time_ns"]
        extras = [f"{ot[k]['extra'] / 1e6:+.0f}" if k in ot else "-" for k in ONE_TIME]
        pr = d["paired_ratio"]
        failed = f"  ({d['failed_runs']} runs failed)" if d.get("failed_runs") else ""
        print(f"  {c:<18}{d['cpu_step_ns']['median'] / 1e3:>12.2f}{d['ratio']:>8.3f}x"
              f"{pr['min']:>8.3f}..{pr['max']:.3f}{extras[0]:>11}{extras[1]:>11}{extras[2]:>9}{failed}")
