"""analysis.filters.ViewFilter: view's processing-time filters on a hand-made session."""

from __future__ import annotations

import numpy as np
import pytest

from neuron_explorer.analysis.filters import ViewFilter
from neuron_explorer.analysis.reader import EVENT_INDEX
from neuron_explorer.contracts.env import ConfigError

from .sessions import session

EVENTS = [("nrt_execute", 0, 10, 0), ("nc_exec_running", 1, 9, 0), ("nrt_execute", 20, 30, 1),
          ("nc_exec_running", 21, 29, 1), ("cc_running", 40, 50, 2), ("model_load", 60, 70, 0)]


def test_no_filter_keeps_everything_untouched():
    f = ViewFilter.parse(None, None, None)
    s = session(EVENTS)
    before = {k: v.copy() for k, v in s.events.items()}
    assert f.apply(s) is None and EVENT_INDEX not in s.events
    assert all(np.array_equal(s.events[k], before[k]) for k in before)
    assert f.keeps_instance("anything")


def test_core_and_type_filters_keep_the_events_their_capture_index():
    f = ViewFilter.parse("0,2", "hardware", None)
    s = session(EVENTS)
    kept = f.apply(s)
    assert kept.tolist() == [False, True, False, False, True, False]
    assert s.events[EVENT_INDEX].tolist() == [1, 4] and s.events["start_ns"].tolist() == [1, 40]
    # a second filter keeps the indices of the capture, not of the first filter's output
    ViewFilter.parse("2", None, None).apply(s)
    assert s.events[EVENT_INDEX].tolist() == [4]


def test_a_filter_that_keeps_every_event_changes_nothing():
    s = session(EVENTS)
    assert ViewFilter.parse("0-2", "^framework_op", None).apply(s) is None and EVENT_INDEX not in s.events
    assert ViewFilter.parse("5", None, None).apply(session([])) is None  # no events: nothing to drop


def test_instance_filter():
    f = ViewFilter.parse(None, None, " i-a , i-b,")
    assert f.instances == {"i-a", "i-b"} and f.keeps_instance("i-b") and not f.keeps_instance("i-c")
    assert ViewFilter.parse(None, None, "  ").instances is None  # blank: every instance
    with pytest.raises(ConfigError, match="--system-trace-filter-instance-id=',,' is not valid"):
        ViewFilter.parse(None, None, ",,")


def test_bad_filters_name_the_flag():
    with pytest.raises(ConfigError, match="--system-trace-filter-neuron-core='3-1'"):
        ViewFilter.parse("3-1", None, None)
    with pytest.raises(ConfigError, match="--system-trace-filter-event-type='bogus'"):
        ViewFilter.parse(None, "bogus", None)


def test_a_type_no_capture_can_hold_is_said_before_any_work():
    f = ViewFilter.parse(None, "kmgr_exec_core,nrt_execute", None)
    assert len(f.warnings) == 1 and f.warnings[0].startswith("--system-trace-filter-event-type: event type "
                                                            "kmgr_exec_core is never recorded here")
