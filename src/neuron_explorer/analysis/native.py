"""The analysis layer's C extension, ``analysis._sweep``, or None: where it is not built, or when
``NEURON_EXPLORER_PURE_PYTHON=1`` asks for the numpy twins of its functions (each caller keeps one,
and a test holds the two to the same results)."""

from __future__ import annotations

import os
from types import ModuleType

sweep: ModuleType | None
try:
    from neuron_explorer.analysis import _sweep as sweep
except ImportError:  # pragma: no cover - an install without the C extensions
    sweep = None
if os.environ.get("NEURON_EXPLORER_PURE_PYTHON", "0") not in ("", "0"):
    sweep = None
