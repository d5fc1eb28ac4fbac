"""The ``.neff`` file of each compiled graph (its code, signature, backend and sources).

Graphs are saved into the NEFF cache directory when they are loaded (``cache_neff``, called by the
graph registration) and into the session directory when device profiles are written
(``write_neffs``, called by the device profiler); the two callers share this module instead of
importing each other.
"""

from __future__ import annotations

import os
import shutil

from neuron_explorer.capture.device import write_neff
from neuron_explorer.contracts.layout import neff_file_name
from neuron_explorer.runtime.core import Model, Runtime
from neuron_explorer.util.log import get_logger

__all__ = ["cache_neff", "save_neff", "write_neffs"]


def _file_name(m: Model) -> str:
    return neff_file_name(m.neff_name.replace("neff_", ""), m.nc_idx)


def save_neff(m: Model, path: str) -> None:
    """Write one graph's ``.neff`` file at ``path``."""
    write_neff(path, neff_name=m.neff_name, graph_hash=m.graph_hash, model_name=m.name, backend=m.backend,
               kind=m.kind, signature=m.signature, code=m.artifacts.get("code", ""), framework="torch",
               compile_ns=m.compile_ns, nodes=m.artifacts.get("nodes", ()))


def write_neffs(rt: Runtime, session_dir: str, written: set[str]) -> None:
    """Save each graph once as neff_<hash>_vnc_<nc>.neff (graph code, signature, backend, sources).

    With a NEFF cache directory, graphs were saved there when they were loaded; they are copied
    into the session directory instead of being written again."""
    for m in list(rt.models):
        fname = _file_name(m)
        if fname in written:
            continue
        written.add(fname)
        cached = os.path.join(rt.neff_cache_dir, fname) if rt.neff_cache_dir else None
        if cached and os.path.exists(cached):
            shutil.copyfile(cached, os.path.join(session_dir, fname))
        else:
            save_neff(m, os.path.join(session_dir, fname))


def cache_neff(rt: Runtime, m: Model) -> None:
    """At load time: keep the graph in the NEFF cache directory, when one is configured."""
    if not rt.neff_cache_dir:
        return
    try:
        os.makedirs(rt.neff_cache_dir, exist_ok=True)
        path = os.path.join(rt.neff_cache_dir, _file_name(m))
        if not os.path.exists(path):
            save_neff(m, path)
    except OSError as e:
        get_logger(__name__).warning(f"neuron-explorer: warning: NEFF cache {rt.neff_cache_dir}: {e.strerror}")
