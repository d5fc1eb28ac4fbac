"""`view` on a Dask cluster against `view --jobs N`, and a projection to a fleet-sized capture.

    python -m bench.view_cluster [--instances 2 --processes 4 --events 500000 --workers 1,2,4 --runs 2]

Measures, on one synthetic capture written by the real capture writer:

* the wall time of `neuron-explorer view --jobs N` and of `view --scheduler tcp://...` on a local
  cluster of N worker processes (started beforehand: a cluster is long-lived), N = 1, 2, 4 —
  throughput in events per second and the cluster path's overhead against the local pool;
* the per-process costs a projection needs: the CPU seconds per event of the index and the
  conversion tasks (run here, one process at a time, as a worker runs them), the bytes per event
  read and written, and the scheduler's cost per task (empty tasks on the cluster);

and writes `bench/results/view_cluster.json` with a projection of a 512-node x 32-rank capture of
100M events per rank on a 64-worker cluster.  Wall times on a shared 2-core machine are noisy: the
interleaved runs are repeated and the median is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from bench import provenance  # noqa: E402
from tests.view.cluster_util import Cluster  # noqa: E402  (a real scheduler + worker processes)


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", NEURON_EXPLORER_QUIET="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(ROOT, "src"), env.get("PYTHONPATH", "")) if p)
    return env


def _view(src: str, out: str, *extra: str) -> float:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "neuron_explorer", "view", "-d", src, "--output-file", out, *extra],
                       env=_env(), capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"view failed: {p.stderr[-2000:]}")
    return time.perf_counter() - t


def per_process_costs(src: str, tmp: str) -> dict:
    """CPU seconds per event of the index and convert tasks, as a worker runs them (this process)."""
    from neuron_explorer.view import pipeline, tasks

    paths, _ = tasks.discover(src, None)
    opts = pipeline.ViewOptions(directory=src, output_file=os.path.join(tmp, "pp"))
    t0 = time.process_time()
    ix = pipeline.new_index()
    for p in paths:
        pipeline.absorb(ix, tasks.index(p, opts, len(paths), None))
    t_index = time.process_time() - t0
    pipeline.finish_index(ix)
    work = tempfile.mkdtemp(dir=tmp)
    jobs = pipeline.make_jobs(ix, opts, os.path.join(tmp, "pp"), work)
    t0 = time.process_time()
    events = sum(tasks.convert(j, None)[0].events for j in jobs)
    t_convert = time.process_time() - t0
    in_bytes = sum(os.path.getsize(os.path.join(p, f)) for p in paths for f in os.listdir(p))
    out_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(work) for f in fs)
    return {"processes": len(paths), "events": events, "index_cpu_s": t_index, "convert_cpu_s": t_convert,
            "index_cpu_ns_per_event": 1e9 * t_index / events, "convert_cpu_ns_per_event": 1e9 * t_convert / events,
            "input_bytes_per_event": in_bytes / events, "output_bytes_per_event": out_bytes / events}


def task_overhead(c: Cluster, n: int = 400) -> float:
    """Seconds per task the scheduler costs (empty tasks, submitted and gathered like view's)."""
    with c.client() as client:
        client.gather(client.map(abs, range(-20, 0), pure=False))  # warm up
        t = time.perf_counter()
        client.gather([client.submit(abs, -i, pure=False) for i in range(n)])
        return (time.perf_counter() - t) / n


def project(pp: dict, overhead_s: float, nodes: int = 512, ranks: int = 32, events: float = 100e6,
            workers: int = 64) -> dict:
    """A fleet-sized capture on ``workers`` one-core workers, from the measured per-process costs.

    Every process is indexed and converted once; a worker holds one process at a time, so time is
    total work / workers (the tasks are many and even), plus the scheduler's per-task cost, plus
    reading the input twice (index and convert) at ``read_gb_s`` per worker."""
    procs = nodes * ranks
    cpu = procs * events * (pp["index_cpu_ns_per_event"] + pp["convert_cpu_ns_per_event"]) / 1e9
    read_gb_s = 0.5  # per worker, a conservative shared-storage or S3 figure (not measured here)
    in_bytes = procs * events * pp["input_bytes_per_event"]
    io_s = 2 * in_bytes / (read_gb_s * 1e9) / workers
    sched_s = 2 * procs * overhead_s  # the scheduler hands out tasks one by one
    per_task_s = events * (pp["index_cpu_ns_per_event"] + pp["convert_cpu_ns_per_event"]) / 1e9
    wall = cpu / workers + io_s + sched_s
    return {"processes": procs, "events_total": procs * events, "workers": workers,
            "cpu_hours": cpu / 3600, "input_tb": in_bytes / 1e12,
            "output_tb": procs * events * pp["output_bytes_per_event"] / 1e12,
            "read_gb_s_per_worker_assumed": read_gb_s, "io_hours": io_s / 3600, "scheduler_s": sched_s,
            "one_task_minutes": per_task_s / 60, "wall_hours": wall / 3600}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--events", type=int, default=500_000)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "view_cluster.json"))
    a = ap.parse_args()
    from bench.synth_capture import generate

    tmp = tempfile.mkdtemp(prefix="view-cluster-bench.")
    src = os.path.join(tmp, "cap")
    generate(src, a.instances, a.processes, a.events)
    total = a.instances * a.processes * a.events
    rows = []
    overhead = None
    for n in [int(x) for x in a.workers.split(",")]:
        c = Cluster(n)
        try:
            if overhead is None:
                overhead = task_overhead(c)
            loc, clu = [], []
            for _ in range(a.runs):  # interleaved
                loc.append(_view(src, os.path.join(tmp, "o"), "--jobs", str(n)))
                clu.append(_view(src, os.path.join(tmp, "o"), "--scheduler", c.address))
        finally:
            c.close()
        row = {"workers": n, "jobs_s": statistics.median(loc), "cluster_s": statistics.median(clu),
               "jobs_events_per_s": total / statistics.median(loc),
               "cluster_events_per_s": total / statistics.median(clu)}
        row["cluster_over_jobs"] = row["cluster_s"] / row["jobs_s"]
        rows.append(row)
        print(f"{n} worker(s): --jobs {row['jobs_s']:.2f} s ({row['jobs_events_per_s'] / 1e6:.2f}M ev/s), "
              f"--scheduler {row['cluster_s']:.2f} s ({row['cluster_events_per_s'] / 1e6:.2f}M ev/s), "
              f"ratio {row['cluster_over_jobs']:.2f}", flush=True)
    pp = per_process_costs(src, tmp)
    proj = project(pp, overhead or 0.0)
    res = {**provenance.stamp(),
           "capture": {"instances": a.instances, "processes": a.processes, "events_per_process": a.events,
                       "events": total}, "cpus": os.cpu_count(), "runs": a.runs, "rows": rows,
           "per_process": pp, "task_overhead_s": overhead, "projection_512x32_100M_64_workers": proj}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({"per_process": pp, "task_overhead_s": overhead, "projection": proj}, indent=1))
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
