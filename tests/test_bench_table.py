"""The README's performance table is generated from bench/results/summary.json, never edited by
hand: these checks fail when the block, the summary and the result files drift apart."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from bench import interleave, table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _summary() -> dict:
    with open(os.path.join(ROOT, "bench", "results", "summary.json")) as f:
        return json.load(f)


def test_readme_block_is_what_the_generator_writes_from_summary_json():
    with open(os.path.join(ROOT, "README.md")) as f:
        block = table.readme_block(f.read())
    assert block is not None, "README.md lost its bench:table markers"
    assert block == table.render_readme(_summary()), \
        "README's performance table differs from bench/results/summary.json: run `python -m bench --readme`"


def test_summary_rows_are_the_committed_result_files_figures():
    rows = table.headline(table.load_results())
    assert _summary()["headline"] == rows, \
        "summary.json is stale against bench/results/*.json: run `python -m bench --collect --readme`"


def test_every_capture_path_has_instruction_and_cpu_rows_measured_with_a_peer_or_said_missing():
    rows = _summary()["headline"]
    for _tag, label, *_ in table.PATHS:
        for kind in ("instructions per step (callgrind)", "process CPU per step (interleaved runs)"):
            # the system profile as a user starts it, or its variants (``, `system_nomem```)
            row = next((r for r in rows if r["figure"].startswith(f"capture, {label}: {kind}")), None)
            assert row is not None, f"no {kind} row for {label}"
            assert row["command"], row
            assert row["peer"] or row["value"] == "not measured yet", row


def test_a_changed_figure_changes_the_block_and_bad_markers_are_named():
    s = _summary()
    t = copy.deepcopy(s)
    t["headline"][0]["value"] = "9.999x"
    assert table.render_readme(s) != table.render_readme(t)
    with pytest.raises(ValueError, match="markers"):
        table.replace_block("# a README without the table\n", table.render_readme(s))
    text = f"before\n{table.BEGIN}\nold\n{table.END}\nafter\n"
    assert table.replace_block(text, "X") == "before\nX\nafter\n"


def test_summarize_reports_one_time_costs_apart_from_the_step():
    def run(step, start, first, exit_):
        return {"cpu_step_ns": step, "wall_step_ns": step, "startup_cpu_ns": start,
                "first_step_cpu_ns": first, "exit_cpu_ns": exit_}

    runs = {"plain": [run(100, 10, 50, 5), run(104, 12, 52, 6)],
            "system": [run(101, 20, 60, 25), run(105, 22, 62, 26)]}
    s = interleave.summarize(runs)
    assert s["system"]["ratio"] == pytest.approx(103 / 102)
    assert s["system"]["one_time_ns"]["exit_cpu_ns"]["extra"] == pytest.approx(20)
    assert s["system"]["paired_ratio"]["max"] == pytest.approx(1.01)


def test_summarize_keeps_crashed_runs_out_of_the_figures_but_counts_them():
    ok = {"cpu_step_ns": 100, "wall_step_ns": 100}
    s = interleave.summarize({"plain": [ok, ok], "system": [None, dict(ok, cpu_step_ns=110)], "other": [None, None]})
    assert s["system"]["failed_runs"] == 1 and s["system"]["ratio"] == pytest.approx(1.1)
    assert s["system"]["paired_ratio"]["n"] == 1
    assert s["other"] == {"failed_runs": 2, "ratio": None, "one_time_ns": {}}


def test_repeated_counts_and_ndet_cpu_runs_show_their_range_and_a_verdict_only_when_resolved():
    ins = {"ratio": {"plain": 1.0, "system": 1.012}, "per_step": {"plain": 1000.0, "system": 1012.0},
           "per_step_repetitions": {"plain": [1000.0, 1000.0, 1001.0], "system": [1012.0, 1005.0, 1014.0]},
           "command": "python bench/capture_instructions.py --repeat 3"}
    rows = table._capture_rows({"capture_instructions.json": ins})
    figure = "capture, compiled step, `aot_eager`: instructions per step (callgrind)"
    (row,) = [r for r in rows if r["figure"] == figure]
    assert "3 repetitions 1.0050..1.0130" in row["value"] and row["target"].endswith("(not met)")

    def ndet(lo, hi):
        d = {"overhead": {"ndet": {"cpu_overhead_pct": 0.5, "overhead_pct": 0.7,
                                   "paired_cpu": {"min": lo, "max": hi, "n": 7}}}}
        (r,) = [r for r in table._other_rows({"ndet.json": d}) if r["figure"].startswith("NDET with")]
        return r

    assert ndet(0.99, 1.04)["target"] == "<= 1% (not resolved: the paired ratios span the target)"
    met = ndet(0.99, 1.005)
    assert met["target"] == "<= 1% (met)" and "paired 0.990..1.005 over 7 runs" in met["value"]


def test_a_same_process_ratio_without_enough_processes_gets_no_verdict_either_way():
    """A verdict needs an interval for the median: without three processes' ratios there is none."""
    for extra in ({}, {"ratios": [1.0, 1.0]}):
        sp = {"ndet": {"label": "NDET on", "median_ratio": 1.0, "min": 1.0, "max": 1.0, "n": 2, **extra}}
        (r,) = [r for r in table._other_rows({"ndet.json": {"same_process": sp}})
                if r["figure"].startswith("NDET on") and "paused" in r["figure"]]
        assert r["target"] == "<= 1.01x (not resolved: fewer than 3 processes' ratios)"


def test_a_same_process_verdict_with_every_process_ratio_comes_from_the_median_s_interval():
    """With the processes' ratios recorded, the verdict is the one a distribution-free 95% interval
    for their median gives: under the target, over it, or spanning it (whatever the median alone
    says)."""
    def row(ratios):
        sp = {"ndet": {"label": "NDET on", "median_ratio": sorted(ratios)[len(ratios) // 2], "min": min(ratios),
                       "max": max(ratios), "n": len(ratios), "ratios": ratios}}
        (r,) = [r for r in table._other_rows({"ndet.json": {"same_process": sp}})
                if r["figure"].startswith("NDET on") and "paused" in r["figure"]]
        return r

    tight_under = [1.002, 1.004, 1.005, 1.006, 1.007, 1.008, 1.009, 1.003, 1.0095]
    assert row(tight_under)["target"] == "<= 1.01x (met)"
    assert "interval 1.0030..1.0090)" in row(tight_under)["value"]  # the 2nd and 8th of 9: 96% coverage
    assert row([1.02, 1.03, 1.025, 1.04, 1.021, 1.05, 1.022, 1.019, 1.033])["target"] == "<= 1.01x (not met)"
    wide = [0.96, 0.98, 1.0, 1.005, 1.008, 1.02, 1.03, 1.04, 1.05]  # median 1.008 under the target
    assert row(wide)["target"] == "<= 1.01x (not resolved: the median's 96% interval 0.9800..1.0400 spans the target)"
    assert table.median_interval([3.0, 1.0, 2.0, 5.0, 4.0])[:2] == (1.0, 5.0)  # n=5: the whole range (94%)


def test_an_eager_workload_s_same_process_ratios_come_out_under_its_own_path():
    """``eager_overhead.py --same-process`` stores its one-process ratios per workload: the MLP's
    appear under the eager MLP path (with that path's target), not under the transformer block's."""
    summary = {"plain": {"ratio": 1.0, "cpu_step_ns": {"median": 7e5}},
               "system": {"ratio": 1.05, "paired_ratio": {"min": 1.0, "max": 1.1, "n": 3},
                          "cpu_step_ns": {"median": 7.3e5}}}
    ratios = [1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 1.08, 1.09]
    sp = {"system": {"label": "system profile, eager mlp", "median_ratio": 1.05, "min": 1.01, "max": 1.09, "n": 9,
                     "ratios": ratios},
          "null": {"label": "A/A control", "median_ratio": 1.0, "min": 0.98, "max": 1.02, "n": 9,
                   "ratios": [0.98, 0.99, 1.0, 1.0, 1.0, 1.0, 1.01, 1.01, 1.02]}}
    eager = {"command": "python -m bench.eager_overhead --same-process 9",
             "workloads": {"mlp": {"summary": summary, "steps": 10000, "same_process": sp},
                           "block": {"summary": summary, "steps": 400}}}
    rows = table._capture_rows({"eager_overhead.json": eager})
    mlp = [r for r in rows if "paused in one process" in r["figure"]]
    assert [r["figure"].split(":")[0] for r in mlp] == ["capture, eager MLP step"]
    assert mlp[0]["value"].startswith("1.0500x (1.0100..1.0900 over 9 processes")
    assert mlp[0]["target"] == table.TARGET["eager_mlp"]  # no target of 1%, so no verdict
    assert mlp[0]["peer"] == "the same process with the hooks paused"
    control = [r for r in rows if r["figure"].startswith("capture, eager MLP step: A/A control")]
    assert control and control[0]["peer"] == "itself"
    eager["workloads"]["block"]["same_process"] = sp  # a path with the 1% target gets its verdict
    (blk,) = [r for r in table._capture_rows({"eager_overhead.json": eager})
              if r["figure"].startswith("capture, eager transformer-block step") and "paused in one" in r["figure"]]
    assert blk["target"] == "system profile <= 1.01x (not met)"


def test_a_figure_older_than_the_code_is_marked_in_the_readme():
    """A row whose result was measured before the last change of src/ (by commit when the result
    names one, else by date) says so in the README; a current one shows when it was measured."""
    code = {"commit": "abc1234", "date": "2026-11-28T12:00:00+00:00", "current_commits": ["abc1234", "def5678"]}
    rows = [dict(table._row(f"fig {i}", "1.000x", "", "", "cmd", "x.json"), measured=m) for i, m in enumerate([
        {"date": "2026-11-28T13:00:00+00:00", "commit": "def5678"},   # on a current commit
        {"date": "2026-11-28T13:00:00+00:00", "commit": "0123456+"},  # later, but on other code
        {"date": "2026-11-27T09:00:00+00:00", "commit": ""},          # before the change, no commit
        {"date": "2026-11-28", "commit": ""},                         # that day: given the benefit
    ])]
    block = table.render_readme({"code": code, "headline": rows})
    lines = {ln.split(" | ")[0][2:]: ln for ln in block.splitlines() if ln.startswith("| fig")}
    assert "older than the code" not in lines["fig 0"] and "def5678" in lines["fig 0"]
    assert "older than the code: measured on 0123456" in lines["fig 1"]
    assert "older than the code: measured 2026-11-27" in lines["fig 2"]
    assert "older than the code" not in lines["fig 3"]
    assert table.older_than_code(rows[2]["measured"], None) == ""  # no code state: nothing said


def test_a_figure_is_older_only_than_the_part_of_the_code_it_measures():
    """A capture figure measured before a change of the offline tools alone stays current; a
    change of the capture's code marks it (``table.AREAS``)."""
    code = {"commit": "fff0000", "date": "2026-11-29T12:00:00+00:00", "current_commits": ["fff0000"],
            "areas": {"capture_torch": {"commit": "aaa1111", "date": "2026-11-28T12:00:00+00:00",
                                        "current_commits": ["aaa1111", "bbb2222", "fff0000"]}}}
    m = {"date": "2026-11-28T13:00:00+00:00", "commit": "bbb2222"}
    assert table.area_of("capture_instructions_eager_block.json") == "capture_torch"
    assert table.area_of("capture_instructions_jax.json") == table.area_of("jax_overhead.json") == "capture_jax"
    assert table.area_of("whole_run.json") == "capture"
    assert table.area_of("view_throughput.json") == table.area_of("json_throughput.json") == "view"
    assert table.area_of("diff_scale.json") == "offline" and table.area_of("ndet.json") == ""
    assert table.older_than_code(m, code, "capture_torch") == ""
    assert "measured on bbb2222" in table.older_than_code(m, code, "offline")  # no state for it: all of src/
    assert "measured on bbb2222" in table.older_than_code(m, code)
    rows = [dict(table._row("cap", "1.000x", "", "", "cmd", "capture_instructions.json"), measured=m),
            dict(table._row("view", "1.000x", "", "", "cmd", "view_throughput.json"), measured=m)]
    lines = {ln.split(" | ")[0][2:]: ln for ln in table.render_readme({"code": code, "headline": rows}).splitlines()
             if ln.startswith("| ")}
    assert "older than the code" not in lines["cap"] and "older than the code" in lines["view"]
    for area, excluded in table.AREAS.items():  # every excluded path exists (a rename must not widen an area)
        for x in excluded:
            assert (Path(__file__).resolve().parents[1] / "src" / "neuron_explorer" / x).exists(), (area, x)


def test_a_merged_branch_dates_the_change_when_it_was_merged(tmp_path, monkeypatch):
    """A branch commit made before a figure was measured, merged after it: the figure measured
    on main in between is older than the code (the change is dated by its merge), while a figure
    measured on the branch's commit is current for the parts whose code the merge left as the
    branch had it, and not for a part main changed meanwhile."""
    import subprocess

    from bench import __main__ as bench_main

    def git(*args: str, date: str = "2026-11-30T06:00:00+00:00") -> str:
        env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_NAME": "t",
               "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
        return subprocess.run(["git", "-C", str(tmp_path), *args], env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    def write(path: str, text: str) -> None:
        p = tmp_path / "src" / "neuron_explorer" / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    git("init", "-q", "-b", "main")
    write("runtime/core.py", "a\n")
    write("diff/cli.py", "a\n")
    git("add", "-A")
    git("commit", "-qm", "base")
    git("checkout", "-qb", "fix")
    write("runtime/core.py", "b\n")  # the branch's change of the capture, at 06:10
    git("commit", "-qam", "capture", date="2026-11-30T06:10:00+00:00")
    branch = git("rev-parse", "--short", "HEAD")
    git("checkout", "-q", "main")
    write("diff/cli.py", "b\n")  # main changes the diff meanwhile
    git("commit", "-qam", "diff", date="2026-11-30T06:20:00+00:00")
    git("merge", "-q", "--no-ff", "fix", "-m", "merge", date="2026-11-30T07:00:00+00:00")
    monkeypatch.setattr(bench_main, "ROOT", str(tmp_path))
    areas = {"capture": ("diff",), "offline": ("runtime",)}
    monkeypatch.setattr(table, "AREAS", areas)
    code = bench_main.code_state()
    assert code["areas"]["capture"]["date"] == "2026-11-30T07:00:00+00:00"  # the merge's, not 06:10
    on_main = {"date": "2026-11-30T06:30:00+00:00"}  # measured on main before the merge
    assert "src/ changed 2026-11-30" in table.older_than_code(on_main, code, "capture")
    on_branch = {"date": "2026-11-30T06:40:00+00:00", "commit": branch}
    assert table.older_than_code(on_branch, code, "capture") == ""  # the capture is the branch's
    assert "measured on" in table.older_than_code(on_branch, code, "offline")  # the branch lacks main's diff


def test_every_bench_that_writes_results_records_its_date_and_commit():
    """The table tells a figure older than its code by the commit a result names (decision 0207):
    a bench with ``--out`` stamps its file itself or runs a bench that does."""
    bench = Path(ROOT) / "bench"
    stamps = {p.stem for p in bench.glob("*.py")
              if "provenance.stamp()" in p.read_text() or '"commit": provenance.commit()' in p.read_text()}
    missing = []
    for p in sorted(bench.glob("*.py")):
        text = p.read_text()
        if p.stem == "__main__" or '"--out"' not in text or p.stem in stamps:
            continue
        if not any(f"from bench import {m} " in text or f"from bench import {m}\n" in text for m in stamps):
            missing.append(p.name)
    assert not missing, f"results written without a date and commit: {missing}"


def test_a_figure_measured_in_rounds_shows_their_count_and_spread():
    res = {"diff_scale.json": {"diff_no_items_vs_view_no_items_cpu": 0.97,
                               "diff_no_items_vs_view_no_items_cpu_rounds": [1.02, 0.97, 0.91, 0.99, 0.95]}}
    (row,) = [r for r in table._other_rows(res) if "without diff items (the events" in r["figure"]]
    assert row["value"].startswith("0.9700x (median of 5 interleaved rounds, 0.910..1.020)")
    assert row["target"].endswith("(met)")
