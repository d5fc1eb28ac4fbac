"""``neuron-explorer check -d DIR``: is this capture usable?  Reports the documented signs of a
failed capture in plain words, with what to do about each."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from neuron_explorer.analysis.pbfile import ProfileError
from neuron_explorer.analysis.reader import discover, load_device_trace, load_session, wall_offset_ns
from neuron_explorer.contracts.env import DEVICE_PROFILE, EAGER, ConfigError, parse_device_profile
from neuron_explorer.util.names import printable
from neuron_explorer.util.storage import is_url

HINT_EMPTY = ("the output directory is empty: profiling was not enabled (NEURON_RT_INSPECT_ENABLE=1, "
              "'neuron-explorer inspect', or a NeuronConfig with torch.profiler) or the workload did not run")
HINT_NO_NEFF = ("has device traces but no .neff files: set neff_cache_dir in NeuronConfig or "
                "TORCH_NEURONX_NEFF_CACHE_DIR before running, so the graphs are copied into the profile")
HINT_ONLY_PB = ("has only .pb files, no .ntff: a system profile only (fine if intended; set "
                "NEURON_RT_INSPECT_DEVICE_PROFILE=1 or ProfileMode.DEVICE for device traces)")


@dataclass
class Finding:
    level: str  # "error", "warning", "info", "ok"
    message: str


def check(root: str, endpoint_url: str | None = None) -> list[Finding]:
    """Findings for every profile under ``root``, from the same loading and validation code that
    ``view`` runs: a file ``view`` would skip is an error here, so both exit with status 1."""
    out: list[Finding] = []
    if is_url(root):
        return _check_url(root, endpoint_url)
    if not os.path.isdir(root):
        return [Finding("error", printable(f"{root}: no such directory"))]
    try:
        empty = not any(os.scandir(root))
    except OSError as e:
        return [Finding("error", printable(f"{root}: cannot list directory ({e.strerror})"))]
    if empty:
        return [Finding("error", printable(f"{root}: {HINT_EMPTY}"))]
    problems: list[tuple[str, str]] = []
    sessions = discover(root, problems)
    out += [Finding("error", msg) for msg, _ in problems]
    if not sessions:
        return out + [Finding("error", printable(f"{root}: no profile found (no ntrace.pb or trace_info.pb below "
                                                 f"it); {HINT_EMPTY}"))]
    for d in sessions:
        out += _check_session(d)
    return out


def _check_url(url: str, endpoint_url: str | None) -> list[Finding]:
    """``check -d s3://bucket/prefix``: each session copied here in turn and checked like a local
    one (the endpoint from ``--endpoint-url``, else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL;
    ``view.remote``)."""
    from neuron_explorer.contracts.env import s3_endpoint
    from neuron_explorer.util.storage import StorageError

    from . import remote

    try:
        endpoint = s3_endpoint(endpoint_url)
        if not remote.discover(url, endpoint):
            return [Finding("error", printable(f"{url}: no profile found (no ntrace.pb or trace_info.pb below "
                                               f"it); {HINT_EMPTY}"))]
        return remote.check_sessions(url, endpoint, _check_session)
    except (StorageError, ConfigError) as e:
        return [Finding("error", printable(str(e)))]


def _check_session(d: str) -> list[Finding]:
    out: list[Finding] = []
    try:
        s = load_session(d)
    except ProfileError as e:
        return [Finding("error", str(e))]
    shown = printable(d)
    # damaged optional files: view leaves them out and exits with status 1, so they are errors here
    out += [Finding("error", w) for w in s.warnings]
    bad_ntff = False
    wall = wall_offset_ns(s)
    for p in s.device_paths:
        try:
            load_device_trace(p, wall)  # (0 bytes, no ops: the warm-up hint is in the message)
        except ProfileError as e:
            out.append(Finding("error", str(e)))
            bad_ntff = True
    if s.device_paths and not s.neff_paths:
        out.append(Finding("warning", f"{shown} {HINT_NO_NEFF}"))
    no_final = s.info is not None and s.info.end_reason == "running"
    if not s.device_paths:
        out.append(_no_device_trace(s, shown, no_final))
    if no_final:
        out.append(Finding("error", f"{shown}: {printable(final_write_missing(s.info))}"))
    if s.info is not None and not s.info.runtime_events_seen:
        if no_final:  # the workload may well have run: the files stop at the last complete write
            out.append(Finding("warning", f"{shown}: no runtime events up to its last complete write"))
        else:
            note = printable(s.info.note or nothing_ran(s.info))
            out.append(Finding("warning", f"{shown}: no runtime events were recorded ({note})"))
    elif s.info is not None and not no_final and s.trace is not None and not _count(s, *_RAN):
        # other events only (framework regions, loads, clock samples): still nothing executed
        out.append(Finding("warning", f"{shown}: no execution or collective was recorded "
                                      f"({printable(s.info.note or nothing_ran(s.info))})"))
    if not bad_ntff:
        out.append(Finding("ok", f"{shown}: {s.num_events} system events, {len(s.device_paths)} device trace(s), "
                                 f"{len(s.neff_paths)} NEFF(s)"))
    return out


def device_profile_requested(info) -> str:
    """How the capture asked for device profiles ("" when it did not), from its recorded config."""
    if info is None:
        return ""
    cfg = dict(info.config)
    if "DEVICE" in cfg.get("modes", "").split(","):
        return "ProfileMode.DEVICE"
    value = cfg.get(DEVICE_PROFILE, "")
    try:
        mode = parse_device_profile(value)
    except ConfigError:
        mode = None
    return f"{DEVICE_PROFILE}={value}" if mode else ""


def nothing_ran(info) -> str:
    """Why a capture that was on recorded no execution, in words."""
    when = ("between the torch.profiler start and stop" if info is not None and info.end_reason == "profiler stop"
            else "while the runtime was on")
    cause = f"no module, compiled graph or collective ran {when}"
    if info is not None and dict(info.config).get(EAGER, "1").strip().lower() in ("0", "false", "no", "off"):
        cause += f" ({EAGER}=0: eager modules were not recorded)"
    return cause


_RAN = ("nrt_execute", "cc_running", "cc_exec_barrier")  # what a workload that ran records


def _count(s, *names: str) -> int:
    """Events of these types in a session."""
    ids = [t for t in (s.type_id(n) for n in names) if t is not None]
    if not ids or not s.num_events:
        return 0
    return int(np.isin(s.events["type"], ids).sum())


def _no_device_trace(s, shown: str, no_final: bool) -> Finding:
    """No .ntff: advise device profiling only when it was off; otherwise say why none was written."""
    how = device_profile_requested(s.info)
    if not how:
        return Finding("info", f"{shown} {HINT_ONLY_PB}")
    if no_final:
        return Finding("warning", f"{shown}: device profiling was on ({how}) but the final write, which "
                                  "writes the device traces, did not happen")
    execs = _count(s, "nrt_execute")
    if s.trace is None:
        cause = "the system profile was off, so what ran is not known"
    elif execs:
        cause = (f"none of its {execs} execution(s) has a device trace here (only executions that ran while "
                 "the capture was on are profiled, in model mode only a graph's first; or the .ntff was removed)")
    else:
        cause = printable(nothing_ran(s.info))
    return Finding("warning", f"{shown}: device profiling was on ({how}) but no device trace was written: {cause}")


def final_write_missing(info) -> str:
    """Why a profile whose trace_info.pb still says "running" is incomplete, in words."""
    when = ""
    if len(info.anchors):
        when = time.strftime(" (%Y-%m-%d %H:%M:%S UTC)", time.gmtime(info.anchors[-1].wall_ns / 1e9))
    return ("the final write did not happen: the process was killed (SIGKILL, out of memory) or its final "
            "write failed (a full disk: its stderr says 'profile incomplete'); the files hold its last "
            f"complete periodic write{when}")


def render(findings: list[Finding]) -> tuple[str, int]:
    lines = [f"{f.level}: {f.message}" for f in findings]
    errors = sum(f.level == "error" for f in findings)
    warns = sum(f.level == "warning" for f in findings)
    lines.append(f"capture check: {errors} error(s), {warns} warning(s)")
    return "\n".join(lines) + "\n", (1 if errors else 0)
