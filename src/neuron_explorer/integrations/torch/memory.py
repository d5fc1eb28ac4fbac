"""Device memory by category, as PyTorch lets the runtime attribute it
(docs/decisions/0031-device-memory-by-category.md).

``install_memory`` registers a memory source with the runtime (``contracts.dataset.DEVICE_MEMORY_SOURCE``):
a callable that returns ``{(nc, category): bytes}``.  The capture sampler calls it at its cadence and
the neuron-monitor counters at theirs, so the profile's ``device_mem.nc<N>.<category>`` counters and
the monitor's ``memory_used`` breakdown are the same numbers.

What is attributed, per core (the tensor's CUDA device, or this process's core on the CPU):

* ``parameters``: parameters and buffers of every module built after torch was instrumented (the
  global registration hooks) and every parameter an optimizer stepped;
* ``gradients``: their ``.grad``, as it was at the latest optimizer step (read on the training thread
  just before the step, at most every ``GRAD_SNAPSHOT_S``: the autograd engine assigns ``.grad``
  without holding the GIL, so reading it from the sampler thread during a backward races with that
  write and crashed the process); ``optimizer_state``: tensors in the stepped optimizers' ``state``;
* ``tensors``: on CUDA, the caching allocator's allocated bytes minus the three above; on the CPU,
  the C heap in use (glibc ``mallinfo2``: arena bytes in use plus mmapped blocks) beyond what it
  was when torch was instrumented, minus the three above -- activations and other tensors, plus
  whatever else the process allocated since (an estimate: the CPU allocator keeps no statistics);
* ``model_code``: the compiled graphs' code the runtime keeps (``Model.artifacts["code"]``);
* ``allocator_cache`` (CUDA): reserved but not allocated by the caching allocator.

Storages are counted once however many tensors view them.  Per step, nothing here runs but one
optimizer pre-hook: a ``RateGate`` (in C, a clock read and a weak-reference compare, no Python
frame) that calls the gradient snapshot at most every ``GRAD_SNAPSHOT_S``.
"""

from __future__ import annotations

import ctypes
import os
import time
import weakref
from typing import Any, Callable

from neuron_explorer.contracts import dataset as ds
from neuron_explorer.contracts.env import GRAD_SNAPSHOT_MAX, ConfigError, parse_positive_int
from neuron_explorer.runtime.core import Runtime
from neuron_explorer.runtime.ring import RateGate, grad_entries

__all__ = ["MemorySource", "heap_in_use", "install_memory"]

Sample = dict[tuple[int, str], int]

#: The gradients are read again at most this often (seconds), on the thread that steps, and only
#: once ``GRAD_SNAPSHOT_STEPS`` steps have passed too unless a whole second has (reading them costs
#: a few microseconds per parameter: on a short step the time bound alone may fall every few steps).
GRAD_SNAPSHOT_S = 0.1
GRAD_SNAPSHOT_STEPS = 16
#: The parameters and optimizer states are walked again at most this often (seconds) unless
#: tensors were added (``MemorySource._attributed``).
WALK_REFRESH_S = 2.0


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None  # not glibc >= 2.33: no heap figure, no CPU "tensors" category
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


_MALLINFO2 = _mallinfo2()


def heap_in_use() -> int | None:
    """Bytes the C heap has handed out and not got back (arenas plus mmapped blocks), or None."""
    if _MALLINFO2 is None:
        return None
    mi = _MALLINFO2()
    return int(mi.uordblks) + int(mi.hblkhd)


def _grad_entries(groups, tensor, host: int, core_of: Callable[[Any], int] | None = None) -> list[tuple[int, int, int]]:
    """(storage address, core, storage bytes) of each gradient of the optimizer's ``groups``, in
    order: ``core_of(t)`` per gradient, or ``host`` for all without it.  The C twin
    ``runtime/_hooks.h`` ``grad_entries`` (without ``core_of``) is held to it by the tests."""
    snap: list[tuple[int, int, int]] = []
    add = snap.append
    for g in groups:
        for p in g.get("params", ()):
            t = getattr(p, "grad", None)
            if isinstance(t, tensor):
                st = t.untyped_storage()
                add((st.data_ptr(), host if core_of is None else core_of(t), int(st.nbytes())))
    return snap


#: the loop without CUDA (every gradient on ``host``): C with the extension
_entries: Callable[[Any, Any, int], list[tuple[int, int, int]]] = grad_entries or _grad_entries


class MemorySource:
    """Tracks the tensors the runtime can name and attributes memory to categories on request."""

    def __init__(self, rt: Runtime, torch) -> None:
        self.rt = rt
        self.torch = torch
        self._tensor_type = torch.Tensor
        self.params: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> tensor
        self.optimizers: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> optimizer
        self.heap_baseline = heap_in_use()
        self.cuda = bool(torch.cuda.is_available())
        # optimizer id -> ((storage key, core, bytes) of its gradients, when read): see the module
        self.grads: dict[int, tuple[list[tuple[int, int, int]], float]] = {}
        # the latest walk (``_attributed``): (shape, when, parameters by core, their keys, states)
        self._walked: tuple | None = None
        self._code_sizes: dict[int, tuple[str, int]] = {}  # id(code) -> (code, UTF-8 bytes)

    # -- hooks (model construction and once per optimizer step) -------------------------------
    def on_tensor_registered(self, _module, _name, tensor):
        if tensor is not None:
            self.params[id(tensor)] = tensor

    def snapshot_step(self, optimizer, _args=None, _kwargs=None):
        """Note the optimizer (its parameters and state are counted) and read the gradients the
        step is about to use, on the thread that steps (the backward that wrote them is over).
        ``step_hook`` calls it at most every ``GRAD_SNAPSHOT_S``.  What the loop needs is looked up
        once per call, not per parameter (decision 0204): without CUDA every tensor is on the
        process's core, so ``_core_of`` is not called, and the loop runs in C (``grad_entries``,
        decision 0206)."""
        key = id(optimizer)
        r = self.optimizers.data.get(key)
        if r is None or r() is not optimizer:
            self.optimizers[key] = optimizer
        try:
            groups = list(getattr(optimizer, "param_groups", ()))
            if self.cuda:
                snap = _grad_entries(groups, self._tensor_type, self.rt.ident.default_core, self._core_of)
            else:
                snap = _entries(groups, self._tensor_type, self.rt.ident.default_core)
            grads = self.grads
            grads[key] = (snap, time.monotonic())
            if len(grads) > 8 and len(grads) > len(self.optimizers) + 8:  # optimizers gone: keep the live ones
                live = set(self.optimizers.keys()) | {key}
                for k in [k for k in grads if k not in live]:
                    del grads[k]
        except (RuntimeError, NotImplementedError):
            pass  # a meta, sparse or fake gradient: nothing to count

    def step_hook(self):
        """The optimizer pre-hook to register: a ``RateGate`` in front of ``snapshot_step`` (the
        C one: a step with nothing to read costs a clock read, not a Python frame).  Its one-second
        bound comes from ``NEURON_EXPLORER_GRAD_SNAPSHOT_MAX_MS``: under valgrind on a loaded
        machine a step takes about a second of wall time, so every step read the gradients and the
        count per step depended on the load (decision 0118); benches stretch it."""
        return RateGate(self.snapshot_step, GRAD_SNAPSHOT_S, GRAD_SNAPSHOT_STEPS, _snapshot_max_s())

    # -- sampling (sampler and publisher threads) --------------------------------------------
    def _core_of(self, t) -> int:
        # (``t.is_cuda`` and ``get_device()``, not ``t.device.type``: that builds the device's name
        # through a C++ string stream, ~3.7k instructions a tensor against ~0.8k)
        return max(int(t.get_device()), 0) if t.is_cuda else self.rt.ident.default_core

    def _entry(self, t) -> tuple[int, int, int] | None:
        """(storage key, core, bytes) of a tensor, or None (not a tensor, no storage of its own)."""
        if t is None or not isinstance(t, self.torch.Tensor):
            return None
        try:
            st = t.untyped_storage()
            key = st.data_ptr()
            return None if key == 0 else (key, self._core_of(t), int(st.nbytes()))
        except (RuntimeError, NotImplementedError):
            return None  # a meta, sparse or fake tensor: no storage of its own to count

    def _add(self, out: Sample, seen: set[int], cat: str, t) -> None:
        e = self._entry(t)
        if e is not None and e[0] not in seen:
            seen.add(e[0])
            out[(e[1], cat)] = out.get((e[1], cat), 0) + e[2]

    def _shape(self, opts: list) -> tuple[int, int, int]:
        """What changes when tensors are added: registered tensors, optimizers, and their states."""
        return (len(self.params), len(opts), sum(len(getattr(o, "state", ())) for o in opts if o is not None))

    def _walk(self, opts: list) -> tuple[Sample, set[int], list[tuple[int, int, int]]]:
        """The parameters' bytes by core, their storage keys, and the optimizer states' tensors as
        (key, core, bytes): what ``_attributed`` reuses between walks."""
        out: Sample = {}
        seen: set[int] = set()
        params = [r() for r in self.params.valuerefs()]
        for opt in opts:
            if opt is None:
                continue
            for g in list(getattr(opt, "param_groups", ())):
                params.extend(g.get("params", ()))
        for p in params:
            self._add(out, seen, "parameters", p)
        state_seen = set(seen)
        states: list[tuple[int, int, int]] = []
        for opt in opts:
            for state in list(getattr(opt, "state", {}).values()) if opt is not None else ():
                for v in list(state.values()) if isinstance(state, dict) else ():
                    e = self._entry(v)
                    if e is not None and e[0] not in state_seen:
                        state_seen.add(e[0])
                        states.append(e)
        return out, seen, states

    def _attributed(self) -> Sample:
        """Parameters, then gradients, then optimizer state, each storage counted once.  The walk
        over the parameters and the optimizer states (a few calls per tensor: milliseconds for a
        large model, at every sample of the sampler and of the monitor's publisher) is redone only
        when tensors were added (``_shape``) or ``WALK_REFRESH_S`` passed; the gradients come from
        the latest snapshots at every call.  Between walks the categories' split may lag by up to
        that long; their sum, and so ``tensors``, does not (it is the heap or the allocator's)."""
        opts = [r() for r in self.optimizers.valuerefs()]
        shape, now = self._shape(opts), time.monotonic()
        cached = self._walked
        if cached is None or cached[0] != shape or now - cached[1] >= WALK_REFRESH_S:
            cached = self._walked = (shape, now, *self._walk(opts))
        params, seen, states = cached[2], cached[3], cached[4]
        out: Sample = dict(params)
        counted: set[int] = set()
        for snap, _ in list(self.grads.values()):
            for key, nc, nbytes in snap:
                if key and key not in seen and key not in counted:
                    counted.add(key)
                    out[(nc, "gradients")] = out.get((nc, "gradients"), 0) + nbytes
        for key, nc, nbytes in states:
            if key not in counted:
                out[(nc, "optimizer_state")] = out.get((nc, "optimizer_state"), 0) + nbytes
        return out

    def __call__(self) -> Sample:
        """``{(nc, category): bytes}`` now (categories: ``contracts.dataset.DEVICE_MEMORY_CATEGORIES``)."""
        out = self._attributed()
        cores = {self.rt.ident.default_core} | {nc for nc, _ in out}
        named = {nc: sum(v for (c, cat), v in out.items() if c == nc) for nc in cores}
        if self.cuda:
            self._cuda(out, named)
        else:
            heap = heap_in_use()
            if heap is not None and self.heap_baseline is not None:
                nc = self.rt.ident.default_core
                out[(nc, "tensors")] = max(0, heap - self.heap_baseline - named.get(nc, 0))
        for m in list(self.rt.models):
            code = m.artifacts.get("code") if isinstance(m.artifacts, dict) else None
            if isinstance(code, str):
                k = (m.nc_idx, "model_code")
                out[k] = out.get(k, 0) + self._code_bytes(code)
        return out

    def _code_bytes(self, code: str) -> int:
        """UTF-8 bytes of a graph's code, encoded once per code string (a compiled graph's code is
        tens of kilobytes, and the sampler asks several times a second)."""
        hit = self._code_sizes.get(id(code))
        if hit is not None and hit[0] is code:
            return hit[1]
        if len(self._code_sizes) > 4 * len(self.rt.models) + 64:
            self._code_sizes.clear()  # (codes replaced or models gone)
        n = len(code.encode())
        self._code_sizes[id(code)] = (code, n)
        return n

    def _cuda(self, out: Sample, named: dict[int, int]) -> None:
        cuda = self.torch.cuda
        for nc in range(cuda.device_count()):
            if not cuda.is_initialized():
                return  # never initialise CUDA from a sampler thread
            st: dict[str, Any] = cuda.memory_stats(nc)
            alloc = int(st.get("allocated_bytes.all.current", 0))
            reserved = int(st.get("reserved_bytes.all.current", 0))
            if alloc or reserved or nc in named:
                out[(nc, "tensors")] = max(0, alloc - named.get(nc, 0))
                out[(nc, "allocator_cache")] = max(0, reserved - alloc)


def _snapshot_max_s() -> float:
    """The gradient snapshot's longest wait in seconds (1 s; a bad or huge value: 1 s / 1e6 s)."""
    try:
        ms = parse_positive_int(GRAD_SNAPSHOT_MAX, os.environ.get(GRAD_SNAPSHOT_MAX), 1000)
    except ConfigError:
        ms = 1000
    return min(ms, 10**9) / 1000.0


def install_memory(rt: Runtime, torch) -> MemorySource | None:
    """Register the memory source with the runtime and the hooks that feed it; once per runtime."""
    if rt.consumer(ds.DEVICE_MEMORY_SOURCE) is not None:
        return rt.consumer(ds.DEVICE_MEMORY_SOURCE)
    import importlib

    src = MemorySource(rt, torch)
    mod = importlib.import_module("torch.nn.modules.module")
    for name in ("register_module_parameter_registration_hook", "register_module_buffer_registration_hook"):
        reg = getattr(mod, name, None)
        if reg is not None:
            reg(src.on_tensor_registered)
    opt_mod = importlib.import_module("torch.optim.optimizer")
    reg = getattr(opt_mod, "register_optimizer_step_pre_hook", None)
    if reg is not None:
        reg(src.step_hook())
    rt.register(ds.DEVICE_MEMORY_SOURCE, src)
    return src
