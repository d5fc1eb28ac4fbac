"""``diff`` over synthetic multi-host captures written by the real capture writer and converted by
``view``'s flow in this process: reading, alignment across ranks and hosts, the outputs, the exit
status, and damaged or foreign inputs (fuzzed)."""

from __future__ import annotations

import json
import pickle
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer.cli import main
from neuron_explorer.diff import dataset, report

from .. import fuzzing
from ..conftest import REPO, shared_dir
from .reference import assert_diff_as_reference

pytestmark = pytest.mark.slow  # three captures written and converted: seconds, not milliseconds


NAMES = (("a", 0), ("same", 0), ("other", 100))


def _build(root: Path) -> None:
    """The three synthetic captures (``synth/<name>``) and their conversions with the diff items
    (``pq/<name>``), in this process."""
    sys.path.insert(0, str(REPO))
    from bench.synth_capture import generate
    from neuron_explorer.view import pipeline
    from neuron_explorer.view.options import ViewOptions

    for name, seed in NAMES:
        generate(str(root / "synth" / name), instances=2, processes=2, events=3000, seed=seed)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEURON_EXPLORER_DIFF_ITEMS", "1")  # the diff items too (decision 0164: opt-in)
        for name, _ in NAMES:
            pipeline.run(ViewOptions(directory=str(root / "synth" / name), output_file=str(root / "pq" / name),
                                     progress=False, jobs=1))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """Made once per test run whichever xdist worker asks first (``shared_dir``: a module fixture is
    made once per worker that runs one of its tests, decision 0210); the tests only read it."""
    return shared_dir(tmp_path_factory, "diff_dataset_synth", _build)[0]


@pytest.fixture(scope="module")
def captures(built) -> dict[str, Path]:
    return {name: built / "synth" / name for name, _ in NAMES}


@pytest.fixture(scope="module")
def datasets(built) -> dict[str, Path]:
    return {name: built / "pq" / name for name, _ in NAMES}


def test_view_writes_diff_items_only_when_asked(captures, tmp_path, capsys, monkeypatch):
    from neuron_explorer.contracts.dataset import DIFF_ITEMS

    monkeypatch.delenv("NEURON_EXPLORER_DIFF_ITEMS", raising=False)
    out = tmp_path / "plain"
    assert main(["view", "-d", str(captures["a"]), "--output-file", str(out)]) == 0
    assert (out / "SystemProfileEvents").is_dir() and not (out / DIFF_ITEMS).exists()
    monkeypatch.setenv("NEURON_EXPLORER_DIFF_ITEMS", "yes")
    capsys.readouterr()
    assert main(["view", "-d", str(captures["a"]), "--output-file", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "NEURON_EXPLORER_DIFF_ITEMS='yes' is not valid; accepted: 0, 1" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad").exists()


DIFF_FUZZ_CASES = 11  # damaged copies; what 4 s gave on an idle machine (decision 0151)


def _doc(capsys, *argv: str) -> tuple[int, dict]:
    rc = main(["diff", *argv, "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)


def _text(capsys, *argv: str) -> tuple[int, str]:
    rc = main(["diff", *argv, "--format", "json"])
    return rc, capsys.readouterr().out


def test_identical_profiles_align_everything_with_no_change(datasets, capsys):
    rc, doc = _doc(capsys, str(datasets["a"]), str(datasets["same"]))
    assert rc == 0 and doc["schema"] == "neuron-explorer-diff/1"
    assert doc["baseline"]["ranks"] == doc["candidate"]["ranks"] == [0, 1, 2, 3]
    assert len(doc["baseline"]["instances"]) == 2
    kinds = {r["kind"] for r in doc["rows"]}
    assert {"step", "step_part", "straggler", "graph", "collective"} <= kinds
    assert doc["changes"] == [] and not any(r["significant"] for r in doc["rows"])
    for r in doc["rows"]:
        if r["kind"] in ("graph", "collective", "step"):
            assert r["delta_ns"] == 0 and r["ci_ns"][0] <= 0 <= r["ci_ns"][1], r
    assert doc["step"]["per_step"]["rank"] and doc["step"]["method"]["baseline"] == ["cycle"]


def test_a_rerun_with_other_noise_shows_no_change(datasets, capsys):
    rc, doc = _doc(capsys, str(datasets["a"]), str(datasets["other"]))
    assert rc == 0
    assert doc["changes"] == [], doc["changes"]
    graphs = {r["key"]: r for r in doc["rows"] if r["kind"] == "graph"}
    assert set(graphs) == {"train_step_forward", "train_step_backward"}
    assert all(g["match"] == "name" and g["baseline"]["count"] == g["candidate"]["count"] for g in graphs.values())


def test_the_bootstrap_by_ranks_gives_the_reference_numbers(datasets):
    """Decision 0146: every interval and verdict of a diff of real view outputs equals the per-row
    ``numpy.quantile`` bootstrap's, for an A/A pair and for two different runs."""
    a, same, other = (dataset.read_side(str(datasets[k])) for k in ("a", "same", "other"))
    assert_diff_as_reference(a, same)
    doc = assert_diff_as_reference(a, other)
    assert sum(1 for r in doc["rows"] if r.get("q25_ci_ns")) >= 10


def test_files_read_by_worker_processes_and_dask_workers_give_the_same_diff(datasets, tmp_path, capsys):
    """Decision 0148: ``-j 2`` (spawned worker processes) and ``--scheduler`` (a real Dask cluster
    on 127.0.0.1) read the events files elsewhere and merge them in file order: the same document
    as one process, and the read really ran on the cluster's workers, from the diff items where
    the dataset has them (decision 0163)."""
    from ..view.cluster_util import Cluster

    pytest.importorskip("distributed")
    argv = (str(datasets["a"]), str(datasets["other"]), "--min-change", "1")
    rc, here = _text(capsys, *argv)
    rc_j, pool = _text(capsys, *argv, "-j", "2")
    c = Cluster(2, log_dir=tmp_path)
    try:
        rc_d, dask = _text(capsys, *argv, "--scheduler", c.address)
        with c.client() as client:
            executed = client.run(lambda dask_worker: dask_worker.state.executed_count)
        # the workers read the diff items view wrote (decision 0163), and the events where there are none
        from neuron_explorer.view.cluster import engine_for

        engine = engine_for(c.address)
        keys: list[str] = []
        submit = engine.client.submit

        def recorded(*args, **kwargs):
            keys.append(kwargs["key"])
            return submit(*args, **kwargs)

        engine.client.submit = recorded
        try:
            on_items = dataset.read_side(str(datasets["a"]), engine)
            on_events = dataset.read_side(str(_without_items(datasets["a"], tmp_path / "no_items")), engine)
        finally:
            engine.close()
    finally:
        c.close()
    assert on_items.items_files == 4 and on_events.items_files == 0 and on_items.events == on_events.events
    # one key per task of the run: the scheduler answers a key it still holds with its old result,
    # which read the second side's files as the first's (the cause of a rare mismatch of the
    # documents below, stops 40-42)
    assert len(keys) == 8 and len(set(keys)) == len(keys), keys
    assert rc == rc_j == rc_d == 0
    assert any(n > 0 for n in executed.values()), executed
    assert any(r.get("q25_ci_ns") for r in json.loads(here)["rows"])
    # the same document to the byte (the workers' parts are packed for the trip: decision 0179)
    assert pool == here, _first_difference(json.loads(here), json.loads(pool))
    assert dask == here, _first_difference(json.loads(here), json.loads(dask))


class _PickleEngine:
    """An engine whose "workers" are this process, each part sent as Dask sends it: pickled with
    its arrays as out-of-band buffers; ``sent``: the bytes of each part (``packed`` False: the
    parts as ``read_part`` gives them, for scale)."""

    local = False

    def __init__(self, packed: bool = True) -> None:
        self.sent: list[int] = []
        self.packed = packed

    def stream(self, fn, items, *args):
        assert fn is dataset.read_part_packed
        fn = fn if self.packed else dataset.read_part
        for it in items:
            bufs: list = []
            data = pickle.dumps(fn(it, *args), protocol=5, buffer_callback=bufs.append)
            self.sent.append(len(data) + sum(b.raw().nbytes for b in bufs))
            yield pickle.loads(data, buffers=[bytearray(b.raw()) for b in bufs])


def test_parts_packed_for_the_trip_give_the_same_document(datasets, tmp_path):
    """Decision 0179: what a worker sends back is packed (``analysis.packed``) and widened again where
    the parts are merged: the same document to the byte as the files read in this process, from
    the diff items and from the events, in a third of the bytes or less."""
    plain = _PickleEngine(packed=False)
    dataset.read_side(str(datasets["a"]), plain)
    bare = {k: _without_items(datasets[k], tmp_path / f"bare_{k}") for k in ("a", "other")}
    engines = []
    for roots in ({k: datasets[k] for k in ("a", "other")}, bare):
        here = [dataset.read_side(str(roots[k])) for k in ("a", "other")]
        engines.append(_PickleEngine())
        there = [dataset.read_side(str(roots[k]), engines[-1]) for k in ("a", "other")]
        assert len(engines[-1].sent) == 8 and there[0].items_files == (4 if roots is not bare else 0)
        docs = [json.dumps(report.build(*sides), indent=1) for sides in (here, there)]
        assert docs[0] == docs[1], _first_difference(json.loads(docs[0]), json.loads(docs[1]))
    assert 3 * sum(engines[0].sent[:4]) < sum(plain.sent), (engines[0].sent, plain.sent)


def _first_difference(a, b, path: str = "") -> str:
    """Where two JSON documents first differ (the message of a rare mismatch seen under load)."""
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"[:2000]
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}")
    elif isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: {a!r} != {b!r}"[:2000]


def test_captures_are_converted_through_view(captures, datasets, capsys):
    rc, doc = _doc(capsys, str(captures["a"]), str(datasets["same"]))
    assert rc == 0 and doc["changes"] == []
    assert doc["baseline"]["path"] == str(captures["a"])


def test_table_and_markdown(datasets, capsys):
    assert main(["diff", str(datasets["a"]), str(datasets["other"]), "--all"]) == 0
    text = capsys.readouterr().out
    assert "step time:" in text and "train_step_forward" in text and "95% interval" in text
    assert main(["diff", str(datasets["a"]), str(datasets["other"]), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("### neuron-explorer diff") and "| kind | item |" in md


def test_gate_passes_on_a_rerun_and_reports_itself(datasets, capsys):
    rc, doc = _doc(capsys, str(datasets["a"]), str(datasets["other"]), "--fail-if-slower", "5")
    assert rc == 0 and doc["gate"]["failed"] is False and doc["gate"]["fail_if_slower_pct"] == 5


def test_usage_errors_are_one_line(tmp_path, capsys):
    assert main(["diff", str(tmp_path / "missing"), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing: no such file or directory" in err
    f = tmp_path / "f.txt"
    f.write_text("x")
    assert main(["diff", str(f), str(f)]) == 2
    assert "not a directory" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["diff", str(empty), str(empty)]) == 2
    assert capsys.readouterr().err.startswith("neuron-explorer: error: baseline")


def test_a_damaged_file_is_named_and_the_rest_compared(datasets, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(datasets["other"], broken)
    part = sorted((broken / "SystemProfileEvents").rglob("*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:100])
    rc, doc = _doc(capsys, str(datasets["a"]), str(broken))
    assert rc == 3
    assert any(str(part) in w and "unreadable" in w for w in doc["warnings"])
    assert len(doc["candidate"]["ranks"]) == 4  # the metadata still names every process
    graphs = [r for r in doc["rows"] if r["kind"] == "graph"]
    assert graphs and all(r["candidate"]["count"] < r["baseline"]["count"] for r in graphs)


def test_fuzzed_tables_never_crash_the_reader(datasets, tmp_path):
    """Random byte damage to the files ``diff`` reads: a Side or a DatasetError, nothing else."""
    rng = np.random.default_rng(fuzzing.seed(34))
    src = datasets["a"]
    files = sorted(p.relative_to(src) for p in src.rglob("*.parquet"))
    for n in range(fuzzing.examples(DIFF_FUZZ_CASES)):
        work = tmp_path / f"f{n}"
        shutil.copytree(src, work)
        victim = work / files[int(rng.integers(len(files)))]
        data = bytearray(victim.read_bytes())
        for _ in range(int(rng.integers(1, 8))):
            data[int(rng.integers(len(data)))] = int(rng.integers(256))
        if rng.random() < 0.3:
            data = data[: int(rng.integers(len(data)))]
        victim.write_bytes(bytes(data))
        try:
            side = dataset.read_side(str(work))
            report.build(side, side)
        except dataset.DatasetError:
            pass
        except Exception as e:  # pragma: no cover - the failure message names the seed to replay
            raise AssertionError(f"seed {fuzzing.seed(34)} case {n}: {victim.name}: {e!r}") from e
        shutil.rmtree(work)


# ---- the diff items view writes beside each events file (decision 0163) ----

def _items(root: Path) -> list[Path]:
    return sorted((root / "SystemProfileDiffItems").rglob("*.parquet"))


def _without_items(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    shutil.rmtree(dst / "SystemProfileDiffItems")
    return dst


def _same_part(a: dataset.FilePart, b: dataset.FilePart) -> None:
    assert (a.events, a.model_names, a.region_links) == (b.events, b.model_names, b.region_links)
    for k in ("graphs", "loads", "regions", "colls"):
        x, y = getattr(a, k), getattr(b, k)
        assert list(x) == list(y), k
        for key in x:
            assert len(x[key]) == len(y[key]), (k, key)
            for p, q in zip(x[key], y[key]):
                assert len(p) == len(q) and all(u.dtype == v.dtype and np.array_equal(u, v) for u, v in zip(p, q))
    assert list(a.steps) == list(b.steps)
    for proc, s in a.steps.items():
        t = b.steps[proc]
        assert (s.method, s.boundary, sorted(s.columns)) == (t.method, t.boundary, sorted(t.columns))
        for u, v in [(s.number, t.number), (s.start_ns, t.start_ns), (s.end_ns, t.end_ns)] + \
                [(s.columns[c], t.columns[c]) for c in s.columns]:
            assert u.dtype == v.dtype and np.array_equal(u, v)


def _cli_doc(capsys, a: Path, b: Path, *extra: str) -> tuple[int, str, list[str]]:
    """Exit status, the JSON text with the two paths taken out, and the stderr lines."""
    rc = main(["diff", str(a), str(b), "--format", "json", *extra])
    got = capsys.readouterr()
    return rc, got.out.replace(str(a), "A").replace(str(b), "B"), got.err.splitlines()


def test_view_writes_diff_items_that_are_what_the_events_give(datasets):
    """Each events file's items, read back, are the part ``read_file`` makes of the events: the
    same keys in the same order, the same arrays (dtype and values) and the same steps."""
    from neuron_explorer.exporters import diff_items

    for name in ("a", "other"):
        side = dataset.read_side(str(datasets[name]))
        kinds = {n: str(m.get("kind") or "") for n, m in side.models.items()}
        events = dataset.table_files(str(datasets[name] / "SystemProfileEvents"))
        assert len(events) == len(_items(datasets[name])) == side.items_files == 4
        for f in events:
            ip = f.replace("SystemProfileEvents", "SystemProfileDiffItems")
            got = diff_items.read(ip, f, kinds)
            assert got.from_items and got.steps and got.colls
            _same_part(got, dataset.read_file(f, *diff_items.model_args(kinds)))


def test_the_diff_is_the_same_with_and_without_diff_items(datasets, tmp_path, capsys):
    a, o = _without_items(datasets["a"], tmp_path / "a"), _without_items(datasets["other"], tmp_path / "o")
    assert dataset.read_side(str(a)).items_files == 0
    for args in (("--all",), ("--min-change", "1")):
        rc, with_items, err = _cli_doc(capsys, datasets["a"], datasets["other"], *args)
        rc2, without, err2 = _cli_doc(capsys, a, o, *args)
        assert (rc, with_items, err) == (rc2, without, err2) and rc == 0 and err == []


def test_stale_or_foreign_diff_items_are_noted_once_and_not_used(datasets, tmp_path, capsys):
    """Items that do not belong to their events file (another process's copied over them) or were
    made with other model kinds than the profile's: one warning line per side, the events read
    instead, and the document and exit status of the same dataset without items."""
    import pyarrow.parquet as pq

    ref = _without_items(datasets["other"], tmp_path / "ref")
    _, want, _ = _cli_doc(capsys, datasets["a"], ref)
    stale = tmp_path / "stale"
    shutil.copytree(datasets["other"], stale)
    it = _items(stale)
    for f in it[1:]:
        shutil.copyfile(it[0], f)
    rc, got, err = _cli_doc(capsys, datasets["a"], stale)
    assert rc == 0 and got == want
    assert len(err) == 1 and "warning: candidate:" in err[0] and "(stale)" in err[0] and "2 more" in err[0], err
    assert dataset.read_side(str(stale)).items_files == 1
    for d, kinds in ((tmp_path / "kinds", "backward"), (tmp_path / "kinds_ref", "backward")):
        shutil.copytree(datasets["other"], d)
        t = pq.read_table(d / "ProfileModels.parquet")
        col = [kinds if k == "forward" else k for k in t.column("kind").to_pylist()]
        pq.write_table(t.set_column(t.column_names.index("kind"), "kind", pa_array(col)), d / "ProfileModels.parquet")
    shutil.rmtree(tmp_path / "kinds_ref" / "SystemProfileDiffItems")
    _, want, _ = _cli_doc(capsys, datasets["a"], tmp_path / "kinds_ref")
    rc, got, err = _cli_doc(capsys, datasets["a"], tmp_path / "kinds")
    assert got == want and len(err) == 1 and "model kinds" in err[0], err


def pa_array(values):
    import pyarrow as pa

    return pa.array(values, pa.string())


DIFF_ITEMS_FUZZ_CASES = 12


def test_damaged_diff_items_never_change_the_diff(datasets, tmp_path):
    """Byte changes and truncations of one items file: the side read is the one without items
    (the same document), and the items were either refused with a note or undamaged where it
    matters (every file read from items, no note)."""
    from neuron_explorer.analysis import compare as cmp

    rnd = __import__("random").Random(fuzzing.seed(163))
    base = dataset.read_side(str(datasets["a"]))
    ref = dataset.read_side(str(_without_items(datasets["other"], tmp_path / "ref")))
    ref.path = "x"
    want = json.dumps(report.build(base, ref, cmp.Thresholds()), sort_keys=True)
    files = [p.relative_to(datasets["other"]) for p in _items(datasets["other"])]
    for n in range(fuzzing.examples(DIFF_ITEMS_FUZZ_CASES)):
        work = tmp_path / f"f{n}"
        shutil.copytree(datasets["other"], work)
        victim = work / files[n % len(files)]
        fuzzing.damage_file(victim, rnd, truncate=rnd.random() < 0.3)
        side = dataset.read_side(str(work))
        side.path = "x"
        where = f"seed {fuzzing.seed(163)} case {n}"
        assert json.dumps(report.build(base, side, cmp.Thresholds()), sort_keys=True) == want, where
        assert side.warnings == ref.warnings, where
        if side.notes:
            assert len(side.notes) == 1 and str(victim) in side.notes[0] and "\n" not in side.notes[0], where
            assert side.items_files == len(files) - 1, where
        else:
            assert side.items_files == len(files), where
        shutil.rmtree(work)
