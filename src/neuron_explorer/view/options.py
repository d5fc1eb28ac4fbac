"""What a ``view`` run is asked (``ViewOptions``), what it answers (``ViewResult``) and how it fails
(``ViewError``, ``OutputError``): the words the run's flow (``pipeline``), its tasks (``tasks``,
``process``) and the object-storage side (``remote``) share, kept here so that none of them has to
import the flow that uses them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from neuron_explorer.analysis import align
from neuron_explorer.analysis.filters import ViewFilter
from neuron_explorer.contracts.tracks import Grouping


class ViewError(Exception):
    """A problem with the view request as a whole (nothing usable to process)."""


class OutputError(Exception):
    """Writing the output failed (full disk, permissions, ...): nothing half-written was left
    looking complete and an earlier output of ours is intact."""

    def __init__(self, output: str, reason: str) -> None:
        super().__init__(f"cannot write {output}: {reason}")
        self.output = output
        self.reason = reason


def os_reason(e: OSError) -> str:
    """The system's words for an OSError ("No space left on device"), without Arrow's wrapping."""
    return os.strerror(e.errno) if e.errno else (e.strerror or str(e))


GOOD_LAYOUT = ("a capture directory looks like OUTPUT/<instance-id>_pid_<pid>/<timestamp>/ holding "
               "ntrace.pb and trace_info.pb (written by NEURON_RT_INSPECT_ENABLE=1 or 'neuron-explorer inspect')")

DEFAULT_OUTPUTS = {"parquet": "system_profile_parquet", "json": "system_profile.json",
                   "perfetto": "system_profile.pftrace"}

SUMMARIES = ("summary-text", "summary-json")


@dataclass
class ViewOptions:
    directory: str
    output_format: str = "parquet"
    output_file: str | None = None
    filter: ViewFilter = field(default_factory=ViewFilter)
    ignore_system_profile: bool = False
    ignore_device_profile: bool = False
    display_name: str = ""
    progress: bool | None = None  # None: when stderr is a terminal
    jobs: int | None = None  # worker processes; None = one per core (used when the input is large)
    grouping: Grouping = field(default_factory=Grouping)  # --system-trace-primary/secondary-group
    progress_delay: float = 1.0  # seconds before the progress bar shows (NEURON_EXPLORER_PROGRESS_DELAY_S)
    peak_flops: float | str | None = None  # --peak-flops: FLOP/s per device, or "measure" (docs/summary.md)


@dataclass
class ViewResult:
    output: str | None
    warnings: list[tuple[str, str]]  # (message, path)
    offsets: dict[str, align.InstanceOffset]
    profiles: int
    events: int
    seconds: float
    text: str | None = None  # summary text/json
    device_files: list[str] = field(default_factory=list)  # device_profile_model_<id>.json/.pftrace

    @property
    def exit_code(self) -> int:
        return 1 if self.warnings else 0
