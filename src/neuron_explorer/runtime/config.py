"""Capture configuration: the spec's environment variables, parsed and validated once at start-up.

Every parser raises ``ConfigError`` whose message names the variable, the offending value and the
accepted forms, so a typo fails the launch instead of silently capturing the wrong thing.
"""

from __future__ import annotations

import bisect
import operator
import os
import re
from dataclasses import dataclass, field
from typing import Mapping

from neuron_explorer.contracts import events as ev


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message is meant for the user."""


ENABLE = "NEURON_RT_INSPECT_ENABLE"
OUTPUT_DIR = "NEURON_RT_INSPECT_OUTPUT_DIR"
SYSTEM_PROFILE = "NEURON_RT_INSPECT_SYSTEM_PROFILE"
DEVICE_PROFILE = "NEURON_RT_INSPECT_DEVICE_PROFILE"
MAX_EVENTS = "NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC"
FILTER_NC = "NEURON_RT_INSPECT_EVENT_FILTER_NC"
FILTER_TYPE = "NEURON_RT_INSPECT_EVENT_FILTER_TYPE"
CPU_UTIL = "NEURON_RT_INSPECT_CPU_UTIL"
HOST_MEMORY = "NEURON_RT_INSPECT_HOST_MEMORY"
ON_FAIL = "NEURON_RT_INSPECT_ON_FAIL"
PROCESS_TAG = "NEURON_PROCESS_TAG"
INSTANCE_ID = "NEURON_EXPLORER_INSTANCE_ID"
FLUSH_PERIOD = "NEURON_EXPLORER_FLUSH_PERIOD_MS"
SAMPLE_PERIOD = "NEURON_EXPLORER_SAMPLE_PERIOD_MS"
NAN_CHECK = "NEURON_EXPLORER_NAN_CHECK"
FINAL_WRITE_TIMEOUT = "NEURON_EXPLORER_FINAL_WRITE_TIMEOUT_MS"
MAX_SAMPLES = "NEURON_EXPLORER_MAX_SAMPLES"
NDET_FLUSH_USEC = "NEURON_RT_DBG_NDET_FLUSH_USEC"
NDET_LOG_LOCATION = "NEURON_RT_DBG_NDET_LOG_LOCATION"
NDET_NUM_ENTRIES = "NEURON_RT_DBG_NDET_NUM_ENTRIES"
SOURCE_DEBUG_VARS = ("XLA_IR_DEBUG", "XLA_HLO_DEBUG", "NEURON_FRAMEWORK_DEBUG")

DEFAULT_MAX_EVENTS = 1_000_000
# Events kept per core, at most: far beyond any memory (~70 TB of rows), and far below where sizes
# in bytes overflow 64 bits.  Rings are never allocated from this number: they grow by doubling.
MAX_EVENTS_LIMIT = 10**12
DEVICE_PROFILE_MODES = {"0": None, "1": "model", "model": "model", "session": "session"}


def parse_bool(var: str, value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{var}={value!r} is not valid; accepted: 0 or 1")


def parse_flag_leniently(var: str, value: str | None, warnings: list[str]) -> bool:
    """A variable that is not ours to police (another tool reads it too): a value other than a
    boolean is off, with a warning, and never stops the program."""
    try:
        return parse_bool(var, value, False)
    except ConfigError:
        warnings.append(f"{var}={value!r} is not 0 or 1; neuron-explorer takes it as off")
        return False


def parse_positive_int(var: str, value: str | None, default: int) -> int:
    if value is None or value.strip() == "":
        return default
    try:
        n = int(value.strip().replace(",", "").replace("_", ""))
    except ValueError:
        n = -1
    if n <= 0:
        raise ConfigError(f"{var}={value!r} is not valid; accepted: a whole number greater than 0, e.g. 1000000")
    return n


def parse_max_events(var: str, value: str | None, default: int = DEFAULT_MAX_EVENTS) -> int:
    """Events kept per core: a whole number from 1 to MAX_EVENTS_LIMIT."""
    n = parse_positive_int(var, value, default)
    if n > MAX_EVENTS_LIMIT:
        raise ConfigError(f"{var}={value!r} is not valid (too large); accepted: a whole number from 1 to "
                          f"{MAX_EVENTS_LIMIT:,}, e.g. 1000000")
    return n


@dataclass(frozen=True)
class IndexRanges:
    """A set of non-negative integers (core indices, ranks) kept as sorted, merged inclusive ranges.

    Filters are written as ranges (``0-3,8``), and a range may be as wide as the user types:
    ``0-99999999999`` costs two integers here, where a set of its members would exhaust memory at
    start-up.  Membership is a binary search; there is deliberately no ``__iter__`` (``sorted(r)``
    or ``set(r)`` on a wide range must fail, not allocate), and ``members`` lists the values only
    when there are at most ``limit`` of them.
    """

    ranges: tuple[tuple[int, int], ...]  # (lo, hi) inclusive, sorted, disjoint, not adjacent

    @classmethod
    def of(cls, pairs) -> "IndexRanges":
        """Merge ``(lo, hi)`` inclusive pairs (any order, overlapping or adjacent) into one set."""
        merged: list[list[int]] = []
        for lo, hi in sorted(pairs):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return cls(tuple((lo, hi) for lo, hi in merged))

    @classmethod
    def parse(cls, value: str) -> "IndexRanges":
        """``0``, ``0,2,4``, ``0-3`` or mixes such as ``0,1,2-5``; raises ValueError naming the bad part."""
        pairs = []
        for part in value.split(","):
            p = part.strip()
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", p)
            if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
                raise ValueError(p)
            lo = int(m.group(1))
            pairs.append((lo, int(m.group(2)) if m.group(2) is not None else lo))
        return cls.of(pairs)

    def __contains__(self, x: object) -> bool:
        try:
            x = operator.index(x)  # int, bool or a numpy integer
        except TypeError:
            return False
        i = bisect.bisect_right(self.ranges, (x, float("inf"))) - 1
        return i >= 0 and self.ranges[i][0] <= x <= self.ranges[i][1]

    @property
    def size(self) -> int:
        """How many integers the set holds (a Python int: it may exceed any machine integer)."""
        return sum(hi - lo + 1 for lo, hi in self.ranges)

    def members(self, limit: int = 1 << 16) -> list[int]:
        """The values in ascending order; ValueError when there are more than ``limit``."""
        if self.size > limit:
            raise ValueError(f"{self} holds {self.size} values, more than {limit}")
        return [i for lo, hi in self.ranges for i in range(lo, hi + 1)]

    def mask(self, values):
        """Element-wise membership of an integer numpy array, one comparison pair per range."""
        import numpy as np  # not at module level: the runtime parses its configuration without numpy

        keep = np.zeros(len(values), dtype=bool)
        info = np.iinfo(values.dtype) if values.dtype.kind in "iu" else None
        for lo, hi in self.ranges:
            if info is not None and (lo > info.max or hi < info.min):
                continue  # no value of this dtype can fall in the range (and lo/hi would not convert)
            if info is not None:
                lo, hi = max(lo, int(info.min)), min(hi, int(info.max))
            keep |= (values >= lo) & (values <= hi)
        return keep

    def __str__(self) -> str:
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.ranges)


def parse_nc_filter(value: str | None, var: str = FILTER_NC) -> IndexRanges | None:
    """Parse ``0``, ``0,2,4``, ``0-3`` or mixes such as ``0,1,2-5``; None/empty means every core.

    The result keeps ranges as ranges (``IndexRanges``): its memory does not depend on the numbers."""
    if value is None or value.strip() == "":
        return None
    try:
        return IndexRanges.parse(value)
    except ValueError as e:
        raise ConfigError(
            f"{var}={value!r} is not valid (bad part {str(e)!r}); accepted: a core index (0), "
            "a comma-separated list (0,2,4), an ascending range (0-3), or a mix (0,1,2-5)"
        ) from None


def parse_type_filter(value: str | None, var: str = FILTER_TYPE) -> frozenset[str] | None:
    """Parse the event-type filter; returns the enabled type names, or None for all.

    Items are event names, the groups ``hardware``/``software``, and ``^name`` exclusions.  When
    only exclusions are given they apply to every type.
    """
    if value is None or value.strip() == "":
        return None
    include: set[str] = set()
    exclude: set[str] = set()
    saw_include = False
    for part in value.split(","):
        p = part.strip()
        neg = p.startswith("^")
        name = p[1:].strip() if neg else p
        if name in ev.GROUPS:
            names = set(ev.GROUPS[name])
        elif name in ev.BY_NAME or name in ev.ALIASES:
            names = {ev.ALIASES.get(name, name)}
        else:
            accepted = ", ".join(sorted(list(ev.BY_NAME) + list(ev.ALIASES)))
            raise ConfigError(
                f"{var}={value!r} is not valid (unknown event type {name!r}); accepted: comma-separated "
                f"'hardware', 'software', event names, and '^name' exclusions; event names: {accepted}"
            )
        if neg:
            exclude |= names
        else:
            saw_include = True
            include |= names
    base = include if saw_include else set(ev.BY_NAME)
    return frozenset(base - exclude)


def parse_device_profile(value: str | None) -> str | None:
    if value is None or value.strip() == "":
        return None
    v = value.strip().lower()
    if v not in DEVICE_PROFILE_MODES:
        raise ConfigError(f"{DEVICE_PROFILE}={value!r} is not valid; accepted: 0, 1, model, session")
    return DEVICE_PROFILE_MODES[v]


@dataclass
class CaptureConfig:
    """What a capture session records and where it writes it."""

    output_dir: str = "./output"
    system_profile: bool = True
    device_profile: str | None = None  # None, "model" or "session"
    max_events_per_nc: int = DEFAULT_MAX_EVENTS
    nc_filter: IndexRanges | None = None
    type_filter: frozenset[str] | None = None
    cpu_util: bool = True
    host_memory: bool = True
    on_fail: bool = False
    nan_check: bool = False
    source_locations: bool = False
    flush_period_s: float = 2.0
    sample_period_s: float = 0.25
    # how long the final write may hold up the end of a process killed by SIGTERM/SIGHUP (see
    # runtime/signals.py): well inside the grace period of torchrun, Kubernetes and Slurm (30 s)
    final_write_timeout_s: float = 5.0
    # CPU and memory samples kept (the oldest are overwritten and counted); None: within a memory
    # budget (capture/samplers.py, default_capacity)
    max_samples: int | None = None
    raw_env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # said once at start-up; nothing stops

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "CaptureConfig":
        env = os.environ if env is None else env
        g = env.get
        raw = {k: v for k, v in env.items() if k.startswith(("NEURON_RT_INSPECT_", "NEURON_EXPLORER_", "NEURON_RT_DBG_NDET_"))
               or k in SOURCE_DEBUG_VARS or k == PROCESS_TAG}
        warnings: list[str] = []
        return cls(
            output_dir=g(OUTPUT_DIR) or "./output",
            system_profile=parse_bool(SYSTEM_PROFILE, g(SYSTEM_PROFILE), True),
            device_profile=parse_device_profile(g(DEVICE_PROFILE)),
            max_events_per_nc=parse_max_events(MAX_EVENTS, g(MAX_EVENTS)),
            nc_filter=parse_nc_filter(g(FILTER_NC)),
            type_filter=parse_type_filter(g(FILTER_TYPE)),
            cpu_util=parse_bool(CPU_UTIL, g(CPU_UTIL), True),
            host_memory=parse_bool(HOST_MEMORY, g(HOST_MEMORY), True),
            on_fail=parse_bool(ON_FAIL, g(ON_FAIL), False),
            # NDET catches numerical errors by default; plain capture does not pay for the scan.
            nan_check=parse_bool(NAN_CHECK, g(NAN_CHECK), ndet_requested(env)),
            source_locations=any([parse_flag_leniently(v, g(v), warnings) for v in SOURCE_DEBUG_VARS]),
            flush_period_s=parse_positive_int(FLUSH_PERIOD, g(FLUSH_PERIOD), 2000) / 1000.0,
            sample_period_s=parse_positive_int(SAMPLE_PERIOD, g(SAMPLE_PERIOD), 250) / 1000.0,
            final_write_timeout_s=parse_positive_int(FINAL_WRITE_TIMEOUT, g(FINAL_WRITE_TIMEOUT), 5000) / 1000.0,
            max_samples=parse_positive_int(MAX_SAMPLES, g(MAX_SAMPLES), 0) or None,
            raw_env=raw,
            warnings=warnings,
        )

    def type_enabled(self, name: str) -> bool:
        return self.type_filter is None or name in self.type_filter

    def nc_enabled(self, nc: int) -> bool:
        return self.nc_filter is None or nc in self.nc_filter


def capture_requested(env: Mapping[str, str] | None = None) -> bool:
    """NEURON_RT_INSPECT_ENABLE as a boolean; any other value raises ConfigError (the .pth hook's
    check is only a cheap pre-filter: it lets 'banana' through to here)."""
    env = os.environ if env is None else env
    return parse_bool(ENABLE, env.get(ENABLE), False)


def ndet_requested(env: Mapping[str, str] | None = None) -> bool:
    """NDET is on when its flush period is a non-zero number (validated by the recorder)."""
    env = os.environ if env is None else env
    return env.get(NDET_FLUSH_USEC, "0").strip() not in ("", "0")
