"""The parsers added for issue #17 under random input: the grouping flags, the progress delay and
device-profile names from arbitrary `.ntff` file names.  Each either accepts the input or refuses it
with its own one-line error, never anything else; names stay unique and safe as path components."""

from __future__ import annotations

import random

import pytest

from neuron_explorer.contracts.env import ConfigError, progress_delay
from neuron_explorer.contracts.tracks import SECONDARY_FIELDS, Grouping, GroupingError, group_pids
from neuron_explorer.util.names import safe_component
from neuron_explorer.view.devices import profile_ids

ALPHABET = list(",_ -.xyz0123456789\n\t\x00é") + list(SECONDARY_FIELDS) * 3


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8)))


def test_grouping_flags_accept_or_refuse_in_one_line():
    rng = random.Random(17)
    accepted = 0
    for _ in range(5000):
        p = None if rng.random() < 0.2 else _text(rng)
        s = None if rng.random() < 0.2 else _text(rng)
        try:
            g = Grouping.parse(p, s)
        except GroupingError as e:
            assert "\n" not in str(e).replace(repr(p or ""), "").replace(repr(s or ""), "") and str(e).startswith("--")
            continue
        accepted += 1
        assert set(g.primary) <= {"instance_id", "process_id"} and g.primary
        assert g.secondary is None or (set(g.secondary) <= set(SECONDARY_FIELDS)
                                       and len(set(g.secondary)) == len(g.secondary))
        procs = [(rng.choice(["i-a", "i-b"]), rng.choice([1, 2, 4194305]), 0) for _ in range(6)]
        shown = group_pids(procs, g)
        keys = {g.group_key(i, p) for i, p, _ in procs}
        assert len({pid for pid, _ in shown}) == len(keys)  # one pid per row, rows never share one
    assert accepted > 100


def test_progress_delay_accepts_seconds_or_refuses_in_one_line():
    rng = random.Random(3)
    for _ in range(3000):
        raw = "".join(rng.choice("0123456789.-e+ xinf") for _ in range(rng.randint(0, 6)))
        try:
            v = progress_delay({"NEURON_EXPLORER_PROGRESS_DELAY_S": raw})
        except ConfigError as e:
            assert "NEURON_EXPLORER_PROGRESS_DELAY_S" in str(e)
            continue
        assert 0.0 <= v <= 3600.0


@pytest.mark.parametrize("seed", range(5))
def test_device_profile_names_from_any_file_names_are_unique_and_safe(seed):
    rng = random.Random(seed)
    procs, paths = [], []
    for k in range(rng.randint(1, 6)):
        names = set()
        for _ in range(rng.randint(0, 8)):
            kind = rng.random()
            if kind < 0.4:
                names.add(f"{rng.choice(['1234567', '1234568', '99'])}_instid_0_vnc_{rng.randint(0, 3)}.ntff")
            elif kind < 0.6:
                names.add(f"profile_nc_{rng.randint(0, 3)}_session_{rng.randint(0, 2)}.ntff")
            else:
                names.add(_text(rng) + ".ntff")
        files = [f"/cap/p{k}/{n}" for n in sorted(names)]
        paths += files
        procs.append((rng.choice(["i-a", "i-b/..", "i-a"]), rng.choice([7, 8]), files,
                      [(0, "neff_1234567"), (1, "neff_1234568"), (2, "neff_1234567")]))
    ids = profile_ids(procs)
    assert set(ids) == set(paths)
    assert len(set(ids.values())) == len(paths)  # unique in the run
    assert len({safe_component(v) for v in ids.values()}) == len(paths)  # and as file names
    for p, v in ids.items():
        if "_instid_0_vnc_" in p and p.split("/")[-1].startswith(("1234567_", "1234568_")):
            assert v.split("_")[0] in ("0", "1")  # the model id of the graph, lowest when loaded twice
