"""Who is recording: the instance (host), the process and its rank, and the core it drives.

The instance id is the EC2 instance id when the host is EC2 -- read from local DMI data only,
never over the network -- else the hostname.  ``NEURON_EXPLORER_INSTANCE_ID`` overrides both so
that containers and tests can stand in for separate hosts.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

_EC2_ID = re.compile(r"^i-[0-9a-f]{8,17}$")


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def ec2_instance_id() -> str | None:
    """The EC2 instance id from DMI (Nitro hosts put it in board_asset_tag), or None."""
    tag = _read("/sys/class/dmi/id/board_asset_tag")
    if _EC2_ID.match(tag):
        return tag
    return None


def instance_id() -> str:
    override = os.environ.get("NEURON_EXPLORER_INSTANCE_ID", "").strip()
    if override:
        return re.sub(r"[^A-Za-z0-9._-]", "_", override)
    return ec2_instance_id() or re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname() or "localhost")


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, ""))
    except ValueError:
        return default


@dataclass(frozen=True)
class ProcessIdentity:
    instance_id: str
    hostname: str
    pid: int
    rank: int
    local_rank: int
    world_size: int
    node_rank: int
    process_tag: str

    @classmethod
    def current(cls) -> "ProcessIdentity":
        return cls(
            instance_id=instance_id(),
            hostname=socket.gethostname(),
            pid=os.getpid(),
            rank=_env_int("RANK", -1),
            local_rank=_env_int("LOCAL_RANK", 0),
            world_size=_env_int("WORLD_SIZE", 1),
            node_rank=_env_int("GROUP_RANK", _env_int("NODE_RANK", 0)),
            process_tag=os.environ.get("NEURON_PROCESS_TAG", "") or str(os.getpid()),
        )

    @property
    def default_core(self) -> int:
        """The logical core this process drives when nothing more specific is known (CPU hosts)."""
        return max(self.local_rank, 0)


# Processes a framework starts for its own book-keeping.  They inherit the environment, so the
# capture variables turn the runtime on in them too, but they never run the user's graphs: a
# profile of one is empty noise beside the real ones (docs/decisions/0008-forked-children.md).
_HELPER_CODE = (  # python -c CODE
    "from multiprocessing.resource_tracker import",
    "from multiprocessing.forkserver import",
    "from multiprocessing.semaphore_tracker import",
)
_HELPER_SCRIPTS = ("torch/_inductor/compile_worker/__main__.py",)  # python SCRIPT
_HELPER_MODULES = ("torch._inductor.compile_worker",)  # python -m MODULE


def framework_helper(argv: list[str] | None = None) -> str | None:
    """What known framework helper this process is (from its real command line), or None:
    multiprocessing's resource tracker and fork server, Inductor's compile workers."""
    if argv is None:
        import sys

        argv = list(getattr(sys, "orig_argv", None) or sys.argv)  # sys.argv is just ['-m'] at .pth time
    args = argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if a == "-c":
            code = nxt.lstrip()
            return next((c.split()[1] for c in _HELPER_CODE if code.startswith(c)), None)
        if a == "-m":
            return nxt if nxt in _HELPER_MODULES else None
        if a in ("-W", "-X"):
            i += 2  # an interpreter option with its argument
            continue
        if a.startswith("-"):
            i += 1  # an interpreter option (-u, -B, -s, -E, -Wdefault...): the command follows
            continue
        norm = a.replace(os.sep, "/")
        return next((s for s in _HELPER_SCRIPTS if norm.endswith(s)), None)
    return None
