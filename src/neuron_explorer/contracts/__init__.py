"""The contracts every package shares, each with one home: the event vocabulary and its NDET mapping
(``events``), environment variables and their parsers (``env``), the file layout, made and parsed
(``layout``), event and op columns (``columns``), the Parquet dataset's tables and columns
(``dataset``) and track classification and labels (``tracks``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["columns", "dataset", "env", "events", "layout", "tracks"]
