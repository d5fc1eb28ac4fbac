"""Turn neuron-monitor reports into named samples for the companion exporters.

Both companions (Prometheus and CloudWatch) publish the same metric names and
labels, so the mapping from the report's JSON lives here once.  Reports are
complete: a group that was not due repeats its previous data.  The tracker
therefore marks each sample ``fresh`` only when its group's content changed,
so counters are incremented once per collected period and CloudWatch does not
receive duplicate datapoints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, TextIO, cast

from neuron_explorer.util import jsonfast as _json
from neuron_explorer.util.log import LineLogger

#: Labels attached to every metric, taken from ``instance_info``.
BASE_LABELS: tuple[str, ...] = (
    "instance_name",
    "instance_id",
    "instance_type",
    "availability_zone",
    "region",
    "subnet_id",
)
_INSTANCE_KEYS = {
    "instance_name": "instance_name",
    "instance_id": "instance_id",
    "instance_type": "instance_type",
    "availability_zone": "instance_availability_zone",
    "region": "instance_region",
    "subnet_id": "subnet_id",
}
CORE_MEMORY_METRICS = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")
PERCENTILE_KEYS = ("p0", "p1", "p25", "p50", "p75", "p99", "p100")


@dataclass(frozen=True)
class MetricDef:
    """A metric's name, kind, unit (CloudWatch) and the labels it adds to the base ones."""

    name: str
    kind: str  # "gauge" or "counter"
    unit: str
    help: str
    labels: tuple[str, ...]


_R = ("runtime_tag",)
METRICS: dict[str, MetricDef] = {m.name: m for m in (
    MetricDef("neuroncore_utilization_ratio", "gauge", "None", "NeuronCore utilization (0-1) during the period",
              _R + ("neuroncore",)),
    MetricDef("neuron_runtime_vcpu_usage_ratio", "gauge", "None", "Share of all host vCPUs used by the application",
              _R + ("usage_type",)),
    MetricDef("neuron_runtime_memory_used_bytes", "gauge", "Bytes", "Memory used by the application",
              _R + ("memory_location",)),
    *(
        MetricDef(f"neuroncore_memory_usage_{c}", "gauge", "Bytes",
                  f"Device memory used for {c.replace('_', ' ')} per NeuronCore",
                  _R + ("neuroncore", "memory_location"))
        for c in CORE_MEMORY_METRICS
    ),
    MetricDef("execution_errors_total", "counter", "Count", "Execution errors by class", _R + ("error_type",)),
    MetricDef("execution_status_total", "counter", "Count", "Executions by outcome", _R + ("status_type",)),
    MetricDef("execution_latency_seconds", "gauge", "Seconds", "Execution latency percentiles during the period",
              _R + ("percentile",)),
    MetricDef("hardware_ecc_events_total", "counter", "Count", "ECC events by type and device",
              ("event_type", "neuron_device_index")),
    MetricDef("system_vcpu_count", "gauge", "Count", "Number of vCPUs on the host", ()),
    MetricDef("system_vcpu_usage_ratio", "gauge", "None", "Average host vCPU usage by type (0-1)", ("usage_type",)),
    MetricDef("system_memory_total_bytes", "gauge", "Bytes", "Host memory size", ()),
    MetricDef("system_memory_used_bytes", "gauge", "Bytes", "Host memory in use", ()),
    MetricDef("system_swap_total_bytes", "gauge", "Bytes", "Host swap size", ()),
    MetricDef("system_swap_used_bytes", "gauge", "Bytes", "Host swap in use", ()),
    MetricDef("instance_info", "gauge", "None", "Instance identity (value is always 1)",
              ("instance_availability_zone_id", "ami_id")),
    MetricDef("neuron_hardware_info", "gauge", "None", "Accelerator hardware (value is always 1)",
              ("neuron_device_type", "neuroncore_version", "neuron_device_count", "neuron_device_memory_size",
               "neuroncore_per_device_count")),
)}


@dataclass
class Sample:
    """One value of one metric; counters carry the increment for their group's period."""

    name: str
    labels: dict[str, str]
    value: float
    fresh: bool

    @property
    def definition(self) -> MetricDef:
        return METRICS[self.name]


def _label(v: Any) -> str:
    return "" if v is None else str(v)[:1024]


# A report comes from a pipe: any field may have any JSON type.  These give the expected container
# or nothing, so one odd field costs its own samples only, never the report or the exporter.
def _d(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list:
    return v if isinstance(v, list) else []


def _pct(v: Any) -> float | None:
    """A percentage as a 0-1 ratio, or None when it is not a number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) / 100.0


def base_labels(report: dict[str, Any]) -> dict[str, str]:
    """The instance labels from a report's ``instance_info``."""
    info = _d(report.get("instance_info"))
    return {k: _label(info.get(src)) for k, src in _INSTANCE_KEYS.items()}


class ReportTracker:
    """Remembers each group's last content so repeated groups are not counted twice."""

    def __init__(self) -> None:
        self._last: dict[tuple[Any, str], Any] = {}

    def _fresh(self, scope: Any, group: str, data: Any) -> bool:
        # deep equality of decoded JSON: a repeated group is identical, a new one differs at
        # least in its measured period
        key = (scope, group)
        if self._last.get(key) == data:
            return False
        self._last[key] = data
        return True

    def samples(self, report: dict[str, Any]) -> list[Sample]:
        """Every sample a report yields, with ``fresh`` set for groups collected since the last one."""
        return list(self._iter(report))

    def _iter(self, report: dict[str, Any]) -> Iterator[Sample]:
        base = base_labels(report)
        live: set[tuple[Any, str]] = set()
        groups: list[tuple[Any, str, Any, dict, dict]] = []  # (scope, group, data, extra labels, samplers)
        for rt in _l(report.get("neuron_runtime_data")):
            if isinstance(rt, dict):
                tag = _label(rt.get("neuron_runtime_tag"))
                scope = ("rt", _label(rt.get("pid")), tag)
                groups += [(scope, g, d, {"runtime_tag": tag}, _RUNTIME_SAMPLES)
                           for g, d in _d(rt.get("report")).items()]
        groups += [("sys", g, d, {}, _SYSTEM_SAMPLES) for g, d in _d(report.get("system_data")).items()]
        for scope, group, data, extra, table in groups:
            samples = table.get(group)
            if not isinstance(data, dict):
                continue
            live.add((scope, group))
            fresh = self._fresh(scope, group, data)
            if samples is not None:
                for name, labels, value in samples(data):
                    s = _sample(name, {**base, **extra, **labels}, value, fresh)
                    if s is not None:
                        yield s
        for group, labels in (("instance_info", _instance_labels), ("neuron_hardware_info", _hardware_labels)):
            info = _d(report.get(group))
            live.add(("info", group))
            s = _sample(group, {**base, **labels(info)}, 1, self._fresh("info", group, info))
            if s is not None:
                yield s
        # forget groups of applications that left, so a returning pid starts fresh
        for key in [k for k in self._last if k not in live]:
            del self._last[key]


def _sample(name: str, labels: dict[str, str], value: Any, fresh: bool) -> Sample | None:
    """A sample of a finite number, else None (CloudWatch refuses a whole request for one NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        v = float(value)
    except OverflowError:  # an integer beyond a double's range
        return None
    return Sample(name, labels, v, fresh) if math.isfinite(v) else None


# The samples of each metric group of a report: (metric, its own labels, value).

def _neuroncore_counters(data: dict) -> Iterator[tuple[str, dict, Any]]:
    for nc, c in _d(data.get("neuroncores_in_use")).items():
        yield "neuroncore_utilization_ratio", {"neuroncore": str(nc)}, _pct(_d(c).get("neuroncore_utilization"))


def _runtime_vcpu(data: dict) -> Iterator[tuple[str, dict, Any]]:
    for ut, v in _d(data.get("vcpu_usage")).items():
        yield "neuron_runtime_vcpu_usage_ratio", {"usage_type": ut}, _pct(v)


def _memory_used(data: dict) -> Iterator[tuple[str, dict, Any]]:
    used = _d(data.get("neuron_runtime_used_bytes"))
    for loc in ("host", "neuron_device"):
        yield "neuron_runtime_memory_used_bytes", {"memory_location": loc}, used.get(loc)
    for nc, cats in _d(_d(used.get("usage_breakdown")).get("neuroncore_memory_usage")).items():
        for cat in CORE_MEMORY_METRICS:
            yield (f"neuroncore_memory_usage_{cat}", {"neuroncore": str(nc), "memory_location": "neuron_device"},
                   _d(cats).get(cat))


def _execution_stats(data: dict) -> Iterator[tuple[str, dict, Any]]:
    for et, v in _d(data.get("error_summary")).items():
        yield "execution_errors_total", {"error_type": et}, v
    for st, v in _d(data.get("execution_summary")).items():
        yield "execution_status_total", {"status_type": st}, v
    total = _d(_d(data.get("latency_stats")).get("total_latency"))
    for p in PERCENTILE_KEYS:
        yield "execution_latency_seconds", {"percentile": p}, total.get(p)


def _hw_counters(data: dict) -> Iterator[tuple[str, dict, Any]]:
    for dev in _l(data.get("neuron_devices")):
        if isinstance(dev, dict):
            idx = _label(dev.get("neuron_device_index"))
            for k, v in dev.items():
                if k != "neuron_device_index":
                    yield "hardware_ecc_events_total", {"event_type": k, "neuron_device_index": idx}, v


def _vcpu_usage(data: dict) -> Iterator[tuple[str, dict, Any]]:
    per = data.get("usage_data")
    if isinstance(per, (dict, list)) and per:
        yield "system_vcpu_count", {}, len(per)
    for ut, v in _d(data.get("average_usage")).items():
        yield "system_vcpu_usage_ratio", {"usage_type": ut}, _pct(v)


def _memory_info(data: dict) -> Iterator[tuple[str, dict, Any]]:
    for what in ("memory_total", "memory_used", "swap_total", "swap_used"):
        yield f"system_{what}_bytes", {}, data.get(f"{what}_bytes")


_RUNTIME_SAMPLES = {"neuroncore_counters": _neuroncore_counters, "neuron_runtime_vcpu_usage": _runtime_vcpu,
                    "memory_used": _memory_used, "execution_stats": _execution_stats}
_SYSTEM_SAMPLES = {"neuron_hw_counters": _hw_counters, "vcpu_usage": _vcpu_usage, "memory_info": _memory_info}


def _instance_labels(info: dict) -> dict[str, str]:
    return {"instance_availability_zone_id": _label(info.get("instance_availability_zone_id")),
            "ami_id": _label(info.get("ami_id"))}


def _hardware_labels(hw: dict) -> dict[str, str]:
    return {k: _label(hw.get(k)) for k in METRICS["neuron_hardware_info"].labels}


_TOP_LEVEL = (("neuron_runtime_data", list, "an array"), ("system_data", dict, "an object"),
              ("instance_info", dict, "an object"), ("neuron_hardware_info", dict, "an object"))


def report_problem(report: dict[str, Any]) -> str | None:
    """Why a decoded report cannot be used as a whole (a top-level field of the wrong type), or None.

    Such a report is skipped rather than folded in: taken as it is, it would read as "no
    applications" and make every series vanish until the next report.  Odd values deeper down cost
    only their own samples (see ``ReportTracker``)."""
    if not any(key in report for key, _, _ in _TOP_LEVEL):
        return f"none of the fields {', '.join(k for k, _, _ in _TOP_LEVEL)}"
    for key, typ, what in _TOP_LEVEL:
        v = report.get(key)
        if v is not None and not isinstance(v, typ):
            shown = repr(v)
            return f"{key} is {shown[:40]}{'...' if len(shown) > 40 else ''}; expected {what}"
    return None


#: Longer report lines are skipped: a real report is about 1 kB per application.
MAX_LINE_CHARS = 64 << 20


def _lines(stream: Iterable[str]) -> Iterator[str | None]:
    """The stream's lines, each at most MAX_LINE_CHARS long; None stands for a longer line (read
    and dropped in pieces, so a writer that never sends a newline cannot grow our memory)."""
    readline = getattr(stream, "readline", None)
    if readline is None:
        yield from stream
        return
    while True:
        line = readline(MAX_LINE_CHARS)
        if not line:
            return
        if len(line) >= MAX_LINE_CHARS and not line.endswith("\n"):
            while True:
                rest = readline(MAX_LINE_CHARS)
                if not rest or rest.endswith("\n"):
                    break
            yield None
            continue
        yield line


def consume_reports(
    stream: Iterable[str], handle: Callable[[dict[str, Any]], Any], prog: str, err: TextIO | None = None
) -> int:
    """Pass every report line of ``stream`` to ``handle``; returns how many lines were skipped.

    A line that is not a JSON object (a truncated write, stray output mixed into
    the pipe), is too long, or is an object the handler cannot use is reported
    in one line on ``err`` and skipped, so one bad line never stops a
    long-running exporter.
    """
    bad = 0
    err = err or cast(TextIO, LineLogger(__name__))  # (the neuron_explorer logger tree: docs/logging.md)
    for n, line in enumerate(_lines(stream), start=1):
        if line is None:
            bad += 1
            print(f"{prog}: skipping line {n}: longer than {MAX_LINE_CHARS} characters", file=err, flush=True)
            continue
        line = line.strip()
        if not line:
            continue
        try:
            report = _json.loads(line)
            if not isinstance(report, dict):
                raise ValueError("not a JSON object")
            problem = report_problem(report)
            if problem is not None:
                raise ValueError(problem)
        except (ValueError, RecursionError) as exc:
            bad += 1
            print(f"{prog}: skipping line {n}: not a neuron-monitor report ({str(exc)[:200]})", file=err, flush=True)
            continue
        try:
            handle(report)
        except Exception as exc:  # noqa: BLE001 - a report of an unexpected shape: skip it, keep serving
            bad += 1
            print(f"{prog}: skipping line {n}: unusable report ({type(exc).__name__}: {str(exc)[:200]})",
                  file=err, flush=True)
    return bad
