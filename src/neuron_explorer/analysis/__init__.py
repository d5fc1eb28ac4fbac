"""Reading captures into the ``view`` model: safe protobuf reads (``pbfile``), sessions (``reader``),
filters (``filters``), which job a process's collectives belong to (``jobs``), clock alignment and
stragglers (``align``), the ``ProcessEvents`` model (``events``), framework events' names and links
(``framework``), counters (``counters``), device profiles (``device``), training steps and their
breakdown (``steps``), their numbers tied across ranks by the collectives (``stepalign``), steps
across ranks, utilisation and ranked insights (``insights``), two
profiles' items compared (``compare``), one events file's items as a diff compares them
(``occurrences``), their int64 columns packed for the trip from a worker (``packed``), the
summary (``summary``) and the C extension several of them use when it is built (``native``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["align", "compare", "counters", "device", "events", "filters", "framework", "insights", "jobs",
           "native", "occurrences", "packed", "pbfile", "reader", "stepalign", "steps", "summary"]
