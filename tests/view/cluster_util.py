"""A real Dask distributed cluster on 127.0.0.1 for the tests: ``dask scheduler`` and ``dask worker``
processes (no nanny, so a killed worker stays dead and its task must move), and the dataset
comparison the cluster and object-storage tests share."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from ..conftest import clean_env, free_port


class Cluster:
    def __init__(self, workers: int = 2, env: dict[str, str] | None = None, log_dir: Path | None = None) -> None:
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.env = clean_env(**(env or {}))
        self.env["DASK_DISTRIBUTED__WORKER__DAEMON"] = "False"
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []
        self.scheduler = self._start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                      "--port", str(self.port), "--no-dashboard"], "scheduler")
        self.workers = [self._start([sys.executable, "-m", "distributed.cli.dask_worker", self.address,
                                     "--host", "127.0.0.1", "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                     "--name", f"w{i}"], f"worker{i}") for i in range(workers)]
        self.wait_workers(workers)

    def _start(self, cmd: list[str], name: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "wb") if self.log_dir else subprocess.DEVNULL
        p = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def client(self):
        from distributed import Client

        return Client(self.address, timeout=30, set_as_default=False)

    def wait_workers(self, n: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.client() as c:
                    c.wait_for_workers(n, timeout=max(1.0, deadline - time.monotonic()))
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


Q_EVENTS = """select instance, process, name, worker_gid, nc_idx, count(*), sum(start_ts), sum(end_ts), count(distinct id),
                     sum(len(flow_id))
              from read_parquet('{}/SystemProfileEvents/**/*.parquet', hive_partitioning=true) group by all order by all"""
Q_META = """select instance_id, process_id, rank, events, clock_offset_ns, clock_offset_method, group_pid
            from '{}/ProfileMetadata.parquet' order by all"""
Q_COUNTERS = """select instance, process, counter, count(*), sum(value)
                from read_parquet('{}/SystemProfileCounters/**/*.parquet', hive_partitioning=true) group by all order by all"""


def dataset_facts(root: str, con=None) -> dict:  # (root: a directory, or an s3:// URL with httpfs set up)
    """What must be equal between two outputs of the same capture: every event (by its columns'
    sums per partition and type), the metadata rows, the counters and the warnings."""
    con = con or duckdb.connect()
    return {"events": con.execute(Q_EVENTS.format(root)).fetchall(),
            "meta": con.execute(Q_META.format(root)).fetchall(),
            "counters": con.execute(Q_COUNTERS.format(root)).fetchall()
            if list(Path(root).glob("SystemProfileCounters/*/*/*.parquet")) else [],
            "warnings": con.execute(f"select message from '{root}/ViewWarnings.parquet' order by all").fetchall()}


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


__all__ = ["Cluster", "dataset_facts", "files_under"]
