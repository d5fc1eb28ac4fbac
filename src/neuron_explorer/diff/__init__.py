"""``neuron-explorer diff``: two profiles compared item by item.  Reading one side of a ``view``
Parquet dataset (``dataset``), turning captures into one through ``view``'s flow (``inputs``), the
document with its rows (``report``), the terminal table and Markdown (``render``), the command and
its exit status (``cli``).  The statistics and alignment rules are ``analysis.compare``.

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["cli", "dataset", "inputs", "render", "report"]
