"""Processing-time filters (``--system-trace-filter-*``): they select what is written, and never
change the capture on disk."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_explorer.analysis.reader import EVENT_INDEX, Session
from neuron_explorer.contracts.env import ConfigError, named_types, parse_nc_filter, parse_type_filter
from neuron_explorer.contracts.events import unproducible
from neuron_explorer.util.ranges import IndexRanges


@dataclass
class ViewFilter:
    ncs: IndexRanges | None = None  # ranges, not members: '0-99999999999' costs two numbers
    types: frozenset[str] | None = None
    instances: frozenset[str] | None = None
    # event types the filter names that no capture can hold (the captures may come from GPU hosts,
    # so only types no host produces): one line each, said before any work
    warnings: tuple[str, ...] = ()

    @classmethod
    def parse(cls, nc: str | None, types: str | None, instances: str | None) -> "ViewFilter":
        insts = None
        if instances is not None and instances.strip():
            insts = frozenset(p.strip() for p in instances.split(",") if p.strip())
            if not insts:
                raise ConfigError(f"--system-trace-filter-instance-id={instances!r} is not valid; "
                                  "accepted: comma-separated instance ids, e.g. i-abc123,i-def456")
        notes = tuple(f"--system-trace-filter-event-type: {w}" for w in unproducible(named_types(types), True))
        return cls(parse_nc_filter(nc, "--system-trace-filter-neuron-core"),
                   parse_type_filter(types, "--system-trace-filter-event-type"), insts, notes)

    def keeps_instance(self, instance_id: str) -> bool:
        return self.instances is None or instance_id in self.instances

    def apply(self, s: Session) -> np.ndarray | None:
        """Drop the events of ``s`` that the filters exclude (in place); the kept ones keep their
        index in the capture (``EVENT_INDEX`` column: their ids and region links are the ones they
        have unfiltered).  Returns which events were kept, or None when all were."""
        if not s.num_events or (self.ncs is None and self.types is None):
            return None
        keep = np.ones(s.num_events, dtype=bool)
        if self.ncs is not None:
            keep &= self.ncs.mask(s.events["nc_idx"])
        if self.types is not None:
            ids = [i for i, n in enumerate(s.type_names) if n in self.types]
            keep &= np.isin(s.events["type"], ids)
        if keep.all():
            return None
        index = np.flatnonzero(keep) if EVENT_INDEX not in s.events else s.events[EVENT_INDEX][keep]
        s.events = {k: v[keep] for k, v in s.events.items()}
        s.events[EVENT_INDEX] = index
        return keep
