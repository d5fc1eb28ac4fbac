"""Running one of our command-line tools inside the test's process, as the tests that read what a
conversion or a verdict holds (not how a process starts or ends) need it.

A fresh interpreter costs about 0.3 CPU-s (Python and the tool's imports) before the tool does
anything; a file that converts one capture dozens of times paid that for each run (decision
0173).  ``run_tool`` gives the same answer as ``subprocess.run(..., capture_output=True,
text=True)``: the exit status the tool's ``main`` returns (or raises with ``SystemExit``, as
argparse does), its standard output and standard error as text, with the environment it would
have been given set in ``os.environ`` for the call and restored after it.  An exception escaping
``main`` is what the interpreter would do with it: its traceback on standard error and status 1,
so that a test asserting "no traceback" still sees one.

A test about the process boundary (start-up, signals, exit codes of the real entry point, memory
caps, the console scripts) keeps running the tool in a process of its own."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator

#: tool name -> (module, function): the functions behind ``python -m neuron_explorer`` and
#: ``python -m neuron_explorer.ndet.cli`` (the ``neuron-det`` console script)
TOOLS = {"neuron_explorer": ("neuron_explorer.cli", "main"),
         "neuron_explorer.ndet.cli": ("neuron_explorer.ndet.cli", "main")}


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _captured(fd: int) -> Iterator[tuple[io.TextIOWrapper, list[str]]]:
    """Descriptor ``fd`` (1 or 2) pointed at a temporary file for the call, and a text stream
    over it for ``sys.stdout``/``sys.stderr``: what the tool writes through either (``print``, the
    logger, ``--output-file -`` written to descriptor 1) lands in one file in order; its text is
    appended to the list on the way out, and the descriptor restored."""
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), fd)
        stream = io.TextIOWrapper(open(os.dup(fd), "wb", buffering=0), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)
        got: list[str] = []
        try:
            yield stream, got
        finally:
            stream.flush()
            stream.close()
            os.dup2(saved, fd)
            os.close(saved)
            f.seek(0)
            got.append(f.read().decode("utf-8", "replace").replace("\r\n", "\n"))


@contextlib.contextmanager
def _fresh_logging() -> Iterator[None]:
    """Our logger tree as a fresh process would have it under the call's environment: no handler a
    library or an earlier test added to the root logger (which would silence our default handler,
    ``util.log._configured_elsewhere``), pytest's own kept, and the level read from the call's
    ``NEURON_EXPLORER_LOG_LEVEL``; both restored after the call."""
    import logging

    from neuron_explorer.util import log

    root, ours = logging.getLogger(), logging.getLogger(log.ROOT)
    handlers, level = list(root.handlers), ours.level
    root.handlers = [h for h in handlers if not log._user_handler(h)]
    ours.setLevel(logging.NOTSET)
    log._setup()
    try:
        yield
    finally:
        root.handlers = handlers
        ours.setLevel(level)


def _entry(tool: str) -> Callable[[list[str]], int | None]:
    import importlib

    module, name = TOOLS[tool]
    return getattr(importlib.import_module(module), name)


def run_tool(tool: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -m <tool> *args`` with ``env`` as its whole environment, run in this process."""
    main = _entry(tool)
    with _captured(1) as (out, out_text), _captured(2) as (err, err_text):
        with _environment(env), _fresh_logging(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) or e.code is None else 1
                if not isinstance(e.code, int) and e.code is not None:
                    print(e.code, file=sys.stderr)
            except Exception:  # noqa: BLE001 - what the interpreter would print: the test sees the traceback
                traceback.print_exc()
                code = 1
    return subprocess.CompletedProcess([sys.executable, "-m", tool, *args], code or 0, out_text[0], err_text[0])
