"""Shared pieces of the fuzz tests: their time budget and seed, the paths of a decoded JSON document
(to mutate one field), and running a reader in a subprocess under a memory cap."""
from __future__ import annotations

import os
import resource
import subprocess
from typing import Any, Iterator

SECONDS_ENV = "NEURON_EXPLORER_FUZZ_SECONDS"  # stretch (or shorten) every fuzz test's time budget
SEED_ENV = "NEURON_EXPLORER_FUZZ_SEED"  # replay a failure: the assertion message names the seed


def budget(default: float) -> float:
    return float(os.environ.get(SECONDS_ENV, default))


def seed(default: int) -> int:
    return int(os.environ.get(SEED_ENV, default))


def json_paths(obj: Any, prefix: tuple = (), per_list: int = 8) -> Iterator[tuple]:
    """Every path into a decoded JSON document (the first ``per_list`` items of each array)."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from json_paths(v, prefix + (k,), per_list)
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:per_list]):
            yield from json_paths(v, prefix + (i,), per_list)


def run_capped(cmd: list[str], mem_bytes: int, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``cmd`` with its address space capped (RLIMIT_AS) and one BLAS/OpenMP thread, so that a
    reader sizing memory by a number from a file fails here instead of swapping the machine."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, preexec_fn=cap, env=env)
