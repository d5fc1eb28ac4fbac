"""Start-up from the environment: which values stop the launch, which never do, and which
processes are not profiled at all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from neuron_explorer.contracts import env as cfgmod

from ..conftest import clean_env
from .helpers import sessions, type_counts

LOOP = Path(__file__).parent / "workloads" / "loop.py"
LIMIT = 10**12  # the documented largest NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=clean_env(**env), capture_output=True, text=True,
                          timeout=120)


@pytest.mark.fast  # a cheap end-to-end check in the fast loop (tests/fastset.py)
@pytest.mark.parametrize("value", ["banana", "2", "enabled"])
def test_an_invalid_enable_value_stops_the_launch(tmp_path, value):
    p = _run("print('ran')", NEURON_RT_INSPECT_ENABLE=value, NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"))
    assert p.returncode == 2 and "ran" not in p.stdout
    assert f"NEURON_RT_INSPECT_ENABLE={value!r} is not valid; accepted: 0 or 1" in p.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["false", "off", "no"])
def test_a_false_enable_value_turns_nothing_on(tmp_path, value):
    p = _run("import neuron_explorer.runtime.core as c; print(c.get_runtime())", NEURON_RT_INSPECT_ENABLE=value,
             NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"))
    assert p.returncode == 0 and p.stdout.strip() == "None", p.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("var", cfgmod.SOURCE_DEBUG_VARS)
def test_a_source_debug_variable_never_stops_the_program(out_dir, var):
    """They belong to other tools too: a value we do not understand is off, with a warning."""
    p = subprocess.run([sys.executable, str(LOOP), "exit", "3"], capture_output=True, text=True, timeout=120,
                       env=clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir),
                                     **{var: "x"}))
    assert p.returncode == 0 and "ready 3" in p.stdout, p.stderr
    assert f"neuron-explorer: warning: {var}='x' is not 0 or 1; neuron-explorer takes it as off" in p.stderr
    (s,) = sessions(out_dir)
    assert type_counts(s)["nc_exec_running"] == 3


@pytest.mark.parametrize("value", [str(2**63), str(2**64 + 5), str(LIMIT + 1)])
def test_a_max_events_value_beyond_the_limit_stops_the_launch(value):
    """2^63 and beyond used to overflow the ring's size and silently record nothing."""
    p = _run("print('ran')", NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC=value)
    assert p.returncode == 2 and "ran" not in p.stdout
    assert f"NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC={value!r} is not valid (too large)" in p.stderr
    assert "1,000,000,000,000" in p.stderr


@pytest.mark.parametrize("pure", ["0", "1"])
def test_the_largest_max_events_records_and_costs_only_what_is_recorded(out_dir, pure):
    """The rings grow by doubling: the limit itself allocates nothing up front."""
    # VmHWM is this image's own peak: ru_maxrss keeps the peak of the process it was forked from
    # (an xdist worker that ran a 2 GB test before reported 2,003,584 kB here)
    code = (f"import runpy, sys; sys.argv = [{str(LOOP)!r}, 'exit', '20']; "
            f"runpy.run_path({str(LOOP)!r}, run_name='__main__'); "
            "print('maxrss_kb', next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))")
    p = _run(code, NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir),
             NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC=str(LIMIT),
             NEURON_EXPLORER_PURE_PYTHON=pure)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout.split("maxrss_kb")[1]) < 2_000_000  # (torch itself is most of it)
    (s,) = sessions(out_dir)
    assert type_counts(s)["nc_exec_running"] == 20
    assert s.info.cores[0].capacity == LIMIT


MP_JOB = """
import multiprocessing as mp, os, sys
def work():
    import torch
    torch.ones(2).sum()
if __name__ == "__main__":
    import torch
    ctx = mp.get_context(sys.argv[1])
    p = ctx.Process(target=work)
    p.start()
    p.join()
    print(os.getpid(), p.pid)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_multiprocessing_helper_processes_leave_no_profile(tmp_path, out_dir, method):
    """The resource tracker and the fork server inherit the variables: they must not leave empty
    profiles beside the real ones.  A spawned worker is a process of its own and profiles itself;
    a fork server's worker is a fork of an unprofiled process."""
    job = tmp_path / "job.py"
    job.write_text(MP_JOB)
    p = subprocess.run([sys.executable, str(job), method], capture_output=True, text=True, timeout=180,
                       env=clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir)))
    assert p.returncode == 0, p.stderr
    parent, child = map(int, p.stdout.split())
    want = {parent, child} if method == "spawn" else {parent}
    assert {s.info.pid for s in sessions(out_dir)} == want
    assert len(list(out_dir.iterdir())) == len(want)  # no other process directory, not even empty


def test_a_python_process_that_runs_no_framework_leaves_no_profile(out_dir):
    """e.g. Inductor's `python -c "...cdll.LoadLibrary(kernel.so)"` checks, build tools."""
    p = _run("import ctypes; ctypes.CDLL(None); print('ran')", NEURON_RT_INSPECT_ENABLE="1",
             NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir), NEURON_EXPLORER_FLUSH_PERIOD_MS="50")
    assert p.returncode == 0 and "ran" in p.stdout
    assert not out_dir.exists() or not list(out_dir.iterdir())


def test_inductor_s_isa_probe_neither_profiles_nor_loads_the_runtime(out_dir):
    """Inductor runs six of these ``python -c`` probes when a process first compiles: with the
    runtime's imports each cost ~0.15 CPU-s (the Inductor row's +0.95 s at exit)."""
    from ..util.test_procs import _torch_probe_code

    code = _torch_probe_code().replace("/tmp/torchinductor_root/xy/probe.so", "libc.so.6")
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, timeout=120,
                       env=clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir)))
    assert p.returncode == 0, p.stderr[-2000:]
    assert " neuron_explorer.util.procs\n" in p.stderr  # the .pth line ran and asked
    assert "neuron_explorer.boot" not in p.stderr and "numpy" not in p.stderr
    assert not out_dir.exists() or not list(out_dir.iterdir())


@pytest.mark.parametrize("launcher", [["-m", "torch.distributed.run"], [str(Path(sys.executable).parent / "torchrun")]])
def test_torchrun_s_agent_runs_without_the_runtime(out_dir, launcher):
    """The agent only starts the ranks, which profile themselves: it neither imports nor starts the
    runtime (its start-up cost, its threads, its signal handlers), whatever the variables say."""
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir),
                    NEURON_RT_DBG_NDET_FLUSH_USEC="1000000", NEURON_PROCESS_TAG="job")
    p = subprocess.run([sys.executable, "-X", "importtime", *launcher, "--help"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0 and "nproc" in p.stdout, p.stderr[-2000:]
    assert " torch\n" in p.stderr and " neuron_explorer.util.procs\n" in p.stderr  # it ran, and the .pth asked
    assert "neuron_explorer.boot" not in p.stderr and "neuron_explorer.runtime" not in p.stderr
    assert not out_dir.exists() or not list(out_dir.iterdir())


def test_a_package_that_cannot_be_imported_leaves_one_line_and_an_unprofiled_run(tmp_path):
    """The .pth line of an install whose package cannot be imported at start-up (here a package that
    fails on a missing module, as numpy is missing when a venv's .pth runs before the system
    site-packages are on the path): one warning line, the program runs and exits as without us."""
    repo = Path(__file__).resolve().parents[2]
    site = tmp_path / "site"
    (site / "neuron_explorer").mkdir(parents=True)
    (site / "neuron_explorer" / "__init__.py").write_text("import a_module_that_is_not_installed\n")
    for name in ("neuron_explorer_autostart.pth", "neuron_explorer_autoload.py"):
        (site / name).write_bytes((repo / "src" / name).read_bytes())
    code = f"import site; site.addsitedir({str(site)!r}); print('ran')"
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"))
    env.pop("PYTHONPATH", None)  # only the broken package may be found
    p = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0 and p.stdout == "ran\n", p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("neuron-explorer: warning: not started, this process runs unprofiled")
    assert "a_module_that_is_not_installed" in lines[0]
    assert not (tmp_path / "out").exists()


def test_record_function_is_hooked_only_when_a_capture_can_read_its_regions(tmp_path):
    """Regions reach only the capture: an NDET-only process leaves ``record_function`` as torch has it
    (its optimizer steps would pay six Python frames a step for nothing); a capture wraps it."""
    code = ("import torch, torch.distributed; "
            "print(getattr(torch.autograd.profiler.record_function, '_neuron_explorer_wrapped', False))")
    ndet = _run(code, NEURON_RT_DBG_NDET_FLUSH_USEC="1000000", NEURON_RT_DBG_NDET_LOG_LOCATION=str(tmp_path))
    assert ndet.returncode == 0 and ndet.stdout.strip() == "False", ndet.stderr
    cap = _run(code, NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"))
    assert cap.returncode == 0 and cap.stdout.strip() == "True", cap.stderr


# (and util.alloc, the offline tools' allocator tuning: bench/table.py counts it out of the capture)
_HEAVY = ("google.protobuf", "neuron_explorer.proto", "psutil", "numpy.ma", "neuron_explorer.util.alloc")
_TRAIN_AND_STOP = f"""
import sys, torch
m = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(m.parameters(), 0.1)
for _ in range(5):
    opt.zero_grad(); m(torch.randn(4, 8)).sum().backward(); opt.step()
import neuron_explorer.boot as boot
boot.stop()  # the final write, as at exit
print("LOADED", [n for n in {_HEAVY!r} if n in sys.modules])
"""


@pytest.mark.parametrize("device", ["0", "model", "session"])
def test_a_profiled_run_never_loads_what_only_its_writer_would_need(out_dir, device):
    """protobuf and the schema, psutil, numpy.ma: ~40 ms of a profiled process's CPU that the
    writer and the samplers do without (decisions 0213, 0214); a plain torch run loads none."""
    p = _run(_TRAIN_AND_STOP, NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out_dir),
             NEURON_RT_INSPECT_DEVICE_PROFILE=device)
    assert p.returncode == 0 and "LOADED []" in p.stdout, (p.stdout, p.stderr)
    (s,) = sessions(out_dir)
    assert s.num_events > 0 and s.cpu is not None and s.mem is not None
    assert bool(s.device_paths) == (device != "0") and bool(s.neff_paths) == (device != "0")
