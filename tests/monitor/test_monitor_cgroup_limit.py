"""A CPU device's memory size in neuron-monitor's report is what the monitored applications can hold
under their memory cgroups' limits, where that is below the host's memory (decision 0186): on a fake
/proc and cgroup tree (the monitor's ``cgroup_root``) with an application of this process, the
JSON's ``neuron_hardware_info.neuron_device_memory_size`` and the exporters' label of the same name;
then, end to end, two real applications in two real child cgroups (tests/cgroups.py) seen by the real
``neuron-monitor`` command.  Without a limit below the host's memory, the host's memory as before."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from monitor_helpers import WORKLOAD, bin_path, stop_all, write_config

from neuron_explorer.monitor.cloudwatch_exporter import to_datum
from neuron_explorer.monitor.config import parse_config
from neuron_explorer.monitor.metrics import ReportTracker
from neuron_explorer.monitor.monitor import Monitor
from neuron_explorer.monitor.prometheus_exporter import ReportState
from neuron_explorer.recorders.app_stats import AppStats
from tests.cgroups import CgroupUnavailable, in_cgroup, memory_cgroup

GIB = 1 << 30
V2_MOUNT = "41 31 0:38 / /sys/fs/cgroup rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"


def _fake_tree(root: Path, files: dict[str, str]) -> Path:
    """This process in cgroup /pods/a of a fake v2 tree holding ``files`` (path -> content)."""
    (root / "proc" / str(os.getpid())).mkdir(parents=True)
    (root / "proc" / "self").mkdir()
    (root / "proc" / str(os.getpid()) / "cgroup").write_text("0::/pods/a\n")
    (root / "proc" / "self" / "mountinfo").write_text(V2_MOUNT)
    for rel, content in files.items():
        f = root / rel.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(content)
    return root


def _monitor(stats_dir: Path, cgroup_root: str = "") -> Monitor:
    cfg = parse_config({"period": "1s",
                        "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": "memory_used"}]}]})
    return Monitor(cfg, stats_dir=stats_dir, use_nvml=False, cgroup_root=cgroup_root)


def _report(m: Monitor) -> dict:
    assert m.collect_due(now=m.next_due())
    return m.report()


def _exported(report: dict) -> tuple[str, str]:
    """neuron_device_memory_size as the Prometheus companion serves it and as CloudWatch gets it."""
    st = ReportState()
    st.update(report)
    line = next(x for x in st.render().decode().splitlines() if x.startswith("neuron_hardware_info{"))
    prom = line.split('neuron_device_memory_size="', 1)[1].split('"', 1)[0]
    (s,) = [s for s in ReportTracker().samples(report) if s.name == "neuron_hardware_info"]
    dims = {d["Name"]: d["Value"] for d in to_datum(s, dt.datetime.now(dt.timezone.utc))["Dimensions"]}
    return prom, dims["neuron_device_memory_size"]


def test_device_memory_size_is_the_applications_cgroup_limit_below_the_hosts_memory(stats_dir: Path,
                                                                                   tmp_path: Path) -> None:
    host = psutil.virtual_memory().total
    limit = (host // 3) & ~4095
    root = _fake_tree(tmp_path / "root", {"/sys/fs/cgroup/pods/a/memory.max": "max\n",
                                          "/sys/fs/cgroup/pods/memory.max": f"{limit}\n"})
    s = AppStats("train_me", None, "i", [0], stats_dir=stats_dir, interval_s=3600)
    s.start()
    try:
        m = _monitor(stats_dir, str(root))
        rep = _report(m)
        assert len(rep["neuron_runtime_data"]) == 1
        hw = rep["neuron_hardware_info"]
        assert hw["neuron_device_type"] == "cpu"
        assert hw["neuron_device_memory_size"] == limit, (hw, host)
        assert "cgroup v2 memory.max of /pods" in hw["error"], hw["error"]
        assert _exported(rep) == (str(limit), str(limit))
        # the limit is read again for each report (`docker update --memory`)
        (root / "sys/fs/cgroup/pods/memory.max").write_text(f"{limit // 2}\n")
        s.publish()
        assert _report(m)["neuron_hardware_info"]["neuron_device_memory_size"] == limit // 2
        # no limit below the host's memory: the host's memory, as without cgroups
        (root / "sys/fs/cgroup/pods/memory.max").write_text(f"{2 * host}\n")
        s.publish()
        hw = _report(m)["neuron_hardware_info"]
        assert hw["neuron_device_memory_size"] == host and "cgroup" not in hw["error"], hw
    finally:
        s.stop()
    # no application in the report: the host's memory
    m = _monitor(stats_dir, str(root))
    hw = m.report()["neuron_hardware_info"]
    assert hw["neuron_device_memory_size"] == host and "cgroup" not in hw["error"]


def test_damaged_cgroup_files_leave_the_hosts_memory(stats_dir: Path, tmp_path: Path) -> None:
    host = psutil.virtual_memory().total
    root = _fake_tree(tmp_path / "root", {"/sys/fs/cgroup/pods/a/memory.max": "-5\n",
                                          "/sys/fs/cgroup/pods/memory.max": "12 GiB\n"})
    s = AppStats("train_me", None, "i", [0], stats_dir=stats_dir, interval_s=3600)
    s.start()
    try:
        hw = _report(_monitor(stats_dir, str(root)))["neuron_hardware_info"]
        assert hw["neuron_device_memory_size"] == host, hw
        # no /proc/<pid>/cgroup at all (another pid namespace): the host's memory
        (root / "proc" / str(os.getpid()) / "cgroup").unlink()
        hw = _report(_monitor(stats_dir, str(root)))["neuron_hardware_info"]
        assert hw["neuron_device_memory_size"] == host, hw
    finally:
        s.stop()


@pytest.mark.slow
def test_two_applications_in_two_real_cgroups_are_reported_with_the_sum_of_their_limits(stats_dir: Path,
                                                                                       tmp_path: Path) -> None:
    """Two workloads, each in its own child cgroup (1 GiB and 1.5 GiB, siblings under the tests' own
    cgroup, which has no lower limit): together they can hold 2.5 GiB, the device memory size the
    real neuron-monitor reports."""
    a_lim, b_lim = GIB, 3 * GIB // 2
    env = dict(os.environ, NEURON_EXPLORER_STATS_DIR=str(stats_dir))
    env.pop("NEURON_PROCESS_TAG", None)
    procs: list[subprocess.Popen] = []
    try:
        with memory_cgroup(a_lim) as (a_procs, _kind), memory_cgroup(b_lim) as (b_procs, _):
            try:
                for tag, cg in (("train_a", a_procs), ("train_b", b_procs)):
                    procs.append(subprocess.Popen(in_cgroup([sys.executable, str(WORKLOAD), "60", "--numpy"], cg),
                                                  env=dict(env, NEURON_PROCESS_TAG=tag), stdout=subprocess.PIPE,
                                                  text=True))
                for p in procs:
                    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
                conf = write_config(tmp_path / "monitor.conf", {"period": "1s", "neuron_runtimes": [
                    {"tag_filter": "^train_", "metrics": [{"type": "memory_used"}]}]})
                mon = subprocess.Popen([bin_path("neuron-monitor"), "-c", str(conf)], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
                try:
                    for _ in range(30):  # until both applications are in one report
                        rep = json.loads(mon.stdout.readline())  # type: ignore[union-attr]
                        if len(rep["neuron_runtime_data"]) == 2:
                            break
                finally:
                    mon.terminate()
                    mon.wait(timeout=10)
            finally:
                stop_all(procs)
    except CgroupUnavailable as e:
        stop_all(procs)
        pytest.skip(f"no memory cgroup can be made here: {e}")
    assert {r["pid"] for r in rep["neuron_runtime_data"]} == {p.pid for p in procs}
    hw = rep["neuron_hardware_info"]
    assert hw["neuron_device_memory_size"] == a_lim + b_lim, hw
    assert a_procs.parent.name in hw["error"] and b_procs.parent.name in hw["error"], hw["error"]
