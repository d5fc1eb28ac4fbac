"""The ``view`` tool: its command (``cli``), the run over processes and formats (``pipeline``), output
naming and safety (``output``), multi-process finalisation (``scale``), ``check``, and the run on a
Dask cluster or object storage (``cluster``, its worker-side steps ``tasks``, S3 input and output
``remote``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["check", "cli", "cluster", "devices", "output", "pipeline", "remote", "scale", "tasks"]
