"""The CPU/memory sampler keeps a bounded number of samples, like the event rings, and counts the
ones it overwrote in cpu_util.pb/host_mem.pb."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from neuron_explorer.capture import writer
from neuron_explorer.capture.samplers import HostSampler, SampleRing, default_capacity
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb

from ..conftest import clean_env
from .helpers import sessions


def test_a_sample_ring_keeps_the_newest_samples_and_counts_the_rest():
    r = SampleRing(5, 2, "int64")
    for i in range(12):
        r.append(i, (i, -i))
    ts, rows = r.arrays()
    assert ts.tolist() == [7, 8, 9, 10, 11] and rows[:, 1].tolist() == [-7, -8, -9, -10, -11]
    assert r.dropped == 7 and len(r.ts) == 5  # storage never beyond the capacity


def test_storage_grows_with_the_samples_not_with_the_capacity():
    r = SampleRing(10**12, 3, "float32")  # a capacity far beyond memory costs nothing up front
    for i in range(100):
        r.append(i, (1.0, 2.0, 3.0))
    assert 100 <= len(r.ts) <= 200 and r.dropped == 0


def test_a_long_run_keeps_a_constant_size_per_write():
    hs = HostSampler(os.getpid(), 0.25, max_samples=100)
    sizes = []
    for i in range(5000):
        hs.record_cpu(i, [1.0] * hs.ncpu, 2.0)
        hs.record_mem(i, (1, 2, 3, 4, 5))
        if i % 1000 == 999:
            sizes.append(len(writer.encode_cpu_util(hs)) + len(writer.encode_host_mem(hs)))
    assert len(set(sizes)) <= 2  # (the varint of the drop count may grow by a byte)
    cpu = pb.CpuUtil.FromString(writer.encode_cpu_util(hs))
    mem = pb.HostMem.FromString(writer.encode_host_mem(hs))
    assert cpu.dropped_samples == mem.dropped_samples == 4900
    ts = np.frombuffer(cpu.ts_ns, dtype="<i8")
    assert ts.tolist() == list(range(4900, 5000))
    assert len(np.frombuffer(cpu.cpu_percent, dtype="<f4")) == 100 * hs.ncpu
    assert np.frombuffer(mem.host_used, dtype="<i8").tolist() == [4] * 100


def test_the_default_capacity_fits_a_memory_budget():
    assert default_capacity(2) == 1_000_000
    assert 80_000 < default_capacity(192) < 90_000  # 784 B per sample within 64 MiB


def test_a_profile_stores_the_bounded_samples_and_the_drop_count(out_dir):
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir),
                    NEURON_EXPLORER_SAMPLE_PERIOD_MS="10", NEURON_EXPLORER_MAX_SAMPLES="8")
    p = subprocess.run([sys.executable, "-c", "import time, torch; time.sleep(1.0)"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    (s,) = sessions(out_dir)
    assert len(np.frombuffer(s.cpu.ts_ns, dtype="<i8")) == 8 and s.cpu.dropped_samples >= 30
    assert len(np.frombuffer(s.mem.ts_ns, dtype="<i8")) == 8 and s.mem.dropped_samples >= 30


def test_a_bad_sample_bound_stops_the_launch():
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_EXPLORER_MAX_SAMPLES="lots")
    p = subprocess.run([sys.executable, "-c", "print('ran')"], env=env, capture_output=True, text=True)
    assert p.returncode == 2 and "NEURON_EXPLORER_MAX_SAMPLES='lots' is not valid" in p.stderr


def test_the_cgroup_limit_is_written_only_when_below_the_hosts_memory(tmp_path):
    """host_mem.pb carries the cgroup's limit read when it is written, when that is below the host's
    memory (the last sample's host_total), and nothing otherwise (decision 0182)."""
    from neuron_explorer.util.cgroup import CgroupMemory

    hs = HostSampler(os.getpid(), 0.25, max_samples=10)
    f = tmp_path / "memory.max"
    hs._cgroup = CgroupMemory([(str(f), "memory.max", "/job")])
    f.write_text(f"{3 << 30}\n")
    mem = pb.HostMem.FromString(writer.encode_host_mem(hs))
    assert mem.memory_limit == 0  # no memory sample yet: no host total to compare with
    hs.record_mem(1, (1, 2, 16 << 30, 4, 5))
    mem = pb.HostMem.FromString(writer.encode_host_mem(hs))
    assert (mem.memory_limit, mem.memory_limit_source, mem.memory_limit_cgroup) == (
        3 << 30, "cgroup v2 memory.max", "/job")
    for text in ("max\n", f"{32 << 30}\n", f"{16 << 30}\n", "garbage"):
        f.write_text(text)
        mem = pb.HostMem.FromString(writer.encode_host_mem(hs))
        assert (mem.memory_limit, mem.memory_limit_source, mem.memory_limit_cgroup) == (0, "", ""), text
    f.unlink()
    assert hs.memory_limit(16 << 30) is None


def test_the_main_threads_run_and_wait_shares_are_read_from_schedstat():
    """Decision 0203: the shares of a period the main thread ran and was runnable but not running.
    A thread pinned to the main thread's CPU beside it makes it wait; a pid that cannot be read
    gives NaN, never an error."""
    import threading
    import time

    from neuron_explorer.capture.samplers import MainThreadShares, main_thread_times

    assert main_thread_times(os.getpid()) is not None and main_thread_times(2**22 + 12345) is None
    assert np.isnan(MainThreadShares(2**22 + 12345)(time.monotonic_ns() + 1)).all()
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # (this thread; a thread started now inherits it)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(10_000))  # (holds the GIL between switches: the main thread below releases it)

    try:
        shares = MainThreadShares(os.getpid())
        t = threading.Thread(target=spin, daemon=True)
        t.start()
        end = time.monotonic() + 0.3
        while time.monotonic() < end:  # the main thread runnable throughout, sharing one CPU
            os.sched_yield()
        ran, waited = shares(time.monotonic_ns())
    finally:
        stop.set()
        os.sched_setaffinity(0, cpus)
    # (a running thread's time is brought up to date at its clock ticks: a read may lag by one)
    assert 0 < ran <= 105 and 0 < waited, (ran, waited)


def test_the_cpu_file_carries_the_main_thread_columns_and_a_wrong_length_is_refused(tmp_path):
    from neuron_explorer.analysis.pbfile import ProfileError
    from neuron_explorer.analysis.reader import _load_samples

    hs = HostSampler(os.getpid(), 0.25, max_samples=10)
    for i in range(3):
        hs.record_cpu(1_000_000 + i, [1.0] * hs.ncpu, 2.0, (50.0 + i, 10.0 * i))
    msg = pb.CpuUtil.FromString(writer.encode_cpu_util(hs))
    assert np.frombuffer(msg.main_thread_percent, "<f4").tolist() == [50.0, 51.0, 52.0]
    assert np.frombuffer(msg.main_thread_wait_percent, "<f4").tolist() == [0.0, 10.0, 20.0]
    path = tmp_path / "cpu_util.pb"
    path.write_bytes(msg.SerializeToString())
    assert _load_samples(str(path), pb.CpuUtil, 0).main_thread_wait_percent  # read as written
    old = pb.CpuUtil.FromString(msg.SerializeToString())
    old.ClearField("main_thread_wait_percent")  # a capture from before the columns
    old.ClearField("main_thread_percent")
    path.write_bytes(old.SerializeToString())
    assert not _load_samples(str(path), pb.CpuUtil, 0).main_thread_wait_percent
    for field in ("main_thread_percent", "main_thread_wait_percent"):
        bad = pb.CpuUtil.FromString(msg.SerializeToString())
        setattr(bad, field, getattr(bad, field)[:8])
        path.write_bytes(bad.SerializeToString())
        try:
            _load_samples(str(path), pb.CpuUtil, 0)
        except ProfileError as e:
            assert field in str(e), e
        else:
            raise AssertionError(f"a {field} column shorter than the samples was read")


def test_a_sample_reads_proc_without_pythons_file_objects(monkeypatch):
    """Decision 0217: a started sampler reads /proc with the extension's ``read_file``, which keeps
    the GIL, so a sample hands the GIL over once (after its wait), not around each system call of
    each file.  With ``open`` refused during a sample, every figure is still read."""
    import builtins
    import time

    from neuron_explorer.runtime.ring import read_file
    from neuron_explorer.util import procfs

    if read_file is None:
        import pytest

        pytest.skip("the C extension is not built")
    s = HostSampler(os.getpid(), 3600.0)
    s.start()
    try:
        assert procfs._read is read_file  # noqa: SLF001

        def refused(*a, **k):
            raise AssertionError(f"a Python file object opened during a sample: {a}")

        time.sleep(0.01)  # (a share of a period under 1 ms reads NaN)
        monkeypatch.setattr(builtins, "open", refused)
        s.sample()
        monkeypatch.undo()
    finally:
        s.stop()
        procfs.use_reader(None)
    _, per_cpu, process, main, _ = s.cpu_columns()
    _, mem, _ = s.mem_columns()
    # (samples: at the start, the one above, at the stop)
    assert len(mem) == 3 and (mem[1] > 0).all()  # rss, vms, total, used, available
    assert per_cpu.shape[1] == s.ncpu and not np.isnan(main[1]).any() and process[1] > 0
