"""contracts.dataset: the Parquet dataset's names, what counts as ours in a dataset directory, and
replacing an earlier output without ever replacing anything else."""

from __future__ import annotations

import os

import pytest

from neuron_explorer.contracts import dataset as ds


def test_every_table_is_documented_and_laid_out_one_way():
    assert set(ds.PARTITIONED).isdisjoint(ds.SINGLE_FILE)
    assert set(ds.SCHEMA_DOC) == set(ds.PARTITIONED) | set(ds.SINGLE_FILE)
    for table, cols in ds.SCHEMA_DOC.items():
        names = [n for n, _ in cols]
        assert len(names) == len(set(names)) and all(doc for _, doc in cols), table
    assert ds.table_file(ds.METADATA) == "ProfileMetadata.parquet"


def test_device_memory_counters_are_named_per_core_and_category():
    assert ds.device_memory_counter(3, "gradients") == "device_mem.nc3.gradients"
    assert set(ds.DEVICE_MEMORY_TO_MONITOR) == set(ds.DEVICE_MEMORY_CATEGORIES)


@pytest.mark.parametrize("span,shift", [(0, 10), (-5, 10), ((1024 << 10) - 1, 10), (1024 << 10, 11),
                                        ((1024 << 11) - 1, 11), (1 << 62, 53)])
def test_summary_buckets_are_at_least_a_microsecond_and_at_most_1024(span, shift):
    assert ds.summary_shift(span) == shift
    assert max(span, 0) >> shift < ds.SUMMARY_MAX_BUCKETS


@pytest.mark.parametrize("span,shift,width", [(0, 0, 1024), (1024 << 10, 0, 1024), ((1024 << 10) + 1, 0, 2048),
                                              (3_124_753_104, 22, 1 << 22), (3_124_753_104, 10, 1 << 22),
                                              (10**6, 25, 1 << 25)])
def test_the_coarse_width_gives_at_most_1024_buckets_and_holds_whole_summary_buckets(span, shift, width):
    assert ds.coarse_width(span, shift) == width
    assert span / width <= ds.COARSE_BUCKETS and width % (1 << shift) == 0


@pytest.mark.parametrize("rel,is_dir,foreign", [
    (ds.table_file(ds.EVENT_OVERVIEW), False, False),
    (ds.MARKER, False, False), (ds.PENDING_MARKER, False, False), ("ProfileMetadata.parquet", False, False),
    (ds.EVENTS, True, False), (ds.EVENTS, False, True), ("ProfileMetadata.parquet", True, True),
    ("notes.txt", False, True), ("analysis", True, True),
    (f"{ds.EVENTS}/instance=i-1", True, False), (f"{ds.EVENTS}/instance=i-1/process=7", True, False),
    (f"{ds.EVENTS}/instance=i-1/process=7/part-0.parquet", False, False),
    (f"{ds.EVENTS}/instance=i-1/part-0.parquet", False, True),  # one partition level short
    (f"{ds.EVENTS}/instance=i-1/process=7/part-0.csv", False, True),
    (f"{ds.EVENTS}/instance=i-1/process=7/x=1", True, True),  # one level too deep
    (f"{ds.EVENTS}/notapartition", True, True), (f"{ds.EVENTS}//x", True, True),
    (f"{ds.METADATA}/instance=i-1", True, True),  # below a single-file table's name
])
def test_what_view_writes_in_a_dataset_and_what_it_never_does(rel, is_dir, foreign):
    assert ds.foreign_entry(rel, is_dir) is foreign


def _our_output(d):
    part = d / ds.EVENTS / "instance=i-1" / "process=7"
    part.mkdir(parents=True)
    (part / "part-0.parquet").write_bytes(b"PAR1")
    (d / "ProfileMetadata.parquet").write_bytes(b"PAR1")
    ds.write_marker(str(d))
    return d


def test_an_output_of_ours_and_one_holding_anything_else(tmp_path):
    out = _our_output(tmp_path / "out")
    assert ds.foreign_entries(str(out)) == [] and ds.is_ours(str(out))
    (out / ds.EVENTS / "instance=i-2").mkdir()  # an empty partition: ours (a run may leave one)
    (out / "analysis").mkdir()
    (out / "notes.txt").write_text("mine")
    os.symlink("/etc/passwd", out / "ProfileMetadata2.parquet")
    assert ds.foreign_entries(str(out)) == ["ProfileMetadata2.parquet", "analysis/", "notes.txt"]
    assert not ds.is_ours(str(out))
    assert not ds.is_ours(str(tmp_path / "missing")) and not ds.is_ours(str(tmp_path))


def test_the_foreign_walk_stops_past_its_limit(tmp_path):
    """It stopped only before entering a directory: a directory of a million files (a home
    directory named by mistake) was listed whole."""
    for i in range(12):
        (tmp_path / f"f{i}").write_text("")
    (tmp_path / "sub").mkdir()
    for i in range(12):
        (tmp_path / "sub" / f"g{i}").write_text("")
    assert len(ds.foreign_entries(str(tmp_path), limit=5)) == 6  # one past the limit says "more than"
    assert len(ds.foreign_entries(str(tmp_path), limit=100)) == 24


@pytest.mark.parametrize("n,text", [
    (1, "1 file not written by neuron-explorer view (f0)"),
    (2, "2 files not written by neuron-explorer view (f0, f1)"),
    (7, "7 files not written by neuron-explorer view (f0, f1, f2, f3, f4 and 2 more)"),
    (1001, "more than 1000 files not written by neuron-explorer view (f0, f1, f2, f3, f4 and more)"),
])
def test_foreign_names_are_counted_and_a_few_shown(n, text):
    assert ds.describe_foreign([f"f{i}" for i in range(n)]) == text


def test_replace_dir_takes_a_new_name_and_replaces_an_earlier_output(tmp_path):
    target = tmp_path / "out"
    work = ds.work_area(str(target))
    (tmp_path / "keep").mkdir()
    _our_output(__import__("pathlib").Path(work))
    ds.replace_dir(work, str(target))
    assert ds.is_ours(str(target)) and not os.path.exists(work)
    work2 = ds.work_area(str(target))
    os.mkdir(os.path.join(work2, "second"))
    ds.replace_dir(work2, str(target))
    assert os.listdir(target) == ["second"]  # the earlier output is gone, the new one in place
    assert sorted(os.listdir(tmp_path)) == ["keep", "out"]  # no work area or old copy left beside it


def test_replace_dir_never_replaces_a_directory_it_did_not_write(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "thesis.tex").write_text("mine")
    work = ds.work_area(str(target))
    with pytest.raises(OSError):
        ds.replace_dir(work, str(target))
    assert (target / "thesis.tex").read_text() == "mine"
    ds.remove_work_area(work)
    assert not os.path.exists(work)
    ds.remove_work_area(None)
