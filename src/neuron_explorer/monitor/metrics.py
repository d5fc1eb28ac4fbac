"""Turn neuron-monitor reports into named samples for the companion exporters.

Both companions (Prometheus and CloudWatch) publish the same metric names and
labels, so the mapping from the report's JSON lives here once.  Reports are
complete: a group that was not due repeats its previous data.  The tracker
therefore marks each sample ``fresh`` only when its group's content changed,
so counters are incremented once per collected period and CloudWatch does not
receive duplicate datapoints.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, TextIO

from neuron_explorer.monitor import _json

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
    MetricDef("neuroncore_utilization_ratio", "gauge", "None", "NeuronCore utilization (0-1) during the period", _R + ("neuroncore",)),
    MetricDef("neuron_runtime_vcpu_usage_ratio", "gauge", "None", "Share of all host vCPUs used by the application", _R + ("usage_type",)),
    MetricDef("neuron_runtime_memory_used_bytes", "gauge", "Bytes", "Memory used by the application", _R + ("memory_location",)),
    *(
        MetricDef(f"neuroncore_memory_usage_{c}", "gauge", "Bytes", f"Device memory used for {c.replace('_', ' ')} per NeuronCore",
                  _R + ("neuroncore", "memory_location"))
        for c in CORE_MEMORY_METRICS
    ),
    MetricDef("execution_errors_total", "counter", "Count", "Execution errors by class", _R + ("error_type",)),
    MetricDef("execution_status_total", "counter", "Count", "Executions by outcome", _R + ("status_type",)),
    MetricDef("execution_latency_seconds", "gauge", "Seconds", "Execution latency percentiles during the period", _R + ("percentile",)),
    MetricDef("hardware_ecc_events_total", "counter", "Count", "ECC events by type and device", ("event_type", "neuron_device_index")),
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
    return "" if v is None else str(v)


def base_labels(report: dict[str, Any]) -> dict[str, str]:
    """The instance labels from a report's ``instance_info``."""
    info = report.get("instance_info") or {}
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

        def mk(name: str, extra: dict[str, str], value: Any, fresh: bool) -> Sample | None:
            if value is None or isinstance(value, bool):
                return None
            try:
                v = float(value)
            except (TypeError, ValueError):
                return None
            return Sample(name, {**base, **extra}, v, fresh)

        out: list[Sample | None] = []
        for rt in report.get("neuron_runtime_data") or []:
            tag = _label(rt.get("neuron_runtime_tag"))
            scope = ("rt", rt.get("pid"), tag)
            rl = {"runtime_tag": tag}
            rep = rt.get("report") or {}
            for group, data in rep.items():
                if not isinstance(data, dict):
                    continue
                live.add((scope, group))
                fresh = self._fresh(scope, group, data)
                if group == "neuroncore_counters":
                    for nc, c in (data.get("neuroncores_in_use") or {}).items():
                        u = c.get("neuroncore_utilization") if isinstance(c, dict) else None
                        out.append(mk("neuroncore_utilization_ratio", {**rl, "neuroncore": str(nc)},
                                      None if u is None else float(u) / 100.0, fresh))
                elif group == "neuron_runtime_vcpu_usage":
                    for ut, v in (data.get("vcpu_usage") or {}).items():
                        out.append(mk("neuron_runtime_vcpu_usage_ratio", {**rl, "usage_type": ut},
                                      None if v is None else float(v) / 100.0, fresh))
                elif group == "memory_used":
                    used = data.get("neuron_runtime_used_bytes") or {}
                    for loc in ("host", "neuron_device"):
                        out.append(mk("neuron_runtime_memory_used_bytes", {**rl, "memory_location": loc}, used.get(loc), fresh))
                    per_core = (used.get("usage_breakdown") or {}).get("neuroncore_memory_usage") or {}
                    for nc, cats in per_core.items():
                        for cat in CORE_MEMORY_METRICS:
                            out.append(mk(f"neuroncore_memory_usage_{cat}",
                                          {**rl, "neuroncore": str(nc), "memory_location": "neuron_device"},
                                          (cats or {}).get(cat), fresh))
                elif group == "execution_stats":
                    for et, v in (data.get("error_summary") or {}).items():
                        out.append(mk("execution_errors_total", {**rl, "error_type": et}, v, fresh))
                    for st, v in (data.get("execution_summary") or {}).items():
                        out.append(mk("execution_status_total", {**rl, "status_type": st}, v, fresh))
                    total = (data.get("latency_stats") or {}).get("total_latency") or {}
                    for p in PERCENTILE_KEYS:
                        out.append(mk("execution_latency_seconds", {**rl, "percentile": p}, total.get(p), fresh))
        sysd = report.get("system_data") or {}
        for group, data in sysd.items():
            if not isinstance(data, dict):
                continue
            live.add(("sys", group))
            fresh = self._fresh("sys", group, data)
            if group == "neuron_hw_counters":
                for dev in data.get("neuron_devices") or []:
                    idx = _label(dev.get("neuron_device_index"))
                    for k, v in dev.items():
                        if k != "neuron_device_index":
                            out.append(mk("hardware_ecc_events_total", {"event_type": k, "neuron_device_index": idx}, v, fresh))
            elif group == "vcpu_usage":
                per = data.get("usage_data") or {}
                if per:
                    out.append(mk("system_vcpu_count", {}, len(per), fresh))
                for ut, v in (data.get("average_usage") or {}).items():
                    out.append(mk("system_vcpu_usage_ratio", {"usage_type": ut}, None if v is None else float(v) / 100.0, fresh))
            elif group == "memory_info":
                out.append(mk("system_memory_total_bytes", {}, data.get("memory_total_bytes"), fresh))
                out.append(mk("system_memory_used_bytes", {}, data.get("memory_used_bytes"), fresh))
                out.append(mk("system_swap_total_bytes", {}, data.get("swap_total_bytes"), fresh))
                out.append(mk("system_swap_used_bytes", {}, data.get("swap_used_bytes"), fresh))
        info = report.get("instance_info") or {}
        fresh = self._fresh("info", "instance_info", info)
        out.append(mk("instance_info", {"instance_availability_zone_id": _label(info.get("instance_availability_zone_id")),
                                        "ami_id": _label(info.get("ami_id"))}, 1, fresh))
        hw = report.get("neuron_hardware_info") or {}
        fresh = self._fresh("info", "neuron_hardware_info", hw)
        out.append(mk("neuron_hardware_info", {k: _label(hw.get(k)) for k in METRICS["neuron_hardware_info"].labels}, 1, fresh))
        live.update({("info", "instance_info"), ("info", "neuron_hardware_info")})
        # forget groups of applications that left, so a returning pid starts fresh
        for key in [k for k in self._last if k not in live]:
            del self._last[key]
        for s in out:
            if s is not None:
                yield s


def consume_reports(
    stream: Iterable[str], handle: Callable[[dict[str, Any]], Any], prog: str, err: TextIO = sys.stderr
) -> int:
    """Pass every report line of ``stream`` to ``handle``; returns how many lines were skipped.

    A line that is not a JSON object (a truncated write, stray output mixed into
    the pipe) is reported on ``err`` and skipped, so one bad line never stops
    a long-running exporter.
    """
    bad = 0
    for line in stream:
        line = line.strip()
        if not line:
            continue
        try:
            report = _json.loads(line)
            if not isinstance(report, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            bad += 1
            print(f"{prog}: skipping a line that is not a neuron-monitor report ({exc})", file=err, flush=True)
            continue
        handle(report)
    return bad
