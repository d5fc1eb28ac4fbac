"""The step detector's covered time in C (``analysis/_sweep.c``), for ``analysis.steps._durations``.

Its Python twin is ``analysis.steps._durations_numpy`` (each category's union merged, the unions
joined in priority order, the cumulative covered time looked up per step: ``_covered_numpy``;
then the partition), which is used when the module is not built or with
``NEURON_EXPLORER_PURE_PYTHON=1``; ``tests/analysis/test_steps.py`` holds the two to the same
integers.  Why it exists: docs/decisions/0192-step-figures-in-one-pass.md,
docs/decisions/0195-diff-cpu-round-three.md.  ``keep`` (decision 0209) reads the rows of an events
file a diff keeps; its twin is ``analysis.occurrences._File._keep_numpy``.  ``check_events``
(decision 0215) checks a chunk of a capture's events for the reader; its twin is
``analysis.reader._check_chunk_numpy``.
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

def durations(points: NDArray[Any], intervals: tuple[NDArray[Any], ...], lo: NDArray[Any] | None,
              hi: NDArray[Any] | None, /) -> tuple[bytearray, ...] | None:
    """Per step i, the span ``[points[lo[i]], points[hi[i]])`` (``lo`` and ``hi`` None: the steps follow
    one another, step i from point i to point i + 1), 10 rows of native int64, each its own
    bytearray (one let go is freed whatever the caller keeps of the others): the six categories'
    growth of the union in priority order, idle (the span's time none covers), the collectives'
    time, the time in neither a collective nor a wait, and the first three categories' union
    outside collectives and waits (``analysis.steps._DURATIONS``).  The points and intervals as for
    ``covered`` (None when some category's starts are not ascending); ``ValueError`` for ``lo`` and
    ``hi`` of different lengths or an index outside the points."""

def keep(name: NDArray[Any], src: NDArray[Any], model: NDArray[Any] | None, model_valid: NDArray[Any] | None,
         model_offset: int, type_of: NDArray[Any], fw_of: NDArray[Any], types: tuple[int, int, int],
         columns: tuple[NDArray[Any], NDArray[Any], NDArray[Any]], out: tuple[NDArray[Any], ...], /) -> int:
    """One events file's rows a diff reads, in one pass: row i (of the int32 dictionary indices
    ``name`` and ``src``) has type ``type_of[name[i]]`` (int64) and is a framework region when
    ``fw_of[src[i]]`` (uint8); with ``types`` = (fw_type, exec_type, ml_type) it is kept when it is a
    framework region or its type is >= 0 and not ``fw_type``.  ``out`` = (typ, fw, rows, start, end,
    ids, model, order, bounds): the kept rows' type, flag (bool or uint8), index, start, end and id
    (of ``columns``, int64 start, end and ids) and graph (``model[i]``, int32, for an execution or a
    model load outside the framework whose bit ``model_offset + i`` of ``model_valid`` is set, else
    -1) are written in row order at the front of the first seven (int64 but ``fw``, each at least
    as long as the file); ``order`` gets the kept rows' positions grouped by the type the step
    detector sees (``fw_type`` for a framework region), each group ascending, group t at
    ``[bounds[t], bounds[t + 1])``.  Returns the count kept.  ``ValueError`` for an index outside its
    table, a type at or beyond ``len(bounds) - 1`` or inputs of different lengths, ``TypeError`` for
    a buffer of another width.  Its numpy twin: ``occurrences._File._keep_numpy``
    (``tests/analysis/test_occurrences.py``)."""

def check_events(typ: NDArray[Any], ntypes: int, slots: tuple[tuple[NDArray[Any], NDArray[Any], NDArray[Any]], ...],
                 start: NDArray[Any], end: NDArray[Any], /) -> tuple[int, int, int, int, int]:
    """A chunk of a capture's events in one pass (decision 0215): ``typ`` uint16 type ids, ``slots``
    up to 5 (values, low, high) of int64, the values per event and, per type id below ``ntypes``,
    the lowest and past-highest value allowed; ``start`` and ``end`` int64.  Returns the largest
    type id (-1 for no event), the first slot (in order) holding a value outside its type's limits
    and the first such event (-1, -1 when none, or when a type id is not below ``ntypes``), and the
    smallest and largest start or end (0, 0 for no event).  ``ValueError`` for columns of different
    lengths or limits shorter than ``ntypes``, ``TypeError`` for a buffer of another width.  Its
    numpy twin: ``analysis.reader._check_chunk_numpy`` (``tests/analysis/test_reader_check.py``)."""
