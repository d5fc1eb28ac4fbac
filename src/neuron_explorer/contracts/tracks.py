"""Which track an event belongs on, and what tracks and processes are called.

One rule for every view of a profile (Perfetto, Chrome JSON, the UI): collectives get a track per
core (``nc_<n>/cc``), other hardware-group events a track per core (``nc_<n>/neuron_hw``), and
everything the host does a track per OS thread (``<tid>/neuron_rt``, framework regions included).
"""

from __future__ import annotations

import numpy as np

from neuron_explorer.contracts.events import HARDWARE

HOST, CORE, COLLECTIVE = 0, 1, 2  # track kinds
COLLECTIVE_TYPES = ("cc_running", "cc_exec_barrier")
# a track's name from its key: the OS thread id (HOST) or the core index (CORE, COLLECTIVE)
TRACK_NAMES = ("{}/neuron_rt", "nc_{}/neuron_hw", "nc_{}/cc")


def track_kind(type_name: str, group: str) -> int:
    if type_name in COLLECTIVE_TYPES:
        return COLLECTIVE
    return CORE if group == HARDWARE else HOST


def kinds_of_types(type_names, type_groups) -> np.ndarray:
    """The track kind of each event type id of a profile (its own type table)."""
    return np.array([track_kind(n, g) for n, g in zip(type_names, type_groups)], dtype=np.int64)


def on_device(kind: int) -> bool:
    """Device-side tracks (the core's executions and collectives) as opposed to host threads."""
    return kind != HOST


def track_name(kind: int, key: int) -> str:
    return TRACK_NAMES[kind].format(key)


def process_label(pid: int, rank: int, instance_id: str | None = None) -> str:
    """``<instance> pid <pid> rank <r>`` (the instance and rank left out when absent)."""
    head = f"{instance_id} " if instance_id else ""
    return f"{head}pid {pid}" + (f" rank {rank}" if rank >= 0 else "")
