"""util.procfs: the samplers' /proc readers give psutil's figures (psutil is the reference here;
the profiled process no longer imports it: decision 0213)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import psutil
import pytest

from neuron_explorer.util import procfs


def _psutil_busy(t1: list[float], t2: list[float]) -> float:
    """psutil's own arithmetic for one CPU (its private helpers, as ``cpu_percent`` calls them)."""
    fields = psutil._ntp.scputimes  # noqa: SLF001 - the reference implementation
    d = psutil._cpu_times_deltas(fields(*t1), fields(*t2))  # noqa: SLF001
    try:
        return round((psutil._cpu_busy_time(d) / psutil._cpu_tot_time(d)) * 100, 1)  # noqa: SLF001
    except ZeroDivisionError:
        return 0.0


def test_busy_percent_is_psutils_arithmetic_to_the_last_digit() -> None:
    if len(psutil._ntp.scputimes._fields) != len(procfs.CPU_FIELDS):  # noqa: SLF001
        pytest.skip("psutil's CPU fields differ on this kernel")
    rng = random.Random(3)
    for _ in range(20_000):
        t1 = [rng.randrange(0, 10**9) / procfs.CLOCK_TICKS for _ in procfs.CPU_FIELDS]
        # mostly forward, some fields backwards (psutil clamps those), some no time at all
        t2 = [a + rng.choice((0, 0, rng.randrange(0, 500), -rng.randrange(0, 3))) / procfs.CLOCK_TICKS
              for a in t1]
        assert procfs.busy_percent(t1, t2) == _psutil_busy(t1, t2), (t1, t2)


def _snapshot(tmp_path, name: str) -> bytes:
    """One read of /proc/<name>, copied where psutil reads it too (``psutil.PROCFS_PATH``): both
    readers see the same figures, whatever the machine does between two reads."""
    with open(f"/proc/{name}", "rb") as f:
        data = f.read()
    (tmp_path / name).write_bytes(data)
    return data


def test_per_cpu_times_are_psutils(tmp_path, monkeypatch) -> None:
    data = _snapshot(tmp_path, "stat")
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))
    ours, theirs = procfs.per_cpu_times(data), psutil.cpu_times(percpu=True)
    assert ours is not None and len(ours) == len(theirs) == psutil.cpu_count()
    for a, b in zip(ours, theirs):
        assert a == [getattr(b, name, 0.0) for name in procfs.CPU_FIELDS]


def test_a_damaged_proc_stat_never_raises() -> None:
    ok = b"cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 1 2 3 4 5 6 7 8 9 10\ncpu1 1 2 3 4\nintr 5\n"
    got = procfs.per_cpu_times(ok)
    assert got is not None and len(got) == 2 and got[1][4:] == [0.0] * 6
    rng = random.Random(5)
    for _ in range(3000):
        b = bytearray(ok)
        for _ in range(rng.randrange(1, 6)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        r = procfs.per_cpu_times(bytes(b[:rng.randrange(len(b) + 1)]))
        assert r is None or all(len(row) == len(procfs.CPU_FIELDS) for row in r)


def test_the_cpu_percent_reader_keeps_its_own_state() -> None:
    """The first call primes (0.0 for each CPU, as psutil); psutil's module state is not touched,
    so a program that calls ``psutil.cpu_percent`` itself reads what it would unprofiled."""
    state = getattr(psutil, "_last_per_cpu_times", None)  # (psutil 7: per thread)
    before = dict(state) if isinstance(state, dict) else None
    reader = procfs.CpuPercent()
    first = reader()
    assert len(first) == psutil.cpu_count() and all(0.0 <= x <= 100.0 for x in first)
    time.sleep(0.05)
    assert all(0.0 <= x <= 100.0 for x in reader())
    if before is not None:
        assert dict(psutil._last_per_cpu_times) == before  # noqa: SLF001


def test_host_memory_is_psutils(tmp_path, monkeypatch) -> None:
    _snapshot(tmp_path, "meminfo")
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))
    vm = psutil.virtual_memory()
    assert procfs.host_memory(str(tmp_path / "meminfo")) == (vm.total, vm.available)
    assert procfs.host_memory(str(tmp_path / "absent")) is None


def test_process_memory_and_start_time_are_psutils() -> None:
    me = psutil.Process()
    rss, vms = procfs.process_memory(os.getpid())
    mi = me.memory_info()
    assert abs(rss - mi.rss) <= 16 << 20 and abs(vms - mi.vms) <= 64 << 20
    assert procfs.process_start_time(os.getpid()) == pytest.approx(me.create_time(), abs=1e-6)


def test_a_process_whose_name_holds_parentheses_is_read_like_any_other(tmp_path) -> None:
    """``/proc/<pid>/stat`` puts the command name in parentheses; a name may hold ``) (`` too.  The
    child reports when it has used some CPU and gone to sleep, so both readers see the same times."""
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys, time\nopen('/proc/self/comm', 'w').write('a) b (c')\n"
                              "s = time.time()\nwhile time.time() - s < 0.3: pass\n"
                              "print('ok', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ok"
        p = psutil.Process(child.pid)
        assert p.name() == "a) b (c"
        ours, theirs = procfs.process_cpu_times(child.pid), p.cpu_times()
        assert ours == (theirs.user, theirs.system)  # (asleep after its loop: the times hold still)
        assert procfs.process_start_time(child.pid) == pytest.approx(p.create_time(), abs=1e-6)
        reader = procfs.ProcessCpuPercent(child.pid)
        assert reader() == 0.0  # the first call primes
    finally:
        child.kill()
        child.wait()
    assert procfs.process_cpu_times(child.pid) is None and reader() is None
    assert procfs.process_memory(child.pid) is None and procfs.process_start_time(child.pid) is None


def _c_reader():
    from neuron_explorer.runtime.ring import read_file

    if read_file is None:
        pytest.skip("the C extension is not built")
    return read_file


def test_the_c_reader_returns_what_python_reads(tmp_path) -> None:
    """``read_file`` (decision 0217) is a drop-in for ``read_python``: the same bytes for files of
    every size around its 16 KiB first read, /proc files, and None where Python's read fails."""
    read_file = _c_reader()
    rng = random.Random(17)
    sizes = [0, 1, 16383, 16384, 16385, 32768, 300_001] + [rng.randrange(70_000) for _ in range(40)]
    for i, n in enumerate(sizes):
        p = tmp_path / f"f{i}"
        p.write_bytes(rng.randbytes(n))
        assert read_file(str(p)) == procfs.read_python(str(p)) == p.read_bytes()
        assert read_file(os.fsencode(p)) == p.read_bytes()  # (a bytes path, as os.open takes)
    for stable in ("/proc/self/cmdline", "/proc/self/environ", "/proc/cpuinfo"):
        assert read_file(stable) == procfs.read_python(stable)
    assert read_file("/proc/self/stat").split()[0] == str(os.getpid()).encode()
    for bad in (str(tmp_path / "absent"), str(tmp_path), "/proc/self/task/0/stat", ""):
        assert read_file(bad) is None and procfs.read_python(bad) is None
    with pytest.raises(TypeError):
        read_file(3)


def test_every_figure_is_read_through_the_reader_in_use() -> None:
    """One reader serves every figure, so installing the C one covers them all."""
    seen: list[str] = []

    def recording(path: str) -> bytes | None:
        seen.append(path)
        return procfs.read_python(path)

    me = os.getpid()
    procfs.use_reader(recording)
    try:
        assert procfs.per_cpu_times() and procfs.host_memory() and procfs.process_memory(me)
        assert procfs.stat_fields(me) and procfs.boot_time() and procfs.process_start_time(me)
        assert procfs.read(f"/proc/{me}/schedstat")
    finally:
        procfs.use_reader(None)
    assert set(seen) == {"/proc/stat", "/proc/meminfo", f"/proc/{me}/statm", f"/proc/{me}/stat",
                         f"/proc/{me}/schedstat"}
    assert procfs.read is not recording and procfs._read is procfs.read_python  # noqa: SLF001
