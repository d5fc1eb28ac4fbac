"""The capture configuration a runtime runs with, built from the environment once at start-up.

The variable names and their parsers are contracts shared with other tools (``contracts.env``);
this is what one capture session records and where it writes it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from neuron_explorer.contracts.env import (
    CPU_UTIL,
    DEFAULT_MAX_EVENTS,
    DEVICE_PROFILE,
    FILTER_NC,
    FILTER_TYPE,
    FINAL_WRITE_TIMEOUT,
    FLUSH_PERIOD,
    HOST_MEMORY,
    MAX_EVENTS,
    MAX_SAMPLES,
    NAN_CHECK,
    ON_FAIL,
    OUTPUT_DIR,
    PROCESS_TAG,
    SAMPLE_PERIOD,
    SOURCE_DEBUG_VARS,
    SYSTEM_PROFILE,
    named_types,
    ndet_requested,
    parse_bool,
    parse_device_profile,
    parse_flag_leniently,
    parse_max_events,
    parse_nc_filter,
    parse_positive_int,
    parse_type_filter,
)
from neuron_explorer.contracts.events import unproducible
from neuron_explorer.util.ranges import IndexRanges


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
        prefixes = ("NEURON_RT_INSPECT_", "NEURON_EXPLORER_", "NEURON_RT_DBG_NDET_")
        raw = {k: v for k, v in env.items() if k.startswith(prefixes) or k in SOURCE_DEBUG_VARS or k == PROCESS_TAG}
        warnings: list[str] = []
        type_filter = parse_type_filter(g(FILTER_TYPE))
        warnings += [f"{FILTER_TYPE}: {w}" for w in unproducible(named_types(g(FILTER_TYPE)), host_has_gpu())]
        return cls(
            output_dir=g(OUTPUT_DIR) or "./output",
            system_profile=parse_bool(SYSTEM_PROFILE, g(SYSTEM_PROFILE), True),
            device_profile=parse_device_profile(g(DEVICE_PROFILE)),
            max_events_per_nc=parse_max_events(MAX_EVENTS, g(MAX_EVENTS)),
            nc_filter=parse_nc_filter(g(FILTER_NC)),
            type_filter=type_filter,
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


def host_has_gpu() -> bool:
    """Does this host have an NVIDIA GPU driver loaded?  (Checked without importing a framework:
    the filter is parsed at start-up, before torch or jax is imported.)"""
    return os.path.exists("/proc/driver/nvidia/version")
