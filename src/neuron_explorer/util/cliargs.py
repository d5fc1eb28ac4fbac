"""What every command line of ours shares: the usage error, the program name, argument types."""

from __future__ import annotations

import argparse
import os
import sys


class UsageError(Exception):
    """A request that cannot be carried out as asked; printed as one line, exit status 2."""


def prog_name(accepted: tuple[str, ...] = ("neuron-explorer", "neuron-profile")) -> str:
    """The name the user typed (``neuron-profile view`` is the same command as ``neuron-explorer view``)."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name in accepted else accepted[0]


def positive_int(text: str) -> int:
    """argparse type: a whole number greater than 0."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (expected e.g. 1000000)") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return n


def port_number(text: str) -> int:
    """argparse type for a TCP port: 1 to 65535 (the OS refuses anything else with a traceback)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid; accepted: a TCP port from 1 to 65535, e.g. 3001")
    return n
