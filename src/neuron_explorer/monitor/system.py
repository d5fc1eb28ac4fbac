"""System-level metric groups and the always-present info objects.

Every value here comes from the running host: ``/proc/stat`` for vCPU time,
psutil (``/proc/meminfo``) for memory, NVML or the kernel's EDAC counters for
ECC events, DMI files for the EC2 identity.  Nothing is fetched over the
network: the EC2 instance metadata service is deliberately not contacted, so
fields only it could provide are null and the ``error`` says so.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from pathlib import Path
from typing import Any

import psutil

from neuron_explorer.monitor.gpu import Nvml
from neuron_explorer.util.cgroup import Limit

#: /proc/stat columns reported by the vcpu_usage group, in file order.
_CPU_FIELDS = ("user", "nice", "system", "idle", "io_wait", "irq", "soft_irq")
#: Instance-info fields, in report order.
INSTANCE_FIELDS = (
    "instance_name",
    "instance_id",
    "instance_type",
    "instance_availability_zone",
    "instance_availability_zone_id",
    "instance_region",
    "ami_id",
    "subnet_id",
)
#: Environment variables (``NEURON_EXPLORER_<FIELD>``) that supply instance fields in containers and tests.
INSTANCE_ENV_PREFIX = "NEURON_EXPLORER_"
#: Fields the spec allows to be missing without an error.
_OPTIONAL_INSTANCE_FIELDS = {"instance_availability_zone_id", "instance_region", "instance_name"}


def _pct(part: float, total: float) -> float:
    return round(100.0 * part / total, 2) if total > 0 else 0.0


def read_proc_stat(path: str = "/proc/stat") -> tuple[dict[str, list[int]], int | None]:
    """Per-CPU jiffy counters (``"cpu"`` is the aggregate) and the context-switch counter."""
    cpus: dict[str, list[int]] = {}
    ctxt: int | None = None
    with open(path, "rb") as f:
        for raw in f:
            if raw.startswith(b"cpu"):
                parts = raw.split()
                # user nice system idle iowait irq softirq steal (guest time is already inside user)
                vals = [int(x) for x in parts[1:9]]
                vals += [0] * (8 - len(vals))
                cpus[parts[0].decode()] = vals
            elif raw.startswith(b"ctxt"):
                ctxt = int(raw.split()[1])
    return cpus, ctxt


class VcpuUsage:
    """The ``vcpu_usage`` group: percentages of each state between two reads of /proc/stat."""

    def __init__(self, proc_stat: str = "/proc/stat") -> None:
        self.proc_stat = proc_stat
        self._last: tuple[float, dict[str, list[int]], int | None] | None = None
        self.prime()

    def prime(self) -> None:
        """Take the baseline sample that the first report's period starts from."""
        try:
            cpus, ctxt = read_proc_stat(self.proc_stat)
            self._last = (time.monotonic(), cpus, ctxt)
        except OSError:
            self._last = None

    @staticmethod
    def _usage(new: list[int], old: list[int]) -> dict[str, float]:
        d = [max(0, a - b) for a, b in zip(new, old)]
        total = sum(d)  # includes steal, so the seven reported states add up to <= 100
        return {k: _pct(v, total) for k, v in zip(_CPU_FIELDS, d)}

    def collect(self) -> dict[str, Any]:
        """Usage since the previous call."""
        now = time.monotonic()
        try:
            cpus, ctxt = read_proc_stat(self.proc_stat)
        except OSError as exc:
            return {"period": None, "average_usage": None, "usage_data": None,
                    "context_switch_count": None, "error": f"cannot read {self.proc_stat}: {exc}"}
        last = self._last
        self._last = (now, cpus, ctxt)
        if last is None:
            return {"period": 0.0, "average_usage": None, "usage_data": None,
                    "context_switch_count": None, "error": "no baseline sample yet"}
        t0, old, old_ctxt = last
        average = self._usage(cpus["cpu"], old["cpu"]) if "cpu" in cpus and "cpu" in old else None
        per: dict[str, dict[str, float]] = {}
        for name, vals in cpus.items():
            if name == "cpu" or name not in old:
                continue
            per[name[3:]] = self._usage(vals, old[name])
        return {
            "period": round(now - t0, 9),
            "average_usage": average,
            "usage_data": dict(sorted(per.items(), key=lambda kv: int(kv[0]))),
            "context_switch_count": (ctxt - old_ctxt) if ctxt is not None and old_ctxt is not None else None,
            "error": "",
        }


class MemoryInfo:
    """The ``memory_info`` group: host RAM and swap, in bytes.

    "Used" is ``total - available`` (what applications could not get back
    without swapping), the figure operators compare against capacity.
    """

    def __init__(self) -> None:
        self._last = time.monotonic()

    @staticmethod
    def _meminfo(path: str = "/proc/meminfo") -> tuple[int, int, int, int] | None:
        """(total, used, swap total, swap used) from one read of /proc/meminfo; None off Linux."""
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        vals: dict[bytes, int] = {}
        for line in data.splitlines():
            key, _, rest = line.partition(b":")
            if key in (b"MemTotal", b"MemAvailable", b"SwapTotal", b"SwapFree"):
                vals[key] = int(rest.split()[0]) * 1024
        if len(vals) < 4:
            return None
        return (vals[b"MemTotal"], vals[b"MemTotal"] - vals[b"MemAvailable"],
                vals[b"SwapTotal"], vals[b"SwapTotal"] - vals[b"SwapFree"])

    def collect(self) -> dict[str, Any]:
        now = time.monotonic()
        period = round(now - self._last, 9)
        self._last = now
        fast = self._meminfo()
        if fast is not None:
            return {"period": period, "memory_total_bytes": fast[0], "memory_used_bytes": fast[1],
                    "swap_total_bytes": fast[2], "swap_used_bytes": fast[3], "error": ""}
        try:
            vm = psutil.virtual_memory()
            sw = psutil.swap_memory()
        except Exception as exc:  # noqa: BLE001
            return {"period": period, "memory_total_bytes": None, "memory_used_bytes": None,
                    "swap_total_bytes": None, "swap_used_bytes": None, "error": str(exc)}
        return {
            "period": period,
            "memory_total_bytes": int(vm.total),
            "memory_used_bytes": int(vm.total - vm.available),
            "swap_total_bytes": int(sw.total),
            "swap_used_bytes": int(sw.used),
            "error": "",
        }


def read_edac(root: str | os.PathLike[str] = "/sys/devices/system/edac") -> tuple[int, int] | None:
    """Sum of corrected and uncorrected memory-controller errors, or None without EDAC."""
    mc_root = Path(root) / "mc"
    if not mc_root.is_dir():
        return None
    ce = ue = 0
    found = False
    for mc in sorted(mc_root.glob("mc[0-9]*")):
        try:
            ce += int((mc / "ce_count").read_text().strip())
            ue += int((mc / "ue_count").read_text().strip())
            found = True
        except (OSError, ValueError):
            continue
    return (ce, ue) if found else None


_ECC_KEYS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_uncorrected", "sram_ecc_corrected")


class HwCounters:
    """The ``neuron_hw_counters`` group: ECC events per device during the period.

    Device counters are lifetime totals, so the group reports the difference
    between two reads; a counter that cannot be read is null.
    """

    def __init__(self, nvml: Nvml | None = None,
                 edac_root: str | os.PathLike[str] = "/sys/devices/system/edac") -> None:
        self.nvml = nvml
        self.edac_root = edac_root
        self._last_t = time.monotonic()
        self._last: dict[int, dict[str, int | None]] = {}
        self._last, self._why = self._read()

    def _read(self) -> tuple[dict[int, dict[str, int | None]], str]:
        if self.nvml is not None and self.nvml.available:
            out: dict[int, dict[str, int | None]] = {}
            errs: list[str] = []
            for dev in self.nvml.devices():
                try:
                    out[dev.index] = self.nvml.ecc_counts(dev.index)
                except Exception as exc:  # noqa: BLE001
                    out[dev.index] = dict.fromkeys(_ECC_KEYS)
                    errs.append(f"device {dev.index}: {exc}")
            if any(v is None for d in out.values() for v in d.values()):
                errs.append("some ECC counters are not supported by the GPU/driver (null)")
            return out, "; ".join(errs)
        edac = read_edac(self.edac_root)
        if edac is None:
            return {0: dict.fromkeys(_ECC_KEYS)}, (
                f"no GPU ({self.nvml.reason if self.nvml else 'NVML not used'}) and no EDAC memory "
                f"controllers under {self.edac_root}; ECC counters of the CPU device are not measurable"
            )
        ce, ue = edac
        return {0: {"mem_ecc_corrected": ce, "mem_ecc_uncorrected": ue,
                    "sram_ecc_uncorrected": None, "sram_ecc_corrected": None}}, (
            "CPU device: DRAM ECC from EDAC; CPU caches expose no SRAM ECC counters (null)"
        )

    def collect(self) -> dict[str, Any]:
        now = time.monotonic()
        cur, why = self._read()
        devices = []
        for idx in sorted(cur):
            old = self._last.get(idx, {})
            entry: dict[str, Any] = {"neuron_device_index": idx}
            for k in _ECC_KEYS:
                a, b = cur[idx].get(k), old.get(k)
                entry[k] = (a - b) if a is not None and b is not None else None
            devices.append(entry)
        period = round(now - self._last_t, 9)
        self._last, self._last_t = cur, now
        return {"period": period, "neuron_devices": devices, "error": why}


def _read_dmi(root: Path, name: str) -> str | None:
    try:
        value = (root / name).read_text().strip()
    except OSError:
        return None
    return value or None


def instance_info(dmi_root: str | os.PathLike[str] = "/sys/class/dmi/id") -> dict[str, Any]:
    """Identify the instance from local DMI data only, with env overrides for containers.

    On EC2 Nitro instances DMI carries the instance id (``board_asset_tag``)
    and the instance type (``product_name``); zone, region, AMI and subnet are
    only served by the instance metadata service, which is never contacted.
    Off EC2 the host name stands in for name and id.
    """
    root = Path(dmi_root)
    info: dict[str, Any] = dict.fromkeys(INSTANCE_FIELDS)
    problems: list[str] = []
    vendor = _read_dmi(root, "sys_vendor") or _read_dmi(root, "bios_vendor")
    uuid = (_read_dmi(root, "product_uuid") or _read_dmi(root, "product_serial") or "").lower()
    on_ec2 = bool(vendor and "amazon" in vendor.lower()) or uuid.startswith("ec2")
    hostname = socket.gethostname()
    if on_ec2:
        asset = _read_dmi(root, "board_asset_tag")
        if asset and asset.startswith("i-"):
            info["instance_id"] = asset
        else:
            problems.append("EC2 host but DMI board_asset_tag holds no instance id (Xen-based instance?)")
        ptype = _read_dmi(root, "product_name")
        if ptype and "." in ptype:
            info["instance_type"] = ptype
        else:
            problems.append("EC2 host but DMI product_name holds no instance type")
        info["instance_name"] = hostname
        problems.append(
            "availability zone, AMI and subnet are only available from the instance metadata service, "
            "which neuron-monitor does not contact"
        )
    else:
        info["instance_name"] = hostname
        info["instance_id"] = hostname
        if not root.is_dir():
            problems.append(f"not identified as EC2: no DMI data at {root}; using the host name")
        else:
            problems.append(f"not an EC2 instance (DMI vendor {vendor!r}); using the host name")
    overridden = []
    for field in INSTANCE_FIELDS:
        val = os.environ.get(INSTANCE_ENV_PREFIX + field.upper())
        if val:
            info[field] = val
            overridden.append(field)
    missing = [f for f in INSTANCE_FIELDS if info[f] is None and f not in _OPTIONAL_INSTANCE_FIELDS]
    if not missing and overridden:
        problems = []
    elif missing:
        problems.append(f"unknown: {', '.join(missing)}")
    info["error"] = "; ".join(problems)
    return info


def hardware_info(nvml: Nvml | None) -> dict[str, Any]:
    """Describe the devices the monitored runtimes use: GPUs through NVML, else the CPU as device 0.

    ``neuroncore_per_device_count`` keeps the spec's meaning, the cores a device offers to run
    graphs: one per GPU (a CUDA device is one core here), and on a CPU host its logical CPUs."""
    if nvml is not None and nvml.available:
        try:
            devs = nvml.devices()
            return {
                "neuron_device_type": devs[0].name,
                "neuroncore_version": devs[0].compute_capability,
                "neuron_device_count": len(devs),
                "neuron_device_memory_size": devs[0].memory_total,
                "neuroncore_per_device_count": 1,
                "error": "",
            }
        except Exception as exc:  # noqa: BLE001
            reason = f"NVML query failed ({exc})"
    else:
        reason = nvml.reason if nvml is not None else "NVML not used"
    return {
        "neuron_device_type": "cpu",
        "neuroncore_version": platform.machine() or None,
        "neuron_device_count": 1,
        "neuron_device_memory_size": int(psutil.virtual_memory().total),
        "neuroncore_per_device_count": psutil.cpu_count(logical=True),
        "error": (
            f"no NVIDIA GPU ({reason}); the host CPU is Neuron device 0, offering one NeuronCore per "
            "logical CPU (processes take core indices by local rank)"
        ),
    }


def with_memory_limit(hw: dict[str, Any], limit: Limit | None) -> dict[str, Any]:
    """``hardware_info`` of a CPU device whose memory is bounded by the monitored processes' cgroups:
    ``neuron_device_memory_size`` becomes what they can hold together (``util.cgroup.shared_limit``)
    when that is below the host's memory, and ``error`` says where it comes from.  A GPU's info,
    or no limit below the host's memory, is returned as it is (docs/decisions/0186)."""
    size = hw.get("neuron_device_memory_size")
    if (limit is None or hw.get("neuron_device_type") != "cpu" or not isinstance(size, int)
            or not 0 < limit.bytes < size):
        return hw
    why = (f"device memory size is the memory cgroup limit of the monitored processes ({limit.source} "
           f"of {limit.cgroup}), below the host's {size} bytes")
    return {**hw, "neuron_device_memory_size": limit.bytes,
            "error": f"{hw['error']}; {why}" if hw.get("error") else why}
