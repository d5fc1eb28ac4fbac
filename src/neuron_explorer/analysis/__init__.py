"""Reading captures into the ``view`` model: safe protobuf reads (``pbfile``), sessions (``reader``),
filters (``filters``), which job a process's collectives belong to (``jobs``), clock alignment and
stragglers (``align``), the ``ProcessEvents`` model (``events``), framework events' names and links
(``framework``), counters (``counters``), device profiles (``device``), training steps and their breakdown (``steps``),
the summary (``summary``) and two profiles' items compared (``compare``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["align", "compare", "counters", "device", "events", "filters", "framework", "jobs", "pbfile", "reader",
           "steps", "summary"]
