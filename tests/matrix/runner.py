"""Running one cell of the matrix (a program under a setting) and boiling what it left behind down
to plain data: exit status, output, the capture's counts per process, NDET's, neuron-monitor's.

The results are JSON, cached on disk per pytest run and shared by the xdist workers (a file lock per
cell), so each cell runs once however many checks read it and whichever worker asks first."""

from __future__ import annotations

import fcntl
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from neuron_explorer.contracts.events import RET_NUM_ERR

from ..inproc import run_tool
from .cells import Program, Setting

# what a program prints last: its own count of what it ran, per process
GROUND_TRUTH = re.compile(r"^GROUND_TRUTH (\{.*\})$", re.M)
# Python's traceback blocks: the header, the indented frames, and the exception line
TRACEBACK = re.compile(r"^Traceback \(most recent call last\):\n(?:[ \t].*\n)*.*$", re.M)

MONITOR_PERIOD = "250ms"
SRC = Path(__file__).resolve().parents[2] / "src"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ground_truth(stdout: str) -> dict[str, dict] | None:
    """The program's own account, per process key: ``counts`` (model kind -> executions),
    ``models`` (the graph names it expects, without hash or line; None: not given) and
    ``numerical`` (forward calls whose outputs hold a NaN or Inf).  None: no GROUND_TRUTH line."""
    found = GROUND_TRUTH.findall(stdout)
    if not found:
        return None
    out = {}
    for proc in json.loads(found[-1])["processes"]:
        proc = dict(proc)
        key, models, numerical = proc.pop("key"), proc.pop("models", None), proc.pop("numerical", 0)
        out[key] = {"counts": {k: v for k, v in proc.items() if v}, "models": models, "numerical": numerical}
    return out


def tracebacks(stderr: str) -> list[str]:
    return TRACEBACK.findall(stderr)


# ---------------------------------------------------------------------------------------- env


def stub_dir(root: Path) -> Path:
    """Modules that shadow neuron-explorer's start-up hooks (the ``.pth`` line's and the
    ``torch.backends``/``jax_plugins`` entry points' targets) with ones that do nothing: put first
    on ``PYTHONPATH``, the program runs as if neuron-explorer were not installed."""
    d = root / "unprofiled-stubs"
    if not (d / "neuron_explorer_autoload.py").exists():
        (d / "jax_plugins").mkdir(parents=True, exist_ok=True)
        (d / "neuron_explorer_autoload.py").write_text(
            "def autostart():\n    pass\n\n\ndef on_torch_import():\n    pass\n")
        (d / "jax_plugins" / "neuron_explorer_profiler.py").write_text("")
    return d


def base_env(work: Path) -> dict[str, str]:
    """The test's environment without any of our variables, with a private XDG runtime directory
    (so no neuron-monitor another test runs can see the program) and single-threaded math."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NEURON_RT_", "NEURON_EXPLORER_", "NEURON_PROCESS_TAG", "XLA_", "XDG_RUNTIME_DIR",
                                "TORCHINDUCTOR_", "JAX_"))}
    xdg = work / "xdg"
    xdg.mkdir(mode=0o700, parents=True, exist_ok=True)
    env.update(XDG_RUNTIME_DIR=str(xdg), OMP_NUM_THREADS="1", TORCHINDUCTOR_COMPILE_THREADS="1",
               PYTHONHASHSEED="0")
    # the tree these tests belong to, whatever is installed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    return env


def command(program: Program) -> list[str]:
    if program.ranks:
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(program.ranks),
                "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(program.path),
                *program.args]
    return [sys.executable, str(program.path), *program.args]


# ------------------------------------------------------------------------------------ monitor


class Monitor:
    """A real ``neuron-monitor`` on the cell's private stats directory, reporting execution stats
    every MONITOR_PERIOD; started (and announced) before the program, stopped after it."""

    def __init__(self, env: dict[str, str], work: Path) -> None:
        self.stats_dir = Path(env["XDG_RUNTIME_DIR"]) / "neuron-explorer" / "stats"
        conf = work / "monitor.json"
        conf.write_text(json.dumps({"period": MONITOR_PERIOD,
                                    "neuron_runtimes": [{"metrics": [{"type": "execution_stats"}]}]}))
        self.err_path = work / "monitor.stderr"
        self.reports: list[dict] = []
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "neuron_explorer.monitor.cli", "-c", str(conf),
                                          "--verbose", "2"], env=env, stdout=subprocess.PIPE, stderr=err,
                                         text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        deadline = time.monotonic() + 60
        while not (self.stats_dir / "monitor.alive").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"neuron-monitor did not start: {self.err_path.read_text()[-2000:]}")
            time.sleep(0.05)

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.reports.append(json.loads(line))
            except ValueError:
                self.reports.append({"unparsed": line[:200]})

    def stop(self) -> dict:
        # the program has exited: a report begun after now reads its final snapshot, and the second
        # report from now is such a one (the first may have begun before); waiting on the reports, not
        # on the clock, holds at any load (it was a fixed 1.5 s, six periods at idle: decision 0153)
        seen, deadline = len(self.reports), time.monotonic() + 60
        while len(self.reports) < seen + 2 and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=10)
        per_pid: dict[int, int] = Counter()
        tags: dict[int, str] = {}
        for rep in self.reports:
            for app in rep.get("neuron_runtime_data", []):
                ex = (app.get("report") or {}).get("execution_stats") or {}
                per_pid[app["pid"]] += sum((ex.get("execution_summary") or {}).values())
                tags[app["pid"]] = app.get("neuron_runtime_tag")
        return {"executions_by_pid": {str(k): v for k, v in per_pid.items()},
                "tags": {str(k): v for k, v in tags.items()},
                "reports": len(self.reports), "returncode": self.proc.returncode, "monitor_pid": self.proc.pid,
                "stderr": self.err_path.read_text()[-3000:]}


# ------------------------------------------------------------------------------- summarising


def _keyed(items: list[dict]) -> dict[str, dict]:
    """Process keys as the programs' ground truth names them: ``rank:<r>`` for a ranked process,
    else ``main``, ``worker``, ``worker:3``, ... in start order."""
    out, order = {}, 0
    for it in sorted(items, key=lambda i: (i["start_wall_ns"], i["pid"])):
        if it["rank"] >= 0:
            out[f"rank:{it['rank']}"] = it
        else:
            order += 1
            out["main" if order == 1 else "worker" if order == 2 else f"worker:{order}"] = it
    return out


def summarize_capture(root: Path) -> dict:
    """Per process: event counts per type, executions per model kind (from ``nrt_execute`` and
    from ``nc_exec_running``), failed executions, device-profile and NEFF files, ``check``'s
    findings."""
    from neuron_explorer.analysis.reader import discover, load_session
    from neuron_explorer.view.check import check

    if not root.exists():
        return {"processes": {}, "findings": [], "errors": []}
    items, errors = [], []
    for path in discover(str(root)):
        try:
            s = load_session(path)
        except Exception as e:  # noqa: BLE001 - a session that cannot be read is a finding of its own
            errors.append(f"{path}: {e}")
            continue
        types = [s.type_names[t] for t in s.events["type"]] if s.num_events else []
        by_kind: dict[str, dict[str, int]] = {}
        failed = num_err = 0
        for name in ("nrt_execute", "nc_exec_running"):
            col = s.arg(name, "model_id")
            tid = s.type_id(name)
            c: Counter = Counter()
            if col is not None and tid is not None:
                mask = s.events["type"] == tid
                for m in s.events[col][mask]:
                    c[s.models[int(m)].kind if 0 <= int(m) < len(s.models) else f"model?{int(m)}"] += 1
                if name == "nrt_execute" and s.arg(name, "ret"):
                    # ret 1003 (NRT_EXEC_COMPLETED_WITH_NUM_ERR): the call completed, its outputs
                    # hold NaN/Inf; counted apart from the executions that failed
                    rets = s.events[s.arg(name, "ret")][mask]
                    num_err = int((rets == RET_NUM_ERR).sum())
                    failed = int((rets != 0).sum()) - num_err
            by_kind[name] = dict(c)
        info = s.info
        items.append({
            "path": path, "pid": s.pid, "rank": int(info.rank) if info is not None else -1,
            "start_wall_ns": int(info.start_wall_ns) if info is not None else 0,
            "end_reason": info.end_reason if info is not None else "",
            "types": dict(Counter(types)),
            "executions": by_kind.get("nrt_execute") or by_kind.get("nc_exec_running") or {},
            "executions_by_type": by_kind, "failed": failed, "num_err_executions": num_err,
            "models": sorted({f"{m.kind}:{m.name}" for m in s.models}),
            "ntff": sorted(os.path.basename(p) for p in s.device_paths),
            "neff": len(s.neff_paths),
        })
    findings = [[f.level, f.message] for f in check(str(root)) if f.level in ("error", "warning")]
    return {"processes": _keyed(items), "findings": findings, "errors": errors, "view": view_summary(root)}


def view_summary(root: Path) -> dict:
    """What ``neuron-explorer view --output-format summary-json`` says of the capture: exit status,
    stderr, warnings, its insights (with their figures) and noise threshold, and per process (by
    pid) its executions and numerical errors."""
    out = root.parent / "summary.json"
    # in this process: the same command and answer without a fresh interpreter's 0.3 CPU-s (decision 0173)
    p = run_tool("neuron_explorer", ["view", "-d", str(root), "--output-format", "summary-json", "--output-file",
                                     str(out)], base_env(root.parent))
    res: dict = {"returncode": p.returncode, "stderr": p.stderr[-3000:], "processes": {}, "warnings": None,
                 "insights": None}
    if p.returncode in (0, 1) and out.exists():
        doc = json.loads(out.read_text())
        res["warnings"] = doc.get("warnings")
        res["insights"] = [{k: i.get(k) for k in ("id", "title", "impact_ns_per_step", "confidence")}
                           | {"figures": (i.get("evidence") or {}).get("figures")} for i in doc.get("insights", [])]
        res["noise_threshold"] = doc.get("noise_threshold")
        res["steady_steps"] = ((doc.get("steps") or {}).get("variation") or {}).get("steady_steps")
        for prof in doc.get("profiles", []):
            cores = prof.get("cores", [])
            res["processes"][str(prof["pid"])] = {
                "executions": sum(c.get("executions", 0) for c in cores),
                "numerical_errors": sum(c.get("numerical_errors", 0) for c in cores)}
    return res


def summarize_ndet(log_dir: Path) -> dict:
    """Per log: executions per model kind, collectives, numerical errors, in-flight records, how
    the process ended; and ``neuron-det``'s verdict and exit status."""
    from neuron_explorer.contracts import ndet_log as fmt
    from neuron_explorer.ndet import sources

    if not log_dir.exists() or not any(log_dir.iterdir()):
        return {"processes": {}, "cli": None}
    items = []
    for path in sources.discover(str(log_dir)):
        log = sources.load(path)
        rec = log.records
        ex = rec[rec["kind"] == fmt.KIND_EXEC]
        kinds = Counter(str(log.models.get(int(a), {}).get("kind", f"model?{int(a)}")) for a in ex["a"])
        items.append({
            "path": path, "pid": log.pid, "rank": log.rank, "start_wall_ns": log.start_wall_ns,
            "final": log.final, "reason": log.reason, "executions": dict(kinds),
            "in_flight": int((rec["state"] == fmt.STATE_IN_FLIGHT).sum()),
            "numerical_errors": int((rec["kind"] == fmt.KIND_NUMERICAL_ERROR).sum()),
            "collectives": int(sum((rec["kind"] == k).sum() for k in fmt.CC_KINDS)),
            "events_recorded": log.events_recorded, "num_entries": log.num_entries,
        })
    cli = run_tool("neuron_explorer.ndet.cli", ["--log-prefix", str(log_dir), "-o",
                                                str(log_dir.parent / "ndet-trace.json")], base_env(log_dir.parent))
    return {"processes": _keyed(items),
            "cli": {"returncode": cli.returncode, "stdout": cli.stdout[-3000:], "stderr": cli.stderr[-3000:]}}


# ------------------------------------------------------------------------------------ running


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, int | str, str, str]:
    """Run to the end: (pid, exit status or "timeout", stdout, stderr).  The program gets a
    session of its own, so that a timeout ends its whole tree (torchrun's ranks hold the pipes)."""
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
        return p.pid, p.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        return p.pid, "timeout", stdout, stderr
    finally:
        if p.poll() is None:  # interrupted: leave nothing behind
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def run_cell(program: Program, setting: Setting | None, work: Path) -> dict:
    """Run ``program`` under ``setting`` (None: unprofiled, neuron-explorer's hooks shadowed by
    stubs) in a fresh directory ``work``; returns the cell's results as plain data."""
    work.mkdir(parents=True, exist_ok=True)
    cwd = work / "cwd"
    cwd.mkdir(exist_ok=True)
    out, ndet = work / "capture", work / "ndet"
    ndet.mkdir(exist_ok=True)
    env = base_env(work)
    if setting is None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stub_dir(work.parent)), env.get("PYTHONPATH")]))
    else:
        env.update({k: v.format(out=out, ndet=ndet) for k, v in setting.env.items()})
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    monitor = Monitor(env, work) if setting is not None and setting.monitor else None
    t0 = time.monotonic()
    try:
        pid, rc, stdout, stderr = _run(command(program), env, cwd, program.timeout)
    except BaseException:
        if monitor is not None:
            monitor.proc.kill()
        raise
    wall = time.monotonic() - t0
    res = {"program": program.name, "setting": setting.name if setting else "unprofiled", "pid": pid, "returncode": rc,
           "stdout": stdout, "stderr": stderr[-20000:], "tracebacks": tracebacks(stderr),
           "ground_truth": ground_truth(stdout), "wall_s": round(wall, 2)}
    res["monitor"] = monitor.stop() if monitor else None
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    res["cpu_s"] = round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 2)  # program (+ monitor)
    res["capture"] = summarize_capture(out) if setting is not None and setting.capture else None
    res["ndet"] = summarize_ndet(ndet) if setting is not None and setting.ndet else None
    return res


class CellCache:
    """Cell results on disk under a directory every xdist worker of the run shares; a lock per
    cell makes the first asker run it and the others wait for its result."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def get(self, program: Program, setting: Setting | None) -> dict:
        name = f"{program.name}--{setting.name if setting else 'unprofiled'}"
        result = self.root / f"{name}.json"
        with open(self.root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if result.exists():
                return json.loads(result.read_text())
            res = run_cell(program, setting, self.root / name)
            tmp = result.with_suffix(".tmp")
            tmp.write_text(json.dumps(res))
            tmp.replace(result)
            return res
