"""How long a host sample takes beside a busy training thread, with each /proc reader (decision 0217).

The sampler thread reads four /proc files per sample. With Python's file objects it gives the GIL
up around each system call and must take it back from the training thread each time; the
extension's ``read_file`` keeps it through the reads.  In one process, a thread calls
``HostSampler.sample()`` every 50 ms while the main thread is busy, alternating the two readers
(``procfs.use_reader``) round by round, and the bench reports each reader's wall time per sample
(median and maximum) and the main thread's voluntary context switches per sample.  Two kinds of
main thread: ``python`` (pure-Python work, which holds the GIL between the interpreter's switch
checks) and ``torch`` (small matmuls: PyTorch releases the GIL inside each operator).

Usage::

    python -m bench.sampler_gil [--rounds 4 --samples 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import provenance  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "sampler_gil.json")


def _voluntary_switches() -> int:
    with open(f"/proc/self/task/{threading.get_native_id()}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches"):
                return int(line.split(":")[1])
    return 0


def _busy(kind: str):
    """One slice of the main thread's work: a callable."""
    if kind == "python":
        return lambda: sum(range(2000))
    import torch

    torch.set_num_threads(1)
    x = [torch.randn(64, 64)]

    def matmuls() -> None:
        for _ in range(20):
            x[0] = (x[0] @ x[0]).tanh()
    return matmuls


def one_round(sampler, busy, samples: int) -> tuple[list[float], float]:
    """(wall seconds of each sample, main-thread voluntary switches per sample)."""
    walls: list[float] = []

    def run() -> None:
        for _ in range(samples):
            time.sleep(0.05)
            t = time.perf_counter()
            sampler.sample()
            walls.append(time.perf_counter() - t)

    th = threading.Thread(target=run)
    v0 = _voluntary_switches()
    th.start()
    while th.is_alive():
        busy()
    return walls, (_voluntary_switches() - v0) / samples


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4, help="rounds per reader and kind, alternating")
    ap.add_argument("--samples", type=int, default=30, help="samples per round")
    ap.add_argument("--out", default=RESULTS)
    a = ap.parse_args(argv)
    from neuron_explorer.capture.samplers import HostSampler
    from neuron_explorer.runtime.ring import read_file
    from neuron_explorer.util import procfs

    if read_file is None:
        print("the C extension is not built: nothing to compare", file=sys.stderr)
        return 2
    sampler = HostSampler(os.getpid(), 3600.0)
    sampler.start()
    readers = {"python": None, "c": read_file}
    out: dict[str, dict[str, dict[str, float]]] = {}
    try:
        for kind in ("python", "torch"):
            busy = _busy(kind)
            walls: dict[str, list[float]] = {r: [] for r in readers}
            switches: dict[str, list[float]] = {r: [] for r in readers}
            for _ in range(a.rounds):
                for name, reader in readers.items():
                    procfs.use_reader(reader)
                    w, s = one_round(sampler, busy, a.samples)
                    walls[name] += w
                    switches[name].append(s)
            out[kind] = {name: {"median_ms": round(statistics.median(walls[name]) * 1e3, 3),
                                "max_ms": round(max(walls[name]) * 1e3, 2),
                                "p95_ms": round(sorted(walls[name])[int(0.95 * (len(walls[name]) - 1))] * 1e3, 2),
                                "main_voluntary_switches_per_sample": round(statistics.median(switches[name]), 2)}
                         for name in readers}
    finally:
        sampler.stop()
        procfs.use_reader(None)
    command = " ".join(["python -m bench.sampler_gil", *(argv if argv is not None else sys.argv[1:])])
    doc = {**provenance.stamp(), "command": command,
           "rounds": a.rounds, "samples": a.samples, "load_average_at_end": list(os.getloadavg()), "main_thread": out}
    provenance.write_results(a.out, doc)
    for kind, by in out.items():
        for name, r in by.items():
            print(f"{kind:6s} main thread, {name:6s} reader: sample wall median {r['median_ms']:.3f} ms, "
                  f"p95 {r['p95_ms']:.2f} ms, max {r['max_ms']:.2f} ms; "
                  f"main-thread voluntary switches per sample {r['main_voluntary_switches_per_sample']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
