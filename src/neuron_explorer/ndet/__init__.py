"""NDET, the distributed event tracer's ``neuron-det`` tool: log discovery (``sources``), analysis
(``analysis``), the verdict rules (``verdict``), the Chrome trace (``trace``) and the command
(``cli``).  The log format is a contract (``contracts.ndet_log``) and the in-process recorder a
runtime consumer (``recorders.ndet``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["analysis", "cli", "sources", "trace", "verdict"]
