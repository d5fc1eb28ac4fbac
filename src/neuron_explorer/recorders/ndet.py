"""The NDET flight recorder: one bounded, atomically rewritten log per process.

The hooks call ``exec_begin``/``exec_end``/``numerical_error``/``cc_begin``/``cc_end`` on the hot path.
Each is one tuple build plus one deque append or dict operation -- no I/O, no formatting, no lock
(``deque.append`` and dict set/pop are atomic under the GIL, so ``cc_end`` may run on gloo's threads).

* Completed events go to ``_ring``, a ring of N records (the C ``RingBuffer``, 11 ints per record,
  which the C execution wrapper writes into directly; a ``deque(maxlen=N)`` of tuples without the
  extension): once more than N events happened the oldest fall out, which is exactly the "last N
  events" the log promises.  Both appends are single C calls, atomic under the GIL.
* Work that has begun but not ended lives in ``_inflight`` (keyed by ``(nc, exec_id)`` for executions,
  by an integer token for collectives), and, for the executions the C wrapper runs, in ``_slots``
  (a small C table: a slot costs two stores where a dict entry cost two tuples and a hash).  Every
  write copies these begin records into the log, so an execution or collective that never returns
  -- a hang -- is visible in the file even though no end record will ever be written.

Every log carries the identity of the job it belongs to (``job`` in the header, see ``job_identity``),
so that ``neuron-det`` can tell apart the logs of different jobs left in one directory (the default
location is ``/tmp``).  A process whose rank was not in its environment (``init_process_group`` with a
``tcp://`` address) takes its rank from ``torch.distributed`` at its first collective, or at the latest
at a write, and renames its own log to carry it.

Every log also says what role its process plays (``process`` in the header, see ``process_facts``):
a rank of a distributed job, a child that ``multiprocessing`` started (a pool worker), or a process of
its own; and whether its parent was still alive at the write.  ``neuron-det`` needs it to tell a rank
killed by its launcher (worth reporting) from an idle pool worker that its pool ended with SIGTERM on
``Pool.__exit__`` (not an error, docs/decisions/0094-ndet-process-roles.md).

A background thread wakes every ``NEURON_RT_DBG_NDET_FLUSH_USEC`` microseconds, drains the ring into
a numpy history of N records (converting only what is new since the last write) and rewrites the log
atomically.  The runtime also calls ``flush`` at exit, on SIGTERM/SIGINT/SIGHUP and on an unhandled
exception, so a failing process leaves its final state; a SIGKILLed one keeps its last periodic write.
"""

from __future__ import annotations

import itertools
import os
import struct
import sys
import threading
import time
from collections import deque
from itertools import starmap
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from neuron_explorer.contracts import ndet_log as fmt
from neuron_explorer.contracts.env import (
    DEFAULT_NUM_ENTRIES,
    NDET_FLUSH_USEC,
    NDET_LOG_LOCATION,
    NDET_NUM_ENTRIES,
    parse_ndet_flush_usec,
    parse_ndet_log_location,
    parse_ndet_num_entries,
)
from neuron_explorer.contracts.layout import log_file_name
from neuron_explorer.util.log import get_logger
from neuron_explorer.util.procs import is_launcher, multiprocessing_child

from ..runtime import clock
from ..runtime.ring import NativeRing, SlotTable

if TYPE_CHECKING:
    from ..runtime.identity import ProcessIdentity
    from ..runtime.ring import NativeRingBuffer

HISTORY_START = 1024
_pack_record = struct.Struct("<BBHi7q").pack  # fmt.RECORD_DTYPE, field for field
assert struct.calcsize("<BBHi7q") == fmt.RECORD_DTYPE.itemsize
_BARRIER_OPS = frozenset({"barrier", "monitored_barrier"})
_FRAMEWORKS = ("torch", "jax")


def _store_address() -> str:
    """``host:port`` of the default process group's TCP store, or "" (no group yet, another store).

    Read only when ``torch.distributed`` is already imported: the recorder never imports it."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return ""
        store = dist.distributed_c10d._get_default_store()
        for _ in range(8):  # PrefixStore(PrefixStore(TCPStore)) under torchrun and tcp:// init
            inner = getattr(store, "underlying_store", None)
            if inner is None:
                break
            store = inner
        host, port = getattr(store, "host", ""), getattr(store, "port", 0)
        return f"{host}:{int(port)}" if host and port else ""
    except Exception:  # a private helper of torch: its absence must not cost the log
        return ""


def job_identity(env: Mapping[str, str], store_address: str = "") -> dict:
    """The fields every process of one launch agrees on without talking to the others.

    The rule (``neuron-det`` groups logs by it, docs/ndet.md): the rendezvous address -- the launcher's
    ``MASTER_ADDR:MASTER_PORT`` when both are set, else the TCP store the default process group was
    created on (``init_process_group(init_method="tcp://...")``) -- plus torchrun's
    ``TORCHELASTIC_RUN_ID`` and ``TORCHELASTIC_RESTART_COUNT`` (an elastic restart is a new run of the
    job).  Two jobs can hold one address only one after the other, so the reader separates logs with
    the same identity by time; a process outside any distributed job has an empty address.
    """
    addr, port = env.get("MASTER_ADDR", "").strip(), env.get("MASTER_PORT", "").strip()
    master = f"{addr}:{port}" if addr and port else store_address
    run_id = env.get("TORCHELASTIC_RUN_ID", "").strip()
    try:
        restart = max(0, int(env.get("TORCHELASTIC_RESTART_COUNT", "0")))
    except ValueError:
        restart = 0
    return {"master": master[:256], "run_id": run_id[:256], "restart": restart}


def _dist_rank() -> tuple[int, int] | None:
    """(rank, world size) from ``torch.distributed`` once its default process group exists."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:
        pass
    return None


def process_facts(rank: int, had_group: bool, ppid: int, spawned: bool = False) -> dict:
    """The ``process`` header object: the role of this process and what is known of its parent.

    ``role``: ``rank`` when this process made a ``torch.distributed`` process group (``had_group``)
    or has a rank and is not a ``multiprocessing`` child; ``multiprocessing-child`` for a process that
    ``multiprocessing`` started (a ``Pool`` worker, a ``Process``), which also inherits its parent's
    ``RANK`` when the parent is a rank -- the inherited rank is the parent's, not its own; else
    ``main``.  ``ppid`` is the parent's pid when the recorder started, ``parent_alive`` whether that
    process is still this one's parent now (an orphan is re-parented), and ``name`` the
    ``multiprocessing`` process name (``SpawnPoolWorker-1``; "" outside multiprocessing).
    ``spawned``: the command line says ``multiprocessing`` spawned this process (``util.procs``).
    """
    name, child = "", spawned
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        try:
            child = child or mp.parent_process() is not None
            if child:
                name = str(mp.current_process().name)[:128]
        except Exception:  # never cost the log
            pass
    if had_group or (rank >= 0 and not child):
        role = fmt.ROLE_RANK
    elif child:
        role = fmt.ROLE_CHILD
    else:
        role = fmt.ROLE_MAIN
    return {"role": role, "name": name, "ppid": ppid, "parent_alive": os.getppid() == ppid}


class NdetRecorder:
    """An NDET sink for the runtime (``name``/``flush``) fed directly by the framework hooks."""

    name = "ndet"

    def __init__(self, rt: Any, log_dir: str, flush_usec: int, num_entries: int = DEFAULT_NUM_ENTRIES,
                 *, require_framework: bool = True, env: Mapping[str, str] | None = None) -> None:
        self.rt = rt
        self.log_dir = log_dir
        self.flush_usec = flush_usec
        self.num_entries = num_entries
        self.require_framework = require_framework
        # ended records, 11 ints each (RECORD_DTYPE's fields in order): a C ring the C execution
        # wrapper writes into directly when the extension is built, else a deque of tuples
        self._ring: NativeRingBuffer | deque[tuple[int, ...]] = \
            NativeRing(num_entries, len(fmt.RECORD_DTYPE.names or ())) if NativeRing is not None else \
            deque(maxlen=num_entries)
        self._inflight: dict = {}
        self._slots = SlotTable() if SlotTable is not None else None  # the C wrapper's in-flight records
        self._tokens = itertools.count(1)
        self._sid: dict[str, int] = {"": 0}
        self._strings: list[str] = [""]
        self._intern_lock = threading.Lock()
        self._io_lock = threading.Lock()
        # grows by doubling up to num_entries: the setting bounds memory, it never sizes it up front
        self._history = np.zeros(min(num_entries, HISTORY_START), dtype=fmt.RECORD_DTYPE)
        self._hist_n = 0  # records ever put into the history
        self._groups: dict[str, None] = {}
        self._flush_seq = 0
        self._final = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        ident: ProcessIdentity = rt.ident
        start = rt.anchors[0]
        self.start_mono_ns, self.start_wall_ns = start[0], start[1]
        self._env = os.environ if env is None else env  # read at every write: scripts set MASTER_* late
        # a spawned multiprocessing child (a pool worker) inherits its parent's RANK: not its own
        # rank, which it has only once it makes a process group of its own (``_learn_rank``)
        self._spawned = multiprocessing_child()
        self.rank, self.world_size = (-1, 1) if self._spawned else (ident.rank, ident.world_size)
        self._store = ""
        self._learned = False  # rank and store read from torch.distributed (once its group exists)
        self.path = self._path_for_rank()
        self._written: str | None = None  # the file this recorder last wrote
        self.write_errors = 0
        self._owner_pid = os.getpid()
        self._ppid = os.getppid()
        umask = os.umask(0)
        os.umask(umask)
        self._file_mode = 0o666 & ~umask

    def forget_after_fork(self) -> None:
        """In a forked child: never write the parent's log (the hot path may still run; its
        records are dropped with the process).  New locks: the parent's flush thread may have held
        one at the fork."""
        self._final = True
        self._intern_lock = threading.Lock()
        self._io_lock = threading.Lock()

    def _path_for_rank(self) -> str:
        ident = self.rt.ident
        return os.path.join(self.log_dir, log_file_name(self.start_wall_ns, ident.instance_id, self.rank,
                                                        self.world_size, ident.pid))

    def _learn_rank(self) -> None:
        """Take the rank (and the store's address) from torch.distributed when the environment had
        none: with ``init_process_group(init_method="tcp://...")`` no RANK variable exists."""
        got = _dist_rank()
        if got is None:
            return
        self._learned = True
        self._store = _store_address()
        if self.rank < 0:
            self.rank, self.world_size = got
            self.path = self._path_for_rank()

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_env(cls, rt: Any, env: dict[str, str] | None = None) -> "NdetRecorder":
        """Build the recorder from the spec's variables; bad values raise ConfigError (one line)."""
        got: Mapping[str, str] = os.environ if env is None else env
        usec = parse_ndet_flush_usec(got.get(NDET_FLUSH_USEC))
        loc = parse_ndet_log_location(got.get(NDET_LOG_LOCATION))
        entries = parse_ndet_num_entries(got.get(NDET_NUM_ENTRIES))
        return cls(rt, loc, usec, entries, env=got)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="neuron-explorer-ndet", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period = self.flush_usec / 1e6
        while not self._stop.wait(period):
            try:
                self.write(final=False, reason="running")
            except Exception as e:  # never take the workload down; say so once
                self.write_errors += 1
                if self.write_errors == 1:
                    get_logger(__name__).warning(f"neuron-explorer: warning: NDET log not written: {e}")

    # -- hot path ----------------------------------------------------------------------------
    def exec_begin(self, nc: int, model_id: int, exec_id: int, t_ns: int) -> None:
        self._inflight[(nc, exec_id)] = (fmt.KIND_EXEC, fmt.STATE_IN_FLIGHT, nc, 0, t_ns, 0, model_id, exec_id, 0, 0, 0)

    def exec_end(self, nc: int, model_id: int, exec_id: int, t0_ns: int, t1_ns: int, ret: int) -> None:
        self._inflight.pop((nc, exec_id), None)
        self._ring.append((fmt.KIND_EXEC, 0, nc, ret, t0_ns, t1_ns, model_id, exec_id, 0, 0, 0))

    def exec_hooks(self) -> tuple | None:
        """What the C execution wrapper needs to do exec_begin/exec_end itself (runtime/_fastpath.c):
        the in-flight dict, the C ring of ended records, the record constants and the in-flight
        slot table (the dict is its overflow); it writes the same records as those two methods.
        None when the ring is a deque (no C extension)."""
        if isinstance(self._ring, deque):
            return None
        return self._inflight, self._ring, fmt.KIND_EXEC, fmt.STATE_IN_FLIGHT, self._slots

    def in_flight(self) -> list[tuple]:
        """The begin records of the executions and collectives running now, oldest first."""
        recs = list(self._inflight.values())
        if self._slots is not None:
            recs += self._slots.records()
        recs.sort(key=lambda r: r[4])
        return recs

    def numerical_error(self, nc: int, model_id: int, exec_id: int, t0_ns: int, t1_ns: int,
                        nan_count: int, inf_count: int) -> None:
        self._ring.append((fmt.KIND_NUMERICAL_ERROR, 0, nc, 1003, t0_ns, t1_ns, model_id, exec_id,
                           nan_count, inf_count, 0))

    def _intern(self, s: str) -> int:
        with self._intern_lock:
            i = self._sid.get(s)
            if i is None:
                i = len(self._strings)
                self._strings.append(s)
                self._sid[s] = i
            return i

    def cc_begin(self, nc: int, op: str, seq: int, group: str, nbytes: int, dtype: str, t_ns: int) -> int:
        if not self._learned:  # the process group exists now (a script may destroy it before the
            self._learn_rank()  # final write): read once, then one attribute test per call
        sid = self._sid
        o = sid.get(op)
        if o is None:
            o = self._intern(op)
        g = sid.get(group)
        if g is None:
            g = self._intern(group)
            self._groups[group] = None
        d = sid.get(dtype)
        if d is None:
            d = self._intern(dtype)
        token = next(self._tokens)
        kind = fmt.KIND_CC_BARRIER if op in _BARRIER_OPS else fmt.KIND_CC_OP
        self._inflight[token] = (kind, fmt.STATE_IN_FLIGHT, nc, 0, t_ns, 0, o, seq, nbytes, d, g)
        return token

    def cc_end(self, token: int, t1_ns: int, ret: int) -> None:
        rec = self._inflight.pop(token, None)
        if rec is not None:
            self._ring.append((rec[0], 0, rec[2], ret, rec[4], t1_ns, rec[6], rec[7], rec[8], rec[9], rec[10]))

    # -- writing -----------------------------------------------------------------------------
    def flush(self, rt: Any, final: bool, reason: str) -> None:
        """Runtime sink entry point: periodic (final=False) or last write (exit, signal, exception)."""
        if final:
            self._stop.set()
        self.write(final=final, reason=reason)

    def _drain(self) -> None:
        ring = self._ring
        n = len(ring)
        if not n:
            return
        if not isinstance(ring, deque):  # the C ring: one int64 block, converted a field at a time
            rows = np.frombuffer(ring.take(), dtype=np.int64).reshape(-1, ring.width)
            block = np.empty(len(rows), dtype=fmt.RECORD_DTYPE)
            for i, name in enumerate(fmt.RECORD_DTYPE.names or ()):
                block[name] = rows[:, i]
            self._push(block)
            return
        pop = ring.popleft
        items = [pop() for _ in range(n)]
        # one struct.pack per record and a single buffer: numpy's per-field conversion of a list of
        # tuples into a structured array costs ~5x more
        self._push(np.frombuffer(b"".join(starmap(_pack_record, items)), dtype=fmt.RECORD_DTYPE))

    def _push(self, block: np.ndarray) -> None:
        cap = self.num_entries
        if len(block) > cap:
            block = block[-cap:]
        self._reserve(len(block))
        pos = self._hist_n % cap
        first = min(cap - pos, len(block))
        self._history[pos:pos + first] = block[:first]
        if first < len(block):
            self._history[:len(block) - first] = block[first:]
        self._hist_n += len(block)

    def _reserve(self, n: int) -> None:
        """Grow the history (by doubling, at most to ``num_entries``) so ``n`` more records fit
        before it wraps.  It only wraps once it has its full size, so until then the records are
        the first ``_hist_n`` rows."""
        have, cap = len(self._history), self.num_entries
        if have >= cap or self._hist_n + n <= have:
            return
        grown = np.zeros(min(cap, max(2 * have, self._hist_n + n)), dtype=fmt.RECORD_DTYPE)
        grown[:self._hist_n] = self._history[:self._hist_n]
        self._history = grown

    def extend_records(self, block: np.ndarray) -> None:
        """Append already-built records (RECORD_DTYPE) to the history, oldest first.

        For tools that replay or synthesize logs (the benchmark writes its 20 MB logs this way); the
        result goes through the same bounded history and write path as recorded events.
        """
        with self._io_lock:
            self._drain()
            self._push(np.asarray(block, dtype=fmt.RECORD_DTYPE))

    def intern(self, s: str) -> int:
        """The string-table id of ``s`` (for records built with ``extend_records``)."""
        i = self._sid.get(s)
        return i if i is not None else self._intern(s)

    def _ordered_history(self) -> list[np.ndarray]:
        cap = self.num_entries
        if self._hist_n <= cap:
            return [self._history[:self._hist_n]]
        pos = self._hist_n % cap
        return [self._history[pos:], self._history[:pos]]

    def _should_write(self) -> bool:
        if self.require_framework and not any(m in sys.modules for m in _FRAMEWORKS):
            return False  # a process that never ran a framework (shell tools, neuron-det itself) leaves no log
        return not is_launcher()

    def header(self, final: bool, reason: str, flush_mono: int, flush_wall: int) -> dict:
        rt = self.rt
        ident = rt.ident
        models = [{"id": m.id, "name": m.name, "neff_name": m.neff_name, "graph_hash": m.graph_hash,
                   "backend": m.backend, "kind": m.kind, "nc": m.nc_idx, "load": list(m.load_span)}
                  for m in list(rt.models)]
        return {
            "format": fmt.FORMAT_NAME,
            "version": fmt.FORMAT_VERSION,
            "record_dtype": fmt.dtype_description(),
            "record_size": fmt.RECORD_DTYPE.itemsize,
            "kinds": {str(k): v for k, v in fmt.KINDS.items()},
            "clock": "host CLOCK_MONOTONIC ns (time.perf_counter_ns); wall = mono + (flush.wall_ns - flush.mono_ns)",
            "ident": {"instance_id": ident.instance_id, "hostname": getattr(ident, "hostname", ""),
                      "pid": ident.pid, "rank": self.rank, "local_rank": ident.local_rank,
                      "world_size": self.world_size, "node_rank": getattr(ident, "node_rank", 0),
                      "process_tag": getattr(ident, "process_tag", ""), "argv": list(sys.argv[:16])},
            "device": {"kind": getattr(rt, "device_kind", "cpu"), "nd": getattr(rt, "nd_idx", 0)},
            "job": job_identity(self._env, self._store),
            "process": process_facts(self.rank, self._learned, self._ppid, self._spawned),
            "start": {"mono_ns": self.start_mono_ns, "wall_ns": self.start_wall_ns},
            "flush": {"seq": self._flush_seq, "mono_ns": flush_mono, "wall_ns": flush_wall, "final": final,
                      "reason": reason},
            "flush_period_us": self.flush_usec,
            "num_entries": self.num_entries,
            "events_recorded": self._hist_n,
            "groups": list(self._groups),
            "strings": list(self._strings),
            "models": models,
        }

    def write(self, final: bool = False, reason: str = "running") -> str | None:
        """Drain, then rewrite the log atomically.  Returns the path, or None when nothing is written."""
        with self._io_lock:
            if self._final or os.getpid() != self._owner_pid:
                # the final state is on disk (a late periodic write must not replace it), or this
                # is a forked child, whose parent owns the log
                return None
            self._drain()
            if not self._should_write():
                return None
            if not self._learned:
                self._learn_rank()
            inflight = self.in_flight()
            blocks = self._ordered_history()
            if inflight:
                blocks.append(np.array(inflight, dtype=fmt.RECORD_DTYPE))
            self._flush_seq += 1
            mono, wall, _ = clock.anchor("ndet")
            parts = fmt.encode_parts(self.header(final, reason, mono, wall), blocks)
            path = self.path  # read once: the hooks may learn the rank meanwhile
            fmt.atomic_write(path, parts, mode=self._file_mode)
            if self._written is not None and self._written != path:
                self._remove_own(self._written)  # our own log, named before the rank was known (gid-)
            self._written = path
            if final:
                self._final = True
            return path

    @staticmethod
    def _remove_own(path: str) -> None:
        try:
            os.unlink(path)
        except OSError:
            pass

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def now_ns() -> int:
    """The clock the hooks stamp events with (re-exported for manual instrumentation and tests)."""
    return time.perf_counter_ns()
