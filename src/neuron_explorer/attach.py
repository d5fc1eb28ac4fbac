"""``neuron-explorer attach``: capture a window of a running job, on demand, on the same steps in
every process.

The command finds its targets (``--pid``, ``--tag``, ``--all``: processes of this user whose
on-demand thread runs, ``contracts.ondemand.THREAD_NAME``), arms them, reads the step boundaries
each reports, numbers the steps the same way in every target (:func:`align`), asks each for the
window ``K .. K + N - 1`` with K past every target's current step, and waits for the session
directories.  It prints one line per target; its status is 0 only when every target wrote its
window.  See docs/on-demand.md and docs/decisions/0107-on-demand-capture.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from neuron_explorer.contracts import ondemand as od
from neuron_explorer.contracts.env import (
    CPU_UTIL,
    DEVICE_PROFILE,
    FILTER_NC,
    FILTER_TYPE,
    HOST_MEMORY,
    MAX_EVENTS,
    PROCESS_TAG,
    ConfigError,
    parse_device_profile,
    parse_max_events,
    parse_nc_filter,
    parse_type_filter,
)
from neuron_explorer.util.cliargs import UsageError
from neuron_explorer.util.log import get_logger

__all__ = ["Target", "add_attach_parser", "align", "attach_command", "find_targets", "parse_duration", "run",
           "run_ndet"]

POLL_S = 0.05
#: Seconds of steps between the alignment and the window's first step (at least 2 steps): the
#: record phase must reach every target before it ends step K - 1, on a loaded machine too.
MARGIN_S = 1.0


@dataclass
class Target:
    pid: int
    start_time: int
    host: str = ""  # the neuron-monitor that relays to it (host:port), "" for this host
    key: int = 0  # unique among the targets of one request (pids repeat across hosts)
    answer: od.Answer | None = None
    offset: int = 0
    outcome: str = ""  # the line printed for it
    ok: bool = False
    errors: list[str] = field(default_factory=list)


def parse_duration(text: str) -> float:
    """``10s``, ``500ms``, ``2m`` or plain seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 10s, 500ms, 2m)")
    v = float(m.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2) or "s"]
    if not 0 < v <= od.MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range (0, 24h]")
    return v


def _pids(text: str) -> list[int]:
    try:
        pids = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of process ids (e.g. 1234,1235)") from None
    if not pids or any(not 0 < p < 1 << 31 for p in pids):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of process ids")
    return pids


def _endpoints(text: str) -> list[str]:
    out = [e.strip() for e in text.split(",") if e.strip()]
    for e in out:
        host, sep, port = e.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"{e!r} is not HOST:PORT")
    if not out:
        raise argparse.ArgumentTypeError("no HOST:PORT given")
    return out


def _steps(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= od.MAX_STEPS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of steps in [1, {od.MAX_STEPS}]")
    return n


def add_attach_parser(sub) -> None:
    p = sub.add_parser(
        "attach", help="capture a window of a running job, on demand (no restart, no variable set)",
        description="Ask running PyTorch/JAX processes for a capture of N training steps (the same steps in "
                    "every process) or of a duration, and wait for their profiles.",
        epilog="examples:\n  neuron-explorer attach --all --steps 5 -o ./on-demand\n"
               "  neuron-explorer attach --tag 'rank[0-3]' --duration 10s -o ./on-demand\n"
               "  neuron-explorer attach --pid 4242,4243 --steps 20 --device-profile model -o out",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--pid", type=_pids, help="process ids, comma-separated")
    who.add_argument("--tag", help=f"processes whose {PROCESS_TAG} matches this regular expression")
    who.add_argument("--all", action="store_true", help="every PyTorch/JAX process of this user on this host")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--steps", type=_steps, help="training steps to capture (optimizer steps, or root executions)")
    how.add_argument("--duration", type=parse_duration, help="time to capture from the first aligned step (10s)")
    how.add_argument("--ndet", action="store_true",
                     help="instead: have NDET-enabled processes write their flight recorder log now (for neuron-det)")
    p.add_argument("-o", "--output-dir", default="./output", help="where the profiles go (default: ./output)")
    p.add_argument("--device-profile", metavar="MODE", help=f"as {DEVICE_PROFILE} (model or session)")
    p.add_argument("--filter-type", metavar="TYPES", help=f"as {FILTER_TYPE}")
    p.add_argument("--filter-nc", metavar="CORES", help=f"as {FILTER_NC}")
    p.add_argument("-n", "--max-events", metavar="N", help=f"events kept per core, as {MAX_EVENTS}")
    p.add_argument("--no-cpu-util", action="store_true", help=f"no CPU samples ({CPU_UTIL}=0)")
    p.add_argument("--no-host-memory", action="store_true", help=f"no host memory samples ({HOST_MEMORY}=0)")
    p.add_argument("--monitor", type=_endpoints, metavar="HOST:PORT[,...]",
                   help="through these neuron-monitors' control endpoints (one per host), not this host's files")
    p.add_argument("--token-file", metavar="FILE", help="the monitors' control token (a file of mode 600)")
    p.add_argument("--timeout", type=parse_duration, default=120.0,
                   help="give up on targets that have not answered after this long (default 120s)")


def capture_vars(args: argparse.Namespace) -> dict[str, str]:
    """The request's capture variables, checked here by the parsers the processes use."""
    out: dict[str, str] = {}
    try:
        if args.device_profile is not None:
            parse_device_profile(args.device_profile)
            out[DEVICE_PROFILE] = args.device_profile
        if args.filter_type is not None:
            parse_type_filter(args.filter_type)
            out[FILTER_TYPE] = args.filter_type
        if args.filter_nc is not None:
            parse_nc_filter(args.filter_nc)
            out[FILTER_NC] = args.filter_nc
        if args.max_events is not None:
            parse_max_events(MAX_EVENTS, args.max_events)
            out[MAX_EVENTS] = args.max_events
    except ConfigError as e:
        raise UsageError(str(e)) from None
    if args.no_cpu_util:
        out[CPU_UTIL] = "0"
    if args.no_host_memory:
        out[HOST_MEMORY] = "0"
    return out


# -- targets --------------------------------------------------------------------------------------
def find_targets(pids: list[int] | None = None, tag: str | None = None,
                 directory: Path | None = None) -> tuple[list[Target], list[str]]:
    """The targets and the problems met (one line each).  ``pids``: exactly these; else every
    process of this user that listens on ``directory`` (default: ours), whose tag matches ``tag``
    when given."""
    problems: list[str] = []
    if pids is not None:
        out = []
        for pid in dict.fromkeys(pids):
            st = od.process_start_time(pid)
            if st is None:
                problems.append(f"pid {pid}: no such process")
            elif not od.owned(pid):
                problems.append(f"pid {pid}: belongs to another user")
            else:
                out.append(Target(pid, st))
        return out, problems
    rx = None
    if tag is not None:
        try:
            rx = re.compile(tag)
        except re.error as e:
            raise UsageError(f"--tag {tag!r} is not a regular expression: {e}") from None
    found = od.listening_processes(directory if directory is not None else od.default_dir(), rx, PROCESS_TAG)
    return [Target(pid, st) for pid, st in found], problems


# -- alignment -------------------------------------------------------------------------------------
def align(answers: dict[int, od.Answer]) -> tuple[dict[int, int], int] | None:
    """Offsets that number every target's steps alike, and the shortest step (ns) any target
    shows (the median of its latest); None until the boundaries allow it.

    The instant T is the middle of one step of the first target (two consecutive boundaries after
    every target armed): ranks of one job end their steps close together (their collectives keep
    them in step), so the step each was in at T is the same step; its number is the first target's
    count at T."""
    arm = max(a.arm_wall_ns for a in answers.values())
    ref = None
    for pid in sorted(answers):
        after = [b for b in answers[pid].boundaries if b[1] > arm]
        if len(after) >= 2:
            ref = (after[0][1] + after[1][1]) // 2, after[1][1] - after[0][1]
            break
    if ref is None:
        return None
    t, period = ref
    counts = {}
    for pid, a in answers.items():
        if not any(w > t for _, w in a.boundaries):
            return None  # its count at T is not known yet
        counts[pid] = max([c for c, w in a.boundaries if w <= t] or [0])
    base = counts[min(answers)]
    for a in answers.values():  # the fastest target's step sets the margin
        ws = [w for _, w in a.boundaries[-16:]]
        gaps = sorted(b - c for c, b in zip(ws, ws[1:]))
        if gaps:
            period = min(period, gaps[len(gaps) // 2])
    return {pid: base - c for pid, c in counts.items()}, max(period, 1)


# -- the exchange ----------------------------------------------------------------------------------
class Exchange:
    def __init__(self, d: Path, targets: list[Target], req: dict) -> None:
        self.d, self.targets, self.req = d, targets, req
        self.rid = secrets.token_hex(8)
        self.written: list[str] = []

    def send(self, t: Target, **kw) -> None:
        r = od.Request(id=self.rid, pid=t.pid, start_time=t.start_time, **{**self.req, **kw})
        path = od.request_path(self.d, t.pid)
        od.write_private(path, od.encode(r))
        self.written.append(path)

    def read(self, t: Target) -> od.Answer | None:
        path = od.answer_path(self.d, t.pid)
        try:
            a = od.parse_answer(od.read_private(path))
        except od.RequestError as e:
            if os.path.lexists(path):
                t.errors.append(str(e))
            return None
        if a.id == self.rid or (a.id == "0" * 8 and a.state == "error"):
            t.answer = a
            return a
        return None

    def cleanup(self) -> None:
        """Remove this request's files and its answers; another requester's are left alone."""
        for t in self.targets:
            od.remove_request_files(self.d, t.pid, self.rid)


class Relay:
    """The exchange through neuron-monitors' control endpoints (``monitor.control``): the same
    calls as :class:`Exchange`, each to the monitor of the target's host."""

    def __init__(self, endpoints: list[str], token: str, req: dict, timeout: float = 10.0) -> None:
        self.endpoints, self.token, self.req, self.timeout = endpoints, token, req, timeout
        self.rid = secrets.token_hex(8)
        self.targets: list[Target] = []

    def call(self, endpoint: str, path: str, obj: dict) -> dict:
        import http.client

        host, _, port = endpoint.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=self.timeout)
        try:
            conn.request("POST", path, body=json.dumps(obj).encode(),
                         headers={"Content-Type": "application/json", od.TOKEN_HEADER: self.token})
            r = conn.getresponse()
            data = r.read(od.MAX_FILE_BYTES + 1)
        finally:
            conn.close()
        try:
            out = json.loads(data)
        except ValueError:
            out = None
        if not isinstance(out, dict):
            raise od.RequestError(f"{endpoint}{path}: HTTP {r.status}, not a JSON object")
        if r.status != 200:
            raise od.RequestError(f"{endpoint}{path}: {out.get('error', r.status)}")
        return out

    def find(self, pids: list[int] | None, tag: str | None) -> tuple[list[Target], list[str]]:
        out: list[Target] = []
        problems: list[str] = []
        for ep in self.endpoints:
            try:
                got = self.call(ep, "/v1/targets", {"pids": pids, "tag": tag})
                for pid, st in got.get("targets", []):
                    out.append(Target(int(pid), int(st), host=ep, key=len(out)))
                problems += [f"{ep}: {p}" for p in got.get("problems", []) if isinstance(p, str)]
            except (OSError, od.RequestError, ValueError, TypeError) as e:
                problems.append(f"{ep}: {e}")
        self.targets = out
        return out, problems

    def send(self, t: Target, **kw) -> None:
        r = od.Request(id=self.rid, pid=t.pid, start_time=t.start_time, **{**self.req, **kw})
        self.call(t.host, "/v1/send", {"request": r.to_json()})

    def read(self, t: Target) -> od.Answer | None:
        try:
            got = self.call(t.host, "/v1/answer", {"pid": t.pid}).get("answer")
            a = od.parse_answer(json.dumps(got).encode()) if got is not None else None
        except (OSError, od.RequestError) as e:
            t.errors.append(str(e))
            return None
        if a is not None and (a.id == self.rid or (a.id == "0" * 8 and a.state == "error")):
            t.answer = a
            return a
        return None

    def cleanup(self) -> None:
        for t in self.targets:
            try:
                self.call(t.host, "/v1/cleanup", {"pid": t.pid, "id": self.rid})
            except (OSError, od.RequestError):
                pass


def attach_command(args: argparse.Namespace) -> int:
    if not args.ndet and args.steps is None and args.duration is None:
        raise UsageError("attach needs --steps N, --duration D or --ndet")
    cap = capture_vars(args)
    out = os.path.abspath(args.output_dir)
    req = {"phase": "arm", "steps": args.steps, "duration_s": args.duration, "output_dir": out, "capture": cap}
    if args.ndet:
        req = {"phase": "ndet", "steps": None, "duration_s": None, "output_dir": "", "capture": {}}
    relay = None
    if args.monitor:
        if not args.token_file:
            raise UsageError("--monitor needs --token-file (the token the monitors were started with)")
        try:
            token = od.read_token(args.token_file)
        except od.RequestError as e:
            raise UsageError(str(e)) from None
        relay = Relay(args.monitor, token, req)
        targets, problems = relay.find(args.pid, args.tag)
    else:
        targets, problems = find_targets(args.pid, args.tag)
    for p in problems:
        get_logger(__name__).warning(f"neuron-explorer attach: {p}")
    if not targets:
        get_logger(__name__).warning("neuron-explorer attach: no target process (PyTorch/JAX processes of this user "
                                    f"with neuron-explorer installed and {od.ON_DEMAND} not 0)")
        return 1
    ex: Exchange | Relay
    if relay is not None:
        ex = relay
    else:
        try:
            d = od.check_private_dir(od.default_dir(), create=True)
        except (OSError, od.EndpointError) as e:
            raise UsageError(f"on-demand directory {od.default_dir()}: {e}") from None
        ex = Exchange(d, targets, req)
    try:
        ok = run_ndet(ex, targets, args.timeout) if args.ndet else run(ex, targets, args.timeout)
    finally:
        ex.cleanup()
    for t in targets:
        where = f" on {t.host}" if t.host else ""
        print(f"pid {t.pid}{where}: {t.outcome}", file=sys.stdout if t.ok else sys.stderr)
    return 0 if ok and not problems else 1


def run(ex, targets: list[Target], timeout: float) -> bool:
    """Arm, align, record and wait, through ``ex`` (an ``Exchange`` here, or a
    ``monitor.control.Relay`` through neuron-monitors), for every target of every host at once."""
    deadline = time.monotonic() + timeout
    for i, t in enumerate(targets):
        t.key = i  # (pids may repeat across hosts)
        ex.send(t)
    live = list(targets)
    # 1. armed, with enough boundaries to number the steps alike
    offsets = None
    while time.monotonic() < deadline:
        for t in live:
            ex.read(t)
        for t in list(live):
            if t.answer is not None and t.answer.state == "error":
                t.outcome = f"error: {t.answer.error}"
                live.remove(t)
        if not live:
            return False
        answers = {t.key: t.answer for t in live if t.answer is not None and t.answer.state in ("armed", "recording")}
        if len(answers) == len(live):
            got = align(answers)
            if got is not None:
                offsets = got
                break
        time.sleep(POLL_S)
    if offsets is None:
        for t in live:
            t.outcome = ("no answer (not listening: no framework imported, another user's, or "
                         f"{od.ON_DEMAND}=0)" if t.answer is None else
                         "armed, but it ended no step in time (idle, or steps are not optimizer steps "
                         "nor root executions)")
        return False
    offs, period = offsets
    current = max(t.answer.step + offs[t.key] for t in live if t.answer is not None and t.answer.step is not None)
    margin = 2 + min(1000, math.ceil(MARGIN_S * 1e9 / period))
    start = current + margin
    for t in live:
        t.offset = offs[t.key]
        ex.send(t, phase="record", offset=t.offset, start=start)
    # 2. written
    want_last = start + ex.req["steps"] - 1 if ex.req["steps"] is not None else None
    if ex.req["duration_s"]:
        deadline += ex.req["duration_s"]
    pending = list(live)
    while pending and time.monotonic() < deadline:
        for t in list(pending):
            a = ex.read(t)
            if a is None or a.state in ("armed", "recording"):
                continue
            pending.remove(t)
            if a.state == "error":
                t.outcome = f"error: {a.error}"
            elif want_last is not None and (a.first_step, a.last_step) != (start, want_last):
                t.outcome = (f"profile written to {a.session_dir} (steps {a.first_step}-{a.last_step}, "
                             f"not the {start}-{want_last} asked: it fell behind or ended)")
            else:
                t.ok = True
                t.outcome = f"profile written to {a.session_dir} (steps {a.first_step}-{a.last_step})"
        time.sleep(POLL_S)
    for t in pending:
        t.outcome = f"no profile within the timeout (step {t.answer.step if t.answer else '?'} + offset {t.offset}, " \
                    f"window from step {start})"
    return all(t.ok for t in targets)


def run_ndet(ex, targets: list[Target], timeout: float) -> bool:
    """Ask every target for its NDET log now (the Flight Recorder's dump on demand)."""
    deadline = time.monotonic() + timeout
    for t in targets:
        ex.send(t)
    pending = list(targets)
    while pending and time.monotonic() < deadline:
        for t in list(pending):
            a = ex.read(t)
            if a is None:
                continue
            pending.remove(t)
            t.ok = a.state == "done"
            t.outcome = f"NDET log written to {a.ndet_log}" if t.ok else f"error: {a.error}"
        time.sleep(POLL_S)
    for t in pending:
        t.outcome = f"no answer (not listening: no framework imported, or {od.ON_DEMAND}=0)"
    return all(t.ok for t in targets)
