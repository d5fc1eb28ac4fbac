"""Collectives: one ``cc_running`` (or ``cc_exec_barrier``) span per c10d operator call.

The c10d operators (``c10d::allreduce_`` and friends) go through the dispatcher for Python calls
and for the C++ callers such as DDP's reducer alike.  A kernel registered for the
``BackendSelect`` key (always in the key set, even under inference mode) sees every call,
re-dispatches below itself to the real backend, and records the span when the ``Work`` completes:
when it is waited on (``Work.wait``, patched) or, for work waited on elsewhere, when its future's
callback runs, whichever comes first.  That moment is also a ``hw_notify`` (the completion reaching
the host), and a ``Work.wait`` called from Python is a ``kbl_exec_wait`` (the host blocked on it).
With the extension the callback is a C ``Stamp`` that only keeps the time and the thread; a
Python thread records the span from it later: after the backward that waited for it, at a
``Work.wait``, or before a sink drains the ring (``Runtime.settle``; decision 0220).  When the
torch-ABI extension is built (``native.py``), the stamp is a C++ callback on the future instead,
which the backend's thread runs without taking the GIL (decision 0221), and the kernels themselves
are C++ (``install_kernels``; ``NEURON_EXPLORER_CPP_KERNELS=0``: Python; decision 0223): they queue a
record per call, without a Python frame, which ``_KernelSite.adopter`` turns into the same entries
where they are looked at (a ``Work.wait``, the runtime's settle before a sink drains, the exit
drain).  NDET and pure Python keep the Python kernels.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
import weakref
from threading import Lock, get_ident, local
from typing import Callable

from neuron_explorer.contracts import events as ev
from neuron_explorer.contracts.env import CPP_KERNELS
from neuron_explorer.integrations.torch import native
from neuron_explorer.integrations.torch.state import Installed, env_switch
from neuron_explorer.integrations.torch.tensors import tensors_in
from neuron_explorer.integrations.torch.waits import wait_recorder
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.core import CoreState
from neuron_explorer.runtime.ring import Stamp, stamps_alive

__all__ = ["entry_status", "future_status", "install_collectives", "settle_oldest", "settle_stamped"]

now_ns = clock.now_ns
native_tid = clock.native_tid
native_ids = clock.native_ids

_COLLECTIVE_OPS = {
    # c10d operator -> name shown in events
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce_coalesced",
    "broadcast_": "broadcast", "allgather_": "all_gather", "_allgather_base_": "all_gather_into_tensor",
    "allgather_coalesced_": "all_gather_coalesced",
    "allgather_into_tensor_coalesced_": "all_gather_into_tensor_coalesced",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor_coalesced",
    "reduce_": "reduce", "gather_": "gather", "scatter_": "scatter", "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all_single", "send": "send", "recv_": "recv", "recv_any_source_": "recv_any_source",
    "barrier": "barrier", "monitored_barrier_": "monitored_barrier",
}


# ids of the completion callbacks handed to backends' futures and not yet released by them
_LIVE: set[int] = set()
_DRAIN_AT_EXIT: list[bool] = []
# which process made a pending entry's stamp (its last item): a forked child's drain does not wait
# for the C++ stamps it inherited, whose completions happen in its parent's memory
_FORK_GEN = [0]


def _after_fork_in_child() -> None:
    _LIVE.clear()  # a forked child has no backend thread to release them
    _FORK_GEN[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Done:
    """A completion callback handed to a backend's future (``on_done(key, fut)``), listed in
    ``_LIVE`` until the backend's thread has run it and let it go (``__del__``, with the GIL)."""

    __slots__ = ("fn", "key")

    def __init__(self, fn: Callable, key: int) -> None:
        self.fn, self.key = fn, key
        _LIVE.add(id(self))

    def __call__(self, fut) -> None:
        self.fn(self.key, fut)
        if not getattr(_KEPT, "on", False):
            _keep_thread_state()

    def __del__(self) -> None:
        _LIVE.discard(id(self))


# per Python thread state: set once that state is kept (below)
_KEPT = local()


def _keep_thread_state() -> None:
    """Keep the Python thread state of the backend thread running a completion callback, for the
    next one.  A thread that Python did not start (gloo's ``pt_gloo_runloop``) has a thread state
    only while pybind holds the GIL for a callback: pybind makes one, runs the callback and deletes
    it, every time, ~100 us of CPU per collective (measured on a 2-rank DDP step of 5.5 ms with
    two buckets: the two gloo threads' CPU 0.27-0.30 ms a step unprofiled, 0.38-0.48 with the
    callback, 0.30-0.33 with the state kept).  One more ``PyGILState_Ensure`` reference, never
    released, makes pybind's release leave the state alive; the interpreter deletes it at
    finalization (or a fork's child with the other threads).  A thread Python started deletes its
    own state when it ends whatever the count.  ``_KEPT`` lives in the thread state, so a state
    made anew (a thread whose reference was not taken) is kept at its first callback."""
    _KEPT.on = True
    try:
        import ctypes  # (already imported by torch)

        ctypes.pythonapi.PyGILState_Ensure()
    except Exception:  # noqa: BLE001 - no ctypes or no C API (another interpreter): a state per call
        pass


def drain_callbacks(bound_s: float, settle: Callable[[], None] | None = None,
                    unstamped: Callable[[], bool] | None = None) -> None:
    """At the program's exit (``atexit``: before the interpreter's finalization), wait at most
    ``bound_s`` until the backends' threads have run and released every callback of ours.  A
    thread that takes the GIL during finalization is ended by ``pthread_exit``, which aborts a
    C++ thread ("terminate called without an active exception"): an async collective left
    running at exit (gloo's interpreter waits for it as it tears down) or DDP's last bucket whose
    thread was descheduled would kill a process that unprofiled exits 0 (decision 0198).  The
    wait lets go of the GIL; unprofiled, the teardown waits for that work anyway.  ``settle``
    (the runtime's) records the stamped ends first, so that only the backends hold stamps.
    ``unstamped()``: a C++ stamp (``native``) is still waiting for its completion; nothing of ours
    runs on the backend's thread then, but the final write is to have the collective's end, as
    with the other callbacks."""
    deadline = time.monotonic() + bound_s
    alive = stamps_alive or (lambda: 0)
    waiting = unstamped or (lambda: False)
    while True:
        if settle is not None and (alive() > 0 or waiting()):
            settle()
        if not (_LIVE or alive() > 0 or waiting()) or time.monotonic() >= deadline:
            return
        time.sleep(0.001)


def _unstamped(inst: Installed) -> bool:
    """Is a collective with a C++ stamp (``native``) made by this process still waiting for its
    completion?"""
    gen = _FORK_GEN[0]
    try:
        return any(e[11] is not None and type(e[11]) is not Stamp and e[12] == gen and not e[11].t
                   for e in list(inst.pending_cc.values()))
    except Exception:  # noqa: BLE001 - (changed by another thread meanwhile: asked again)
        return True


def entry_status(entry: list) -> int:
    """The status code of a completed collective (an ``Installed.pending_cc`` entry): its C++
    stamp's, else its Work's future's."""
    st = getattr(entry[11], "status", None)  # (the C++ WorkStamp has one, the C Stamp none)
    return st if st is not None else future_status(entry[0].get_future())


def settle_stamped(inst: Installed) -> None:
    """Record the end of every collective whose ``Stamp`` has been called, at the stamp's time and
    on the thread that called it (the backend's), from whichever Python thread gets here first.
    The entry then lets go of its stamp, so that ``stamps_alive`` counts only the stamps the
    backends still hold."""
    for key, entry in list(inst.pending_cc.items()):
        s = entry[11]
        if s is not None and s.t:
            inst.cc_complete(key, s.t, entry_status(entry))


def settle_oldest(inst: Installed) -> None:
    """``settle_stamped`` from the oldest collective on, up to the first whose stamp has not been
    called: a kernel's share, O(1) a call however many collectives are in flight (a group runs
    its collectives in order; what this leaves, a backward's end or the next drain settles)."""
    pending = inst.pending_cc
    while pending:
        try:
            key = next(iter(pending))
        except (StopIteration, RuntimeError):  # (emptied or changed by another thread meanwhile)
            return
        entry = pending.get(key)
        if entry is None:
            continue  # (recorded by another thread meanwhile)
        s = entry[11]
        if s is None or not s.t:
            return
        inst.cc_complete(key, s.t, entry_status(entry))


def install_collectives(inst: Installed, torch, core: CoreState) -> None:
    """Register a recording kernel for every c10d operator.  Each records the types of
    ``events.COLLECTIVE_TYPES`` the capture keeps: a kernel whose own type is filtered out still
    gives its ``hw_notify``, the ``kbl_exec_wait`` of a wait on it (named by op, sequence number and
    group) and NDET's record, and the sequence numbers stay those of an unfiltered run."""
    c10d = torch._C._distributed_c10d if hasattr(torch._C, "_distributed_c10d") else None
    if c10d is None:
        return
    rt = inst.rt
    site = _KernelSite(inst, torch, c10d, core)
    specs = []  # (operator, process_group's position, async_op's or -1, where the Work is, etype, name, barrier)
    for opname, shown in _COLLECTIVE_OPS.items():
        packet = getattr(torch.ops.c10d, opname, None)
        if packet is None:
            continue
        op = packet.default
        names = [a.name for a in op._schema.arguments]
        if "process_group" not in names:
            continue
        is_barrier = "barrier" in opname
        returns = [str(r.type) for r in op._schema.returns]
        # where the Work is in what the operator returns: -1 last of a tuple, 0 alone, None: no
        # Work (the operator returns when the collective is done)
        work_at = -1 if len(returns) > 1 else 0 if returns else None
        specs.append((op, names.index("process_group"), names.index("async_op") if "async_op" in names else -1,
                      work_at, ev.CC_EXEC_BARRIER if is_barrier else ev.CC_RUNNING, rt.intern(shown), is_barrier))
    # the kernels in C++ (the extension built against this torch: no Python frame per call; off with
    # NEURON_EXPLORER_CPP_KERNELS=0), else in Python.  NDET keeps the Python kernels: its begin
    # record is written before the collective can hang, and pure Python (no C extension) keeps what
    # it tests
    cpp = Stamp is not None and rt.ndet is None and env_switch(CPP_KERNELS, "the C++ collective kernels")
    mod = native.module(torch) if cpp else None
    adopt = None
    if mod is not None:
        try:
            inst.lib = mod.install_kernels([(op._schema.name.split("::")[-1], pg_pos, async_pos,
                                             1 if work_at is None else work_at, is_barrier)
                                            for op, pg_pos, async_pos, work_at, _, _, is_barrier in specs])
            adopt = inst.adopt_cc = site.adopter(mod, [(_finisher(etype, sid, core, rt.enabled[etype],
                                                                  rt.enabled[ev.HW_NOTIFY]), sid)
                                                       for _, _, _, _, etype, sid, _ in specs])
            inst.cc_queued, inst.cc_queued_address = mod.queued, mod.queued_address()
        except Exception as e:  # noqa: BLE001 - (a build this torch does not take): the Python kernels
            inst.lib = inst.adopt_cc = inst.cc_queued = inst.cc_queued_address = None
            inst.warn_once("cc-cpp", f"the C++ collective kernels are not used ({type(e).__name__}: {e})")
    if Stamp is not None:  # (before the sinks drain the rings: the adopted records and stamped ends go in first)
        rt.add_settler(_cpp_settler(inst, adopt, mod.stop_recording) if adopt is not None else
                       (lambda: settle_stamped(inst)))
    if not _DRAIN_AT_EXIT:  # (after the program's own handlers, before our final write's)
        _DRAIN_AT_EXIT.append(True)
        queued = mod.queued if adopt is not None else (lambda: 0)
        atexit.register(drain_callbacks, rt.config.final_write_timeout_s, rt.settle,
                        lambda: queued() > 0 or _unstamped(inst))
    _patch_work_wait(c10d.Work, inst, wait_recorder(inst, core),
                     (mod.work_address, adopt) if adopt is not None else None)
    if adopt is not None:
        return
    lib = torch.library.Library("c10d", "IMPL")
    inst.lib = lib  # registrations live as long as the library object
    for op, pg_pos, async_pos, work_at, etype, sid, is_barrier in specs:
        lib.impl(op._schema.name.split("::")[-1], site.kernel(op, pg_pos, async_pos, work_at, etype, sid, is_barrier),
                 "BackendSelect", with_keyset=True)


def group_seq(pg) -> int:
    """The number of collectives the group ran before the hooks first saw it: 0 when they were
    installed at start-up, the count so far when installed mid-run (``neuron-explorer attach``),
    so that every rank numbers a collective alike whenever its hooks went in."""
    try:
        n = pg._get_sequence_number_for_group()
    except Exception:  # noqa: BLE001 - a backend without sequence numbers: counted from here
        return 0
    return n if type(n) is int and n >= 0 else 0


def group_ranks(pg) -> list[int]:
    """The global ranks of a process group (``0..size-1`` when torch.distributed does not know it)."""
    name = pg.group_name
    try:
        import torch.distributed as dist

        for p, n in dist.distributed_c10d._world.pg_names.items():
            if n == name:
                return dist.get_process_group_ranks(p)
    except Exception:  # noqa: BLE001 - a group torch.distributed does not list
        pass
    return list(range(pg.size()))


_UNSET = object()


class _KernelSite:
    """What every collective kernel of a process shares: the core's ring, each process group's
    label and sequence number, the dtypes' and dispatch key sets' lookups.  ``kernel`` copies them
    into each kernel's closure, so a call reads no attributes of this object.

    A call's cost is mostly torch's (the dispatcher hands the arguments to Python and takes the
    result back, and the redispatch does the same once more: a Python kernel that only redispatches
    adds ~59k instructions to the ~62k of a 1 KB all-reduce); what the kernel adds (~25k) is kept
    to lookups in dicts filled on first sight (docs/decisions/0180-collective-kernel-cost.md)."""

    def __init__(self, inst: Installed, torch, c10d, core: CoreState) -> None:
        self.inst = inst
        self.torch = torch
        self.PG, self.Work = c10d.ProcessGroup, c10d.Work
        self.below = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
        # group name -> [string id of "r0,r1,..." (the label), the label, next sequence number]
        self.groups: dict[str, list] = {}
        # id(ProcessGroup wrapper) -> (weak reference to it, its groups entry): pybind gives the
        # same Python object for a group as long as one lives, so a call needs no group_name read
        self.by_id: dict[int, tuple] = {}
        self.dtypes: dict = {}  # torch.dtype -> string id of its name ("float32")
        self.masks: dict[int, object] = {}  # raw key set at BackendSelect -> the key set below it
        self.core = core
        # the extension's ``stamp_work`` (``native``), or None; ``_UNSET`` until the first collective
        self.cpp_stamp: list = [_UNSET]

    def group(self, pg, seq0: int = -1) -> list:
        """The ``groups`` entry of a process group, made on first sight (and cached by wrapper);
        ``seq0``: its sequence number then when known (else read from the group now)."""
        rt = self.inst.rt
        name = pg.group_name
        g = self.groups.get(name)
        if g is None:
            # two process groups over the same ranks keep separate sequence spaces: every group
            # but the default one carries its name after the ranks ("0,1#3")
            label = ",".join(map(str, group_ranks(pg))) + ("" if name == "0" else f"#{name}")
            g = self.groups[name] = [rt.intern(label), label, seq0 if seq0 >= 0 else group_seq(pg)]
        key, by_id = id(pg), self.by_id
        try:
            ref = weakref.ref(pg, lambda r, key=key: by_id.pop(key) if by_id.get(key, (None,))[0] is r else None)
        except TypeError:  # (a wrapper without weak references: read by name each call)
            return g
        by_id[key] = (ref, g)
        return g

    def dtype_sid(self, t) -> int:
        return self.dtype_of(t.dtype)

    def dtype_of(self, d) -> int:
        sid = self.dtypes[d] = self.inst.rt.intern(str(d).replace("torch.", ""))
        return sid

    def adopter(self, mod, ops: list[tuple[Callable, int]]) -> Callable[[], None]:
        """``adopt()``: record what the C++ kernels (``mod.install_kernels``) queued, in call order:
        each call's sequence number in its group, its ``Installed.pending_cc`` entry (keyed by the
        Work's address, which the entry's weak reference keeps from being reused), or its span at
        once when the operator returned with the collective done.  ``ops[i]``: operator i's
        ``finish`` and name.  Called where the Python kernels' records are looked at: a
        ``Work.wait``, the runtime's settle before a sink drains, the exit drain."""
        drain, queued, pending, warn_once = mod.drain, mod.queued, self.inst.pending_cc, self.inst.warn_once
        by_id, group, dtypes, dtype_of = self.by_id, self.group, self.dtypes, self.dtype_of
        lock = Lock()  # (two threads adopting at once would number a group's calls out of order)

        def adopt() -> None:
            if not queued():
                return
            with lock:
                records, dropped = drain()
                if dropped:
                    warn_once("cc-dropped", f"{dropped} collectives not recorded: more than 65536 between two "
                                            "writes of the capture")
                gen = _FORK_GEN[0]
                for op_i, t0, t1, tid, nbytes, dtype, pg, seq0, key, ref, stamped, failed in records:
                    c = by_id.get(id(pg))
                    g = c[1] if c is not None and c[0]() is pg else group(pg, seq0)
                    seq = g[2]
                    g[2] = seq + 1
                    if failed:  # (the call raised: numbered, not recorded, as the Python kernel does)
                        continue
                    finish, op_sid = ops[op_i]
                    d_sid = 0 if dtype is None else dtypes.get(dtype) or dtype_of(dtype)
                    entry = [ref, finish, op_sid, seq, g[0], t0, tid, nbytes, d_sid, None, -1,
                             ref if stamped else None, gen]
                    if t1:
                        finish(entry, t1, 0)
                    else:
                        pending[key] = entry
                if pending:  # the stamped ends from the oldest on, as a Python kernel's call does
                    settle_oldest(self.inst)

        return adopt

    def mask(self, keyset):
        m = self.masks[keyset.raw_repr()] = keyset & self.below
        return m

    def kernel(self, op, pg_pos: int, async_pos: int, work_at: int | None, etype: int, op_sid: int,
               is_barrier: bool) -> Callable:
        """The ``BackendSelect`` kernel of one c10d operator (registered with the key set: the
        redispatch continues below this key on the key set the dispatcher computed)."""
        inst = self.inst
        rt, nc = inst.rt, self.core.nc
        torch = self.torch
        Tensor = torch.Tensor
        unbox_pg, unbox_work = self.PG.unbox, self.Work.unbox
        redispatch = op._handle.redispatch_boxed
        by_id, group, dtypes, dtype_sid, masks, mask = \
            self.by_id, self.group, self.dtypes, self.dtype_sid, self.masks, self.mask
        pending, complete, warn_once = inst.pending_cc, inst.cc_complete, inst.warn_once
        strings = rt.string_list
        op_name = strings[op_sid]
        finish = _finisher(etype, op_sid, self.core, rt.enabled[etype], rt.enabled[ev.HW_NOTIFY])
        stamp = Stamp
        cpp = self.cpp_stamp

        def stamped(work):
            """A stamp of ``work``'s completion, or None (no extension: a Python callback)."""
            work_stamp = cpp[0]
            if work_stamp is _UNSET:
                # the C++ stamp (no GIL on the backend's thread), looked up at the process's first
                # stamped collective; with the C extension only: pure Python
                # (NEURON_EXPLORER_PURE_PYTHON=1) keeps the Python callback it tests
                work_stamp = cpp[0] = native.stamp_work(torch) if stamp is not None else None
            if work_stamp is not None:
                try:
                    return work_stamp(work)
                except Exception:  # noqa: BLE001 - (a Work without a future): the C stamp
                    pass
            fut = _future(work) if stamp is not None else None
            if fut is None:
                return None
            s = stamp()
            fut.add_done_callback(s)
            return s

        def on_done(key: int, fut) -> None:  # on the thread that completed the future
            t1 = now_ns()
            if key in pending:  # (else a Work.wait has recorded it)
                complete(key, t1, future_status(fut))

        def kernel(keyset, *args, **kwargs):
            t0 = now_ns()
            if pending and stamp is not None:  # the earlier collectives' stamped ends, before this one
                try:
                    settle_oldest(inst)
                except Exception as e:  # noqa: BLE001 - recording must not break the collective
                    warn_once("cc-settle", f"collective ends not recorded: {e}")
            tid = native_ids.get(get_ident()) or native_tid()
            ndet = rt.ndet
            entry = None
            try:
                # the tensors of the first argument: their bytes, and the first one's dtype
                a0 = args[0]
                if type(a0) is list and len(a0) == 1 and type(a0[0]) is Tensor:
                    t = a0[0]
                    nbytes = t.nbytes
                elif type(a0) is Tensor:
                    t = a0
                    nbytes = t.nbytes
                else:
                    ts: list = []
                    tensors_in(a0, ts)
                    t = ts[0] if ts else None
                    nbytes = sum(x.numel() * x.element_size() for x in ts)
                if is_barrier or t is None:
                    nbytes = d_sid = 0
                else:
                    d_sid = dtypes.get(t.dtype)
                    if d_sid is None:
                        d_sid = dtype_sid(t)
                pg = unbox_pg(args[pg_pos] if len(args) > pg_pos else kwargs["process_group"])
                c = by_id.get(id(pg))
                g = c[1] if c is not None and c[0]() is pg else group(pg)
                seq = g[2]
                g[2] = seq + 1
                token = -1
                if ndet is not None:  # the begin record exists before the collective can hang
                    token = ndet.cc_begin(nc, op_name, seq, g[1], nbytes, strings[d_sid], t0)
                entry = [None, finish, op_sid, seq, g[0], t0, tid, nbytes, d_sid, ndet, token, None, _FORK_GEN[0]]
            except Exception as e:  # recording must not break the collective
                warn_once("cc", f"collective not recorded: {e}")
            try:
                # continue the dispatch below this key, on the key set the dispatcher computed
                below = masks.get(keyset.raw_repr())
                if below is None:
                    below = mask(keyset)
                result = redispatch(below, *args, **kwargs)
            except BaseException:
                if entry is not None and ndet is not None:
                    ndet.cc_end(entry[10], now_ns(), 1)
                raise
            if entry is not None:
                try:
                    if work_at is None:  # no Work: the operator returned when the collective was done
                        finish(entry, now_ns(), 0)
                        return result
                    work = unbox_work(result[-1] if work_at else result)
                    # The end is recorded by whichever comes first: the caller's Work.wait()
                    # returning (patched; on the calling thread, no GIL hand-off) or, for work waited
                    # on elsewhere (async ops, DDP's buckets in C++), a callback on the future.  A
                    # blocking call from torch.distributed (the operator's async_op argument False)
                    # waits at once, so it needs no callback: the callback runs on the backend's
                    # thread and taking the GIL from it cost ~80 us per call.
                    key = id(work)
                    entry[0] = work  # keeps the Python wrapper (and its id) alive
                    pending[key] = entry
                    if async_pos >= 0:  # (an argument left at its default, True, is not passed)
                        callback = len(args) <= async_pos or args[async_pos] is not False
                    else:
                        callback = not _blocking_caller(sys._getframe(1))
                    # the C++ or C stamp: no Python frame on the backend's thread (the C++ one
                    # takes no GIL there either).  NDET keeps the Python callback: its end record
                    # must not wait for a settle
                    s = stamped(work) if callback and ndet is None else None
                    if s is not None:
                        entry[11] = s  # (after the call: a stamp the backend does not hold is never called)
                    elif callback:
                        fut = _future(work)
                        if fut is not None:  # (else its Work.wait records the end)
                            fut.add_done_callback(_Done(on_done, key))
                except Exception as e:
                    warn_once("cc", f"collective completion not recorded: {e}")
            return result

        return kernel


def _finisher(etype: int, op_sid: int, core: CoreState, span: bool, notify: bool) -> Callable:
    """``finish(entry, t1, status)`` of one operator's collectives: the span, the ``hw_notify`` and
    NDET's end record.  ``entry`` (``Installed.pending_cc``): [Work (the C++ kernels: its
    ``WorkStamp``, a weak reference), finish, op, seq, group, t0, calling thread, bytes, dtype, NDET
    recorder or None, NDET token, Stamp or None, the process's fork generation when it was made].  The end is
    at ``t1`` on the calling thread, or, when the entry's stamp has been called, at the stamp's
    time on the thread that called it: the completion's own moment, whoever records it."""
    append, tick = core.ring.append, core.ring.tick
    hw_notify = ev.HW_NOTIFY

    def finish(p: list, t1: int, status: int) -> None:
        s, p[11] = p[11], None  # (let go: stamps_alive counts the stamps the backends hold)
        tid = 0
        if s is not None and s.t:
            t1, tid = s.t, s.tid
        if span:
            append((etype, p[5], t1, p[6], op_sid, p[3], p[7], p[8], p[4]))
            tick()
        if notify:  # the completion reaching the host, on the thread that saw it
            append((hw_notify, t1, t1, tid or native_ids.get(get_ident()) or native_tid(), status, op_sid, p[3], 0,
                    p[4]))
            tick()
        if p[9] is not None:
            p[9].cc_end(p[10], t1, status)

    return finish


def _cpp_settler(inst: Installed, adopt: Callable[[], None], stop_recording: Callable[[], None]) -> Callable:
    """The runtime's settler with the C++ kernels: their queued records, then the stamped ends.
    At the final write (the runtime stopped) the kernels stop recording first, then the queue is
    adopted: nothing would adopt a later record, and each queued record pins its Work (and its
    tensors) until adopted."""
    rt = inst.rt

    def settle() -> None:
        if rt.stopped:
            stop_recording()
        adopt()
        settle_stamped(inst)

    return settle


def _future(work):
    """The Work's future, or None for a Work without one (gloo's send and recv: ``get_future``
    raises; their ``Work.wait`` records the end)."""
    try:
        return work.get_future()
    except RuntimeError:
        return None


def _blocking_caller(frame) -> bool:
    """For an operator without an ``async_op`` argument (send, recv): is it called by
    torch.distributed's own function with async_op=False?  Those call ``work.wait()`` right after
    the op returns."""
    try:
        return (frame.f_code.co_filename.endswith("distributed_c10d.py")
                and frame.f_locals.get("async_op") is False)
    except Exception:
        return False


def _patch_work_wait(Work, inst: Installed, waited: Callable | None, cpp: tuple | None = None) -> None:
    """Record a collective's end when its Work is waited on, on the waiting thread, and the wait
    itself (``kbl_exec_wait``) through ``waited``.  ``cpp``: (the Work's key, ``adopt``) with the
    C++ kernels, whose queued records are adopted first; else the key is the wrapper's id."""
    orig = Work.wait
    if getattr(orig, "_neuron_explorer", False):
        return
    pending, complete = inst.pending_cc, inst.cc_complete
    key_of, adopt = cpp if cpp is not None else (id, None)

    def wait(self, *args, **kwargs):
        if adopt is not None:
            try:
                adopt()  # (returns at once when nothing is queued)
                key = key_of(self)
            except Exception as e:  # noqa: BLE001 - recording must not break the wait
                inst.warn_once("cc", f"collective not recorded: {e}")
                key = 0
        else:
            key = id(self)
        p = pending.get(key)  # taken before a completion callback can pop it (and done_cc drop it)
        t0 = now_ns()
        try:
            r = orig(self, *args, **kwargs)
        except BaseException as e:
            complete(key, now_ns(), _error_status(e))
            raise
        t1 = now_ns()
        complete(key, t1, 0, False)  # the wait itself looks no further
        if waited is not None:
            waited(t0, t1, key, p)
        return r

    wait._neuron_explorer = True
    wait.__doc__ = orig.__doc__
    Work.wait = wait


def _error_status(e: BaseException) -> int:
    """The runtime status code of a failed collective: 5 (timeout) or 1 (failure)."""
    text = str(e).lower()
    return 5 if "timed out" in text or "timeout" in text else 1


def future_status(fut) -> int:
    """The runtime status code of a completed collective: 0 or that of its error."""
    try:
        fut.value()
        return 0
    except Exception as e:
        return _error_status(e)
