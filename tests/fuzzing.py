"""Shared pieces of the fuzz tests: how many examples they try and their seed, the paths of a
decoded JSON document (to mutate one field), and running a reader in a subprocess under a memory cap.

A fuzz test tries a fixed number of examples from a fixed seed, never "as many as fit in N
seconds": the same run checks the same inputs on an idle machine and on a loaded one, and a
failure replays from its seed and index (decision 0151).  Each default count is what the test's
former time budget gave on an idle machine.  ``NEURON_EXPLORER_FUZZ_SCALE=20`` runs twenty times as
many (a longer hunt, before a release or after changing a parser); ``NEURON_EXPLORER_FUZZ_SEED``
searches elsewhere."""
from __future__ import annotations

import os
import random
import resource
import subprocess
from typing import Any, Iterator

SCALE_ENV = "NEURON_EXPLORER_FUZZ_SCALE"  # multiply (or shrink) every fuzz test's example count
SEED_ENV = "NEURON_EXPLORER_FUZZ_SEED"  # replay a failure: the assertion message names the seed


def examples(default: int) -> int:
    """The number of examples a fuzz test tries: ``default`` times ``NEURON_EXPLORER_FUZZ_SCALE``
    (at least one)."""
    return max(1, round(default * float(os.environ.get(SCALE_ENV, 1))))


def hunting() -> bool:
    """A hunt was asked for (``NEURON_EXPLORER_FUZZ_SCALE`` set): the fuzz tests that only search
    further on a corpus another test already fuzzes run, from a fresh seed (decision 0151)."""
    return SCALE_ENV in os.environ


HUNT_ONLY = "a hunt beyond the suite's fixed examples: set NEURON_EXPLORER_FUZZ_SCALE (decision 0151)"


def seed(default: int) -> int:
    return int(os.environ.get(SEED_ENV, default))


def hunt_seed() -> int:
    """A hunt's seed: ``NEURON_EXPLORER_FUZZ_SEED``, else a fresh one (printed: ``pytest -s``)."""
    s = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1 << 31))
    print(f"fuzz seed {s}")
    return s


def damage_file(f, rnd, truncate: bool) -> None:
    """Damage file ``f`` in place as a crash or a bad disk might: cut at a random length
    (``truncate``), or 1 to 8 random bytes changed."""
    data = bytearray(f.read_bytes())
    if truncate:
        data = data[: rnd.randrange(len(data))]
    else:
        for _ in range(rnd.randint(1, 8)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
    f.write_bytes(bytes(data))


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
