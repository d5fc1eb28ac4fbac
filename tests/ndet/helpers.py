"""Shared helpers for the NDET tests: real torchrun jobs with NDET on, and in-process recorders."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from neuron_explorer.recorders.ndet import NdetRecorder
from neuron_explorer.runtime.config import CaptureConfig
from neuron_explorer.runtime.core import Runtime
from neuron_explorer.runtime.identity import ProcessIdentity

from ..conftest import clean_env, free_port, shared_dir
from ..inproc import run_tool

WORKLOADS = Path(__file__).resolve().parent / "workloads"
JOB = WORKLOADS / "ndet_job.py"


def ndet_env(log_dir: Path, flush_usec: int = 100000, **extra: str) -> dict[str, str]:
    return clean_env(NEURON_RT_DBG_NDET_FLUSH_USEC=str(flush_usec), NEURON_RT_DBG_NDET_LOG_LOCATION=str(log_dir),
                     **extra)


def job_cmd(mode: str, nproc: int = 2, steps: int = 5, port: int | None = None, compiled: bool = True) -> list[str]:
    """torchrun of ``ndet_job.py``; ``compiled=False``: its function run eagerly (collectives only)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
            "127.0.0.1", "--master_port", str(port or free_port()), str(JOB), mode, str(steps),
            *([] if compiled else ["no-compile"])]


def run_job(log_dir: Path, mode: str, nproc: int = 2, steps: int = 5, timeout: float = 120, port: int | None = None,
            compiled: bool = True, **extra: str) -> subprocess.CompletedProcess:
    """torchrun the test job with one injected fault; returns the (possibly failed) launcher result."""
    log_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(job_cmd(mode, nproc, steps, port, compiled), env=ndet_env(log_dir, **extra),
                          capture_output=True, text=True, timeout=timeout)


def skip_job(tmp_path_factory) -> tuple[Path, int]:
    """The NDET logs of the 2-rank job in which rank 1 skips an all-reduce (5 steps), and torchrun's
    exit status: one launch per test run for the tests that analyse it and the fuzz test that
    mutates copies of its logs (``tests.conftest.shared_dir``)."""
    d, rc = shared_dir(tmp_path_factory, "ndet_skip_job", lambda d: run_job(d, "skip").returncode)
    return d, rc


def neuron_det(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``neuron-det *args`` with a clean environment: its exit status, stdout and stderr.  Run in
    this process (``tests.inproc``): these tests read the verdict, not how a process starts, and a
    fresh interpreter was 0.2 CPU-s of each call (decision 0173).  ``timeout`` is kept for the
    callers, not applied to an in-process run."""
    return run_tool("neuron_explorer.ndet.cli", list(args), clean_env())


def load_trace(path: Path) -> list[dict]:
    return json.loads(path.read_text())["traceEvents"]


def logs_in(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.startswith("ndet_"))


JOB_ENV = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none"}


def make_recorder(log_dir: Path, rank: int = 0, world: int = 2, num_entries: int = 100, pid: int | None = None,
                  flush_usec: int = 1_000_000, job_env: dict[str, str] | None = None) -> NdetRecorder:
    """A recorder on a real Runtime with a chosen identity (no framework needed to write).

    ``job_env``: the launcher's variables the log's job id comes from (default: torchrun's on port
    29500)."""
    ident = ProcessIdentity(instance_id="i-0123456789abcdef0", hostname="test", pid=pid or (40000 + rank),
                            rank=rank, local_rank=rank, world_size=world, node_rank=0, process_tag="t")
    rt = Runtime(CaptureConfig(max_events_per_nc=1), ident=ident)
    rt.add_model(name="step_graph", neff_name="neff_1234", graph_hash="abcd", backend="aot_eager",
                 kind="forward", nc_idx=rank)
    return NdetRecorder(rt, str(log_dir), flush_usec, num_entries, require_framework=False,
                        env=JOB_ENV if job_env is None else job_env)


def seal(header: dict, records: bytes = b"", raw_header: bytes | None = None) -> bytes:
    """An NDET log with a valid checksum around any header (``raw_header``: bytes used as they are),
    as a crafted or buggy writer could produce: the reader must judge the contents, not the CRC."""
    import struct
    import zlib

    from neuron_explorer.contracts import ndet_log as fmt

    hb = raw_header if raw_header is not None else json.dumps(header).encode()
    body = fmt.MAGIC + struct.pack("<I", len(hb)) + hb + records
    return body + fmt.TRAILER + struct.pack("<II", zlib.crc32(body) & 0xFFFFFFFF, 0)
