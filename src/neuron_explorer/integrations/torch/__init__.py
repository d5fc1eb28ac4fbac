"""PyTorch instrumentation, installed without code changes (``boot`` calls ``install`` when torch
is imported).

* ``eager``: eager executions (root modules, their backward, optimizer steps);
* ``regions``: ``record_function`` regions as framework events;
* ``graphs``: ``torch.compile`` graphs (Dynamo's compile hooks, graph registration, the backward);
* ``execution``: the wrapper that records each call of a compiled graph (the hot path);
* ``collectives``: c10d collectives, from Python and from C++ callers such as DDP;
* ``copies``: host/device copies on CUDA hosts;
* ``device``: device profiles (the ops inside an execution), ``neffs``: the graphs' ``.neff`` files;
* ``waits``: the host blocked on handed-off work (``Work.wait``, synchronize) as ``kbl_exec_wait``;
* ``tensors``: what the others read off tensors; ``state``: what the hooks keep between calls;
* ``frames``: our frames out of the tracebacks of the program's exceptions;
* ``flops``: graph flop counts, ``autograd_flops``: an eager first call's, off its autograd graph.
"""

from __future__ import annotations

import os

from neuron_explorer.contracts import events as ev
from neuron_explorer.integrations.importhook import when_imported
from neuron_explorer.integrations.torch.collectives import install_collectives
from neuron_explorer.integrations.torch.copies import install_copies
from neuron_explorer.integrations.torch.eager import eager_enabled, install_eager
from neuron_explorer.integrations.torch.graphs import install_compile_start, install_dynamo
from neuron_explorer.integrations.torch.regions import install_regions, regions_enabled
from neuron_explorer.integrations.torch.state import Installed
from neuron_explorer.integrations.torch.waits import install_waits, record_sync
from neuron_explorer.runtime.core import EXECUTIONS, Runtime

__all__ = ["Installed", "install", "installed", "record_sync"]

_installed: Installed | None = None  # the one installation of this process


def installed() -> Installed | None:
    """The state of the hooks ``install`` set up in this process (None before)."""
    return _installed


def install(rt: Runtime, torch) -> None:
    """Install the hooks the enabled event types need; once per process."""
    global _installed
    if _installed is not None:
        return
    inst = _installed = Installed(rt, os.path.dirname(torch.__file__) + os.sep)
    if torch.cuda.is_available():
        rt.device_kind = "cuda:" + torch.cuda.get_device_name(max(rt.ident.local_rank, 0) % torch.cuda.device_count())
        rt.nd_idx = max(rt.ident.local_rank, 0)
    core = rt.core()
    if core is None:
        return  # this process's core is filtered out at capture time
    rt.sync_point(core)
    # each mechanism when any type it produces is kept (contracts.events), or NDET needs it
    if rt.keeps_any(ev.COLLECTIVE_TYPES) or rt.ndet is not None:
        install_collectives(inst, torch, core)
    if rt.enabled[EXECUTIONS]:
        when_imported("torch._dynamo.trace_rules", lambda m: m.add("neuron_explorer"))  # never trace our hooks
        when_imported("torch._dynamo.callback", lambda m: install_compile_start(inst, m))
        when_imported("torch._dynamo.output_graph", lambda m: install_dynamo(inst, torch, core, m))
        if eager_enabled():
            inst.eager = install_eager(inst, torch, core)
    if rt.enabled[ev.FRAMEWORK_OP] and regions_enabled():
        install_regions(rt, torch, core)
    if torch.cuda.is_available() and (rt.enabled[ev.NRT_TENSOR_READ] or rt.enabled[ev.NRT_TENSOR_WRITE]):
        install_copies(rt, torch, core)
    install_waits(rt, torch)
