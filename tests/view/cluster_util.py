"""A real Dask distributed cluster on 127.0.0.1 for the tests: ``dask scheduler`` and ``dask worker``
processes (no nanny, so a killed worker stays dead and its task must move), and the dataset
comparison the cluster and object-storage tests share."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from ..conftest import clean_env, free_port


class Cluster:
    def __init__(self, workers: int = 2, env: dict[str, str] | None = None, log_dir: Path | None = None,
                 preload: Path | None = None) -> None:
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.env = clean_env(**(env or {}))
        self.env["DASK_DISTRIBUTED__WORKER__DAEMON"] = "False"
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []
        self.scheduler = self._start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                      "--port", str(self.port), "--no-dashboard"], "scheduler")
        self._wait_listening()  # before any worker takes a port: the scheduler's could be taken
        self.workers = [self._start([sys.executable, "-m", "distributed.cli.dask_worker", self.address,
                                     "--host", "127.0.0.1", "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                     "--name", f"w{i}", *(["--preload", str(preload)] if preload else [])],
                                    f"worker{i}") for i in range(workers)]
        self.wait_workers(workers)

    def _start(self, cmd: list[str], name: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "wb") if self.log_dir else subprocess.DEVNULL
        p = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def _wait_listening(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.scheduler.poll() is not None:
                raise RuntimeError(f"the dask scheduler exited with {self.scheduler.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

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
                if time.monotonic() > deadline or self.scheduler.poll() is not None:
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


Q_EVENTS = """select instance, process, name, worker_gid, nc_idx, count(*), sum(start_ts), sum(end_ts),
                     count(distinct id), sum(len(flow_id))
              from read_parquet('{}/SystemProfileEvents/**/*.parquet', hive_partitioning=true)
              group by all order by all"""
Q_META = """select instance_id, process_id, rank, events, clock_offset_ns, clock_offset_method, group_pid
            from '{}/ProfileMetadata.parquet' order by all"""
Q_COUNTERS = """select instance, process, counter, count(*), sum(value)
                from read_parquet('{}/SystemProfileCounters/**/*.parquet', hive_partitioning=true)
                group by all order by all"""


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


class MotoS3:
    """moto's S3 server on 127.0.0.1 (a free port), fake credentials, nothing else contacted (the
    instance metadata lookup is off)."""

    def __init__(self, tmp: Path) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        # moto's state lives in this process, shared by every server it starts: begin empty
        import urllib.request

        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only, never a proxy
        direct.open(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST"), timeout=30).close()
        self.vars = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_EC2_METADATA_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_ENDPOINT_URL": self.endpoint, "AWS_CONFIG_FILE": str(tmp / "no-aws-config"),
                     "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "no-aws-credentials"),
                     "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
        import boto3

        self.s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                               aws_access_key_id="testing", aws_secret_access_key="testing")

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(**self.vars, **extra)

    def upload_dir(self, local: Path, bucket: str, prefix: str) -> None:
        for p in sorted(local.rglob("*")):
            if p.is_file():
                self.s3.upload_file(str(p), bucket, f"{prefix}/{p.relative_to(local).as_posix()}")

    def keys(self, bucket: str, prefix: str) -> list[str]:
        out = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
            out += [o["Key"][len(prefix) + 1:] for o in page.get("Contents", []) if not o["Key"].endswith("/")]
        return sorted(out)

    def download_dir(self, bucket: str, prefix: str, local: Path) -> Path:
        for k in self.keys(bucket, prefix):
            dst = local / k
            dst.parent.mkdir(parents=True, exist_ok=True)
            self.s3.download_file(bucket, f"{prefix}/{k}", str(dst))
        return local

    def close(self) -> None:
        self.server.stop()
