"""NVML access for the monitor, optional by design.

On GPU hosts the "Neuron devices" are NVIDIA GPUs and NVML is the only
vendor-sanctioned way to read their identity and ECC counters.  The binding
(``pynvml``, shipped by the ``nvidia-ml-py`` package) and the driver are both
optional: when either is missing the monitor reports the CPU as device 0 and
says why in the ``error`` fields instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class GpuInfo:
    """What the monitor needs to know about one GPU."""

    index: int
    name: str
    memory_total: int
    compute_capability: str | None


class Nvml:
    """A thin, failure-tolerant wrapper around pynvml; ``available`` says whether it can be used."""

    def __init__(self) -> None:
        self.available = False
        self.reason = ""
        self._nvml: Any = None
        try:
            import pynvml
        except Exception as exc:  # noqa: BLE001 - any import failure means "no NVML"
            self.reason = f"NVML python binding not importable ({type(exc).__name__}: {exc})"
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - no driver / no GPU
            self.reason = f"NVML could not initialise ({exc})"
            return
        self._nvml = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
        except Exception as exc:  # noqa: BLE001
            self.reason = f"NVML could not count devices ({exc})"
            return
        if count == 0:
            self.reason = "NVML reports no GPUs"
            return
        self.available = True

    def devices(self) -> list[GpuInfo]:
        """Identity and memory size of every GPU."""
        n = self._nvml
        out: list[GpuInfo] = []
        for i in range(n.nvmlDeviceGetCount()):
            h = n.nvmlDeviceGetHandleByIndex(i)
            name = n.nvmlDeviceGetName(h)
            if isinstance(name, bytes):
                name = name.decode()
            mem = int(n.nvmlDeviceGetMemoryInfo(h).total)
            try:
                major, minor = n.nvmlDeviceGetCudaComputeCapability(h)
                cc: str | None = f"sm_{major}{minor}"
            except Exception:  # noqa: BLE001 - old drivers
                cc = None
            out.append(GpuInfo(i, str(name), mem, cc))
        return out

    def ecc_counts(self, index: int) -> dict[str, int | None]:
        """Aggregate (lifetime) ECC counters of one GPU: DRAM and SRAM, corrected and uncorrected.

        Counters the GPU does not support (ECC disabled, consumer boards) are None.
        """
        n = self._nvml
        h = n.nvmlDeviceGetHandleByIndex(index)
        out: dict[str, int | None] = {}
        sram = getattr(n, "NVML_MEMORY_LOCATION_SRAM", None)
        spec = {
            "mem_ecc_corrected": (n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_MEMORY_LOCATION_DEVICE_MEMORY),
            "mem_ecc_uncorrected": (n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_MEMORY_LOCATION_DEVICE_MEMORY),
            "sram_ecc_uncorrected": (n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, sram),
            "sram_ecc_corrected": (n.NVML_MEMORY_ERROR_TYPE_CORRECTED, sram),
        }
        for key, (etype, loc) in spec.items():
            if loc is None:
                out[key] = None
                continue
            try:
                out[key] = int(n.nvmlDeviceGetMemoryErrorCounter(h, etype, n.NVML_AGGREGATE_ECC, loc))
            except Exception:  # noqa: BLE001 - NOT_SUPPORTED on boards without ECC
                out[key] = None
        return out
