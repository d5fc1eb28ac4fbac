"""XLA's executions in a session device profile paired with the ones we recorded
(``integrations.jax.devprof.pair_executions``), in process."""

from types import SimpleNamespace

from neuron_explorer.integrations.jax.devprof import pair_executions


def _rec(eid, module, t0, t1):
    return (eid, SimpleNamespace(artifacts={} if module is None else {"module": module}), t0, t1)


STEPS = [_rec(i, "jit(step)", i * 1_000_000, i * 1_000_000 + 400_000) for i in range(4)]


def test_a_clock_mapping_off_by_more_than_the_slack_still_pairs_each_execution_with_its_own():
    pending = STEPS + [_rec(4, "jit(predict)", 5_000_000, 5_300_000)]
    off = 700_000  # (every XLA start lands after our span, past the 200 us slack)
    found = [(p[2] + off, "jit_step") for p in STEPS] + [(5_000_000 + off, "jit_predict")]
    found.insert(2, (1_900_000 + off, "jit_convert_element_type"))  # the program's own eager op
    got = pair_executions(found, pending)
    assert [g[0] if g else None for g in got] == [0, 1, None, 2, 3, 4]


def test_a_module_seen_a_different_number_of_times_is_paired_by_time():
    found = [(10_000, "jit_step"), (300_000, "jit_step"), (1_050_000, "jit_step")]  # one split in two
    got = pair_executions(found, STEPS[:2])
    assert [g[0] if g else None for g in got] == [0, 0, 1]


def test_without_module_names_executions_are_paired_by_time_only():
    pending = [_rec(0, None, 0, 400_000), _rec(1, None, 1_000_000, 1_400_000)]
    found = [(100_000, "jit_a"), (700_000, "jit_b"), (1_450_000, None)]
    got = pair_executions(found, pending)
    assert [g[0] if g else None for g in got] == [0, None, 1]


def test_names_agree_whatever_characters_each_side_uses():
    pending = [_rec(0, "jit(<lambda>)", 0, 100), _rec(1, "pmap(train step)", 5_000_000, 5_000_100)]
    found = [(9_000_000, "jit__lambda_"), (9_500_000, "pmap_train_step")]
    assert [g[0] for g in pair_executions(found, pending)] == [0, 1]


def test_module_names_that_never_agree_leave_the_time_match_alone():
    pending = [_rec(0, "pjit(step)", 0, 400_000)]
    found = [(100_000, "some_other_spelling"), (2_000_000, "jit_eager_op")]
    assert [g[0] if g else None for g in pair_executions(found, pending)] == [0, None]
