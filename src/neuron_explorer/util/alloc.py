"""Allocator tuning shared by every ``view`` worker, whatever the output format.

A worker's numpy and Arrow temporaries are a few MB each. glibc's defaults return such blocks to
the kernel at each free (it trims the heap top and maps every block above a threshold that only
grows with use), so every chunk faulted its working memory in anew: page faults were about a
quarter of a Perfetto worker's CPU time (docs/decisions/0019-perfetto-chunked-writer.md) and most of
the JSON writer's system time (docs/decisions/0004-parquet-write-path.md).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

_TUNED = False

# freed memory glibc may keep for reuse before trimming the heap: a Parquet worker frees ~100 MB
# between two chunks of events, and with 64 MiB every chunk faulted its memory in again (0215)
KEEP_FREED = 128 << 20
MMAP_ABOVE = 32 << 20  # blocks below this come from the heap (and are reused), not fresh mappings


def keep_freed_memory() -> None:
    """Have glibc keep up to 128 MiB of freed memory for reuse and serve blocks below 32 MiB from
    the heap. Process-wide, set once; a no-op without glibc's ``mallopt``."""
    global _TUNED
    if _TUNED:
        return
    _TUNED = True
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        return
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    mallopt(M_MMAP_THRESHOLD, MMAP_ABOVE)  # (setting either turns off glibc's own adjustment of both)
    mallopt(M_TRIM_THRESHOLD, KEEP_FREED)


@contextmanager
def small_pages() -> Iterator[None]:
    """Large arrays without transparent huge pages within the block: numpy's without
    ``madvise(MADV_HUGEPAGE)``, Arrow's from the system allocator instead of its default pool
    (mimalloc, which maps huge pages); both restored after.

    Where the kernel's THP defrag setting is ``madvise`` (a common default), each fault on such
    memory may compact memory first. On the diff's 20M-event pair (GBs of arrays, read and kept)
    that was most of its system time and varied with how fragmented the machine's memory was:
    reading the 128 diff items files and keeping them cost 5.5-6.4 CPU-s from mimalloc, 1.6 from
    the system allocator (docs/decisions/0168-diff-at-20m.md). Buffers allocated within the block
    are freed by the pool that made them, whenever that is."""
    import numpy as np
    import pyarrow as pa

    multiarray = getattr(getattr(np, "_core", None) or getattr(np, "core", None), "multiarray", None)
    switch = getattr(multiarray, "_set_madvise_hugepage", None)
    numpy_before = switch(False) if switch is not None else None
    arrow_before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(arrow_before)
        if switch is not None:
            switch(numpy_before)
