"""The one interface every output format implements, so ``view`` runs one loop for all of them.

A run converts each process in a worker and joins the results in the parent:

    w = exporter(fmt).open_process(target)      # in the worker, one process
    w.add_devices(device_views)                 # its device profiles (files, or dataset rows)
    for lo, part in w.chunks(session):          # the process, in the pieces and order w wants
        w.add(build_events(part, ..., with_extra=w.with_extra))
    piece = w.close()                           # what the parent needs from this process
    ...
    exporter(fmt).assemble(output, pieces, run) # in the parent, all processes in order

``abort`` stops a writer after an error (threads, temporary files); ``discard`` then removes what
it wrote, when the run goes on without this process.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterator, Protocol

from neuron_explorer.contracts.tracks import Grouping
from neuron_explorer.util.names import safe_component

if TYPE_CHECKING:
    from neuron_explorer.analysis.align import InstanceOffset
    from neuron_explorer.analysis.device import DeviceProfileView
    from neuron_explorer.analysis.events import ProcessEvents
    from neuron_explorer.analysis.reader import Session

FORMATS = {"parquet": "neuron_explorer.exporters.parquet", "json": "neuron_explorer.exporters.chrome_json",
           "perfetto": "neuron_explorer.exporters.perfetto"}


@dataclass
class ProcessTarget:
    """Where and how one process is written (picklable: it goes to a worker)."""

    index: int  # the process's position in the run: keeps piece names, track and flow ids apart
    origin_ns: int  # time zero of the output's relative timestamps
    out: str  # the user's output
    work: str  # where pieces and parts go before ``assemble``
    device_dir: str  # where device_profile_model_<id> files go
    display_name: str = ""
    offset: InstanceOffset | None = None  # the instance's clock alignment (recorded in metadata)
    grouping: Grouping = field(default_factory=Grouping)  # how the track tree groups events
    group_pid: int = 0  # pid of the process's group in the track tree (0: index + 1)
    group_label: str = ""  # name of that group ("": the process's own label)

    @property
    def shown_pid(self) -> int:
        return self.group_pid or self.index + 1


@dataclass
class Piece:
    """What a process's writer hands back for ``assemble`` (picklable: it comes from a worker)."""

    path: str | None = None  # the process's piece of a single-file output
    device_files: list[str] = field(default_factory=list)  # device_profile_model_<id> files written
    tables: dict[str, list[dict]] = field(default_factory=dict)  # dataset table -> rows (Parquet)
    flows: str | None = None  # JSON: the process's collective slices (flow id, start, end, tid), .npy
    flow_pid: int = 0  # JSON: the pid those slices are shown under


@dataclass
class RunInfo:
    """What ``assemble`` needs to know about the whole run."""

    origin_ns: int
    offsets: dict[str, InstanceOffset]
    warnings: list[tuple[str, str]]  # (message, path)
    work: str  # the work area of the pieces
    display_name: str = ""
    summary: dict | None = None  # the summary-json document (docs/summary.md), written as summary.json


class ProcessWriter:
    """One process of one output format.  Subclasses set ``chunk`` and ``with_extra`` and implement
    ``add_devices``, ``add`` and ``close``; they may read the process in another order (``chunks``)."""

    chunk = 262_144  # events converted at a time: bounds memory beyond the loaded process (~50 MB)
    with_extra = True  # the format shows extra_attributes_json

    def __init__(self, target: ProcessTarget) -> None:
        self.target = target
        self.device_files: list[str] = []  # device_profile_model_<id> files written
        self.written: list[str] = []  # pieces and parts this process writes in the work area

    def chunks(self, s: Session) -> Iterator[tuple[int, Session]]:
        """(first event, session restricted to the piece) over the process, ``chunk`` events at a
        time in file order; each piece's mapped pages leave resident memory once it is added."""
        n = s.num_events
        size = self.chunk
        for lo in range(0, max(n, 1), size):
            yield lo, (s if n <= size else replace(s, events={k: v[lo:lo + size] for k, v in s.events.items()}))
            s.release(lo + size)

    def add_devices(self, views: list[DeviceProfileView]) -> None:
        raise NotImplementedError

    def add(self, pe: ProcessEvents) -> None:
        raise NotImplementedError

    def close(self) -> Piece:
        raise NotImplementedError

    def abort(self) -> None:
        """Stop after an error: close what is open, drop unfinished files."""

    def discard(self) -> None:
        """Remove what this process wrote (after ``abort``): the run goes on without it."""
        for f in self.device_files + self.written:
            remove_file(f)

    def piece_path(self) -> str:
        """The file of this process's piece of a single-file output, in the work area."""
        path = os.path.join(self.target.work, f"piece-{self.target.index:08d}")
        self.written.append(path)
        return path

    def device_path(self, v: DeviceProfileView, ext: str) -> str:
        """The file of one device profile, beside the output."""
        return os.path.join(self.target.device_dir, f"device_profile_model_{safe_component(v.profile_id)}.{ext}")


class Exporter(Protocol):
    """An output format's module."""

    def open_process(self, target: ProcessTarget) -> ProcessWriter: ...

    def assemble(self, path: str, pieces: list[Piece], run: RunInfo) -> None: ...


def exporter(fmt: str) -> Exporter:
    """The module of an output format, imported on first use (Parquet loads pyarrow's writer,
    Perfetto a thread pool: a run loads only its own)."""
    return importlib.import_module(FORMATS[fmt])


def remove_file(path: str) -> None:
    """Remove a file this run wrote, if it is still there."""
    try:
        os.unlink(path)
    except OSError:
        pass
