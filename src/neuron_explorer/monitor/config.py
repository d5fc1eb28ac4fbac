"""The neuron-monitor configuration file: parsing, validation and defaults.

A configuration error is reported as one line that names the offending key
(as a JSON path such as ``neuron_runtimes[0].metrics[1].type``), the value,
and the accepted forms, because the monitor usually runs unattended and its
stderr ends up in a log that someone reads later.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuron_explorer.util import files

#: Application-level metric groups, in report order.
RUNTIME_GROUPS: tuple[str, ...] = (
    "neuroncore_counters",
    "execution_stats",
    "memory_used",
    "neuron_runtime_vcpu_usage",
)
#: System-level metric groups, in report order.
SYSTEM_GROUPS: tuple[str, ...] = ("neuron_hw_counters", "vcpu_usage", "memory_info")

#: Period used where the configuration does not give one.
DEFAULT_PERIOD_S = 5.0
#: Shortest accepted period: below this the monitor would mostly measure itself.
MIN_PERIOD_S = 0.1
#: Longest accepted period (a day): longer ones overflow the timers and are surely a typo.
MAX_PERIOD_S = 86400.0
#: Larger configuration files are refused unread (a real one is a few hundred bytes).
MAX_CONFIG_BYTES = 1 << 20

_PERIOD_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
PERIOD_FORMS = 'a number followed by a unit: "500ms", "1s", "1.5s", "2m", "1h" (at least 100ms, at most 24h)'


class ConfigError(ValueError):
    """A configuration problem, with a message fit to print as-is."""


def parse_period(value: Any, key: str) -> float:
    """Convert a period string such as ``"1s"`` or ``"500ms"`` to seconds."""
    if not isinstance(value, str):
        raise ConfigError(f"{key}: invalid period {json.dumps(value)}; expected a string, {PERIOD_FORMS}")
    m = _PERIOD_RE.match(value)
    if not m:
        raise ConfigError(f"{key}: invalid period {json.dumps(value)}; expected {PERIOD_FORMS}")
    seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds < MIN_PERIOD_S:
        raise ConfigError(f"{key}: period {json.dumps(value)} is too short; expected {PERIOD_FORMS}")
    if not seconds <= MAX_PERIOD_S:  # also catches inf from a very long digit string
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise ConfigError(f"{key}: period {json.dumps(shown)} is too long; expected {PERIOD_FORMS}")
    return seconds


@dataclass
class RuntimeSelector:
    """One ``neuron_runtimes`` entry: which applications, and which groups at which periods."""

    tag_filter: re.Pattern[str] | None
    groups: dict[str, float]

    def matches(self, tag: str) -> bool:
        """Whether an application's tag passes this entry's filter (search semantics, like grep)."""
        return self.tag_filter is None or self.tag_filter.search(tag) is not None


@dataclass
class MonitorConfig:
    """The validated configuration."""

    runtimes: list[RuntimeSelector] = field(default_factory=list)
    system_groups: dict[str, float] = field(default_factory=dict)

    def warnings(self) -> list[str]:
        """Valid settings that collect nothing, one line each: the monitor still runs (a config
        being written, a deliberate heartbeat), but it must not do so silently (issue 29: a file
        holding only ``{"period": "1s"}`` reported no metric for a whole run)."""
        if not self.system_groups and not any(sel.groups for sel in self.runtimes):
            return ["no metric group is enabled (neither neuron_runtimes entries with metrics nor "
                    "system_metrics): reports will hold only instance_info and neuron_hardware_info"]
        return [f"neuron_runtimes[{i}] has no metrics: the applications it selects are not reported"
                for i, sel in enumerate(self.runtimes) if not sel.groups]

    def groups_for(self, tag: str) -> dict[str, float] | None:
        """Groups (and their periods) enabled for an application, or None when no entry selects it.

        When several entries select the same application, a group takes the
        period of the first entry that enables it.
        """
        out: dict[str, float] | None = None
        for sel in self.runtimes:
            if sel.matches(tag):
                if out is None:
                    out = {}
                for g, p in sel.groups.items():
                    out.setdefault(g, p)
        return out


def default_config() -> MonitorConfig:
    """Every group, every application, every 5 seconds: what runs without ``-c``."""
    return MonitorConfig(
        runtimes=[RuntimeSelector(None, {g: DEFAULT_PERIOD_S for g in RUNTIME_GROUPS})],
        system_groups={g: DEFAULT_PERIOD_S for g in SYSTEM_GROUPS},
    )


def _check_keys(obj: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for k in obj:
        if k not in allowed:
            path = f"{where}.{k}" if where else k
            raise ConfigError(f"{path}: unknown key; accepted keys here: {', '.join(allowed)}")


def _metric_list(items: Any, where: str, kinds: tuple[str, ...], inherited: float) -> dict[str, float]:
    if not isinstance(items, list):
        raise ConfigError(f"{where}: expected an array of objects like {{\"type\": \"{kinds[0]}\"}}")
    out: dict[str, float] = {}
    for i, item in enumerate(items):
        key = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{key}: expected an object like {{\"type\": \"{kinds[0]}\"}}")
        _check_keys(item, ("type", "period"), key)
        if "type" not in item:
            raise ConfigError(f"{key}.type: missing; accepted values: {', '.join(kinds)}")
        kind = item["type"]
        if kind not in kinds:
            raise ConfigError(f"{key}.type: unknown metric group {json.dumps(kind)}; "
                              f"accepted values: {', '.join(kinds)}")
        period = parse_period(item["period"], f"{key}.period") if "period" in item else inherited
        out.setdefault(kind, period)
    return out


def parse_config(data: Any) -> MonitorConfig:
    """Validate a decoded configuration document."""
    if not isinstance(data, dict):
        raise ConfigError("(root): expected a JSON object with keys period, neuron_runtimes, system_metrics")
    _check_keys(data, ("period", "neuron_runtimes", "system_metrics"), "")
    root_period = parse_period(data["period"], "period") if "period" in data else DEFAULT_PERIOD_S
    cfg = MonitorConfig()
    runtimes = data.get("neuron_runtimes", [])
    if not isinstance(runtimes, list):
        raise ConfigError('neuron_runtimes: expected an array of objects like {"tag_filter": ".*", "metrics": [...]}')
    for i, entry in enumerate(runtimes):
        key = f"neuron_runtimes[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f'{key}: expected an object like {{"tag_filter": ".*", "metrics": [...]}}')
        _check_keys(entry, ("tag_filter", "period", "metrics"), key)
        pattern: re.Pattern[str] | None = None
        if "tag_filter" in entry:
            tf = entry["tag_filter"]
            if not isinstance(tf, str):
                raise ConfigError(f"{key}.tag_filter: expected a regular expression string, e.g. \"^train_\"")
            try:
                pattern = re.compile(tf)
            except re.error as exc:
                raise ConfigError(
                    f"{key}.tag_filter: invalid regular expression {json.dumps(tf)} ({exc}); "
                    'expected a Python regular expression, e.g. "^train_" or ".*"'
                ) from None
        period = parse_period(entry["period"], f"{key}.period") if "period" in entry else root_period
        groups = _metric_list(entry.get("metrics", []), f"{key}.metrics", RUNTIME_GROUPS, period)
        cfg.runtimes.append(RuntimeSelector(pattern, groups))
    cfg.system_groups = _metric_list(data.get("system_metrics", []), "system_metrics", SYSTEM_GROUPS, root_period)
    return cfg


def _read_text(p: Path) -> str:
    """The file's text; only a regular file of at most MAX_CONFIG_BYTES is read (a FIFO would block,
    /dev/zero never ends)."""
    try:
        raw = files.read_regular(p, MAX_CONFIG_BYTES)
    except files.NotRegularFile:
        raise ConfigError(f"{p}: not a regular file; expected a JSON configuration file") from None
    except files.FileTooLarge as exc:
        raise ConfigError(f"{p}: {exc.size} bytes; a configuration file is at most {MAX_CONFIG_BYTES} bytes") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read configuration file ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte {exc.start}); expected a JSON configuration file") from None


def load_config(path: str | Path) -> MonitorConfig:
    """Read and validate a configuration file."""
    p = Path(path)
    text = _read_text(p)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{p}: not valid JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); "
            "expected a JSON object with keys period, neuron_runtimes, system_metrics"
        ) from None
    except RecursionError:
        raise ConfigError(f"{p}: JSON nested too deeply; expected a JSON object with keys period, "
                          "neuron_runtimes, system_metrics") from None
    return parse_config(data)
