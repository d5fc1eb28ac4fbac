"""The capture-time filter parsers, on their own, against the spec's examples, and the recording
mechanisms a type filter needs."""

from types import SimpleNamespace

import numpy as np
import pytest

from neuron_explorer.capture import store
from neuron_explorer.contracts import events as ev
from neuron_explorer.contracts.env import ConfigError, parse_nc_filter, parse_type_filter
from neuron_explorer.runtime.config import CaptureConfig


@pytest.mark.parametrize("value,expected", [
    ("0", [0]), ("0,2,4", [0, 2, 4]), ("0-3", [0, 1, 2, 3]), ("0,1,2-5", [0, 1, 2, 3, 4, 5]), (" 3 ", [3]),
])
def test_nc_filter_accepts_spec_forms(value, expected):
    assert parse_nc_filter(value).members() == expected


@pytest.mark.parametrize("value", [None, ""])
def test_nc_filter_unset_means_every_core(value):
    assert parse_nc_filter(value) is None


@pytest.mark.parametrize("value", ["a", "0-", "3-1", "0,,1", "-1", "1.5"])
def test_nc_filter_rejects_bad_values_with_value_and_forms(value):
    with pytest.raises(ConfigError) as e:
        parse_nc_filter(value)
    msg = str(e.value)
    assert repr(value) in msg and "0,2,4" in msg and "0-3" in msg


def test_type_filter_names():
    want = {"model_load", "nrt_execute", "runtime_execute"}
    assert parse_type_filter("model_load,nrt_execute,runtime_execute") == want


def test_type_filter_groups_match_the_spec():
    assert parse_type_filter("hardware") == {"nc_exec_running", "cc_running", "cc_exec_barrier", "numerical_err",
                                             "nrt_model_switch", "timestamp_sync_point", "hw_notify"}
    sw = parse_type_filter("software")
    assert "model_load" in sw and "nrt_execute" in sw and "nc_exec_running" not in sw


def test_type_filter_exclusions():
    assert parse_type_filter("software,^model_load") == set(ev.GROUPS["software"]) - {"model_load"}
    assert "cc_running" not in parse_type_filter("hardware,^cc_exec")
    assert parse_type_filter("^nrt_load") == set(ev.BY_NAME) - {"nrt_load"}


def test_type_filter_mix_of_groups_and_aliases():
    got = parse_type_filter("hardware,tensor_read,tensor_write")
    assert got == set(ev.GROUPS["hardware"]) | {"nrt_tensor_read", "nrt_tensor_write"}


def test_type_filter_rejects_unknown_names():
    with pytest.raises(ConfigError) as e:
        parse_type_filter("hardware,^bogus")
    assert "'bogus'" in str(e.value) and "NEURON_RT_INSPECT_EVENT_FILTER_TYPE" in str(e.value)


def test_config_from_env_defaults_and_validation():
    c = CaptureConfig.from_env({})
    assert c.output_dir == "./output" and c.max_events_per_nc == 1_000_000 and c.system_profile
    assert c.device_profile is None and c.cpu_util and c.host_memory and not c.on_fail
    c = CaptureConfig.from_env({"NEURON_RT_INSPECT_DEVICE_PROFILE": "session",
                                "NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC": "5"})
    assert c.device_profile == "session" and c.max_events_per_nc == 5
    assert CaptureConfig.from_env({"NEURON_RT_INSPECT_DEVICE_PROFILE": "1"}).device_profile == "model"
    for var, bad in [("NEURON_RT_INSPECT_DEVICE_PROFILE", "sometimes"),
                     ("NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC", "0"),
                     ("NEURON_RT_INSPECT_CPU_UTIL", "maybe")]:
        with pytest.raises(ConfigError) as e:
            CaptureConfig.from_env({var: bad})
        assert var in str(e.value) and repr(bad) in str(e.value)


# -- which recording mechanisms a filter needs (issue 29, item 2; end to end in
# test_type_filter_equivalence.py) ----------------------------------------------------------------

# the spec's examples, and single types whose mechanism also produces types of the other group
FILTERS = ["hardware", "software", "hardware,^cc_exec", "software,^model_load", "hardware,tensor_read,tensor_write",
           "hw_notify", "kbl_exec_wait", "nrt_model_switch", "runtime_execute", "cc_running", "^nrt_execute",
           "cc_running,framework_op", "framework_op"]
SPEC_HARDWARE = {"nc_exec_running", "cc_running", "cc_exec_barrier", "numerical_err", "nrt_model_switch",
                 "timestamp_sync_point", "hw_notify"}


def test_the_groups_are_the_specs_and_split_every_type():
    assert set(ev.GROUPS[ev.HARDWARE]) == SPEC_HARDWARE
    assert set(ev.GROUPS[ev.SOFTWARE]) == set(ev.BY_NAME) - SPEC_HARDWARE  # "software: all other events"
    assert "kbl_exec_wait" in ev.GROUPS[ev.SOFTWARE] and "hw_notify" in ev.GROUPS[ev.HARDWARE]
    assert parse_type_filter("hardware,^cc_exec") == SPEC_HARDWARE - {"cc_running"}
    assert parse_type_filter("software,^model_load") == set(ev.BY_NAME) - SPEC_HARDWARE - {"model_load"}


def test_each_mechanism_records_types_of_both_groups():
    """An execution pair expands into types of ``EXECUTION_TYPES`` only, and each mechanism's types
    span both groups: a filter on one group alone needs every mechanism."""
    rows = np.array([(ev.EXEC_PAIR, 10 * i, 10 * i + 5, 1, i % 2, i, 0, 0, 0) for i in range(4)], dtype=np.int64)
    cols, _ = store.expand_exec_pairs(rows, -1, runtime_rows=True)
    made = {ev.EVENT_TYPES[int(t)].name for t in cols[0]}
    assert made == {"nrt_execute", "runtime_execute", "nc_exec_running", "nrt_model_switch"}
    assert made <= set(ev.EXECUTION_TYPES)
    for mechanism in (ev.EXECUTION_TYPES, ev.COLLECTIVE_TYPES):
        assert {ev.BY_NAME[n].group for n in mechanism} == {ev.HARDWARE, ev.SOFTWARE}, mechanism


@pytest.mark.parametrize("value", FILTERS)
def test_executions_are_recorded_when_any_type_they_produce_is_kept(value):
    from neuron_explorer.runtime.core import EXECUTIONS, STATS, Runtime

    kept = parse_type_filter(value)
    rt = Runtime(CaptureConfig(type_filter=kept))
    assert rt.enabled[EXECUTIONS] == bool(kept & set(ev.EXECUTION_TYPES))
    assert rt.keeps_any(ev.COLLECTIVE_TYPES) == bool(kept & set(ev.COLLECTIVE_TYPES))
    assert [rt.enabled[t.id] for t in ev.EVENT_TYPES] == [t.name in kept for t in ev.EVENT_TYPES]
    # the monitor's counters count every execution, whatever the capture keeps
    rt.register(STATS, SimpleNamespace(forget_after_fork=lambda: None))
    assert rt.enabled[EXECUTIONS]
    rt.forget_after_fork()  # a forked child records nothing, executions included
    assert not any(rt.enabled)
