"""contracts.events: the event vocabulary every producer and reader shares.
(The groups against the spec: tests/capture/test_filters.py.)"""

from __future__ import annotations

from neuron_explorer.contracts import events as ev


def test_ids_are_positions_and_names_are_unique():
    assert [t.id for t in ev.EVENT_TYPES] == list(range(len(ev.EVENT_TYPES)))
    assert len(ev.BY_NAME) == len(ev.EVENT_TYPES)
    assert all(ev.BY_NAME[t.name] is t for t in ev.EVENT_TYPES)
    assert ev.EXEC_PAIR >= len(ev.EVENT_TYPES) and ev.EXEC_PAIR < 256  # never a real type; fits the u2 column


def test_every_type_fills_the_five_argument_slots():
    assert ev.RECORD_WIDTH == 4 + ev.NUM_ARGS == 9
    for t in ev.EVENT_TYPES:
        assert len(t.args) == ev.NUM_ARGS, t.name
        named = [a for a in t.args if a]
        assert len(named) == len(set(named)), t.name
        assert t.group in (ev.HARDWARE, ev.SOFTWARE)
        assert t.source in (ev.SOURCE_RT, ev.SOURCE_HW, ev.SOURCE_FRAMEWORK) and t.doc


def test_collectives_keep_op_seq_and_group_in_the_same_slots():
    """A collective is matched across ranks by (group, op, seq): each kind stores them where the
    readers look for them by name."""
    for name in ("cc_running", "cc_exec_barrier"):
        args = ev.BY_NAME[name].args
        assert (args[0], args[1], args[4]) == ("op_str", "seq", "group_str")


def test_aliases_and_constants_name_existing_types():
    for alias, name in ev.ALIASES.items():
        assert ev.type_id(alias) == ev.type_id(name) == ev.BY_NAME[name].id
    assert ev.EVENT_TYPES[ev.NC_EXEC_RUNNING].name == "nc_exec_running"
    assert ev.EVENT_TYPES[ev.FRAMEWORK_OP].source == ev.SOURCE_FRAMEWORK
    assert set(ev.EXECUTION_TYPES) <= set(ev.BY_NAME) and set(ev.COLLECTIVE_TYPES) <= set(ev.BY_NAME)
    assert not set(ev.EXECUTION_TYPES) & set(ev.COLLECTIVE_TYPES)


def test_status_codes_name_the_numerical_error():
    assert ev.STATUS_CODES[ev.RET_NUM_ERR] == "NRT_EXEC_COMPLETED_WITH_NUM_ERR"
    assert ev.STATUS_CODES[0] == "NRT_SUCCESS"


def test_unproducible_types_get_one_sorted_warning_each():
    assert ev.unproducible([], False) == []
    assert ev.unproducible(["nrt_execute", "cc_exec"], False) == []
    cpu = ev.unproducible(["device_exec", "kmgr_exec_core", "kmgr_exec_core"], has_gpu=False)
    assert [w.split()[2] for w in cpu] == ["device_exec", "kmgr_exec_core"]
    assert all(w.startswith("event type ") and "never recorded here" in w for w in cpu)
    gpu = ev.unproducible(["device_exec", "kmgr_exec_core"], has_gpu=True)
    assert [w.split()[2] for w in gpu] == ["kmgr_exec_core"]  # a GPU host records device_exec
