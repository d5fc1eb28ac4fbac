"""NDET, the distributed event tracer: the log format (``format``, a contract), the in-process
recorder (``recorder``, a runtime consumer), and the ``neuron-det`` tool: log discovery
(``sources``), analysis (``analysis``), the verdict rules (``verdict``), the Chrome trace (``trace``)
and the command (``cli``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["analysis", "cli", "format", "recorder", "sources", "trace", "verdict"]
