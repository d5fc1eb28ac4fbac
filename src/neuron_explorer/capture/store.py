"""Turns drained ring records into compact column blocks, keeping at most N events per core.

Records are converted in batches (one ``numpy.array`` call per drain), execution pairs are
expanded into ``nrt_execute`` + ``runtime_execute`` + ``nc_exec_running``, the capture-time type filter is applied, and
the oldest rows are dropped once a core holds more than its limit.
"""

from __future__ import annotations

import numpy as np

from neuron_explorer.contracts import events as ev

W = ev.RECORD_WIDTH


def model_switches(pairs: np.ndarray, last_model: int) -> tuple[np.ndarray, int]:
    """nrt_model_switch rows where a core's execution runs another graph than the one before it.

    ``pairs`` are EXEC_PAIR rows of one core; returns the rows and the last model id seen."""
    if not len(pairs):
        return np.empty((0, W), dtype=np.int64), last_model
    order = np.argsort(pairs[:, 1], kind="stable")
    mids = pairs[order, 4]
    prev = np.empty_like(mids)
    prev[0] = last_model
    prev[1:] = mids[:-1]
    sw = (mids != prev) & (prev >= 0)
    rows = np.zeros((int(sw.sum()), W), dtype=np.int64)
    src = pairs[order][sw]
    rows[:, 0] = ev.NRT_MODEL_SWITCH
    rows[:, 1] = rows[:, 2] = src[:, 1]
    rows[:, 3] = src[:, 3]
    rows[:, 4] = src[:, 4]
    rows[:, 5] = src[:, 5]
    rows[:, 6] = prev[sw]
    return rows, int(mids[-1])


def _expand_ordered_pairs(pairs: np.ndarray, last_model: int, runtime_rows: bool) -> tuple[np.ndarray, int]:
    """expand_exec_pairs for the common drain: only EXEC_PAIR rows, host spans only, starts strictly
    increasing.  The output is built in place (one repeat and a few column writes) instead of
    concatenating and sorting; it is row for row what the general path produces."""
    mids = pairs[:, 4]
    prev = np.empty_like(mids)
    prev[0] = last_model
    prev[1:] = mids[:-1]
    sw = (mids != prev) & (prev >= 0)
    per = sw.astype(np.int64)
    per += 3 if runtime_rows else 2
    out = np.repeat(pairs, per, axis=0)  # per execution: [switch], host, [runtime], device
    ends = np.cumsum(per)
    out[ends - per + sw, 0] = ev.NRT_EXECUTE
    if runtime_rows:
        out[ends - 2, 0] = ev.RUNTIME_EXECUTE
    out[ends - 1, 0] = ev.NC_EXEC_RUNNING
    out[:, 7:9] = 0
    if sw.any():
        si = (ends - per)[sw]
        out[si, 0] = ev.NRT_MODEL_SWITCH
        out[si, 2] = out[si, 1]
        out[si, 6] = prev[sw]
    return out, int(mids[-1])


def runtime_share(pairs: np.ndarray) -> np.ndarray:
    """``runtime_execute`` rows of EXEC_PAIR rows: the runtime's own share of each host call.  A
    graph run synchronously by the calling thread (a CPU) is the runtime's work from call to
    return; where the core's span was measured apart (JAX, a device queue) the share ends where
    the core starts, or at the call's return if that comes first."""
    rows = pairs.copy()
    rows[:, 0] = ev.RUNTIME_EXECUTE
    dev_start = pairs[:, 7]
    handed = (pairs[:, 8] > 0) & (dev_start > pairs[:, 1])
    rows[handed, 2] = np.minimum(pairs[handed, 2], dev_start[handed])
    rows[:, 6:9] = 0
    return rows


def expand_exec_pairs(block: np.ndarray, last_model: int = -1, runtime_rows: bool = False) -> tuple[np.ndarray, int]:
    """Replace each EXEC_PAIR row by an nrt_execute row, with ``runtime_rows`` a runtime_execute
    row, and an nc_exec_running row (in that order), and add the nrt_model_switch rows they imply.
    Returns the rows and the core's last model."""
    types = block[:, 0]
    is_pair = types == ev.EXEC_PAIR
    n_pairs = int(np.count_nonzero(is_pair))
    if not n_pairs:
        return block, last_model
    if n_pairs == len(block) and not block[:, 8].any():
        starts = block[:, 1]
        if n_pairs == 1 or bool((starts[1:] > starts[:-1]).all()):
            return _expand_ordered_pairs(block, last_model, runtime_rows)
    pairs = block[is_pair]
    switches, last_model = model_switches(pairs, last_model)
    host = pairs.copy()
    host[:, 0] = ev.NRT_EXECUTE
    host[:, 7:9] = 0
    dev = pairs.copy()
    dev[:, 0] = ev.NC_EXEC_RUNNING
    has_dev = pairs[:, 8] > 0  # device span measured separately (e.g. CUDA events)
    dev[has_dev, 1] = pairs[has_dev, 7]
    dev[has_dev, 2] = pairs[has_dev, 8]
    dev[:, 7:9] = 0
    rest = block[~is_pair]
    parts = [host, runtime_share(pairs), dev] if runtime_rows else [host, dev]
    inter = np.empty((len(pairs) * len(parts), W), dtype=np.int64)
    for i, part in enumerate(parts):
        inter[i::len(parts)] = part
    out = np.concatenate([switches, rest, inter])
    # keep time order (stable: switch, then host, runtime and device for the same start)
    return out[np.argsort(out[:, 1], kind="stable")], last_model


class CoreStore:
    __slots__ = ("nc", "capacity", "blocks", "rows", "produced", "filtered", "last_model", "derived")

    def __init__(self, nc: int, capacity: int) -> None:
        self.nc = nc
        self.capacity = capacity
        self.blocks: list[np.ndarray] = []
        self.rows = 0
        self.produced = 0  # events the hooks produced (the ring's tick count)
        self.filtered = 0  # events removed by the capture-time type filter
        self.last_model = -1  # graph of the core's latest execution (for nrt_model_switch)
        self.derived = 0  # events derived at drain time (switches, runtime shares), not counted by the ring

    def add(self, block: np.ndarray, enabled: np.ndarray, produced: int) -> None:
        """``block``: a drained ring, (n, W) int64 rows."""
        self.produced = produced + self.derived
        if not len(block):
            return
        n_before = len(block) + int(np.count_nonzero(block[:, 0] == ev.EXEC_PAIR))  # events the hooks counted
        block, self.last_model = expand_exec_pairs(block, self.last_model, bool(enabled[ev.RUNTIME_EXECUTE]))
        k = len(block) - n_before  # derived events (nrt_model_switch, runtime_execute)
        self.derived += k
        self.produced += k
        keep = enabled[block[:, 0]]
        n_keep = int(np.count_nonzero(keep))
        if n_keep < len(block):
            self.filtered += len(block) - n_keep
            block = block[keep]
        if len(block) > self.capacity:
            block = block[-self.capacity:]
        self.blocks.append(block)
        self.rows += len(block)
        while self.rows > self.capacity:
            excess = self.rows - self.capacity
            first = self.blocks[0]
            if len(first) <= excess:
                self.blocks.pop(0)
                self.rows -= len(first)
            else:
                self.blocks[0] = first[excess:]
                self.rows -= excess

    def array(self) -> np.ndarray:
        if not self.blocks:
            return np.empty((0, W), dtype=np.int64)
        if len(self.blocks) > 1:
            self.blocks = [np.concatenate(self.blocks)]
        return self.blocks[0]

    @property
    def recorded(self) -> int:
        """Events recorded for this core (produced and not filtered out)."""
        return max(self.produced - self.filtered, self.rows)

    @property
    def dropped(self) -> int:
        """Oldest events overwritten because the core reached its limit."""
        return self.recorded - self.rows


def enabled_mask(enabled: list[bool]) -> np.ndarray:
    mask = np.zeros(256, dtype=bool)
    mask[: len(enabled)] = enabled
    mask[ev.EXEC_PAIR] = True
    return mask
