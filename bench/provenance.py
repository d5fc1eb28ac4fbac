"""Which commit a bench result was measured on, for ``bench/results/*.json`` and the README
table's staleness marks (``bench/table.py``)."""

from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit() -> str:
    """The short commit of the checkout (with ``+`` when src/ or bench/ has changes), or ``""``
    outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        return git("rev-parse", "--short", "HEAD") + ("+" if git("status", "--porcelain", "--", "src", "bench")
                                                      else "")
    except (OSError, subprocess.CalledProcessError):
        return ""


def stamp() -> dict[str, str]:
    """When and on which commit a result was measured: the ``date`` (UTC, to the second) and
    ``commit`` keys every results file carries, so that the README table can tell a figure older
    than the code it measures (``bench/table.py``)."""
    import datetime

    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit()}


def write_results(path: str, doc: dict) -> None:
    """Write a bench's results file (its folder made), in the layout the other results use."""
    import json

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
