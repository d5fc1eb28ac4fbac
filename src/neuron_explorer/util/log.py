"""The ``neuron_explorer`` logger tree: every message we write on stderr goes through it.

Why a logger and not ``print``: most of our messages are written inside the user's own training
process, and a user with a logging configuration (files, JSON lines, a level per library) must be
able to route, filter or silence them like any other library's (docs/logging.md, decision 0119).

Without any configuration nothing changes: a default handler on the ``neuron_explorer`` logger
writes each message's text as it always was (``neuron-explorer: warning: ...``), nothing added, in
one ``write`` with its newline (the ranks of a torchrun job share one stderr: two writes per line
let their lines run together).  It steps aside as soon as the user configures logging: a handler
on the root logger or on any logger between ours and the root (pytest's capture handlers are not a
user configuration and do not count), so a message is never written twice.

``NEURON_EXPLORER_LOG_LEVEL`` (``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``, ``CRITICAL`` or a
number) sets the tree's level; by default it is ``INFO`` unless the user's configuration set one
before our first import.  An invalid value is said once and ignored.
"""

from __future__ import annotations

import logging
import os
import sys

ROOT = "neuron_explorer"
LEVEL_VAR = "NEURON_EXPLORER_LOG_LEVEL"
_NAMES = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "WARN": logging.WARNING,
          "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL}


def parse_level(text: str | None) -> int | None:
    """A level name (any case) or a non-negative number; None for unset, ValueError for anything else."""
    if text is None or not text.strip():
        return None
    t = text.strip()
    if t.upper() in _NAMES:
        return _NAMES[t.upper()]
    if t.isdigit() and len(t) <= 3:
        return int(t)
    raise ValueError(f"{LEVEL_VAR}={text[:40]!r} is not a level; accepted: DEBUG, INFO, WARNING, ERROR, "
                     "CRITICAL or a number")


class DefaultHandler(logging.Handler):
    """Writes ``record.getMessage()`` and a newline to the current ``sys.stderr`` in one write,
    unless another handler would see the record (the user configured logging)."""

    def emit(self, record: logging.LogRecord) -> None:
        if _configured_elsewhere(record.name, self):
            return
        try:
            stream = sys.stderr
            if stream is None:
                return
            stream.write(record.getMessage() + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or full stderr must not break the user's process
            pass


def _user_handler(h: logging.Handler) -> bool:
    """pytest attaches its capture handlers to the root logger: they are not a user's configuration."""
    return not type(h).__module__.startswith("_pytest")


def _configured_elsewhere(name: str, ours: logging.Handler) -> bool:
    lg: logging.Logger | None = logging.getLogger(name)
    while lg is not None:
        if any(h is not ours and _user_handler(h) for h in lg.handlers):
            return True
        if not lg.propagate:
            return False
        lg = lg.parent
    return False


_HANDLER = DefaultHandler()


def _setup() -> None:
    root = logging.getLogger(ROOT)
    if not any(isinstance(h, DefaultHandler) for h in root.handlers):
        root.addHandler(_HANDLER)
    try:
        level = parse_level(os.environ.get(LEVEL_VAR))
    except ValueError as e:
        level = None
        root.warning(f"neuron-explorer: warning: {e}")
    if level is not None:
        root.setLevel(level)
    elif root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


def get_logger(name: str) -> logging.Logger:
    """The logger for module ``name`` (``__name__``): a child of ``neuron_explorer``."""
    if name != ROOT and not name.startswith(ROOT + "."):
        name = f"{ROOT}.{name}"
    return logging.getLogger(name)


_setup()


class LineLogger:
    """A text stream whose every line is one log record: for the functions that take an ``err``
    stream (the monitor companions' skipped-line reports), so that their default goes through the
    tree while tests can still pass a ``StringIO``."""

    def __init__(self, name: str, level: int = logging.WARNING) -> None:
        self.name, self.level, self._buf = name, level, ""

    def write(self, text: str) -> int:
        self._buf += text
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            get_logger(self.name).log(self.level, line)
        return len(text)

    def flush(self) -> None:
        pass
