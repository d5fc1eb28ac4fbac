"""The promises the matrix checks, one small function each, and when each applies.

Every function takes the cell's results and the results it is compared with (``Ctx``) and raises
``AssertionError`` with what differs.  The event groups used to judge a type filter are the
README's event vocabulary table (its "group" column), written out here rather than taken from the
code under test: a filter must keep exactly the types the documentation says it keeps."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Callable

from .cells import Program, Setting

# README "Event vocabulary": the group of every event type (a region is `framework_op` in ntrace.pb)
HARDWARE = {"nc_exec_running", "nrt_model_switch", "cc_running", "cc_exec_barrier", "numerical_err",
            "timestamp_sync_point", "hw_notify"}
SOFTWARE = {"model_load", "nrt_load", "nrt_execute", "framework_op", "nrt_tensor_read", "nrt_tensor_write",
            "runtime_execute", "kbl_exec_wait", "device_exec", "kmgr_exec_core"}
ALIASES = {"tensor_read": "nrt_tensor_read", "tensor_write": "nrt_tensor_write", "cc_exec": "cc_running"}


def kept_types(value: str) -> set[str]:
    """The event types ``NEURON_RT_INSPECT_EVENT_FILTER_TYPE=value`` keeps, as the README states it."""
    keep, drop = set(), set()
    for item in (i.strip() for i in value.split(",") if i.strip()):
        target = drop if item.startswith("^") else keep
        name = item.lstrip("^")
        target |= HARDWARE if name == "hardware" else SOFTWARE if name == "software" else {ALIASES.get(name, name)}
    if not keep:
        keep = HARDWARE | SOFTWARE
    return keep - drop


@dataclass
class Ctx:
    program: Program
    setting: Setting
    cell: dict
    base: dict  # the unprofiled run
    reference: dict | None = None  # the unfiltered capture (``cells.REFERENCE_SETTING``)


def _diff(a: str, b: str, what: str) -> str:
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), f"{what} unprofiled", f"{what} here",
                                      lineterm="", n=1))
    return "\n".join(lines[:60])


def _stderr_tail(c: dict) -> str:
    return "\n--- stderr (tail) ---\n" + c["stderr"][-3000:]


def expected_executions(ctx: Ctx) -> dict[str, dict[str, int]]:
    """The program's own count of what it ran, per process and model kind."""
    gt = ctx.base["ground_truth"]
    assert gt is not None, "the unprofiled run printed no GROUND_TRUTH line" + _stderr_tail(ctx.base)
    return {k: dict(v["counts"]) for k, v in gt.items()}


def expected_numerical(ctx: Ctx, nan_check: bool = True) -> dict[str, int]:
    """Numerical errors per process the NaN check must report (0 where the check is off)."""
    gt = ctx.base["ground_truth"] or {}
    return {k: (v.get("numerical", 0) if nan_check else 0) for k, v in gt.items()}


def _nan_check_on(s: Setting) -> bool:
    """README: NEURON_EXPLORER_NAN_CHECK=1, which NDET turns on by default (docs/ndet.md)."""
    return s.env.get("NEURON_EXPLORER_NAN_CHECK", "1" if s.ndet else "0") == "1"


def graph_name(name: str) -> str:
    """A model name without its hash and line: ``Net_9219bedba6d7d298_bwd`` -> ``Net_bwd``,
    ``train_step@jax_train.py:60_f0cab710808ae4a8`` -> ``train_step@jax_train.py``."""
    return re.sub(r"_[0-9a-f]{16}(?=_bwd$|$)", "", re.sub(r":\d+(?=_[0-9a-f]{16})", "", name))


def _procs(summary: dict | None) -> dict[str, dict]:
    return (summary or {}).get("processes", {})


# ------------------------------------------------------------------------------------ checks


def check_stdout(ctx: Ctx) -> None:
    a, b = ctx.base["stdout"], ctx.cell["stdout"]
    if ctx.program.mask:
        a, b = re.sub(ctx.program.mask, "<masked>", a), re.sub(ctx.program.mask, "<masked>", b)
    assert a == b, "stdout differs from the unprofiled run:\n" + _diff(a, b, "stdout") + _stderr_tail(ctx.cell)


def check_exit_status(ctx: Ctx) -> None:
    assert ctx.cell["returncode"] == ctx.base["returncode"], (
        f"exit status {ctx.cell['returncode']}, unprofiled {ctx.base['returncode']}" + _stderr_tail(ctx.cell))


# what our tools may add to stderr: where a profile went (README: "prints where the profile was
# written"; torchrun prefixes a rank's lines with "[rank<r>]: ")
OUR_NOTES = re.compile(r"^(\[rank\d+\]: )?neuron-explorer: profile written to ")


def _stderr_lines(text: str) -> set[str]:
    """stderr's lines with numbers (times, pids, addresses) made alike, as a set: the ranks of a
    torchrun job interleave their lines in any order."""
    return {re.sub(r"0x[0-9a-f]+|\d+", "N", line) for line in text.splitlines() if not OUR_NOTES.match(line)}


def check_stderr(ctx: Ctx) -> None:
    """Nothing new on stderr: no warning, error or thread traceback of ours."""
    new = sorted(_stderr_lines(ctx.cell["stderr"]) - _stderr_lines(ctx.base["stderr"]))
    assert not new, "stderr has lines the unprofiled run does not print:\n" + "\n".join(new[:40])


def check_traceback(ctx: Ctx) -> None:
    a, b = ctx.base["tracebacks"], ctx.cell["tracebacks"]
    assert a, "the unprofiled run printed no traceback" + _stderr_tail(ctx.base)
    assert a == b, "the traceback differs from the unprofiled one:\n" + _diff("\n".join(a), "\n".join(b), "traceback")


def check_executions(ctx: Ctx) -> None:
    """Executions per process and model kind, from nrt_execute and from nc_exec_running alike,
    equal the program's ground truth; every recorded session is one of its processes."""
    want = expected_executions(ctx)
    cap = ctx.cell["capture"]
    assert not cap["errors"], f"sessions that cannot be read: {cap['errors']}"
    got = {k: p["executions_by_type"] for k, p in _procs(cap).items()}
    problems = []
    for key in sorted(set(want) | set(got)):
        for typ in ("nrt_execute", "nc_exec_running"):
            g = (got.get(key) or {}).get(typ, {}) if key in got else None
            if g != want.get(key):
                problems.append(f"{key} {typ}: recorded {g}, ground truth {want.get(key)}")
        if key in _procs(cap):
            failed = _procs(cap)[key]["failed"]
            if failed != (1 if ctx.program.raises and key == "main" else 0):
                problems.append(f"{key}: {failed} executions recorded as failed")
            num = _procs(cap)[key]["types"].get("numerical_err", 0)
            want_num = expected_numerical(ctx, _nan_check_on(ctx.setting)).get(key, 0)
            if num != want_num:
                problems.append(f"{key}: {num} numerical_err events, expected {want_num}")
            num_ret = _procs(cap)[key].get("num_err_executions", 0)
            if num_ret != want_num:
                problems.append(f"{key}: {num_ret} executions ended with ret 1003, expected {want_num}")
    assert not problems, "executions differ from the ground truth:\n" + "\n".join(problems)


def check_model_names(ctx: Ctx) -> None:
    """Graphs are named as the README says: ``<ModuleClass>_<hash>`` (a compiled module too),
    ``_bwd`` for its backward, ``<OptimizerClass>_<hash>``, ``<function>@<file>:<line>_<hash>``."""
    want = {k: sorted(v["models"]) for k, v in ctx.base["ground_truth"].items() if v["models"] is not None}
    got = {k: sorted({graph_name(m.split(":", 1)[1]) for m in p["models"]})
           for k, p in _procs(ctx.cell["capture"]).items()}
    got = {k: v for k, v in got.items() if k in want}
    assert got == want, f"graph names {got}, expected {want}"


def check_capture_usable(ctx: Ctx) -> None:
    """``neuron-explorer check`` finds no error and no warning in the capture."""
    f = ctx.cell["capture"]["findings"]
    assert not f, "check reports:\n" + "\n".join(f"{lvl}: {msg}" for lvl, msg in f)


def check_view_summary(ctx: Ctx) -> None:
    """``view --output-format summary-json`` reads the capture without a warning and counts the
    same executions and numerical errors per process."""
    v = ctx.cell["capture"]["view"]
    assert v["returncode"] == 0 and not v["warnings"], f"view exited {v['returncode']}: {v['warnings']} {v['stderr']}"
    want = {str(p["pid"]): sum(p["executions"].values()) for p in _procs(ctx.cell["capture"]).values()}
    got = {pid: p["executions"] for pid, p in v["processes"].items()}
    assert got == want, f"executions per pid: summary {got}, capture {want}"
    want_num = {str(p["pid"]): p["types"].get("numerical_err", 0) for p in _procs(ctx.cell["capture"]).values()}
    got_num = {pid: p["numerical_errors"] for pid, p in v["processes"].items()}
    assert got_num == want_num, f"numerical errors per pid: summary {got_num}, capture's numerical_err {want_num}"


# The summary's insights each corpus program may get because they are true of it (why, beside
# each); any other is a false finding (docs/summary.md, "Noise threshold").  Kept here, not on
# ``cells.Program``: what a program may be told is this check's business.
TRUE_FINDINGS: dict[str, tuple[str, ...]] = {
    # its DataLoader's two workers start again every epoch (persistent_workers off): a real cost,
    # which its eight steps on a loaded machine may or may not lift above their own spread
    "cnn": ("data_loading",),
    # a 10-32-5 model: its backward is far shorter than gloo's all-reduce of the gradients, which
    # therefore cannot overlap: the step waits for it
    "ddp": ("exposed_collectives",),
    # its static argument changes from tanh to relu half way: train_step compiles again, and the
    # worker's power_sum compiles for each new k
    "jax": ("recompilation",),
    "jax_in_process": ("recompilation",),
    "nan": ("numerical_errors",),
    # Adam's per-parameter loop (no fused or foreach path by default on CPU) beside a tiny compiled
    # MLP: measured without any profiler, opt.step() is 0.23-0.39 ms of a 0.7-1.4 ms step (27-36%
    # median, >= 25% in 64-92% of the steps), and Adam(fused=True) takes 0.09-0.11 ms instead of
    # 0.24 (decision 0138)
    "compiled_inductor": ("optimizer_share",),
    "compiled_aot_eager": ("optimizer_share",),
}


def check_insights(ctx: Ctx) -> None:
    """The summary finds nothing in a program but what is true of it (``TRUE_FINDINGS``): a
    setting's own cost (the monitor, NDET, the pure-Python path) is no finding.  Not checked
    under a device profile, which records the ops of the executions it covers on the host: those
    steps are the profiler's, not the program's (docs/summary.md)."""
    v = ctx.cell["capture"]["view"]
    assert v["insights"] is not None, f"no summary: view exited {v['returncode']}: {v['stderr']}"
    allowed = TRUE_FINDINGS.get(ctx.program.name, ())
    false = [i for i in v["insights"] if i["id"] not in allowed]
    assert not false, (f"false findings {false} ({v.get('steady_steps')} steady steps, noise threshold "
                       f"{v.get('noise_threshold')})")


def check_device_files(ctx: Ctx) -> None:
    """``model``: one .ntff per graph executed (per core), ``session``: one per core; a .neff per graph."""
    problems = []
    for key, p in _procs(ctx.cell["capture"]).items():
        graphs = len({m for m in p["models"]})
        executed = sum(p["executions"].values())
        if not executed:
            continue
        if ctx.setting.device == "model":
            ok = len(p["ntff"]) == graphs and all(n.endswith(".ntff") and "_instid_" in n for n in p["ntff"])
        else:
            ok = len(p["ntff"]) == 1 and re.fullmatch(r"profile_nc_\d+_session_0\.ntff", p["ntff"][0]) is not None
        if not ok:
            problems.append(f"{key}: {graphs} graphs, device traces {p['ntff']}")
        if p["neff"] != graphs:
            problems.append(f"{key}: {graphs} graphs, {p['neff']} .neff files")
    assert not problems, "\n".join(problems)


def _scheduled(p: Program, types: dict[str, int]) -> dict[str, int]:
    """``types`` with the counts that depend on the threads' interleaving (``Program.scheduled``)
    reduced to their presence: two runs of the program give different numbers."""
    return {t: (n if t not in p.scheduled else min(n, 1)) for t, n in types.items()}


def check_filtered(ctx: Ctx) -> None:
    """A filtered capture holds exactly the unfiltered capture's events of the kept types, per
    type and process."""
    keep = kept_types(ctx.setting.type_filter)
    ref, got = _procs(ctx.reference["capture"]), _procs(ctx.cell["capture"])
    ref_keys = {k: k for k in ref}
    problems = []
    for key in sorted(set(ref_keys) | set(got)):
        want = {t: n for t, n in _scheduled(ctx.program, (ref.get(key) or {}).get("types", {})).items() if t in keep}
        have = _scheduled(ctx.program, (got.get(key) or {}).get("types", {}))
        if want != have:
            lost = {t: f"{have.get(t, 0)} of {n}" for t, n in want.items() if have.get(t, 0) != n}
            extra = {t: n for t, n in have.items() if t not in want}
            problems.append(f"{key}: kept types differ; lost {lost}, not expected {extra}")
    assert not problems, f"filter {ctx.setting.type_filter!r} keeps {sorted(keep)}:\n" + "\n".join(problems)


def check_same_as_c(ctx: Ctx) -> None:
    """The pure-Python path records what the C path records (same types and counts per process)."""
    ref, got = _procs(ctx.reference["capture"]), _procs(ctx.cell["capture"])
    a = {k: _scheduled(ctx.program, p["types"]) for k, p in ref.items()}
    b = {k: _scheduled(ctx.program, p["types"]) for k, p in got.items()}
    assert a == b, f"C path {a}\npure Python {b}"


def _capture_by_pid(ctx: Ctx) -> dict[int, dict[str, int]]:
    return {p["pid"]: p["executions"] for p in _procs(ctx.cell["capture"]).values()}


def check_ndet(ctx: Ctx) -> None:
    """NDET's executions per process and kind equal the capture's (when there is one) and the
    ground truth, and so do its collectives and numerical errors; each log has its final write
    and nothing left in flight (clean programs)."""
    logs = _procs(ctx.cell["ndet"])
    assert logs, "no NDET log was written"
    problems = []
    want = expected_executions(ctx)
    got = {k: v["executions"] for k, v in logs.items()}
    if got != want:
        problems.append(f"NDET {got}, ground truth {want}")
    if ctx.cell["capture"] is not None:
        cap = _capture_by_pid(ctx)
        cc = {p["pid"]: p["types"].get("cc_running", 0) + p["types"].get("cc_exec_barrier", 0)
              for p in _procs(ctx.cell["capture"]).values()}
        for key, log in logs.items():
            if cap.get(log["pid"]) != log["executions"]:
                problems.append(f"{key} (pid {log['pid']}): NDET {log['executions']}, capture {cap.get(log['pid'])}")
            if cc.get(log["pid"]) != log["collectives"]:
                problems.append(f"{key} (pid {log['pid']}): NDET {log['collectives']} collectives and barriers, "
                                f"capture {cc.get(log['pid'])}")
    for key, log in logs.items():
        if not log["final"]:
            problems.append(f"{key}: no final write ({log['reason']})")
        if not ctx.program.raises and log["in_flight"]:
            problems.append(f"{key}: {log['in_flight']} records in flight after a clean exit")
        want_num = expected_numerical(ctx).get(key, 0)
        if log["numerical_errors"] != want_num:
            problems.append(f"{key}: {log['numerical_errors']} numerical errors, the program had {want_num}")
    assert not problems, "\n".join(problems)


def check_ndet_verdict(ctx: Ctx) -> None:
    """``neuron-det`` on a clean program's logs: ``no errors detected``, exit 0; on a program that
    died of its exception: exit 1, and it names the exception; on one whose outputs went NaN:
    exit 1, naming the first numerical error."""
    cli = ctx.cell["ndet"]["cli"]
    assert cli is not None, "no NDET log was written"
    if ctx.program.raises:
        assert cli["returncode"] == 1 and "BadBatch" in cli["stdout"], cli
    elif any(expected_numerical(ctx).values()):
        assert cli["returncode"] == 1 and "first numerical error" in cli["stdout"], cli
    else:
        assert cli["returncode"] == 0 and "no errors detected" in cli["stdout"], cli


def check_monitor(ctx: Ctx) -> None:
    """neuron-monitor counted every execution of each process (the sum of its reports), and
    reported only the program's processes."""
    mon = ctx.cell["monitor"]
    problems = []
    if mon["returncode"] not in (0, -15):
        problems.append(f"neuron-monitor exited with {mon['returncode']}: {mon['stderr']}")
    by_pid = {int(k): v for k, v in mon["executions_by_pid"].items()}
    if mon.get("monitor_pid") in by_pid:
        problems.append(f"neuron-monitor reports itself (pid {mon['monitor_pid']}) as an application")
        by_pid.pop(mon["monitor_pid"])
    want = expected_executions(ctx)
    if len(by_pid) != len(want):
        problems.append(f"{len(by_pid)} applications reported (pids {sorted(by_pid)}), the program has "
                        f"{len(want)} processes that run a framework ({sorted(want)})")
    totals = sorted(v for v in by_pid.values() if v)
    if totals != sorted(sum(c.values()) for c in want.values()):
        problems.append(f"executions per process: monitor {sorted(by_pid.items())}, ground truth "
                        f"{ {k: sum(c.values()) for k, c in want.items()} }")
    if ctx.cell["capture"] is not None:
        for pid, ex in _capture_by_pid(ctx).items():
            if by_pid.get(pid, 0) != sum(ex.values()):
                problems.append(f"pid {pid}: monitor {by_pid.get(pid, 0)}, capture {sum(ex.values())}")
    assert not problems, "\n".join(problems) + f"\n({mon['reports']} reports)"


@dataclass(frozen=True)
class Check:
    name: str
    applies: Callable[[Program, Setting], bool]
    run: Callable[[Ctx], None]
    needs_reference: bool = False


def _capture(p: Program, s: Setting) -> bool:
    return s.capture and not s.type_filter


CHECKS = [
    Check("stdout", lambda p, s: True, check_stdout),
    Check("exit_status", lambda p, s: True, check_exit_status),
    Check("stderr", lambda p, s: True, check_stderr),
    Check("traceback", lambda p, s: p.raises, check_traceback),
    Check("executions", _capture, check_executions),
    Check("model_names", _capture, check_model_names),
    Check("capture_usable", _capture, check_capture_usable),
    Check("view_summary", _capture, check_view_summary),
    Check("insights", lambda p, s: _capture(p, s) and s.device is None, check_insights),
    Check("device_files", lambda p, s: _capture(p, s) and s.device is not None, check_device_files),
    Check("filtered", lambda p, s: s.type_filter is not None, check_filtered, needs_reference=True),
    Check("same_as_c", lambda p, s: s.env.get("NEURON_EXPLORER_PURE_PYTHON") == "1", check_same_as_c,
          needs_reference=True),
    Check("ndet", lambda p, s: s.ndet, check_ndet),
    Check("ndet_verdict", lambda p, s: s.ndet, check_ndet_verdict),
    Check("monitor", lambda p, s: s.monitor, check_monitor),
]
