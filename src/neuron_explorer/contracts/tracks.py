"""Which track an event belongs on, and what tracks and processes are called.

One rule for every view of a profile (Perfetto, Chrome JSON, the UI): collectives get a track per
core (``nc_<n>/cc``), other hardware-group events a track per core (``nc_<n>/neuron_hw``), and
everything the host does a track per OS thread (``<tid>/neuron_rt``, framework regions included).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

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


def kinds_of_types(type_names: Sequence[str], type_groups: Sequence[str]) -> np.ndarray:
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


# ---- grouping (--system-trace-primary-group / --system-trace-secondary-group)
#
# The primary group decides which events share a process in the Perfetto and JSON track tree (and
# in the UI's process rows); the secondary group decides the tracks inside it.  Both name columns of
# SystemProfileEvents.  Primary fields are the ones constant over a capture session, so a group is a
# set of whole processes; secondary fields vary per event.  See docs/decisions/0032-view-grouping.md.

PRIMARY_FIELDS = ("instance_id", "process_id")
SECONDARY_FIELDS = ("instance_id", "process_id", "thread_id", "nc_idx", "trace_event_source")
DEFAULT_PRIMARY = ("instance_id", "process_id")
# the default secondary grouping: host events by OS thread, hardware events and collectives by core
DEFAULT_SECONDARY_NAME = "cpu_vs_device"
# Linux pids stay below 2**22 (pid_max's ceiling): a pid shared by processes of different groups is
# shown as pid + k * PID_SPACE for the k-th group after the first, so it still reads as the real pid
PID_SPACE = 1 << 22


class GroupingError(ValueError):
    """A grouping flag names something that cannot group events (a usage error)."""


def _fields(value: str, flag: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    parts = [p.strip() for p in value.split(",")]
    if not value.strip() or any(not p for p in parts):
        raise GroupingError(f"{flag}={value!r} is not valid; accepted: a comma-separated list of "
                            f"{', '.join(allowed)}")
    bad = [p for p in parts if p not in allowed]
    if bad:
        raise GroupingError(f"{flag}: unknown field {bad[0]!r}; accepted: {', '.join(allowed)}")
    if len(set(parts)) != len(parts):
        raise GroupingError(f"{flag}={value!r} names a field twice")
    return tuple(parts)


class Grouping:
    """How the track tree groups events: ``primary`` (fields that make a process row) and
    ``secondary`` (fields that make a track inside it; None: the default, host events by thread,
    hardware events and collectives by core)."""

    def __init__(self, primary: tuple[str, ...] = DEFAULT_PRIMARY, secondary: tuple[str, ...] | None = None) -> None:
        self.primary = tuple(primary)
        self.secondary = None if secondary is None else tuple(secondary)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Grouping) and (self.primary, self.secondary) == (other.primary, other.secondary)

    def __repr__(self) -> str:
        return f"Grouping({self.primary_text!r}, {self.secondary_text!r})"

    @classmethod
    def parse(cls, primary: str | None, secondary: str | None) -> "Grouping":
        """The flags' values (None: the default); raises GroupingError with a one-line message."""
        p = DEFAULT_PRIMARY if primary is None else _fields(primary, "--system-trace-primary-group", PRIMARY_FIELDS)
        s = None if secondary is None else _fields(secondary, "--system-trace-secondary-group", SECONDARY_FIELDS)
        return cls(p, s)

    @property
    def primary_text(self) -> str:
        return ",".join(self.primary)

    @property
    def secondary_text(self) -> str:
        return DEFAULT_SECONDARY_NAME if self.secondary is None else ",".join(self.secondary)

    @property
    def by_process(self) -> bool:
        """Each group is one process (the default): its pid can be the real one."""
        return "process_id" in self.primary

    def group_key(self, instance_id: str, pid: int, session: str = "") -> tuple:
        """The group of a process.  Grouped by instance and pid (the default), a process is also
        its capture session: two runs that reused a pid on one host (containers start their
        processes under the same pids) are two processes, so ``session`` (unique per session in
        the run) joins the key."""
        values = {"instance_id": instance_id, "process_id": int(pid)}
        key = tuple(values[f] for f in self.primary)
        return key + (session,) if self.per_session else key

    @property
    def per_session(self) -> bool:
        """Whether each capture session is a group of its own (grouped by instance and pid)."""
        return "process_id" in self.primary and "instance_id" in self.primary

    def group_label(self, instance_id: str, pid: int, rank: int) -> str:
        if self.by_process:
            return process_label(pid, rank, instance_id if "instance_id" in self.primary else None)
        return instance_id


def group_pids(processes: list[tuple], grouping: Grouping) -> list[tuple[int, str]]:
    """(pid shown, label) of each process (instance id, real pid, rank[, session]) in the track
    tree: processes of one group share it.  Grouped by process, a group shows its real pid; where
    groups share a pid (the same pid on two instances, or on one instance in two sessions), the
    first in instance order keeps it and the k-th after it shows pid + k * PID_SPACE.  Sessions of
    one instance and pid are told apart in their labels too: ``... (session <name>)``, with the
    session directory's name.  Grouped by instance only, groups are numbered 1, 2, ... in order."""
    procs = [tuple(p) + ("",) * (4 - len(p)) for p in processes]
    keys = [grouping.group_key(inst, pid, session) for inst, pid, _, session in procs]
    distinct = sorted(set(keys), key=lambda k: tuple(str(x) for x in k))
    shown: dict[tuple, int] = {}
    if grouping.by_process:
        pos = grouping.primary.index("process_id")
        later = []
        used: set[int] = set()
        for k in distinct:  # the first group of each pid shows it as it is
            if int(k[pos]) in used:
                later.append(k)
            else:
                shown[k] = int(k[pos])
                used.add(shown[k])
        for k in later:  # the others: + k * PID_SPACE, past any pid shown (a crafted pid >= 2**22)
            n = int(k[pos])
            while n in used:
                n += PID_SPACE
            shown[k] = n
            used.add(n)
    else:
        shown = {k: i + 1 for i, k in enumerate(distinct)}
    sessions: dict[tuple, set] = {}
    for inst, pid, _, session in procs:
        sessions.setdefault((inst, int(pid)), set()).add(session)
    out = []
    for k, (inst, pid, rank, session) in zip(keys, procs):
        label = grouping.group_label(inst, pid, rank)
        if grouping.per_session and len(sessions[(inst, int(pid))]) > 1:
            label += f" (session {session_name(session)})"
        out.append((shown[k], label))
    return out


def session_name(path: str) -> str:
    """A capture session's name: its directory's (the start time in the capture's layout,
    ``<instance>_pid_<pid>/<timestamp>/``)."""
    return os.path.basename(path.rstrip("/")) or path


_SOURCE_SHORT = {"": "unknown"}


def secondary_labels(fields: tuple[str, ...], instance_id: str, pid: int, thread_id: np.ndarray,
                     nc_idx: np.ndarray, source: list[str]) -> tuple[np.ndarray, list[str]]:
    """Custom secondary grouping of a piece of events: (track index of each event, label of each
    track).  ``source`` is each event's trace_event_source."""
    cols = []
    src_names: list[str] = []
    if "trace_event_source" in fields:
        src_names = sorted(set(source))
        lut = {s: i for i, s in enumerate(src_names)}
        src_ix = np.fromiter((lut[s] for s in source), dtype=np.int64, count=len(source))
    for f in fields:
        if f == "thread_id":
            cols.append(np.asarray(thread_id, dtype=np.int64))
        elif f == "nc_idx":
            cols.append(np.asarray(nc_idx, dtype=np.int64))
        elif f == "trace_event_source":
            cols.append(src_ix)
    n = len(thread_id)
    if not cols:
        return np.zeros(n, dtype=np.int64), [_track_label(fields, instance_id, pid, (), src_names)]
    uniq, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    labels = [_track_label(fields, instance_id, pid, tuple(u.tolist()), src_names) for u in uniq]
    return inv.reshape(-1).astype(np.int64), labels


def _track_label(fields: tuple[str, ...], instance_id: str, pid: int, values: tuple, src_names: list[str]) -> str:
    parts = []
    it = iter(values)
    for f in fields:
        if f == "instance_id":
            parts.append(instance_id)
        elif f == "process_id":
            parts.append(f"pid {pid}")
        elif f == "thread_id":
            parts.append(f"tid {next(it)}")
        elif f == "nc_idx":
            parts.append(f"nc_{next(it)}")
        else:
            s = src_names[next(it)]
            parts.append(_SOURCE_SHORT.get(s, s))
    return " / ".join(parts)


def label_tid(label: str) -> int:
    """A JSON thread id for a custom track: the same label (the same secondary values) gives the same
    id in every process of a group, so their tracks merge; 31 bits, above any OS thread id."""
    import zlib

    return (zlib.crc32(label.encode()) & 0x3FFF_FFFF) | 0x4000_0000
