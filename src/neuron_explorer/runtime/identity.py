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


