"""``coarse.split_all`` (every process's overview rows at once, decision 0185) gives the leaves and the
coarse level that ``split_part`` per process, the sort by leaf and ``build`` give: the same picture,
including a name in two event groups (two rows per bucket, merged) and processes listed out of order."""

from __future__ import annotations

import numpy as np

from neuron_explorer.ui import coarse


def _table(rng: np.random.Generator) -> tuple[list[tuple[str, int]], dict[str, np.ndarray]]:
    parts = [("i-b", 7), ("i-a", 9), ("i-a", 3)]  # not in (instance, process) order
    names, srcs, groups = ["cc_running", "nc_exec_running", "nrt_execute"], ["", "nrt"], ["hardware", "software"]
    rows: list[tuple] = []
    for p in range(len(parts)):
        for tid in (-1, 12, 40):
            for src in range(len(srcs)):
                for name in range(len(names)):
                    if rng.random() < 0.4:
                        continue
                    buckets = np.unique(rng.integers(0, 50, rng.integers(1, 12)))
                    for b in buckets.tolist():
                        two = name == 2 and rng.random() < 0.5  # a name in two event groups
                        for g in ((0, 1) if two else (int(rng.integers(0, 2)),)):
                            s = 1000 + b * 100 + int(rng.integers(0, 40))
                            rows.append((p, tid, tid % 2, src, name, g, b, int(rng.integers(1, 9)), s,
                                         s + int(rng.integers(0, 60)), int(rng.integers(0, 300))))
    rows.sort(key=lambda r: r[:5] + (r[6],))
    a = np.array(rows, dtype=np.int64)
    cols = dict(zip(("part", "tid", "nc", "src", "name", "g", "b", "c", "s", "e", "d"), a.T))
    return parts, {**cols, "srcv": np.array(srcs, dtype=object), "namev": np.array(names, dtype=object),
                   "gv": np.array(groups, dtype=object)}


def test_split_all_is_split_part_sorted_and_built() -> None:
    rng = np.random.default_rng(185)
    for _ in range(20):
        parts, t = _table(rng)
        base, w, maxdur = 1000, 100, 45
        got: list = []
        for p, key in enumerate(parts):
            m = t["part"] == p
            cols = {"tid": t["tid"][m], "nc": t["nc"][m], "src": t["srcv"][t["src"][m]],
                    "name": t["namev"][t["name"][m]], "g": t["gv"][t["g"][m]], "b": t["b"][m], "c": t["c"][m],
                    "s": t["s"][m], "e": t["e"][m], "d": t["d"][m]}
            got.extend(coarse.split_part(*key, cols, maxdur))
        got.sort(key=lambda x: x[0][:6])
        want = coarse.build(got, base, w)
        rows, level = coarse.split_all(t["part"], parts, t["tid"], t["nc"], (t["src"], list(t["srcv"])),
                                       (t["name"], list(t["namev"])), (t["g"], list(t["gv"])),
                                       {k: t[k] for k in ("b", "c", "s", "e", "d")}, base, w, maxdur)
        assert rows == [r for r, _ in got]
        assert level.base == want.base and level.levels == want.levels
        assert level.maxdur.tolist() == want.maxdur.tolist()
        assert set(level.a) == set(want.a)
        for k, v in want.a.items():
            assert level.a[k].dtype == v.dtype and level.a[k].tolist() == v.tolist(), k
