"""Names in the on-disk layout, made and recognised in one place.

Capture writes ``<out>/<instance>_pid_<pid>/<UTC timestamp>/`` holding ``ntrace.pb`` (the system
trace's tables) with its event segments (``ntrace_nc<nc>_<k>.pb``, decision 0111),
``trace_info.pb``, ``cpu_util.pb``, ``host_mem.pb``, device traces (``<hash>_instid_0_vnc_<nc>.ntff``
in model mode, ``profile_nc_<nc>_session_<k>.ntff`` in session mode) and graphs
(``neff_<hash>_vnc_<nc>.neff``); NDET writes ``ndet_<date>_<instance>_<gid>_<pid>.log`` files.
Readers find sessions by their marker files.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import time

from neuron_explorer.util.names import safe_component


def session_dir_name(wall_ns: int) -> str:
    # whole seconds from the integer (a float rounds the last 200 ns of a second up to the next one)
    t = time.gmtime(wall_ns // 1_000_000_000)
    return time.strftime("%Y%m%dT%H%M%S", t) + f"{(wall_ns // 1_000_000) % 1000:03d}Z"


def make_session_dir(output_dir: str, instance_id: str, pid: int, wall_ns: int) -> str:
    """A new directory ``<out>/<instance>_pid_<pid>/<timestamp>[_<n>]`` that no other process got.

    Processes may race for the same name (pid reuse in containers, a shared volume, sessions in
    the same millisecond): ``mkdir`` is the arbiter, and the loser takes the next suffix."""
    parent = os.path.join(output_dir, f"{instance_id}_pid_{pid}")
    os.makedirs(parent, exist_ok=True)
    base = os.path.join(parent, session_dir_name(wall_ns))
    path, n = base, 1
    while True:
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            path = f"{base}_{n}"
            n += 1


def model_ntff_name(graph_hash_decimal: str, nc: int) -> str:
    return f"{safe_component(str(graph_hash_decimal))}_instid_0_vnc_{int(nc)}.ntff"


def session_ntff_name(nc: int, k: int = 0) -> str:
    return f"profile_nc_{int(nc)}_session_{int(k)}.ntff"


def segment_name(nc: int, k: int) -> str:
    """A core's k-th system event segment (``ntrace_nc0_000003.pb``): zero-padded so that a
    directory listing sorts them in recording order (the reader sorts by the parsed numbers)."""
    return f"ntrace_nc{int(nc)}_{int(k):06d}.pb"


_SEGMENT = re.compile(r"ntrace_nc(\d{1,10})_(\d{1,12})\.pb")


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """(core, k) of a segment file name, None for any other name."""
    m = _SEGMENT.fullmatch(name)
    if m is None:
        return None
    nc, k = int(m.group(1)), int(m.group(2))
    return (nc, k) if nc < 1 << 31 else None


def neff_file_name(graph_hash_decimal: str, nc: int) -> str:
    return f"neff_{safe_component(str(graph_hash_decimal))}_vnc_{int(nc)}.neff"


def log_file_name(start_wall_ns: int, instance_id: str, rank: int, world_size: int, pid: int) -> str:
    """``ndet_<date>T<time>_<instance>_gid<ranks>_pid<pid>.log``.

    The date and time are when tracing started (UTC); ``gid`` lists the global ranks (replica group
    ids) this process drives -- ``gid-`` for a process outside any distributed job.
    """
    t = _dt.datetime.fromtimestamp(start_wall_ns / 1e9, tz=_dt.timezone.utc)
    stamp = t.strftime("%Y%m%dT%H%M%S") + f"{t.microsecond // 1000:03d}"
    gid = str(rank) if rank >= 0 else "-"
    return f"ndet_{stamp}_{instance_id}_gid{gid}_pid{pid}.log"


SESSION_MARKERS = ("trace_info.pb", "ntrace.pb")
