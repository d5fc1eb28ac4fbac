"""What every command line of ours shares: the usage error, the program name, argument types,
``--version``, shell completion and the one line naming a missing extra (docs/commands.md)."""

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


def add_version(parser: argparse.ArgumentParser, prog: str, version: str) -> None:
    """``--version``: every command answers it the same way (``neuron-det 0.1.0``); ``version`` is
    ``neuron_explorer.__version__``, the one place the version is written."""
    parser.add_argument("--version", action="version", version=f"{prog} {version}")


def complete(parser: argparse.ArgumentParser) -> None:
    """Shell completion (docs/commands.md): argcomplete answers and exits when the shell asks
    (``_ARGCOMPLETE`` set); otherwise nothing is imported and nothing happens."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


def missing_extra(extra: str, modules: tuple[str, ...], what: str) -> str | None:
    """None when every module of ``modules`` imports, else the one line to say before any work:
    ``what`` needs the extra, and the pip command that installs it."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            return (f"{what} needs the '{extra}' extra ({e}); install it with: "
                    f"pip install 'neuron-explorer[{extra}]'")
    return None
