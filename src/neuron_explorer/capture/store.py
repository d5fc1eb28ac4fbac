"""Turns drained ring records into compact column blocks, keeping at most N events per core.

A drain's records (rows) are turned into columns once, execution pairs are expanded into
``nrt_execute`` + ``runtime_execute`` + ``nc_exec_running``, the capture-time type filter is
applied, and the oldest events are dropped once a core holds more than its limit.  The store keeps
columns because that is what the capture files hold: a write copies no row.

The capture sink appends what a store holds to the core's segment files at each flush and then
forgets it (``take``/``written``, decision 0111): a store then holds one flush's events, and the
limit applies to everything recorded (``kept``), the segment files dropping the oldest on disk.
"""

from __future__ import annotations

import numpy as np

from neuron_explorer.contracts import events as ev

from ..runtime.ring import expand_pairs as _c_expand

W = ev.RECORD_WIDTH
# the type ids the C expansion writes (runtime/_expand.h)
_TYPES = (ev.EXEC_PAIR, ev.NRT_EXECUTE, ev.RUNTIME_EXECUTE, ev.NC_EXEC_RUNNING, ev.NRT_MODEL_SWITCH)


def expand_exec_pairs(block: np.ndarray, last_model: int = -1, runtime_rows: bool = False,
                      native: bool = True) -> tuple[np.ndarray, int]:
    """Replace each EXEC_PAIR row of ``block`` (a drain: (n, W) int64 rows) by an nrt_execute
    event, with ``runtime_rows`` a runtime_execute event, and an nc_exec_running event (in that
    order), add the nrt_model_switch events they imply, and keep start order (stable: a switch,
    then the other rows in ring order, then each pair's events, for equal starts).  Returns the
    events as columns, (W, m) int64, and the core's last model.

    With the C extension (``native``) one pass writes every event's columns in place; without it
    numpy does the same (the tests hold the two to each other)."""
    cols, last_model, _ = _expand(block, last_model, runtime_rows, native)
    return cols, last_model


def _expand(block: np.ndarray, last_model: int, runtime_rows: bool,
            native: bool = True) -> tuple[np.ndarray, int, int]:
    """``expand_exec_pairs`` and the number of EXEC_PAIR rows it expanded."""
    block = np.ascontiguousarray(block, dtype=np.int64)
    is_pair = block[:, 0] == ev.EXEC_PAIR
    n_pairs = int(np.count_nonzero(is_pair))
    if not n_pairs:
        return np.ascontiguousarray(block.T), last_model, 0
    if native and _c_expand is not None:
        m_max = len(block) + n_pairs * (3 if runtime_rows else 2)
        out = np.empty(W * m_max, dtype=np.int64)
        m, last_model = _c_expand(block, out, last_model, runtime_rows, _TYPES)
        out.resize(W * m, refcheck=False)  # fewer switches than pairs: shrunk in place, not copied
        return out.reshape(W, m), last_model, n_pairs
    rows, last_model = _expand_rows(block, is_pair, last_model, runtime_rows)
    return np.ascontiguousarray(rows.T), last_model, n_pairs


def _expand_rows(block: np.ndarray, is_pair: np.ndarray, last_model: int,
                 runtime_rows: bool) -> tuple[np.ndarray, int]:
    """The numpy expansion, as rows: the switch rows, then the other rows, then each
    pair's host, [runtime,] device rows, stably sorted by start.  Rows are gathered with ``take``
    (a copy a row; fancy indexing a 2-D array by rows costs several times more) and edited
    column-wise."""
    pidx = np.flatnonzero(is_pair)
    pairs = block.take(pidx, axis=0)
    order = np.argsort(pairs[:, 1], kind="stable")
    mids = pairs[:, 4].take(order)
    prev = np.empty_like(mids)
    prev[0] = last_model
    prev[1:] = mids[:-1]
    sw = (mids != prev) & (prev >= 0)
    k = 3 if runtime_rows else 2
    sw_src = pidx.take(order[sw])
    n_head = len(sw_src) + (len(block) - len(pidx))
    src = np.concatenate([sw_src, np.flatnonzero(~is_pair), np.repeat(pidx, k)])
    out = block.take(src, axis=0)
    switches = out[:len(sw_src)]
    switches[:, 0] = ev.NRT_MODEL_SWITCH
    switches[:, 2] = switches[:, 1]
    switches[:, 6] = prev[sw]
    switches[:, 7:] = 0
    inter = out[n_head:]
    inter[0::k, 0] = ev.NRT_EXECUTE
    dev = inter[k - 1::k]
    dev[:, 0] = ev.NC_EXEC_RUNNING
    has_dev = pairs[:, 8] > 0  # device span measured separately (e.g. CUDA events)
    if has_dev.any():
        dev[has_dev, 1] = pairs[has_dev, 7]
        dev[has_dev, 2] = pairs[has_dev, 8]
    if runtime_rows:
        # the runtime's own share of each host call: a graph run synchronously by the calling
        # thread (a CPU) is the runtime's work from call to return; where the core's span was
        # measured apart (JAX, a device queue) the share ends where the core starts, or at the
        # call's return if that comes first
        share = inter[1::3]
        share[:, 0] = ev.RUNTIME_EXECUTE
        dev_start = pairs[:, 7]
        handed = has_dev & (dev_start > pairs[:, 1])
        if handed.any():
            share[handed, 2] = np.minimum(pairs[handed, 2], dev_start[handed])
        share[:, 6] = 0
    inter[:, 7:9] = 0
    starts = out[:, 1]
    if len(out) > 1 and not bool((starts[1:] >= starts[:-1]).all()):
        out = out.take(np.argsort(starts, kind="stable"), axis=0)
    return out, int(mids[-1])


class CoreStore:
    """A core's events as column blocks: (W, n) int64 arrays, one row per record slot, oldest
    first; at most ``capacity`` events in all."""

    __slots__ = ("nc", "capacity", "blocks", "rows", "produced", "filtered", "last_model", "derived", "written")

    def __init__(self, nc: int, capacity: int) -> None:
        self.nc = nc
        self.capacity = capacity
        self.blocks: list[np.ndarray] = []
        self.rows = 0  # events held (not yet written to a segment)
        self.written = 0  # events handed to the segment files (take), no longer held
        self.produced = 0  # events the hooks produced (the ring's tick count)
        self.filtered = 0  # events removed by the capture-time type filter
        self.last_model = -1  # graph of the core's latest execution (for nrt_model_switch)
        self.derived = 0  # events derived at drain time (switches, runtime shares), not counted by the ring

    def add(self, block: np.ndarray, enabled: np.ndarray, produced: int) -> None:
        """``block``: a drained ring, (n, W) int64 rows."""
        self.produced = produced + self.derived
        if not len(block):
            return
        cols, self.last_model, n_pairs = _expand(block, self.last_model, bool(enabled[ev.RUNTIME_EXECUTE]))
        n = cols.shape[1]
        k = n - (len(block) + n_pairs)  # derived events (nrt_model_switch, runtime_execute)
        self.derived += k
        self.produced += k
        ids = cols[0]
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= len(enabled) or not enabled[lo:hi + 1].all():
            # (else every type in the range is on: nothing to filter, and no gather an event)
            keep = enabled.take(ids)
            n_keep = int(np.count_nonzero(keep))
            if n_keep < n:
                self.filtered += n - n_keep
                cols = cols.compress(keep, axis=1)
        if cols.shape[1] > self.capacity:
            cols = cols[:, -self.capacity:]
        self.blocks.append(cols)
        self.rows += cols.shape[1]
        while self.rows > self.capacity:
            excess = self.rows - self.capacity
            first = self.blocks[0]
            if first.shape[1] <= excess:
                self.blocks.pop(0)
                self.rows -= first.shape[1]
            else:
                self.blocks[0] = first[:, excess:]
                self.rows -= excess

    def hold(self, rows: np.ndarray) -> None:
        """Hold ``rows`` ((n, W) int64 events, already expanded: synthesized captures) as the
        core's events, replacing what it held."""
        self.blocks = [np.ascontiguousarray(np.asarray(rows, dtype=np.int64).T)]
        self.rows = self.produced = len(rows)

    def take(self) -> np.ndarray:
        """The events held, as one (W, n) block, to append to the segment files; call ``wrote``
        once they are written (until then they stay held: a failed write offers them again)."""
        return self.columns()

    def wrote(self, n: int) -> None:
        """The ``n`` events ``take`` gave are written: forget them."""
        self.blocks = []
        self.rows = 0
        self.written += n

    def columns(self) -> np.ndarray:
        """The events held, as one (W, n) block of columns."""
        if not self.blocks:
            return np.empty((W, 0), dtype=np.int64)
        if len(self.blocks) > 1:
            self.blocks = [np.concatenate(self.blocks, axis=1)]
        return self.blocks[0]

    @property
    def recorded(self) -> int:
        """Events recorded for this core (produced and not filtered out)."""
        return max(self.produced - self.filtered, self.written + self.rows)

    @property
    def kept(self) -> int:
        """Events the capture keeps for this core: the newest ``capacity`` (held or written)."""
        return min(self.written + self.rows, self.capacity)

    @property
    def dropped(self) -> int:
        """Oldest events overwritten because the core reached its limit."""
        return self.recorded - self.kept


def enabled_mask(enabled: list[bool]) -> np.ndarray:
    mask = np.zeros(256, dtype=bool)
    mask[: len(enabled)] = enabled
    mask[ev.EXEC_PAIR] = True
    return mask
