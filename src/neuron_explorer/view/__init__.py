"""The ``view`` tool: its command (``cli``); the one flow of a run, on any engine (``pipeline``:
this process or a local process pool; ``cluster``: a Dask cluster); what the flow is asked and
answers (``options``); the steps it runs as tasks (``tasks``), each profile's index and conversion
(``process``); output naming and safety (``output``); device profile ids (``devices``); S3 input
and output (``remote``); the same steps for users' own engines (``scale``); and ``check``.

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["check", "cli", "cluster", "devices", "options", "output", "pipeline", "process", "remote", "scale",
           "tasks"]
