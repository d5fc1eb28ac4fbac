"""neuron-explorer inspect, flushing on every way a process ends, and ON_FAIL."""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from ..conftest import clean_env, cli
from .helpers import sessions, type_counts

WORKLOAD = os.path.join(os.path.dirname(__file__), "workloads", "loop.py")


@pytest.mark.fast  # a cheap end-to-end check in the fast loop (tests/fastset.py)
def test_inspect_keeps_at_most_n_events_per_core_and_counts_the_rest(out_dir):
    r = cli("inspect", "-o", str(out_dir), "-n", "5", sys.executable, WORKLOAD, "exit", "20")
    assert r.returncode == 0, r.stderr
    assert "ready 20" in r.stdout
    (s,) = sessions(out_dir)
    assert 0 < s.num_events <= 5
    core = s.info.cores[0]
    assert core.kept == s.num_events and core.capacity == 5
    assert core.recorded >= 40 and core.dropped == core.recorded - core.kept
    # the newest events are the ones kept
    assert type_counts(s)["nc_exec_running"] >= 1


def test_inspect_on_a_non_python_command_keeps_samplers_and_says_no_runtime_events(out_dir):
    # some CPU work, then idle: the CLI samples the child from its own process (util.procfs's
    # reads of another pid: its CPU share and its memory)
    r = cli("inspect", "-o", str(out_dir), "sh", "-c",
            "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; sleep 1.5")
    assert r.returncode == 0, r.stderr
    assert "no runtime events were seen" in r.stderr
    (s,) = sessions(out_dir)
    assert s.num_events == 0 and not s.info.runtime_events_seen
    assert s.cpu is not None and s.mem is not None and s.cpu.monitored_pid == s.mem.monitored_pid != os.getpid()
    col = {name: np.frombuffer(getattr(m, name), dtype) for m, dtype, names in
           ((s.cpu, "<i8", ("ts_ns",)), (s.cpu, "<f4", ("process_percent",)),
            (s.mem, "<i8", ("process_rss", "host_total"))) for name in names}
    assert len(col["ts_ns"]) >= 4  # 250 ms apart over ~1.5 s (NaN CPU once the child has ended)
    assert np.nanmax(col["process_percent"]) > 0 and col["process_rss"].max() > 0 and col["host_total"].min() > 0
    v = cli("view", "-d", str(out_dir), "--output-format", "summary-text")
    assert "no runtime events were seen" in v.stdout


def test_a_non_utf8_argument_is_written_escaped_not_lost(out_dir):
    # b"caf\xe9" (Latin-1) is not UTF-8: Python keeps the byte as a lone surrogate, which a
    # protobuf string cannot hold; trace_info.pb used to fail to write, losing the session's counts
    r = cli("inspect", "-o", str(out_dir), sys.executable, WORKLOAD, "exit", "3", "data/caf\udce9.csv")
    assert r.returncode == 0 and "write failed" not in r.stderr, r.stderr
    (s,) = sessions(out_dir)
    assert list(s.info.argv)[-1] == "data/caf\\xe9.csv"
    assert s.num_events > 0 and s.cpu is not None and s.mem is not None
    v = cli("view", "-d", str(out_dir), "--output-format", "summary-text")
    assert v.returncode == 0, v.stderr


def test_inspect_propagates_the_exit_status(out_dir):
    r = cli("inspect", "-o", str(out_dir), "sh", "-c", "exit 3")
    assert r.returncode == 3


@pytest.mark.fast  # a cheap end-to-end check in the fast loop (tests/fastset.py)
@pytest.mark.parametrize("args,needle", [
    (["inspect", "-n", "0", "true"], "must be greater than 0"),
    (["inspect", "-n", "many", "true"], "not a whole number"),
    (["inspect", "-o", "x"], "needs a command"),
    (["inspect", "no-such-program-xyz"], "cannot run 'no-such-program-xyz'"),
])
def test_inspect_validates_its_arguments(tmp_path, args, needle):
    r = cli(*args, cwd=tmp_path)
    assert r.returncode == 2
    assert needle in r.stderr


def test_help_has_examples():
    r = cli("inspect", "--help", check=True)
    assert "-o" in r.stdout and "--num-trace-events" in r.stdout and "example" in r.stdout
    assert "neuron-explorer" in cli("--version", check=True).stdout


def test_invalid_variable_fails_at_start_up_with_value_and_forms():
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_EVENT_FILTER_NC="zero")
    p = subprocess.run([sys.executable, "-c", "print('ran')"], env=env, capture_output=True, text=True)
    assert p.returncode == 2 and "ran" not in p.stdout
    assert "NEURON_RT_INSPECT_EVENT_FILTER_NC='zero'" in p.stderr and "0-3" in p.stderr


def test_no_variable_means_no_runtime(tmp_path):
    p = subprocess.run([sys.executable, "-c", "import neuron_explorer.runtime.core as c; print(c.get_runtime())"],
                       env=clean_env(), capture_output=True, text=True, cwd=tmp_path)
    assert p.stdout.strip() == "None"
    assert not (tmp_path / "output").exists()


def _start(out_dir, mode, **extra):
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir), **extra)
    p = subprocess.Popen([sys.executable, WORKLOAD, mode, "5"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("ready")
    return p


def test_sigterm_keeps_the_events(out_dir):
    p = _start(out_dir, "forever")
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGTERM
    (s,) = sessions(out_dir)
    assert s.info.end_reason == "signal:SIGTERM"
    assert type_counts(s)["nc_exec_running"] >= 5


def test_sigkill_loses_nothing_already_flushed(out_dir):
    p = _start(out_dir, "forever", NEURON_EXPLORER_FLUSH_PERIOD_MS="200")
    seen = 0
    deadline = time.time() + 60
    while time.time() < deadline and seen < 20:
        time.sleep(0.1)
        try:
            ss = sessions(out_dir)
        except Exception:  # a reader must never see a torn file
            raise
        if ss:
            seen = type_counts(ss[0])["nc_exec_running"]
    p.kill()
    p.wait(timeout=30)
    (s,) = sessions(out_dir)
    assert s.info.end_reason == "running"
    assert type_counts(s)["nc_exec_running"] >= seen >= 20
    # a kill during a write may leave that write's hidden temporary file (docs/reliability.md), only
    # ever beside the complete file it was to replace, which the reader read above
    for f in os.listdir(s.path):
        if f.endswith(".tmp"):
            m = re.fullmatch(r"\.(.+)\.[A-Za-z0-9_]+\.tmp", f)
            assert m and os.path.isfile(os.path.join(s.path, m.group(1))), f


def test_on_fail_writes_only_when_the_workload_fails(tmp_path):
    ok_dir, bad_dir = tmp_path / "ok", tmp_path / "bad"
    for d, mode, rc in ((ok_dir, "exit", 0), (bad_dir, "raise", 1)):
        env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(d),
                        NEURON_RT_INSPECT_ON_FAIL="1")
        p = subprocess.run([sys.executable, WORKLOAD, mode, "3"], env=env, capture_output=True, text=True)
        assert p.returncode == rc
    assert not ok_dir.exists() or not sessions(ok_dir)
    (s,) = sessions(bad_dir)
    assert s.info.end_reason == "exception:RuntimeError"
    assert type_counts(s)["nc_exec_running"] == 3


def test_source_locations_and_nan_check(out_dir, tmp_path):
    script = tmp_path / "nan.py"
    script.write_text(
        "import torch\n"
        "def f(x):\n"
        "    return torch.log(x)\n"
        "cf = torch.compile(f, backend='aot_eager')\n"
        "cf(torch.ones(4))\n"
        "cf(-torch.ones(4))\n"
    )
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir),
                    XLA_IR_DEBUG="1", NEURON_EXPLORER_NAN_CHECK="1")
    subprocess.run([sys.executable, str(script)], env=env, check=True, capture_output=True)
    (s,) = sessions(out_dir)
    (m,) = [m for m in s.models if m.kind == "forward"]
    assert m.source_location == f"{script}:3"
    c = type_counts(s)
    assert c["numerical_err"] == 1 and c["nc_exec_running"] == 2
    from .helpers import events_of

    err = events_of(s, "numerical_err")
    assert int(err[s.arg("numerical_err", "ret")][0]) == 1003
    assert int(err[s.arg("numerical_err", "exec_id")][0]) == 1


def test_an_unusable_output_directory_fails_at_start_up(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(blocker / "out"))
    p = subprocess.run([sys.executable, "-c", "print('ran')"], env=env, capture_output=True, text=True)
    assert p.returncode == 2 and "ran" not in p.stdout
    assert "NEURON_RT_INSPECT_OUTPUT_DIR" in p.stderr and str(blocker / "out") in p.stderr


def _unshare_works() -> bool:
    try:
        p = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare -rm and a tmpfs mount (a private mount namespace)")
def test_a_final_write_on_a_full_disk_is_reported_as_incomplete_and_check_says_so(tmp_path):
    """On a small tmpfs in a private mount namespace: the program fills the disk after the first
    periodic write, so the final write fails with ENOSPC."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    out = mnt / "out"
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                    NEURON_EXPLORER_FLUSH_PERIOD_MS="200")
    env.pop("NEURON_EXPLORER_QUIET")
    script = (f"mount -t tmpfs -o size=4m tmpfs {mnt} || exit 99; "
              f"{sys.executable} {WORKLOAD.replace('loop.py', 'fill_disk.py')} {mnt}/filler; echo rc=$?; "
              f"rm -f {mnt}/filler; "
              f"env -u NEURON_RT_INSPECT_ENABLE {sys.executable} -m neuron_explorer check -d {out}; "
              "echo check_rc=$?")
    p = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert "rc=0" in p.stdout, p.stdout + p.stderr  # the program itself is untouched
    err = p.stderr
    assert "profile written to" not in err, err
    m = re.search(r"neuron-explorer: profile incomplete: the final write failed \(ENOSPC: No space left on device"
                  r".*\); the last complete write is from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, in (\S+)", err)
    assert m, err
    # check does not blame the workload: it says the final write did not happen, and fails
    assert "the final write did not happen" in p.stdout, p.stdout
    assert "check_rc=1" in p.stdout
    assert "the process ran no compiled graph" not in p.stdout
