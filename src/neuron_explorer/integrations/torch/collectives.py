"""Collectives: one ``cc_running`` (or ``cc_exec_barrier``) span per c10d operator call.

The c10d operators (``c10d::allreduce_`` and friends) go through the dispatcher for Python calls
and for the C++ callers such as DDP's reducer alike.  A kernel registered for the
``BackendSelect`` key (always in the key set, even under inference mode) sees every call,
re-dispatches below itself to the real backend, and records the span when the ``Work`` completes:
when it is waited on (``Work.wait``, patched) or, for work waited on elsewhere, when its future's
callback runs, whichever comes first.  That moment is also a ``hw_notify`` (the completion reaching
the host), and a ``Work.wait`` called from Python is a ``kbl_exec_wait`` (the host blocked on it).
"""

from __future__ import annotations

import sys
from typing import Callable

from neuron_explorer.contracts import events as ev
from neuron_explorer.integrations.torch.state import Installed
from neuron_explorer.integrations.torch.tensors import tensors_in
from neuron_explorer.integrations.torch.waits import wait_recorder
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.core import CoreState

__all__ = ["future_status", "install_collectives"]

now_ns = clock.now_ns
native_tid = clock.native_tid

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


def install_collectives(inst: Installed, torch, core: CoreState) -> None:
    """Register a recording kernel for every c10d operator.  Each records the types of
    ``events.COLLECTIVE_TYPES`` the capture keeps: a kernel whose own type is filtered out still
    gives its ``hw_notify``, the ``kbl_exec_wait`` of a wait on it (named by op, sequence number and
    group) and NDET's record, and the sequence numbers stay those of an unfiltered run."""
    c10d = torch._C._distributed_c10d if hasattr(torch._C, "_distributed_c10d") else None
    if c10d is None:
        return
    rt = inst.rt
    _patch_work_wait(c10d.Work, inst, wait_recorder(inst, core))
    lib = torch.library.Library("c10d", "IMPL")
    inst.lib = lib  # registrations live as long as the library object
    site = _KernelSite(inst, torch, c10d, core, _group_info(inst, torch))
    for opname, shown in _COLLECTIVE_OPS.items():
        packet = getattr(torch.ops.c10d, opname, None)
        if packet is None:
            continue
        op = packet.default
        names = [a.name for a in op._schema.arguments]
        if "process_group" not in names:
            continue
        is_barrier = "barrier" in opname
        etype = ev.CC_EXEC_BARRIER if is_barrier else ev.CC_RUNNING
        lib.impl(opname, site.kernel(op, names.index("process_group"), etype, rt.intern(shown), is_barrier),
                 "BackendSelect")


def _group_info(inst: Installed, torch) -> Callable:
    """``group_info(pg) -> (name, string id of "r0,r1,...")`` for a process group, cached by name."""
    rt = inst.rt
    groups: dict[str, tuple[int, int]] = {}

    def group_info(pg) -> tuple[str, int]:
        name = pg.group_name
        g = groups.get(name)
        if g is None:
            ranks = None
            try:
                import torch.distributed as dist

                for p, n in dist.distributed_c10d._world.pg_names.items():
                    if n == name:
                        ranks = dist.get_process_group_ranks(p)
                        break
            except Exception:
                ranks = None
            if ranks is None:
                ranks = list(range(pg.size()))
            # two process groups over the same ranks keep separate sequence spaces: every group
            # but the default one carries its name after the ranks ("0,1#3")
            label = ",".join(map(str, ranks)) + ("" if name == "0" else f"#{name}")
            g = groups[name] = (len(ranks), rt.intern(label))
        return name, g[1]

    return group_info


def group_seq(pg) -> int:
    """The number of collectives the group ran before the hooks first saw it: 0 when they were
    installed at start-up, the count so far when installed mid-run (``neuron-explorer attach``),
    so that every rank numbers a collective alike whenever its hooks went in."""
    try:
        n = pg._get_sequence_number_for_group()
    except Exception:  # noqa: BLE001 - a backend without sequence numbers: counted from here
        return 0
    return n if type(n) is int and n >= 0 else 0


class _KernelSite:
    """What every collective kernel of a process shares: the core's ring, the sequence numbers per
    group, the dispatcher keys below ``BackendSelect``.  ``kernel`` copies them into each kernel's
    closure, so a call reads no attributes of this object."""

    def __init__(self, inst: Installed, torch, c10d, core: CoreState, group_info: Callable) -> None:
        self.inst = inst
        self.PG, self.Work = c10d.ProcessGroup, c10d.Work
        self.below = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
        self.keys_of = torch._C._dispatch_keys
        self.seqs: dict[str, int] = {}
        self.group_info = group_info
        self.core = core

    def kernel(self, op, pg_pos: int, etype: int, op_sid: int, is_barrier: bool) -> Callable:
        """The ``BackendSelect`` kernel of one c10d operator."""
        inst = self.inst
        rt, nc = inst.rt, self.core.nc
        PG, Work, keys_of, below, seqs, group_info = \
            self.PG, self.Work, self.keys_of, self.below, self.seqs, self.group_info
        append, tick = self.core.ring.append, self.core.ring.tick
        pending, complete, warn_once = inst.pending_cc, inst.cc_complete, inst.warn_once
        span, notify = rt.enabled[etype], rt.enabled[ev.HW_NOTIFY]

        def kernel(*args, **kwargs):
            t0 = now_ns()
            tid = native_tid()
            ts: list = []
            tensors_in(args[0] if pg_pos > 0 else args, ts)
            ndet = rt.ndet
            info = None
            try:
                pg = PG.unbox(args[pg_pos] if len(args) > pg_pos else kwargs["process_group"])
                gname, gsid = group_info(pg)
                seq = seqs.get(gname)
                if seq is None:
                    seq = group_seq(pg)
                seqs[gname] = seq + 1
                nbytes = 0 if is_barrier else sum(t.numel() * t.element_size() for t in ts)
                dtype_sid = rt.intern(str(ts[0].dtype).replace("torch.", "")) if ts and not is_barrier else 0
                token = -1
                if ndet is not None:  # the begin record exists before the collective can hang
                    token = ndet.cc_begin(nc, rt.string_list[op_sid], seq, rt.string_list[gsid], nbytes,
                                          rt.string_list[dtype_sid], t0)
                info = (seq, nbytes, dtype_sid, gsid, token)
            except Exception as e:  # recording must not break the collective
                warn_once("cc", f"collective not recorded: {e}")
            try:
                # continue the dispatch below this key, on the tensors' own backend (CPU, CUDA, ...)
                result = op.redispatch(keys_of(ts[0]) & below, *args, **kwargs)
            except BaseException:
                if info is not None and ndet is not None:
                    ndet.cc_end(info[4], now_ns(), 1)
                raise
            if info is not None:
                seq, nbytes, dtype_sid, gsid, token = info

                def finish(t1, status, t0=t0, tid=tid, seq=seq, nbytes=nbytes, dtype_sid=dtype_sid, gsid=gsid,
                           token=token):
                    if span:
                        append((etype, t0, t1, tid, op_sid, seq, nbytes, dtype_sid, gsid))
                        tick()
                    if notify:  # the completion reaching the host, on the thread that saw it
                        append((ev.HW_NOTIFY, t1, t1, native_tid(), status, op_sid, seq, 0, gsid))
                        tick()
                    if ndet is not None:
                        ndet.cc_end(token, t1, status)

                try:
                    work = Work.unbox(result[-1] if isinstance(result, (tuple, list)) else result)
                    # The end is recorded by whichever comes first: the caller's Work.wait()
                    # returning (patched; on the calling thread, no GIL hand-off) or, for work waited
                    # on elsewhere (async ops, DDP's buckets in C++), a callback on the future.  A
                    # blocking call from torch.distributed waits at once, so it needs no callback:
                    # the callback runs on the backend's thread and taking the GIL from it cost
                    # ~80 us per call.
                    key = id(work)
                    pending[key] = (work, finish, op_sid, seq, gsid)  # keeps the Python wrapper (and its id) alive
                    if not _blocking_caller(sys._getframe(1)):
                        work.get_future().add_done_callback(
                            lambda fut, key=key: complete(key, now_ns(), future_status(fut)))
                except Exception as e:
                    warn_once("cc", f"collective completion not recorded: {e}")
            return result

        return kernel


def _blocking_caller(frame) -> bool:
    """Is the collective called by torch.distributed's own function with async_op=False?  Those
    call ``work.wait()`` right after the op returns."""
    try:
        return (frame.f_code.co_filename.endswith("distributed_c10d.py")
                and frame.f_locals.get("async_op") is False)
    except Exception:
        return False


def _patch_work_wait(Work, inst: Installed, waited: Callable | None) -> None:
    """Record a collective's end when its Work is waited on, on the waiting thread, and the wait
    itself (``kbl_exec_wait``) through ``waited``."""
    orig = Work.wait
    if getattr(orig, "_neuron_explorer", False):
        return
    pending, complete = inst.pending_cc, inst.cc_complete

    def wait(self, *args, **kwargs):
        key = id(self)
        p = pending.get(key)  # taken before a completion callback can pop it
        t0 = now_ns()
        try:
            r = orig(self, *args, **kwargs)
        except BaseException as e:
            complete(key, now_ns(), _error_status(e))
            raise
        t1 = now_ns()
        complete(key, t1, 0)
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
