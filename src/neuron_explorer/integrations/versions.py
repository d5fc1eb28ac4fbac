"""The PyTorch and JAX versions neuron-explorer supports, and the one-line warning outside them.

The hooks patch framework internals that move between releases (profiler private APIs, dynamo's
backend interface, jaxlib's profiler plugin), so "supported" means "tested": the CI runs the whole
suite on the versions below (decision 0121).  Outside them the hooks still install and every
failure to hook stays a warning; the user is told once per process that events may be missing.
pyproject.toml's ``torch`` and ``jax`` extras declare the same ranges (tests/test_packaging.py
checks that they agree).
"""

from __future__ import annotations

import re

from neuron_explorer.util.log import get_logger

# framework -> (lowest supported (major, minor), first (major, minor) not supported)
SUPPORTED: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "torch": ((2, 13), (2, 14)),
    "jax": ((0, 10), (0, 11)),
}
_warned: set[str] = set()


def _shown(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def unsupported(framework: str, version: str) -> str | None:
    """None when ``version`` (``2.13.0+cpu``) is in the supported range, else the warning's text."""
    low, high = SUPPORTED[framework]
    m = re.match(r"(\d+)\.(\d+)", str(version))
    if m is not None and low <= (int(m.group(1)), int(m.group(2))) < high:
        return None
    tested = _shown(low) if (low[0], low[1] + 1) == high else f"{_shown(low)} to before {_shown(high)}"
    return (f"{framework} {str(version)[:40]} is not a version neuron-explorer supports ({framework} {tested}); "
            "its hooks may miss events")


def check(framework: str, version: str) -> None:
    """Say once per process that ``framework`` is outside the supported range (never raises)."""
    if framework in _warned:
        return
    _warned.add(framework)
    why = unsupported(framework, version)
    if why is not None:
        get_logger(__name__).warning(f"neuron-explorer: warning: {why}")
