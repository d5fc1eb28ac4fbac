"""`neuron-explorer diff` at scale: two synthetic 64-rank profiles (written by the real capture writer,
`bench.synth_capture`) converted by `view`, then diffed; the peer is `view` converting one of them.
Issue 34's target: the diff of the pair takes less than `view` takes to convert one profile.

Each command runs in its own process (wall time, and CPU and peak RSS of that process from
`resource.getrusage`; its worker processes' CPU is added); `view` uses one worker (--jobs 1), the
diff of two Parquet outputs runs in one process (reading the diff items `view` wrote, then again on
copies without them: the events read), then with its files read by two worker processes (-j 2).
With --dask, on a local two-worker Dask cluster (`--scheduler`; the workers' CPU is added):
the diff of the two Parquet outputs (the files read on the workers), the same again on the warm
cluster (its workers have imported the readers, as on a cluster that keeps running), and of the
two *capture* directories (converted and read there), the path for profiles too big for one machine;
then `view --scheduler` of the baseline capture on the same (warm) cluster, so that the Dask diff is
compared with a `view` on the same workers as well as with the local `view`.

    python -m bench.diff_scale                                  # 64 ranks, 20M events per profile
    python -m bench.diff_scale --events 2000000 --dask          # quick
"""

from __future__ import annotations

import argparse
import json
import os
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
ROOT = os.path.dirname(HERE)
RES = os.path.join(HERE, "results")

WRAPPER = r"""
import json, resource, sys, time
from neuron_explorer.cli import main
t = time.perf_counter()
rc = main(sys.argv[1:])
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_SELF)
rc_children = resource.getrusage(resource.RUSAGE_CHILDREN)
print("BENCH " + json.dumps({"rc": rc, "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
                              "children_cpu_s": rc_children.ru_utime + rc_children.ru_stime,
                              "peak_rss_mb": ru.ru_maxrss / 1024,
                              "children_peak_rss_mb": rc_children.ru_maxrss / 1024}), file=sys.stderr)
"""


# the environment every command runs in, taken before a LocalCluster is made: making one sets
# MALLOC_TRIM_THRESHOLD_=65536 (and PYTHONHASHSEED, OMP_NUM_THREADS) in this process's os.environ
# for its workers, and a command run with that glibc setting maps and faults every large array
# afresh: 2 CPU-s more system time for the 20M Dask diff's client (decision 0179), a cost a
# user's shell does not have
ENV = dict(os.environ)


def timed(*argv: str, items: str = "1") -> dict:
    # view writes the diff items (decision 0164: opt-in), which the diff reads; items="0": without them
    env = {**ENV, "OMP_NUM_THREADS": "1", "NEURON_EXPLORER_QUIET": "1", "NEURON_EXPLORER_DIFF_ITEMS": items}
    p = subprocess.run([sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, env=env)
    line = [x for x in p.stderr.splitlines() if x.startswith("BENCH ")]
    if not line:
        raise SystemExit(f"{argv[0]} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    out = json.loads(line[-1][6:])
    if out["rc"] not in (0, 3):
        raise SystemExit(f"{argv} exited {out['rc']}:\n{p.stderr[-3000:]}")
    return out


def _same(a: dict, b: dict) -> bool:
    """The same diff but for the paths given (captures against their conversions)."""
    a, b = json.loads(json.dumps(a)), json.loads(json.dumps(b))
    for d in (a, b):
        for role in ("baseline", "candidate"):
            d[role].pop("path", None)
    return a == b


def _write_items() -> None:
    """(On a Dask worker) ``view`` tasks write the diff items from now on."""
    os.environ["NEURON_EXPLORER_DIFF_ITEMS"] = "1"




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--processes", type=int, default=8, help="per instance (ranks = instances x processes)")
    ap.add_argument("--events", type=float, default=20e6, help="events per profile, all ranks together")
    ap.add_argument("--dask", action="store_true", help="also diff the captures with a local Dask cluster")
    ap.add_argument("--keep", default=None, help="work directory to keep (default: a temporary one)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="interleaved rounds of `view` and the diff, both without diff items, for the ratio's "
                         "median and spread (one run of each reads within +-5%% of another on a shared machine)")
    ap.add_argument("--out", default=os.path.join(RES, "diff_scale.json"))
    a = ap.parse_args()
    sys.path.insert(0, ROOT)
    from bench.synth_capture import generate

    work = a.keep or tempfile.mkdtemp(prefix="diff-scale.")
    ranks = a.instances * a.processes
    per = int(a.events // ranks)
    res: dict = {**provenance.stamp(), "command": "python -m bench.diff_scale " + " ".join(sys.argv[1:]),
                 "load_average": {"start": list(os.getloadavg())},
                 "ranks": ranks, "events_per_profile": per * ranks, "machine_note":
                 "2 shared cores, loaded by other work: compare the ratio, not the seconds"}
    try:
        caps = {}
        for name, seed in (("baseline", 0), ("candidate", 1000)):
            caps[name] = os.path.join(work, name)
            if not os.path.isdir(caps[name]):
                t = time.perf_counter()
                generate(caps[name], a.instances, a.processes, per, seed=seed)
                print(f"generated {name}: {per * ranks} events in {time.perf_counter() - t:.0f} s", flush=True)
        pq = {k: v + "_parquet" for k, v in caps.items()}
        for name in caps:
            shutil.rmtree(pq[name], ignore_errors=True)
            res[f"view_{name}"] = timed("view", "-d", caps[name], "--output-file", pq[name], "--jobs", "1")
            print(f"view {name}: {res[f'view_{name}']['wall_s']:.1f} s", flush=True)
        # what the items cost view: the baseline converted again without them (decision 0167)
        plain = pq["baseline"] + "_plain"
        shutil.rmtree(plain, ignore_errors=True)
        res["view_baseline_no_items"] = timed("view", "-d", caps["baseline"], "--output-file", plain, "--jobs", "1",
                                              items="0")
        shutil.rmtree(plain, ignore_errors=True)
        cpu_v = {k: res[k]["cpu_s"] for k in ("view_baseline", "view_baseline_no_items")}
        res["view_items_cost_cpu"] = cpu_v["view_baseline"] / cpu_v["view_baseline_no_items"] - 1
        print(f"view baseline without diff items: {res['view_baseline_no_items']['wall_s']:.1f} s", flush=True)
        out_json = os.path.join(work, "diff.json")
        res["diff_parquet"] = timed("diff", pq["baseline"], pq["candidate"], "--format", "json",
                                    "--output-file", out_json)
        print(f"diff of the Parquet outputs: {res['diff_parquet']['wall_s']:.1f} s", flush=True)
        with open(out_json) as f:
            doc = json.load(f)
        res["rows"] = len(doc["rows"])
        res["changes"] = len(doc["changes"])
        res["diff_vs_view_one"] = res["diff_parquet"]["wall_s"] / res["view_baseline"]["wall_s"]
        cpu = {k: res[k]["cpu_s"] + res[k]["children_cpu_s"] for k in ("diff_parquet", "view_baseline")}
        res["diff_vs_view_one_cpu"] = cpu["diff_parquet"] / cpu["view_baseline"]
        # against the view that writes no diff items (the default): issue 34 item 6's peer (decision 0168)
        res["diff_vs_view_no_items_cpu"] = cpu["diff_parquet"] / cpu_v["view_baseline_no_items"]
        # the same diff of copies without the diff items view wrote (decision 0163): the events read
        bare = {k: v + "_no_items" for k, v in pq.items()}
        for name in pq:
            shutil.rmtree(bare[name], ignore_errors=True)
            shutil.copytree(pq[name], bare[name], ignore=shutil.ignore_patterns("SystemProfileDiffItems"))
        res["diff_parquet_no_items"] = timed("diff", bare["baseline"], bare["candidate"], "--format", "json",
                                             "--output-file", out_json + ".bare")
        with open(out_json + ".bare") as f:
            res["no_items_same_document"] = _same(json.load(f), doc)
        # issue 34 item 6 as a user meets it (view writes no diff items by default): the events read
        bare_cpu = res["diff_parquet_no_items"]["cpu_s"] + res["diff_parquet_no_items"]["children_cpu_s"]
        res["diff_no_items_vs_view_no_items_cpu"] = bare_cpu / cpu_v["view_baseline_no_items"]
        print(f"diff of the Parquet outputs without diff items: {res['diff_parquet_no_items']['wall_s']:.1f} s",
              flush=True)
        # the same two commands again, one after the other in each round: each round's ratio sees the
        # same load on both sides, and the median of the rounds is the figure (with their spread)
        ratios = []
        for i in range(a.rounds):
            shutil.rmtree(plain, ignore_errors=True)
            v = timed("view", "-d", caps["baseline"], "--output-file", plain, "--jobs", "1", items="0")
            d = timed("diff", bare["baseline"], bare["candidate"], "--format", "json", "--output-file",
                      out_json + ".round")
            with open(out_json + ".round") as f:
                if not _same(json.load(f), doc):
                    raise SystemExit(f"round {i + 1}: the diff without items differs from the first one")
            ratios.append((d["cpu_s"] + d["children_cpu_s"]) / (v["cpu_s"] + v["children_cpu_s"]))
            print(f"round {i + 1}/{a.rounds}: diff without items / view without items {ratios[-1]:.3f}x CPU",
                  flush=True)
        shutil.rmtree(plain, ignore_errors=True)
        if ratios:
            res["diff_no_items_vs_view_no_items_cpu_rounds"] = ratios
            res["diff_no_items_vs_view_no_items_cpu"] = statistics.median(ratios)
        # the same diff with the events files read by two worker processes (their CPU is the children's)
        res["diff_parquet_j2"] = timed("diff", pq["baseline"], pq["candidate"], "--format", "json",
                                       "--output-file", out_json + ".j2", "-j", "2")
        with open(out_json + ".j2") as f:
            res["j2_same_document"] = json.load(f) == doc
        print(f"diff of the Parquet outputs, -j 2: {res['diff_parquet_j2']['wall_s']:.1f} s", flush=True)
        if a.dask:
            from dask.distributed import LocalCluster

            def worker_cpu() -> float:
                return time.process_time()

            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
                    cl.get_client() as client:
                for key, inputs, extra in (
                        ("diff_parquet_dask", pq, ()),  # the files read on the workers
                        # the same again: the workers have imported the readers (a running cluster)
                        ("diff_parquet_dask_warm", pq, ()),
                        ("diff_captures_dask", caps, ("--work-dir", work))):  # converted and read there
                    before = sum(client.run(worker_cpu).values())
                    res[key] = timed("diff", inputs["baseline"], inputs["candidate"], "--format", "json",
                                     "--output-file", out_json + ".dask", "--scheduler", cl.scheduler_address, *extra)
                    res[key]["workers_cpu_s"] = sum(client.run(worker_cpu).values()) - before
                    with open(out_json + ".dask") as f:
                        res[key]["same_document"] = _same(json.load(f), doc)
                    print(f"{key} (2 workers): {res[key]['wall_s']:.1f} s", flush=True)
                # the peer on the same workers: view of the baseline capture on the warm cluster (its
                # converting modules imported by the captures' diff), writing diff items as
                # view_baseline does (the workers read the setting from their own environment)
                dview = pq["baseline"] + "_dask"
                shutil.rmtree(dview, ignore_errors=True)
                client.run(_write_items)
                before = sum(client.run(worker_cpu).values())
                res["view_baseline_dask"] = timed("view", "-d", caps["baseline"], "--output-file", dview,
                                                  "--scheduler", cl.scheduler_address)
                res["view_baseline_dask"]["workers_cpu_s"] = sum(client.run(worker_cpu).values()) - before
                res["view_baseline_dask"]["wrote_diff_items"] = os.path.isdir(os.path.join(dview,
                                                                                           "SystemProfileDiffItems"))
                shutil.rmtree(dview, ignore_errors=True)
                print(f"view_baseline_dask (2 workers): {res['view_baseline_dask']['wall_s']:.1f} s", flush=True)
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'':34}{'wall s':>8}{'CPU s':>8}{'peak MB':>9}{'child MB':>9}   (CPU: the process, its children and "
          "Dask workers; peak: the process, its largest child)")
    for k in ("view_baseline", "view_candidate", "view_baseline_no_items", "diff_parquet", "diff_parquet_no_items",
              "diff_parquet_j2", "diff_parquet_dask", "diff_parquet_dask_warm", "diff_captures_dask",
              "view_baseline_dask"):
        if k in res:
            r = res[k]
            cpu_all = r["cpu_s"] + r["children_cpu_s"] + r.get("workers_cpu_s", 0.0)
            child = r.get("children_peak_rss_mb", 0)
            print(f"{k:34}{r['wall_s']:8.1f}{cpu_all:8.1f}{r['peak_rss_mb']:9.0f}{child:9.0f}")
    print(f"diff / view of one profile: {res['diff_vs_view_one']:.2f}x wall, {res['diff_vs_view_one_cpu']:.2f}x CPU "
          "(target < 1)")
    print(f"diff / view of one profile without diff items: {res['diff_vs_view_no_items_cpu']:.2f}x CPU (target < 1)")
    print(f"diff of outputs without diff items / view of one without: {res['diff_no_items_vs_view_no_items_cpu']:.2f}x "
          "CPU (target < 1)")
    print(f"view writing diff items / without: +{100 * res['view_items_cost_cpu']:.0f}% CPU (target +20%)")
    if "diff_parquet_dask_warm" in res:
        def all_cpu(r: dict) -> float:
            return r["cpu_s"] + r["children_cpu_s"] + r.get("workers_cpu_s", 0.0)

        warm = res["diff_parquet_dask_warm"]
        res["dask_warm_vs_view_one"] = warm["wall_s"] / res["view_baseline"]["wall_s"]
        res["dask_warm_vs_view_one_cpu"] = all_cpu(warm) / all_cpu(res["view_baseline"])
        res["dask_warm_vs_view_no_items_cpu"] = all_cpu(warm) / all_cpu(res["view_baseline_no_items"])
        print(f"Dask diff (warm cluster) / view of one profile: {res['dask_warm_vs_view_one']:.2f}x wall, "
              f"{res['dask_warm_vs_view_one_cpu']:.2f}x CPU (target < 1); / view without diff items: "
              f"{res['dask_warm_vs_view_no_items_cpu']:.2f}x CPU")
        if "view_baseline_dask" in res:
            vd = res["view_baseline_dask"]
            res["dask_warm_vs_view_dask"] = warm["wall_s"] / vd["wall_s"]
            res["dask_warm_vs_view_dask_cpu"] = all_cpu(warm) / all_cpu(vd)
            print(f"Dask diff (warm cluster) / view --scheduler of one profile on the same cluster: "
                  f"{res['dask_warm_vs_view_dask']:.2f}x wall, {res['dask_warm_vs_view_dask_cpu']:.2f}x CPU "
                  "(target < 1)")
    res["load_average"]["end"] = list(os.getloadavg())
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
