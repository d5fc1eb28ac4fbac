"""The step detector's covered time in C (``analysis/_sweep.c``), for ``analysis.steps._covered``.

Its Python twin is ``analysis.steps._covered_numpy`` (each category's union merged, the unions
joined in priority order, the cumulative covered time looked up per step), which is used when the
module is not built; ``tests/analysis/test_steps.py`` holds the two to the same integers.  Why it
exists: docs/decisions/0192-step-figures-in-one-pass.md.
"""

from typing import Any

from numpy.typing import NDArray

def covered(points: NDArray[Any], intervals: tuple[NDArray[Any], ...], /) -> bytes | None:
    """Per point of the int64 ascending ``points``, the time before it covered by the union of
    categories 0..r (rows r = 0..5), by category 1 (row 6) and by categories 1 or 2 (row 7): 8 rows
    of ``len(points)`` native int64.  ``intervals``: 12 int64 arrays, the starts and the ends of 6
    categories in priority order, each category's intervals ``[s, max(e, s))`` listed by ascending
    start; None when some category's starts are not ascending.  ``ValueError`` for points out of
    order, another count of arrays or a category's starts and ends of different lengths;
    ``TypeError`` for a buffer that is not int64."""
