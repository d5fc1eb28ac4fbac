"""Reading captures back the way a user's tools would."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from neuron_explorer.analysis.reader import Session, discover, load_session
from neuron_explorer.capture import store


def sessions(root: Path) -> list[Session]:
    return [load_session(p) for p in discover(str(root))]


def type_counts(s: Session) -> Counter:
    names = [s.type_names[t] for t in s.events["type"]] if s.num_events else []
    return Counter(names)


def events_of(s: Session, name: str) -> dict[str, np.ndarray]:
    tid = s.type_id(name)
    mask = s.events["type"] == tid
    return {k: v[mask] for k, v in s.events.items()}


def expand_rows(rows: np.ndarray, last_model: int, **kw) -> tuple[np.ndarray, int]:
    """``store.expand_exec_pairs`` on drained rows, its event columns turned back into rows."""
    cols, last = store.expand_exec_pairs(rows, last_model, **kw)
    return cols.T, last
