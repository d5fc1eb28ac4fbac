"""On-demand capture: where requests and answers go, and what they hold (``neuron-explorer attach``).

The command and the processes it targets talk through two small files per process in a private
directory of the user (mode 0700, owner checked, beside the stats directory): the requester writes
``<pid>.request``, the process answers in ``<pid>.answer``.  Files, not a socket, so a process
that nobody asks pays one ``stat`` a second and listens on nothing; only the user (or root) can
write into the directory, so only they can trigger a capture.

A request goes through two phases under one id (docs/decisions/0107-on-demand-capture.md):

* ``arm``: the process starts recording and reports its step boundaries (local count, wall time);
* ``record``: the requester has chosen the window from every target's boundaries and sends each its
  ``offset`` (local count + offset = the job's step number) and the first step ``start``; the
  process keeps exactly the steps ``start .. start + steps - 1`` (or ``duration_s`` from ``start``),
  writes its session directory and answers ``done``.

Everything read here comes from a file and is not trusted: bounded reads of regular files owned by
the user, JSON objects with known keys only, every number range-checked.  A request that fails
``parse_request`` changes nothing in the process; its one-line reason goes into the answer.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuron_explorer.util import procfs

from .env import (
    CPU_UTIL,
    DEVICE_PROFILE,
    FILTER_NC,
    FILTER_TYPE,
    HOST_MEMORY,
    MAX_EVENTS,
    SYSTEM_PROFILE,
)
from .stats_files import STATS_DIR_ENV, EndpointError, default_stats_dir, ensure_private_dir

__all__ = ["ANSWER_SUFFIX", "Answer", "CAPTURE_VARS", "DIR_ENV", "MAX_FILE_BYTES", "ON_DEMAND",
    "RELAY_PATHS", "REQUEST_FORMAT", "REQUEST_SUFFIX", "Request", "RequestError", "THREAD_NAME",
    "TOKEN_HEADER", "answer_path", "check_private_dir", "default_dir", "dir_of_environment", "encode",
    "listening_processes", "listens", "loose_id", "owned", "parse_answer", "parse_request",
    "process_environment", "process_start_time", "read_private", "read_token", "remove_request_files",
    "request_path", "write_private"]

#: ``NEURON_EXPLORER_ON_DEMAND=0`` keeps a process from ever taking a request.
ON_DEMAND = "NEURON_EXPLORER_ON_DEMAND"
#: Overrides the directory (a container that shares the host's ``/tmp`` under another path).
DIR_ENV = "NEURON_EXPLORER_ON_DEMAND_DIR"
REQUEST_FORMAT = "neuron-explorer-on-demand/1"
#: The OS name of the thread that takes requests in a process: ``attach --all`` finds them by it.
THREAD_NAME = "nx-on-demand"
REQUEST_SUFFIX = ".request"
ANSWER_SUFFIX = ".answer"
#: A request or an answer larger than this is refused unread.
MAX_FILE_BYTES = 64 * 1024
#: The capture variables a request may set, as the environment would (validated by their parsers).
CAPTURE_VARS = (DEVICE_PROFILE, MAX_EVENTS, FILTER_NC, FILTER_TYPE, CPU_UTIL, HOST_MEMORY, SYSTEM_PROFILE)
PHASES = ("arm", "record", "ndet")
MAX_STEPS = 1_000_000
MAX_DURATION_S = 24 * 3600.0
_ID = re.compile(r"[0-9a-f]{8,32}")


class RequestError(ValueError):
    """A request or answer that cannot be used; the message is one line naming the problem."""


def default_dir() -> Path:
    """The user's on-demand directory: ``$NEURON_EXPLORER_ON_DEMAND_DIR``, else ``on-demand``
    beside the stats directory (``$XDG_RUNTIME_DIR/neuron-explorer`` or
    ``/tmp/neuron-explorer-<uid>``)."""
    override = os.environ.get(DIR_ENV)
    if override:
        return Path(override)
    return default_stats_dir().parent / "on-demand"


def dir_of_environment(env: dict[str, str]) -> Path:
    """The on-demand directory a process with environment ``env`` watches (as ``default_dir``
    computes it there), so that a requester asks only the processes that read its directory."""
    if env.get(DIR_ENV):
        return Path(env[DIR_ENV])
    if env.get(STATS_DIR_ENV):
        return Path(env[STATS_DIR_ENV]).parent / "on-demand"
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "neuron-explorer" / "on-demand"
    tmp = env.get("TMPDIR") or ""
    base = Path(tmp if tmp and os.path.isdir(tmp) else tempfile.gettempdir())
    return base / f"neuron-explorer-{os.getuid()}" / "on-demand"


def process_environment(pid: int, limit: int = 1 << 20) -> dict[str, str] | None:
    """A process's environment (``/proc/<pid>/environ``, at most ``limit`` bytes), or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read(limit)
    except OSError:
        return None
    out = {}
    for item in data.split(b"\0"):
        k, eq, v = item.partition(b"=")
        if eq:
            out[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return out


def owned(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.getuid()
    except OSError:
        return False


def listens(pid: int) -> bool:
    """Does the process run the on-demand thread (:data:`THREAD_NAME`)?"""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm", "rb") as f:
                if f.read(64).strip() == THREAD_NAME.encode():
                    return True
        except OSError:
            continue
    return False


def listening_processes(directory: Path, tag: "re.Pattern[str] | None" = None,
                        tag_var: str = "NEURON_PROCESS_TAG") -> list[tuple[int, int]]:
    """``(pid, start time)`` of this user's processes on this host that listen on ``directory``
    (their on-demand thread runs and their environment names that directory), whose
    ``tag_var`` matches ``tag`` when given; sorted by pid."""
    me, want = os.getpid(), os.path.realpath(directory)
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        if not owned(pid) or not listens(pid):
            continue
        env = process_environment(pid)
        if env is None or os.path.realpath(dir_of_environment(env)) != want:
            continue
        if tag is not None and not tag.search(env.get(tag_var, "\0")):
            continue
        st = process_start_time(pid)
        if st is not None:
            found.append((pid, st))
    return sorted(found)


def check_private_dir(path: Path, create: bool = False) -> Path:
    """The directory, verified: a real directory of this user that no one else can enter
    (``EndpointError`` otherwise).  ``create``: make it (and a private parent) first."""
    if create:
        return ensure_private_dir(path)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise EndpointError(f"{path} is not a private directory of uid {os.getuid()} (mode 0700)")
    return path


def request_path(d: Path | str, pid: int) -> str:
    return os.path.join(d, f"{pid}{REQUEST_SUFFIX}")


def answer_path(d: Path | str, pid: int) -> str:
    return os.path.join(d, f"{pid}{ANSWER_SUFFIX}")


def read_private(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of this user, at most ``limit`` of them (``RequestError`` for
    anything else: a symlink, a FIFO, another user's file, a larger file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise RequestError(f"cannot open {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RequestError(f"{path} is not a regular file")
        if st.st_uid != os.getuid():
            raise RequestError(f"{path} belongs to uid {st.st_uid}, not to this user")
        if st.st_size > limit:
            raise RequestError(f"{path} holds {st.st_size} bytes, more than {limit}")
        data = os.read(fd, limit + 1)
        if len(data) > limit:
            raise RequestError(f"{path} holds more than {limit} bytes")
        return data
    finally:
        os.close(fd)


def write_private(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole (a temporary file renamed into place), mode 0600."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def process_start_time(pid: int) -> int | None:
    """The start time of a process (clock ticks since boot, ``/proc/<pid>/stat`` field 22), which
    tells a process from a later one that reused its pid; None when it cannot be read."""
    fields = procfs.stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (ValueError, IndexError):
        return None


@dataclass
class Request:
    id: str
    pid: int
    start_time: int
    phase: str = "arm"
    steps: int | None = None
    duration_s: float | None = None
    output_dir: str = ""
    capture: dict[str, str] = field(default_factory=dict)  # CAPTURE_VARS -> value
    ndet: bool = False  # also write the NDET flight recorder now (when the process runs one)
    offset: int = 0  # record phase: the job's step number = local count + offset
    start: int = 0  # record phase: the first step of the window (the job's number)

    def to_json(self) -> dict[str, Any]:
        return {"format": REQUEST_FORMAT, "id": self.id, "pid": self.pid, "start_time": self.start_time,
                "phase": self.phase, "steps": self.steps, "duration_s": self.duration_s,
                "output_dir": self.output_dir, "capture": dict(self.capture), "ndet": self.ndet,
                "offset": self.offset, "start": self.start}


@dataclass
class Answer:
    id: str
    state: str  # armed | recording | done | error
    pid: int = 0
    error: str = ""
    step: int | None = None  # the latest local step count
    arm_wall_ns: int = 0
    boundaries: list[tuple[int, int]] = field(default_factory=list)  # (local count, wall ns)
    session_dir: str = ""
    first_step: int | None = None  # the job's numbers of the steps kept
    last_step: int | None = None
    ndet_log: str = ""
    window_wall_ns: int = 0  # when the window's first step began (the end of the step before it)

    def to_json(self) -> dict[str, Any]:
        return {"format": REQUEST_FORMAT, "id": self.id, "state": self.state, "pid": self.pid,
                "window_wall_ns": self.window_wall_ns,
                "error": self.error, "step": self.step, "arm_wall_ns": self.arm_wall_ns,
                "boundaries": [list(b) for b in self.boundaries], "session_dir": self.session_dir,
                "first_step": self.first_step, "last_step": self.last_step, "ndet_log": self.ndet_log}


def encode(obj: Request | Answer) -> bytes:
    return json.dumps(obj.to_json(), separators=(",", ":")).encode()


_REQUEST_KEYS = frozenset(Request("0" * 8, 1, 0).to_json())
_ANSWER_KEYS = frozenset(Answer("0" * 8, "error").to_json())
ANSWER_STATES = ("armed", "recording", "done", "error")


def _load(data: bytes, keys: frozenset[str], what: str) -> dict:
    if len(data) > MAX_FILE_BYTES:
        raise RequestError(f"{what} larger than {MAX_FILE_BYTES} bytes")
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise RequestError(f"{what} is not JSON ({type(e).__name__})") from None
    if not isinstance(obj, dict):
        raise RequestError(f"{what} is not a JSON object")
    if obj.get("format") != REQUEST_FORMAT:
        raise RequestError(f"{what} format is not {REQUEST_FORMAT!r}")
    extra = sorted(k for k in obj if k not in keys)
    if extra:
        raise RequestError(f"{what} has unknown field {_short(extra[0])!r}")
    return obj


def _short(s: object, n: int = 60) -> str:
    text = str(s).encode("unicode_escape").decode("ascii")
    return text if len(text) <= n else text[:n] + "..."


def _int(obj: dict, key: str, lo: int, hi: int, default: int | None = None, what: str = "request") -> int:
    v = obj.get(key, default)
    if v is None and default is None and key in obj:
        raise RequestError(f"{what} field {key!r} is null")
    if type(v) is not int or not lo <= v <= hi:
        raise RequestError(f"{what} field {key!r} must be an integer in [{lo}, {hi}], not {_short(v)}")
    return v


def _opt_int(obj: dict, key: str, lo: int, hi: int, what: str) -> int | None:
    return None if obj.get(key) is None else _int(obj, key, lo, hi, what=what)


def parse_request(data: bytes) -> Request:
    """A request file's bytes as a ``Request``; ``RequestError`` (one line) for anything else."""
    obj = _load(data, _REQUEST_KEYS, "request")
    rid = obj.get("id")
    if not isinstance(rid, str) or not _ID.fullmatch(rid):
        raise RequestError(f"request id must be 8-32 lowercase hex digits, not {_short(rid)}")
    phase = obj.get("phase", "arm")
    if phase not in PHASES:
        raise RequestError(f"request phase must be one of {', '.join(PHASES)}, not {_short(phase)}")
    steps = _opt_int(obj, "steps", 1, MAX_STEPS, "request")
    dur = obj.get("duration_s")
    if dur is not None:
        if type(dur) not in (int, float) or not 0 < dur <= MAX_DURATION_S or dur != dur:
            raise RequestError(f"request field 'duration_s' must be in (0, {MAX_DURATION_S:g}] seconds, "
                               f"not {_short(dur)}")
        dur = float(dur)
    if phase != "ndet" and (steps is None) == (dur is None):
        raise RequestError("request must give exactly one of 'steps' and 'duration_s'")
    out = obj.get("output_dir", "")
    if not isinstance(out, str) or (phase != "ndet" and not os.path.isabs(out)) or "\0" in out or len(out) > 4096:
        raise RequestError(f"request output_dir must be an absolute path, not {_short(out)}")
    cap = obj.get("capture", {})
    if not isinstance(cap, dict):
        raise RequestError("request field 'capture' must be an object")
    for k, v in cap.items():
        if k not in CAPTURE_VARS:
            raise RequestError(f"request capture variable {_short(k)!r} is not one of {', '.join(CAPTURE_VARS)}")
        if not isinstance(v, str) or len(v) > 1024 or "\0" in v:
            raise RequestError(f"request capture variable {k} must be a short string")
    ndet = obj.get("ndet", False)
    if type(ndet) is not bool:
        raise RequestError("request field 'ndet' must be true or false")
    return Request(id=rid, pid=_int(obj, "pid", 1, (1 << 31) - 1), start_time=_int(obj, "start_time", 0, 1 << 62),
                   phase=phase, steps=steps, duration_s=dur, output_dir=out, capture=dict(cap), ndet=ndet,
                   offset=_int(obj, "offset", -(1 << 62), 1 << 62, 0), start=_int(obj, "start", -(1 << 62), 1 << 62, 0))


MAX_BOUNDARIES = 256


def parse_answer(data: bytes) -> Answer:
    """An answer file's bytes as an ``Answer``; ``RequestError`` (one line) for anything else."""
    w = "answer"
    obj = _load(data, _ANSWER_KEYS, w)
    rid, state = obj.get("id"), obj.get("state")
    if not isinstance(rid, str) or not _ID.fullmatch(rid):
        raise RequestError(f"answer id must be 8-32 lowercase hex digits, not {_short(rid)}")
    if state not in ANSWER_STATES:
        raise RequestError(f"answer state must be one of {', '.join(ANSWER_STATES)}, not {_short(state)}")
    texts = {}
    for k in ("error", "session_dir", "ndet_log"):
        v = obj.get(k, "")
        if not isinstance(v, str) or len(v) > 4096:
            raise RequestError(f"answer field {k!r} must be a short string")
        texts[k] = v
    bounds = obj.get("boundaries", [])
    if not isinstance(bounds, list) or len(bounds) > MAX_BOUNDARIES:
        raise RequestError(f"answer boundaries must be a list of at most {MAX_BOUNDARIES}")
    pairs = []
    for b in bounds:
        if not (isinstance(b, list) and len(b) == 2 and all(type(x) is int and 0 <= x < 1 << 63 for x in b)):
            raise RequestError("answer boundaries must be [count, wall_ns] pairs of non-negative integers")
        pairs.append((b[0], b[1]))
    big = 1 << 62
    return Answer(id=rid, state=state, pid=_int(obj, "pid", 0, (1 << 31) - 1, 0, w), error=texts["error"],
                  step=_opt_int(obj, "step", 0, big, w), arm_wall_ns=_int(obj, "arm_wall_ns", 0, 1 << 63, 0, w),
                  window_wall_ns=_int(obj, "window_wall_ns", 0, 1 << 63, 0, w),
                  boundaries=pairs, session_dir=texts["session_dir"], ndet_log=texts["ndet_log"],
                  first_step=_opt_int(obj, "first_step", -big, big, w),
                  last_step=_opt_int(obj, "last_step", -big, big, w))


def loose_id(data: bytes) -> str:
    """The id of a request that did not parse, when it has a valid one (else zeros), so that the
    requester can match the error to its request."""
    try:
        rid = json.loads(data.decode("utf-8", "replace")).get("id")
    except Exception:  # noqa: BLE001 - anything unreadable has no id
        return "0" * 8
    return rid if isinstance(rid, str) and _ID.fullmatch(rid) else "0" * 8


# -- the relay through neuron-monitor (``monitor.control`` serves it, ``attach --monitor`` calls it) --
#: The header that carries the token; a browser sends no custom header to another origin without a
#: CORS preflight, which the endpoint never answers, so no web page can trigger a capture.
TOKEN_HEADER = "X-Neuron-Explorer-Token"
RELAY_PATHS = ("/v1/targets", "/v1/send", "/v1/answer", "/v1/cleanup")
MAX_TOKEN_BYTES = 256


def read_token(path: str) -> str:
    """The token in ``path`` (a private file of this user: not readable by others), stripped."""
    data = read_private(path, MAX_TOKEN_BYTES)
    st = os.stat(path)
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise RequestError(f"{path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}); chmod 600 it")
    token = data.decode("ascii", "replace").strip()
    if len(token) < 16:
        raise RequestError(f"{path} holds no token of at least 16 characters")
    return token


def remove_request_files(d: Path | str, pid: int, rid: object) -> int:
    """Remove the request and answer files of ``pid`` in ``d`` that belong to request ``rid`` (or
    answer an unparsable request, id zeros); another requester's files are left alone.  Returns
    how many were removed."""
    removed = 0
    for path, parse in ((request_path(d, pid), parse_request), (answer_path(d, pid), parse_answer)):
        try:
            if parse(read_private(path)).id in (rid, "0" * 8):
                os.unlink(path)
                removed += 1
        except (OSError, RequestError):
            pass
    return removed
