"""System-level groups and the info objects, read from real or staged local files."""

import os
import socket
from pathlib import Path

import pytest

from neuron_explorer.monitor.gpu import Nvml
from neuron_explorer.monitor.system import HwCounters, MemoryInfo, VcpuUsage, hardware_info, instance_info

STAT1 = "cpu  100 0 50 800 10 0 5 0 0 0\ncpu0 60 0 20 400 5 0 5 0 0 0\ncpu1 40 0 30 400 5 0 0 0 0 0\nctxt 1000\n"
STAT2 = ("cpu  200 10 100 1600 20 0 35 0 0 0\ncpu0 120 10 40 800 10 0 10 0 0 0\ncpu1 80 0 60 800 10 0 0 0 0 0\n"
         "ctxt 1600\n")


def test_vcpu_usage_from_proc_stat_deltas(tmp_path: Path) -> None:
    f = tmp_path / "stat"
    f.write_text(STAT1)
    v = VcpuUsage(str(f))
    f.write_text(STAT2)
    out = v.collect()
    assert out["error"] == "" and out["context_switch_count"] == 600
    avg = out["average_usage"]
    assert avg["user"] == 10.0 and avg["idle"] == 80.0 and avg["nice"] == 1.0
    assert set(out["usage_data"]) == {"0", "1"}
    assert set(avg) == {"user", "nice", "system", "idle", "io_wait", "irq", "soft_irq"}


def test_vcpu_usage_on_this_host_adds_up() -> None:
    v = VcpuUsage()
    sum(i * i for i in range(200000))
    out = v.collect()
    assert out["error"] == "" and out["period"] > 0
    assert 99.0 <= sum(out["average_usage"].values()) <= 100.5 or sum(out["average_usage"].values()) == 0.0


def test_memory_info_is_real() -> None:
    out = MemoryInfo().collect()
    assert out["memory_total_bytes"] > out["memory_used_bytes"] > 0
    assert out["swap_total_bytes"] >= out["swap_used_bytes"] >= 0


def test_hw_counters_from_edac(tmp_path: Path) -> None:
    mc = tmp_path / "edac" / "mc" / "mc0"
    mc.mkdir(parents=True)
    (mc / "ce_count").write_text("3\n")
    (mc / "ue_count").write_text("0\n")
    hw = HwCounters(None, tmp_path / "edac")
    (mc / "ce_count").write_text("5\n")
    out = hw.collect()
    dev = out["neuron_devices"][0]
    assert dev["neuron_device_index"] == 0
    assert dev["mem_ecc_corrected"] == 2 and dev["mem_ecc_uncorrected"] == 0
    assert dev["sram_ecc_corrected"] is None and "SRAM" in out["error"]


def test_hw_counters_without_gpu_or_edac_are_null_with_reason(tmp_path: Path) -> None:
    out = HwCounters(None, tmp_path / "none").collect()
    assert all(out["neuron_devices"][0][k] is None for k in ("mem_ecc_corrected", "sram_ecc_uncorrected"))
    assert "EDAC" in out["error"]


def test_instance_info_from_ec2_dmi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("INSTANCE_ID", "INSTANCE_TYPE", "INSTANCE_REGION"):
        monkeypatch.delenv("NEURON_EXPLORER_" + k, raising=False)
    (tmp_path / "sys_vendor").write_text("Amazon EC2\n")
    (tmp_path / "board_asset_tag").write_text("i-0123456789abcdef0\n")
    (tmp_path / "product_name").write_text("trn1.32xlarge\n")
    info = instance_info(tmp_path)
    assert info["instance_id"] == "i-0123456789abcdef0"
    assert info["instance_type"] == "trn1.32xlarge"
    assert info["instance_region"] is None and "metadata service" in info["error"]


def test_instance_info_off_ec2_uses_hostname(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEURON_EXPLORER_INSTANCE_ID", raising=False)
    info = instance_info(tmp_path / "missing")
    assert info["instance_id"] == socket.gethostname()
    assert "no DMI data" in info["error"]
    monkeypatch.setenv("NEURON_EXPLORER_INSTANCE_ID", "i-override")
    assert instance_info(tmp_path / "missing")["instance_id"] == "i-override"


def test_hardware_info_without_gpu_reports_cpu_device() -> None:
    nvml = Nvml()
    info = hardware_info(nvml)
    if nvml.available:
        pytest.skip("a GPU is present; the CPU fallback is not used here")
    assert info["neuron_device_type"] == "cpu" and info["neuron_device_count"] == 1
    assert info["neuron_device_memory_size"] > 0
    assert info["neuroncore_per_device_count"] == os.cpu_count() and "no NVIDIA GPU" in info["error"]


class _FakeMemInfo:
    total = 80 * 2**30


class _FakeNvml:
    """Stands in for pynvml on this GPU-less host, to check how NVML answers map onto the report."""

    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_AGGREGATE_ECC = 1
    NVML_MEMORY_LOCATION_DEVICE_MEMORY = 1
    NVML_MEMORY_LOCATION_SRAM = 7

    def __init__(self) -> None:
        self.ce = 5

    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: return 2
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int: return i
    def nvmlDeviceGetName(self, h: int) -> str: return "NVIDIA H100 80GB HBM3"
    def nvmlDeviceGetMemoryInfo(self, h: int) -> _FakeMemInfo: return _FakeMemInfo()
    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]: return (9, 0)

    def nvmlDeviceGetMemoryErrorCounter(self, h: int, etype: int, counter: int, loc: int) -> int:
        if loc == self.NVML_MEMORY_LOCATION_SRAM and h == 1:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.ce if etype == self.NVML_MEMORY_ERROR_TYPE_CORRECTED else 0


def test_gpu_hosts_map_nvml_devices_and_ecc(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    fake = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nvml = Nvml()
    assert nvml.available
    info = hardware_info(nvml)
    assert info == {"neuron_device_type": "NVIDIA H100 80GB HBM3", "neuroncore_version": "sm_90",
                    "neuron_device_count": 2, "neuron_device_memory_size": 80 * 2**30,
                    "neuroncore_per_device_count": 1, "error": ""}
    hw = HwCounters(nvml)
    fake.ce = 8
    out = hw.collect()
    d0, d1 = out["neuron_devices"]
    assert d0["mem_ecc_corrected"] == 3 and d0["sram_ecc_corrected"] == 3 and d0["mem_ecc_uncorrected"] == 0
    assert d1["neuron_device_index"] == 1 and d1["sram_ecc_corrected"] is None
    assert "not supported" in out["error"]


def test_nvml_absent_is_reported_not_raised() -> None:
    nvml = Nvml()
    if nvml.available:
        pytest.skip("a GPU with NVML is present")
    assert nvml.reason
