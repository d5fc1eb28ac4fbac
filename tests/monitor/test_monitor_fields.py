"""Fields of the neuron-monitor report whose meaning the spec fixes (issue #17, item 11):
``neuroncore_per_device_count`` is the number of cores a device offers, and a runtime's ``address``
is something a user can act on -- here the stats file the monitor reads it from."""

import json
import os
import subprocess
from pathlib import Path

import psutil
import pytest
from monitor_helpers import Apps, bin_path, write_config

from neuron_explorer.monitor.gpu import Nvml
from neuron_explorer.monitor.system import hardware_info


def test_a_cpu_device_offers_one_core_per_logical_cpu() -> None:
    nvml = Nvml()
    if nvml.available:
        pytest.skip("a GPU is present; each GPU is one core there")
    info = hardware_info(nvml)
    assert info["neuroncore_per_device_count"] == psutil.cpu_count(logical=True) == os.cpu_count()
    assert info["neuron_device_count"] == 1


@pytest.mark.slow
def test_the_report_names_an_address_the_user_can_read_and_the_cores_per_device(apps: Apps, stats_dir: Path,
                                                                               tmp_path: Path) -> None:
    app = apps.start("train_a", 60.0)
    apps.wait_ready()
    conf = write_config(tmp_path / "monitor.conf", {
        "period": "1s", "neuron_runtimes": [{"tag_filter": "^train_", "metrics": [{"type": "execution_stats"}]}]})
    mon = subprocess.Popen([bin_path("neuron-monitor"), "-c", str(conf)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=dict(os.environ), cwd=tmp_path)
    try:
        rep = json.loads(mon.stdout.readline())
    finally:
        mon.terminate()
        mon.wait(timeout=10)
    (rt,) = rep["neuron_runtime_data"]
    addr = rt["address"]
    assert os.path.isabs(addr) and Path(addr).parent == stats_dir.resolve()
    snap = json.loads(Path(addr).read_text())  # what a user does with it: read the raw counters
    assert snap["pid"] == rt["pid"] == app.pid
    hw = rep["neuron_hardware_info"]
    if hw["neuron_device_type"] == "cpu":
        assert hw["neuroncore_per_device_count"] == os.cpu_count()
