"""A small real workload that publishes its stats through AppStats, as the runtime layer would.

Usage: python workload.py SECONDS [--numpy] [--size N]

Each step is a real matrix multiplication (torch when importable and not
--numpy, else numpy); its wall time is recorded as both host and device time
(on a CPU host the compute span is the device span).  Prints "ready" once the
first snapshot is on disk so tests can start measuring.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from neuron_explorer.recorders.app_stats import AppStats


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("seconds", type=float)
    ap.add_argument("--numpy", action="store_true")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--sleep", type=float, default=0.002)
    args = ap.parse_args()
    n = args.size
    if not args.numpy:
        try:
            import torch

            torch.set_num_threads(1)
            a = torch.rand(n, n)
            matmul = lambda: a @ a  # noqa: E731
            param_bytes = a.numel() * a.element_size()
        except ImportError:
            args.numpy = True
    if args.numpy:
        import numpy as np

        a = np.random.rand(n, n)
        matmul = lambda: a @ a  # noqa: E731
        param_bytes = a.nbytes
    stats = AppStats(None, os.getpid(), None, [0])
    stats.on_model_load(1, "matmul", 0, flops=2.0 * n**3, code_bytes=4096, constants_bytes=param_bytes)
    stats.set_memory(
        {"constants": param_bytes, "tensors": param_bytes, "dma_buffers": 0},
        {0: {"constants": param_bytes, "model_code": 4096, "tensors": param_bytes}},
    )
    stats.start()
    print("ready", flush=True)
    end = time.monotonic() + args.seconds
    step = 0
    while time.monotonic() < end:
        t0 = time.perf_counter_ns()
        matmul()
        t1 = time.perf_counter_ns()
        stats.on_execution(1, 0, t1 - t0, t1 - t0, "completed")
        step += 1
        if step % 50 == 0:
            stats.on_execution(1, 0, t1 - t0, -1, "failed_to_queue")
            stats.on_error("transient")
        time.sleep(args.sleep)
    stats.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
