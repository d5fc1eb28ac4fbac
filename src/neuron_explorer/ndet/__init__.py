"""NDET, the distributed event tracer's ``neuron-det`` tool: log discovery (``sources``), analysis
(``analysis``), the verdict rules (``verdict``), the Chrome trace (``trace``) and the command
(``cli``, also ``python -m neuron_explorer.ndet``).  The log format is a contract
(``contracts.ndet_log``) and the in-process recorder a runtime consumer (``recorders.ndet``);
``format`` keeps the import path 0.1.0 documented for reading a log
(``from neuron_explorer.ndet.format import read_log``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["analysis", "cli", "format", "sources", "trace", "verdict"]
