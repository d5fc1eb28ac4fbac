# PYTHON_ARGCOMPLETE_OK (shell completion: docs/commands.md)
"""The console entry points of ``neuron-monitor-prometheus.py`` and ``neuron-monitor-cloudwatch.py``.

A companion's module imports its extra (prometheus_client, boto3) at load time; a console script
that named it directly would die in that import with a traceback on a base install.  These entry
points say, in one line with the pip command, which extra is missing before loading the module.
"""

from __future__ import annotations

import sys
from typing import Sequence

from neuron_explorer.util.cliargs import missing_extra
from neuron_explorer.util.log import get_logger


def _missing(prog: str, module: str) -> bool:
    if "--version" in sys.argv[1:] or "-h" in sys.argv[1:] or "--help" in sys.argv[1:]:
        return False  # (answered without the extra; the cloudwatch module imports boto3 only in main)
    why = missing_extra("monitor", (module,), prog)
    if why is not None:
        get_logger(__name__).error(f"{prog}: error: {why}")
    return why is not None


def prometheus(argv: Sequence[str] | None = None) -> int:
    """``neuron-monitor-prometheus(.py)``."""
    if _missing("neuron-monitor-prometheus.py", "prometheus_client"):
        return 2
    from neuron_explorer.monitor import prometheus_exporter

    return prometheus_exporter.main(argv)


def cloudwatch(argv: Sequence[str] | None = None) -> int:
    """``neuron-monitor-cloudwatch(.py)``."""
    from neuron_explorer.monitor import cloudwatch_exporter

    return cloudwatch_exporter.main(argv)
