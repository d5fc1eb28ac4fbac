"""A process that records events at a steady rate through the real capture sink (flush thread,
stores, segment files) until it is killed: ``test_sigkill.py`` and ``bench/sigkill_capture.py``.

Its core's ring is a stand-in that hands the sink numpy blocks (the ring's own per-event append
is the hooks' cost, not what is measured here), so tens of millions of events take seconds.  The
event numbered i has ``a = i``.  Progress goes to a log file the parent reads after the kill:
slot 0 the entries written, slot 1 the longest flush so far (ns), then (monotonic ns, events
handed over) pairs: each pair is written once its block can be drained.

usage: sigkill_child.py OUT_DIR TOTAL RATE PERIOD_S LOG
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np

from neuron_explorer.capture.sink import CaptureSink
from neuron_explorer.contracts import events as ev
from neuron_explorer.runtime.config import CaptureConfig
from neuron_explorer.runtime.core import CoreState, Runtime

BLOCK = 20_000
LOG_ENTRIES = 1 << 16


class BlockRing:
    """What the sink reads of a ring: capacity, produced(), drain()."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.lock = threading.Lock()
        self.pending: list[np.ndarray] = []
        self.n = 0

    def put(self, rows: np.ndarray) -> None:
        with self.lock:
            self.pending.append(rows)
            self.n += len(rows)

    def produced(self) -> int:
        return self.n

    def drain(self) -> np.ndarray:
        with self.lock:
            p, self.pending = self.pending, []
        return np.concatenate(p) if p else np.empty((0, ev.RECORD_WIDTH), dtype=np.int64)


def main() -> None:
    out, log_path = sys.argv[1], sys.argv[5]
    total, rate, period = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    log = np.lib.format.open_memmap(log_path, mode="w+", dtype=np.int64, shape=(2 + 2 * LOG_ENTRIES,))
    cfg = CaptureConfig(output_dir=out, max_events_per_nc=2 * total, flush_period_s=period, cpu_util=False,
                        host_memory=False)
    rt = Runtime(cfg)
    ring = BlockRing(2 * total)
    rt.cores[0] = CoreState(0, ring)  # type: ignore[arg-type]
    sink = CaptureSink(rt)
    rt.add_sink(sink)
    sink.start()
    tid = ev.EVENT_TYPES[11].id  # nrt_tensor_read: plain-number arguments
    template = np.zeros((BLOCK, ev.RECORD_WIDTH), dtype=np.int64)
    template[:, 0] = tid
    t0 = time.perf_counter()
    done = k = 0
    print("started", flush=True)
    while True:
        if done < total:
            n = min(BLOCK, total - done)
            rows = template[:n].copy()
            now = time.monotonic_ns()
            rows[:, 1] = now
            rows[:, 2] = now + 1000
            rows[:, 4] = np.arange(done, done + n)
            ring.put(rows)
            done += n
            if k < LOG_ENTRIES:
                log[2 + 2 * k], log[3 + 2 * k] = time.monotonic_ns(), done
                k += 1
                log[0] = k
        log[1] = max(int(log[1]), int(sink.last_write_s * 1e9))
        wait = t0 + done / rate - time.perf_counter()
        time.sleep(max(wait, 0.001 if done >= total else 0.0))


if __name__ == "__main__":
    main()
