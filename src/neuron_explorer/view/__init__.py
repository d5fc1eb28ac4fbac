"""The ``view`` tool: its command (``cli``), the run over processes and formats (``pipeline``), output
naming and safety (``output``), multi-process finalisation (``scale``) and ``check``.

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["check", "cli", "devices", "output", "pipeline", "scale"]
