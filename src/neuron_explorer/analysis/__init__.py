"""Reading captures into the ``view`` model: safe protobuf reads (``pbfile``), sessions (``reader``),
filters (``filters``), clock alignment and stragglers (``align``), the ``ProcessEvents`` model
(``events``), framework events' names and links (``framework``), counters (``counters``), device
profiles (``device``) and the summary (``summary``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["align", "counters", "device", "events", "filters", "framework", "pbfile", "reader", "summary"]
