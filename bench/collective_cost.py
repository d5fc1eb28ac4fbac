"""Cost of the collective hooks (``integrations/torch/collectives.py``) per call, counted with
callgrind and in process CPU time of interleaved runs (issue 33, item 2).

Every c10d collective goes through our ``BackendSelect`` kernel, and work waited on outside Python
(async ops, DDP's gradient buckets) also gets a completion callback on its future, which runs on
gloo's thread.  Three workloads, each on a one-rank gloo process group over loopback (one intra-op
thread):

* ``blocking`` -- ``dist.all_reduce(x)`` of 1 KB (torch.distributed waits on the Work at once);
* ``async``    -- ``w = dist.all_reduce(x, async_op=True); w.wait()``;
* ``async_cb`` -- the same with a done-callback of the program's own on the Work's future (a
  function that does nothing): ``async_cb`` over ``async`` unprofiled is what one Python callback
  run on gloo's thread costs (pybind takes the GIL, and a thread state, to call it and again to
  drop it);
* ``ddp``      -- one training step of the whole-run bench's DDP model (``bench/whole_run_programs.py``)
  at world size 1: DDP's reducer all-reduces its two gradient buckets from C++ and waits on their
  futures there, so both the kernel and the completion callback are exercised.

Configurations: ``plain`` (no profiler variable), ``system`` (``NEURON_RT_INSPECT_ENABLE=1``),
``system_pykernels`` (the same with ``NEURON_EXPLORER_CPP_KERNELS=0``: the kernels in Python, not
C++, decision 0223) and, with ``--before SRC``, ``system_before`` (``system`` with another
checkout's ``src``).

Instructions (``--what instructions``): the slope between a short and a long run under
``valgrind --tool=callgrind``, counting switched on after the warm-up (``--instr-atstart=no``),
address-space randomisation off, as in ``bench/capture_instructions.py`` (whose environments the
runs use: the samplers' and the flush's timers stretched).  Callgrind runs one thread at a time,
so a callback run on gloo's thread is counted too; what it cannot count is the kernel's side of
handing the GIL between threads (futex waits, context switches): process CPU time includes it.

Process CPU (``--what cpu``): fresh processes, configurations interleaved (``bench/interleave.py``),
the median CPU per call of a timed window of every thread, with the profiler as a user starts it.

Usage::

    python -m bench.collective_cost                                   # both, ~12 minutes on 2 cores
    python -m bench.collective_cost --before /path/to/other/src --repeat 3

Results go to ``bench/results/collective_cost.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import capture_instructions as ci, interleave, provenance  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results", "collective_cost.json")
WORKLOADS = ("blocking", "async", "async_cb", "ddp")
LABELS = {"blocking": "blocking all_reduce (1 KB)", "async": "async all_reduce (1 KB) + Work.wait",
          "async_cb": "async all_reduce (1 KB) + a no-op done-callback of the program + Work.wait",
          "ddp": "world-size-1 DDP step (whole-run model, 2 buckets)"}
# collectives per call of the workload (a DDP step all-reduces two gradient buckets)
COLLECTIVES = {"blocking": 1, "async": 1, "async_cb": 1, "ddp": 2}
# callgrind: (short, long) calls; CPU: (warm-up, timed) calls
CG_CALLS = {"blocking": (200, 600), "async": (200, 600), "async_cb": (200, 600), "ddp": (10, 30)}
CPU_CALLS = {"blocking": (500, 40000), "async": (500, 30000), "async_cb": (500, 30000), "ddp": (30, 1000)}


def build(workload: str):
    """A one-rank gloo process group and the workload's call (the whole-run DDP step for ``ddp``)."""
    import torch

    torch.set_num_threads(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    if workload == "ddp":
        from bench import whole_run_programs

        return whole_run_programs.build(torch, "ddp")
    import torch.distributed as dist

    dist.init_process_group("gloo")
    x = torch.ones(256)
    if workload == "blocking":
        return lambda: dist.all_reduce(x)
    if workload == "async":
        return lambda: dist.all_reduce(x, async_op=True).wait()

    def noop(fut) -> None:
        pass

    def call():
        w = dist.all_reduce(x, async_op=True)
        w.get_future().add_done_callback(noop)
        w.wait()
    return call


def worker(workload: str, calls: int, warmup: int, counted: bool) -> None:
    """``counted``: the callgrind protocol (instrumentation switched on by the parent after the
    warm-up); else a timed window reported to ``bench/interleave.py``."""
    interleave.mark_start()
    if counted:
        _check_tree()
    call = build(workload)
    import torch.distributed as dist

    if not counted:
        r = interleave.timed_window(call, calls, warmup)
        dist.destroy_process_group()
        interleave.report(r)
        return
    for _ in range(warmup):
        call()
    go = os.environ["NE_CG_GO"]
    print("ready", flush=True)  # counting is off until the parent has switched it on
    while not os.path.exists(go):
        time.sleep(0.002)
    for _ in range(calls):
        call()
    print("done", flush=True)  # the parent dumps the count of the calls apart from the exit's
    while not os.path.exists(go + ".end"):
        time.sleep(0.002)
    dist.destroy_process_group()


def _check_tree() -> None:
    """Stop when ``neuron_explorer`` does not come from the first PYTHONPATH entry (the tree this
    configuration measures)."""
    import importlib.util

    spec = importlib.util.find_spec("neuron_explorer")
    where = os.path.dirname(os.path.abspath(spec.origin)) if spec and spec.origin else "nowhere"
    want = os.path.join(os.environ.get("PYTHONPATH", "").split(os.pathsep)[0], "neuron_explorer")
    if os.path.realpath(where) != os.path.realpath(want):
        sys.exit(f"collective_cost: neuron_explorer is imported from {where}, not {want}")


def _env_for(config: str, out_dir: str, before: str, counted: bool) -> dict[str, str]:
    if counted:
        env = ci._env("plain" if config == "plain" else "system", out_dir)
    else:
        env = interleave.clean_env() if config == "plain" else interleave.system_env(out_dir)
    src = before if config == "system_before" else os.path.join(ROOT, "src")
    env["PYTHONPATH"] = src + os.pathsep + ROOT
    if config == "system_pykernels":  # the collectives' kernels in Python (decision 0223)
        env["NEURON_EXPLORER_CPP_KERNELS"] = "0"
    return env


def _count(workload: str, config: str, calls: int, work: str, before: str, rep: int) -> dict[str, int]:
    """Instructions of one callgrind run of a configuration (``count``)."""
    name = f"{workload}.{config}.{calls}.r{rep}"
    out_dir = os.path.join(work, "out." + name)
    os.makedirs(out_dir, exist_ok=True)
    return count(workload, calls, _env_for(config, out_dir, before, counted=True), work, name,
                 profiled=config != "plain")


def count(workload: str, calls: int, env: dict[str, str], work: str, name: str, profiled: bool) -> dict[str, int]:
    """Instructions of one callgrind run from the end of the warm-up: of the calls, and of the exit
    after them (``dist.destroy_process_group``, the profile's final write, interpreter teardown)."""
    cg, go = (os.path.join(work, p + name) for p in ("cg.", "go."))
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", "--instr-atstart=no", ci._python(),
           "-m", "bench.collective_cost", "--worker", workload, "--calls", str(calls), "--warmup", "20",
           "--counted"]
    if shutil.which("setarch"):
        cmd = ["setarch", os.uname().machine, "-R"] + cmd  # see capture_instructions: CPython's caches
    env = dict(env, NE_CG_GO=go)
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=err)
        line = p.stdout.readline() if p.stdout else b""
        if line.strip() == b"ready":
            subprocess.run(["callgrind_control", "-i", "on", str(p.pid)], check=True, capture_output=True,
                           timeout=600)
        open(go, "w").close()
        if p.stdout and p.stdout.readline().strip() == b"done":
            subprocess.run(["callgrind_control", "--dump=calls", str(p.pid)], check=True, capture_output=True,
                           timeout=600)
        open(go + ".end", "w").close()
        if p.stdout:
            p.stdout.read()
        rc = p.wait(timeout=7200)
        if rc != 0 or line.strip() != b"ready":
            err.seek(0)
            raise RuntimeError(f"{name}: exit {rc}\n{err.read().decode(errors='replace')[-3000:]}")
    counts = {}
    for part, path in (("exit", cg), ("calls", cg + ".1")):
        try:
            with open(path, "rb") as f:
                m = ci._TOTAL.search(f.read())
        except OSError:
            m = None
        if m is None:
            raise RuntimeError(f"{name}: no total in {path}")
        counts[part] = int(m.group(1))
    out_dir = env.get("NEURON_RT_INSPECT_OUTPUT_DIR", "")
    if profiled and not any("ntrace.pb" in fs for _, _, fs in os.walk(out_dir)):
        raise RuntimeError(f"{name}: no profile written")
    return counts


def instructions(workloads: list[str], configs: list[str], before: str, repeat: int, jobs: int) -> dict:
    """Per workload and configuration: instructions per call (median slope of ``repeat``)."""
    work = tempfile.mkdtemp(prefix="ne-cc-cg-")
    runs = [(w, c, n, r) for r in range(repeat) for w in workloads for n in CG_CALLS[w] for c in configs]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {j: pool.submit(_count, j[0], j[1], j[2], work, before, j[3]) for j in runs}
        got = {j: f.result() for j, f in futs.items()}
    shutil.rmtree(work, ignore_errors=True)
    out: dict = {}
    for w in workloads:
        short, long_ = CG_CALLS[w]

        def slope(c: str, r: int, part: str | None = None, w=w, short=short, long_=long_) -> float:
            a, b = got[(w, c, short, r)], got[(w, c, long_, r)]
            if part is None:  # the calls and the exit (the final write grows with the events recorded)
                return (b["calls"] + b["exit"] - a["calls"] - a["exit"]) / (long_ - short)
            return (b[part] - a[part]) / (long_ - short)

        slopes = {c: [slope(c, r) for r in range(repeat)] for c in configs}
        per_call = {c: statistics.median(v) for c, v in slopes.items()}
        base = per_call["plain"]
        out[w] = {"label": LABELS[w], "short": short, "long": long_, "collectives_per_call": COLLECTIVES[w],
                  "per_call": per_call, "repetitions": slopes,
                  "exit_per_call": {c: statistics.median(slope(c, r, "exit") for r in range(repeat)) for c in configs},
                  "ratio": {c: v / base for c, v in per_call.items()},
                  "extra_per_collective": {c: (v - base) / COLLECTIVES[w] for c, v in per_call.items() if c != "plain"}}
    return out


def cpu(workloads: list[str], configs: list[str], before: str, rounds: int) -> dict:
    """Per workload: ``interleave.summarize`` of interleaved fresh processes (CPU per call)."""
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="ne-cc-cpu-") as tmp:
        for w in workloads:
            warm, calls = CPU_CALLS[w]

            def job(config: str, w=w, warm=warm, calls=calls):
                def make(i: int):
                    env = _env_for(config, os.path.join(tmp, f"{w}_{config}_{i}"), before, counted=False)
                    return [sys.executable, "-m", "bench.collective_cost", "--worker", w, "--calls", str(calls),
                            "--warmup", str(warm)], env
                return make

            got = interleave.run_interleaved({c: job(c) for c in configs}, rounds, cwd=ROOT, label=w)
            summ = interleave.summarize(got["runs"])
            out[w] = {"label": LABELS[w], "calls": calls, "collectives_per_call": COLLECTIVES[w], "summary": summ,
                      "load_average": got["load_average"], "failures": got["failures"],
                      "extra_us_per_collective": {c: d["overhead_ns_per_step"] / 1e3 / COLLECTIVES[w]
                                                  for c, d in summ.items() if c != "plain" and d.get("ratio")}}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--what", default="instructions,cpu", help="instructions, cpu or both (comma-separated)")
    ap.add_argument("--before", default="", help="another checkout's src/: adds system_before")
    ap.add_argument("--repeat", type=int, default=1, help="callgrind repetitions (median slope)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved CPU rounds")
    ap.add_argument("--jobs", type=int, default=2, help="valgrind runs at a time")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--calls", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--counted", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker, a.calls, a.warmup, a.counted)
        return 0
    workloads = [w for w in a.workloads.split(",") if w]
    bad = [w for w in workloads if w not in WORKLOADS]
    if bad:
        ap.error(f"unknown workload {bad[0]!r}")
    what = set(a.what.split(","))
    configs = ["plain", "system", "system_pykernels"] + (["system_before"] if a.before else [])
    res = {**provenance.stamp(),
           "command": "python -m bench.collective_cost " + " ".join(argv if argv is not None else sys.argv[1:]),
           "before": a.before or None, "load_average_at_start": list(os.getloadavg())}
    if "instructions" in what:
        if shutil.which("valgrind") is None:
            print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
            return 2
        res["instructions"] = instructions(workloads, configs, a.before, max(1, a.repeat), max(1, a.jobs))
    if "cpu" in what:
        res["cpu"] = cpu(workloads, configs, a.before, a.rounds)
    res["load_average_at_end"] = list(os.getloadavg())
    _print(res)
    provenance.write_results(a.out, res)
    print(f"wrote {a.out}")
    return 0


def _print(res: dict) -> None:
    for w, d in (res.get("instructions") or {}).items():
        print(f"\n{w} ({d['label']}): instructions per call (callgrind slope {d['short']} -> {d['long']})")
        for c, v in d["per_call"].items():
            extra = "" if c == "plain" else f"   {d['extra_per_collective'][c]:+12,.0f} per collective"
            reps = d["repetitions"][c]
            spread = f"   repetitions {min(reps):,.0f}..{max(reps):,.0f}" if len(reps) > 1 else ""
            print(f"  {c:<14}{v:14,.0f}   ratio {d['ratio'][c]:.4f}{extra}{spread}")
    for w, d in (res.get("cpu") or {}).items():
        load = d["load_average"]["start"][0]
        print(f"\n{w} ({d['label']}): process CPU per call, median of interleaved runs (load {load:.1f})")
        for c, s in d["summary"].items():
            if not s.get("ratio"):
                print(f"  {c:<14}every run failed")
                continue
            pr = s["paired_ratio"]
            extra = "" if c == "plain" else f"   {d['extra_us_per_collective'][c]:+8.1f} us per collective"
            print(f"  {c:<14}{s['cpu_step_ns']['median'] / 1e3:10.1f} us   ratio {s['ratio']:.3f} "
                  f"(paired {pr['min']:.3f}..{pr['max']:.3f}){extra}")


if __name__ == "__main__":
    sys.exit(main())
