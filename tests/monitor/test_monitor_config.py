"""Configuration parsing and the one-line errors for bad configurations."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from monitor_helpers import bin_path

from neuron_explorer.monitor.config import (
    DEFAULT_PERIOD_S,
    RUNTIME_GROUPS,
    SYSTEM_GROUPS,
    ConfigError,
    default_config,
    parse_config,
    parse_period,
)


@pytest.mark.parametrize("text,seconds", [("1s", 1.0), ("500ms", 0.5), ("1.5s", 1.5), ("2m", 120.0), ("1h", 3600.0)])
def test_period_strings(text: str, seconds: float) -> None:
    assert parse_period(text, "period") == seconds


def test_spec_example_config_periods_inherit_and_override() -> None:
    cfg = parse_config({
        "period": "1s",
        "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": g} for g in RUNTIME_GROUPS]}],
        "system_metrics": [{"type": "vcpu_usage"}, {"type": "memory_info"},
                           {"period": "2s", "type": "neuron_hw_counters"}],
    })
    assert cfg.groups_for("anything") == {g: 1.0 for g in RUNTIME_GROUPS}
    assert cfg.system_groups == {"vcpu_usage": 1.0, "memory_info": 1.0, "neuron_hw_counters": 2.0}


def test_tag_filter_selects_and_first_entry_wins() -> None:
    cfg = parse_config({
        "neuron_runtimes": [
            {"tag_filter": "^train_", "period": "1s", "metrics": [{"type": "execution_stats"}]},
            {"tag_filter": ".*", "metrics": [{"type": "execution_stats"}, {"type": "memory_used"}]},
        ]
    })
    assert cfg.groups_for("train_a") == {"execution_stats": 1.0, "memory_used": DEFAULT_PERIOD_S}
    assert cfg.groups_for("eval") == {"execution_stats": DEFAULT_PERIOD_S, "memory_used": DEFAULT_PERIOD_S}
    assert parse_config({"neuron_runtimes": [{"tag_filter": "^x$", "metrics": []}]}).groups_for("y") is None


def test_no_config_means_everything_every_five_seconds() -> None:
    cfg = default_config()
    assert cfg.groups_for("1234") == {g: 5.0 for g in RUNTIME_GROUPS}
    assert cfg.system_groups == {g: 5.0 for g in SYSTEM_GROUPS}


@pytest.mark.parametrize("doc,key,accepted", [
    ({"period": "1 sec"}, "period", '"500ms", "1s"'),
    ({"period": 1}, "period", '"500ms", "1s"'),
    ({"period": "10ms"}, "period", "at least 100ms"),
    ({"system_metrics": [{"type": "gpu_temp"}]}, "system_metrics[0].type", "vcpu_usage, memory_info"),
    ({"neuron_runtimes": [{"metrics": [{"type": "vcpu_usage"}]}]}, "neuron_runtimes[0].metrics[0].type",
     "neuroncore_counters"),
    ({"neuron_runtimes": [{"tag_filter": "(", "metrics": []}]}, "neuron_runtimes[0].tag_filter", "regular expression"),
    ({"neuron_runtime": []}, "neuron_runtime", "neuron_runtimes"),
    ({"neuron_runtimes": [{"metrics": [{"type": "memory_used", "period": "fast"}]}]},
     "neuron_runtimes[0].metrics[0].period", '"1s"'),
    ({"system_metrics": [{}]}, "system_metrics[0].type", "accepted values"),
])
def test_bad_config_names_key_and_accepted_forms(doc: dict, key: str, accepted: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(doc)
    msg = str(exc.value)
    assert msg.startswith(key + ":") and accepted in msg and "\n" not in msg


@pytest.mark.fast  # a cheap end-to-end check in the fast loop (tests/fastset.py)
def test_cli_bad_config_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    conf = tmp_path / "monitor.conf"
    conf.write_text(json.dumps({"period": "1s", "system_metrics": [{"type": "vcpu_usage", "period": "soon"}]}))
    r = subprocess.run([bin_path("neuron-monitor"), "-c", str(conf)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "system_metrics[0].period" in lines[0] and '"500ms"' in lines[0]


def test_cli_invalid_json_and_missing_file(tmp_path: Path) -> None:
    conf = tmp_path / "monitor.conf"
    conf.write_text('{"period": "1s",')
    r = subprocess.run([bin_path("neuron-monitor"), "-c", str(conf)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "not valid JSON at line 1" in r.stderr
    r = subprocess.run([bin_path("neuron-monitor"), "-c", str(tmp_path / "nope")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "cannot read configuration file" in r.stderr


@pytest.mark.parametrize("doc,problem", [
    ({"period": "1s"}, "no metric group is enabled"),
    ({"neuron_runtimes": [{"tag_filter": "^a"}]}, "no metric group is enabled"),
    ({"neuron_runtimes": [{"tag_filter": "^a", "metrics": [{"type": "memory_used"}]}, {"tag_filter": "^b"}],
      "system_metrics": [{"type": "vcpu_usage"}]}, "neuron_runtimes[1] has no metrics"),
])
def test_a_config_that_collects_nothing_is_warned_about_in_one_line_and_the_monitor_runs(
        tmp_path: Path, doc: dict, problem: str) -> None:
    """Issue 29: a file holding only {"period": "1s"} reported no metric for a whole run, silently."""
    conf = tmp_path / "monitor.conf"
    conf.write_text(json.dumps(doc))
    p = subprocess.Popen([bin_path("neuron-monitor"), "-c", str(conf)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, NEURON_EXPLORER_STATS_DIR=str(tmp_path / "s")))
    try:
        report = json.loads(p.stdout.readline())  # it runs: reports keep coming
        assert "instance_info" in report
    finally:
        p.terminate()
        _, err = p.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("neuron-monitor: warning: ") and problem in lines[0], err
    assert str(conf) in lines[0]


def test_a_config_that_collects_something_gives_no_warning() -> None:
    assert parse_config({"period": "1s", "system_metrics": [{"type": "vcpu_usage"}]}).warnings() == []
    assert default_config().warnings() == []
