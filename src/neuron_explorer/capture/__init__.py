"""The capture consumer: the sink that drains the runtime's ring (``sink``), the column blocks it keeps
(``store``), the session files it writes (``writer``) with the event segments it appends to
(``segments``), host samplers (``samplers``) and device
profiles (``device``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["device", "samplers", "segments", "sink", "store", "writer"]
