"""Convert a fleet's captures with Dask (any map-capable engine works the same way), then query the
dataset with DuckDB.  The output is the same Parquet dataset `neuron-explorer view` writes.

    python examples/scale_out_dask.py ./output ./fleet_parquet [--workers 8]

The command line does the same on a Dask distributed cluster, with view's progress bar, warnings
and exit codes (docs/scale-out.md):

    neuron-explorer view -d /shared/output --output-file /shared/fleet_parquet --scheduler tcp://head:8786

This script shows the steps for driving them from your own code or another engine.
"""
import argparse

import dask.bag as db
import duckdb

from neuron_explorer.view.scale import convert_session, discover, finalize, index_session, plan_offsets


def convert(item, out, plan):
    index, path = item
    return convert_session(path, out, index, plan)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("captures")
    ap.add_argument("out")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()

    paths = discover(a.captures)
    run = dict(scheduler="processes", num_workers=a.workers)
    # map: the collective timings of each process; reduce: one clock offset per instance
    plan = plan_offsets(db.from_sequence(paths, npartitions=len(paths)).map(index_session).compute(**run))
    # map: each process writes its own partition files; reduce: the small single-file tables
    parts = db.from_sequence(list(enumerate(paths)), npartitions=len(paths)).map(
        convert, out=a.out, plan=plan).compute(**run)
    finalize(a.out, parts)

    con = duckdb.connect()
    rows = con.execute(f"""
        select instance_id, worker_gid, count(*) filter (where name = 'nc_exec_running') as executions,
               count(*) filter (where name = 'cc_running') as collectives
        from read_parquet('{a.out}/SystemProfileEvents/**/*.parquet', hive_partitioning = true)
        group by all order by worker_gid""").fetchall()
    for r in rows:
        print(f"instance {r[0]} rank {r[1]}: {r[2]} executions, {r[3]} collectives")


if __name__ == "__main__":
    main()
