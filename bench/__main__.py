"""Run the benchmarks and print one table: ``python -m bench [--full] [--only a,b] [--collect] [--readme]``.

Each benchmark runs in its own process and writes ``bench/results/<name>.json``; this runner then
builds every figure, with its same-run peer, its target and its command (``bench/table.py``),
prints them as one table and stores them in ``bench/results/summary.json``. ``--collect`` skips the
runs and rebuilds the table from the result files already there; ``--readme`` rewrites the README's
performance table (between its ``bench:table`` markers) from ``summary.json``.

Default: quick settings (about 15 minutes on a 2-core machine, the callgrind counts not included);
``--full`` uses each benchmark's full settings and counts instructions on every execution path
(about an hour more).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

from bench import table

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RES = table.RES
SUMMARY = os.path.join(RES, "summary.json")
README = os.path.join(ROOT, "README.md")

_CG = ["bench/capture_instructions.py", "--peer", "--workload"]
BENCHES = {
    # name: (command, quick extra args or None to skip in quick mode, full extra args)
    "capture_overhead": (["bench/capture_overhead.py"], ["--quick"], []),
    "capture_overhead_inductor": (["bench/capture_overhead.py", "--backend", "inductor", "--out",
                                   "bench/results/capture_overhead_inductor.json"], ["--quick"], []),
    "eager_overhead": (["-m", "bench.eager_overhead"], ["--rounds", "3"], []),
    "jax_overhead": (["-m", "bench.jax_overhead"], ["--rounds", "3"], []),
    "instructions_aot_eager": (_CG + ["compiled"], None, []),
    "instructions_inductor": (_CG + ["compiled", "--backend", "inductor"], None, []),
    "instructions_eager_mlp": (_CG + ["eager_mlp", "--short", "20", "--long", "60"], None, []),
    "instructions_eager_block": (_CG + ["eager_block", "--short", "4", "--long", "12"], None, []),
    "instructions_jax": (_CG + ["jax"], None, []),
    "store_instructions": (["bench/store_instructions.py"], None, []),
    "view_throughput": (["-m", "bench.view_throughput"],
                        ["--instances", "2", "--processes", "2", "--events", "500000"], ["--events", "1000000"]),
    "json_throughput": (["-m", "bench.json_throughput"], ["--events", "300000", "--rounds", "3"], []),
    "hook_costs": (["-m", "bench.hook_costs"], ["--runs", "3", "--calls", "2000"], []),
    "view_scaling": (["-m", "bench.view_scaling"],
                     ["--events", "1e6,4e6", "--processes", "2,16", "--out", "view_scaling_quick.json"], []),
    "ndet_bench": (["-m", "bench.ndet_bench"], ["--quick"], []),
    "import_order": (["-m", "bench.import_order"], ["--rounds", "3"], []),
    "whole_run": (["-m", "bench.whole_run"], ["--rounds", "3"], ["--rounds", "5"]),
    "monitor_bench": (["-m", "bench.monitor_bench"], ["--seconds", "10"], []),
    "ui_bench": (["-m", "bench.ui_bench"], ["--events", "4000000"], []),
}


def run(names: list[str], full: bool) -> dict:
    """Run the named benchmarks one after the other; their wall time and exit status."""
    timings = {}
    for name in names:
        cmd, quick, full_args = BENCHES[name]
        args = full_args if full else quick
        if args is None:
            continue
        t = time.perf_counter()
        print(f"== {name}: python {' '.join(cmd + args)}", flush=True)
        p = subprocess.run([sys.executable, *cmd, *args], cwd=ROOT)
        timings[name] = {"seconds": round(time.perf_counter() - t, 1), "returncode": p.returncode}
    return timings


def collect(timings: dict) -> dict:
    """summary.json's contents from the result files now in bench/results."""
    results = table.load_results()
    return {"date": time.strftime("%Y-%m-%d"),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "runs": timings, "sources": {n: d.get("date", "") for n, d in results.items()},
            "code": code_state(), "headline": table.headline(results)}


def code_state() -> dict:
    """The last commit that changed src/ (what the figures measure), its date, and the commits
    since (a result measured on any of them measured this code), and the same for each part of
    src/ a result may measure alone (``table.AREAS``: ``areas``); {} outside a git checkout."""
    changed: dict[str, list[str]] = {}  # commit -> the files of src/ it differs in from HEAD
    state = _last_change((), changed)
    if state:
        state["areas"] = {area: _last_change(excluded, changed) for area, excluded in table.AREAS.items()}
    return state


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, check=True).stdout.strip()


def _last_change(excluded: tuple[str, ...], changed: dict[str, list[str]]) -> dict:
    """{commit, date, current_commits} of the last change of src/ outside ``excluded`` (paths under
    src/neuron_explorer) as it reached this branch (a merge is dated when it was merged, not by its
    branch's commits), {} when git cannot say.  ``current_commits``: the commits since, including
    a merged branch's, whose src/ outside ``excluded`` is HEAD's (a branch commit without a change
    the branch's merge brought in does not count); ``changed`` remembers each commit's difference."""
    parts = [os.path.normpath(os.path.join("src/neuron_explorer", x)) for x in excluded]
    spec = ["src"] + [f":(exclude){p}" for p in parts]
    try:
        last = _git("log", "-1", "--first-parent", "--format=%h %cI", "--", *spec)
        if not last:
            return {}
        commit, date = last.split()
        since = _git("rev-list", "--abbrev-commit", f"{commit}^..HEAD").split()
        for c in since:
            if c not in changed:
                changed[c] = _git("diff", "--name-only", c, "HEAD", "--", "src").split()
    except (OSError, subprocess.CalledProcessError, ValueError):
        return {}
    import datetime as dt

    def outside(f: str) -> bool:
        return not any(f == p or f.startswith(p + "/") for p in parts)

    utc = dt.datetime.fromisoformat(date).astimezone(dt.timezone.utc).isoformat(timespec="seconds")
    return {"commit": commit, "date": utc,
            "current_commits": [c for c in since if not any(outside(f) for f in changed[c])]}


def write_readme(summary: dict, path: str = README) -> bool:
    """Rewrite the README block from ``summary``; True when the file changed."""
    with open(path) as f:
        text = f.read()
    new = table.replace_block(text, table.render_readme(summary))
    if new != text:
        with open(path, "w") as f:
            f.write(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true", help="each benchmark's full settings, callgrind included")
    ap.add_argument("--only", default=None, help=f"comma-separated, from {', '.join(BENCHES)}")
    ap.add_argument("--collect", action="store_true", help="no runs: rebuild the table from bench/results")
    ap.add_argument("--readme", action="store_true", help="rewrite the README's table from summary.json")
    a = ap.parse_args(argv)
    names = a.only.split(",") if a.only else list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        ap.error(f"unknown benchmark {unknown[0]!r}")
    if a.readme and not a.collect and a.only is None and not a.full:
        summary = _read_summary()  # --readme alone: only regenerate the README from summary.json
    else:
        timings = {} if a.collect else run(names, a.full)
        summary = collect(timings)
        os.makedirs(RES, exist_ok=True)
        with open(SUMMARY, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
    print(table.render_terminal(summary["headline"]))
    if a.readme:
        print(f"\n{'updated' if write_readme(summary) else 'unchanged'}: {README}")
    return 0


def _read_summary() -> dict:
    with open(SUMMARY) as f:
        return json.load(f)


if __name__ == "__main__":
    sys.exit(main())
