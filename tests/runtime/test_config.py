"""runtime.config.CaptureConfig from an environment mapping (defaults and the basic refusals:
tests/capture/test_filters.py)."""

from __future__ import annotations

import pytest

from neuron_explorer.contracts.env import ConfigError
from neuron_explorer.runtime import config as cfg
from neuron_explorer.runtime.config import CaptureConfig


def test_periods_are_given_in_ms_and_kept_in_seconds():
    c = CaptureConfig.from_env({"NEURON_EXPLORER_FLUSH_PERIOD_MS": "500", "NEURON_EXPLORER_SAMPLE_PERIOD_MS": "1,000",
                                "NEURON_EXPLORER_FINAL_WRITE_TIMEOUT_MS": "250"})
    assert (c.flush_period_s, c.sample_period_s, c.final_write_timeout_s) == (0.5, 1.0, 0.25)
    d = CaptureConfig.from_env({})
    assert (d.flush_period_s, d.sample_period_s, d.final_write_timeout_s, d.max_samples) == (2.0, 0.25, 5.0, None)
    assert CaptureConfig.from_env({"NEURON_EXPLORER_MAX_SAMPLES": "64"}).max_samples == 64


@pytest.mark.parametrize("var", ["NEURON_EXPLORER_FLUSH_PERIOD_MS", "NEURON_EXPLORER_SAMPLE_PERIOD_MS",
                                 "NEURON_EXPLORER_FINAL_WRITE_TIMEOUT_MS", "NEURON_EXPLORER_MAX_SAMPLES",
                                 "NEURON_RT_INSPECT_SYSTEM_PROFILE", "NEURON_RT_INSPECT_HOST_MEMORY",
                                 "NEURON_RT_INSPECT_ON_FAIL", "NEURON_EXPLORER_NAN_CHECK",
                                 "NEURON_RT_INSPECT_EVENT_FILTER_NC", "NEURON_RT_INSPECT_EVENT_FILTER_TYPE"])
def test_every_variable_is_validated_at_start_up(var):
    with pytest.raises(ConfigError) as e:
        CaptureConfig.from_env({var: "-x-"})
    assert str(e.value).startswith(f"{var}='-x-'")


def test_the_nan_check_is_on_by_default_only_under_ndet():
    assert not CaptureConfig.from_env({}).nan_check
    assert CaptureConfig.from_env({"NEURON_RT_DBG_NDET_FLUSH_USEC": "5000"}).nan_check
    off = {"NEURON_RT_DBG_NDET_FLUSH_USEC": "5000", "NEURON_EXPLORER_NAN_CHECK": "0"}
    assert not CaptureConfig.from_env(off).nan_check


def test_source_locations_follow_the_frameworks_debug_flags_leniently():
    assert not CaptureConfig.from_env({}).source_locations
    assert CaptureConfig.from_env({"XLA_HLO_DEBUG": "1"}).source_locations
    c = CaptureConfig.from_env({"XLA_IR_DEBUG": "verbose"})  # another tool's variable: never fatal
    assert not c.source_locations and c.warnings == ["XLA_IR_DEBUG='verbose' is not 0 or 1; neuron-explorer "
                                                     "takes it as off"]


def test_a_type_no_host_here_records_is_warned_about(monkeypatch):
    monkeypatch.setattr(cfg, "host_has_gpu", lambda: False)
    c = CaptureConfig.from_env({"NEURON_RT_INSPECT_EVENT_FILTER_TYPE": "device_exec,nrt_execute"})
    assert c.type_filter == {"device_exec", "nrt_execute"}
    assert len(c.warnings) == 1 and c.warnings[0].startswith(
        "NEURON_RT_INSPECT_EVENT_FILTER_TYPE: event type device_exec is never recorded here")
    monkeypatch.setattr(cfg, "host_has_gpu", lambda: True)
    assert CaptureConfig.from_env({"NEURON_RT_INSPECT_EVENT_FILTER_TYPE": "device_exec"}).warnings == []


def test_filters_select_cores_and_types():
    c = CaptureConfig.from_env({"NEURON_RT_INSPECT_EVENT_FILTER_NC": "0,2-3",
                                "NEURON_RT_INSPECT_EVENT_FILTER_TYPE": "hardware,^cc_exec"})
    assert [c.nc_enabled(i) for i in range(5)] == [True, False, True, True, False]
    assert c.type_enabled("nc_exec_running") and not c.type_enabled("cc_running") and not c.type_enabled("nrt_execute")
    d = CaptureConfig()
    assert d.nc_enabled(10**9) and d.type_enabled("anything")


def test_the_recorded_environment_is_ours_only():
    env = {"NEURON_RT_INSPECT_OUTPUT_DIR": "/out", "NEURON_EXPLORER_QUIET": "1", "NEURON_RT_DBG_NDET_FLUSH_USEC": "0",
           "XLA_IR_DEBUG": "0", "NEURON_PROCESS_TAG": "trainer", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "s"}
    c = CaptureConfig.from_env(env)
    assert c.output_dir == "/out"
    assert c.raw_env == {k: v for k, v in env.items() if k not in ("HOME", "AWS_SECRET_ACCESS_KEY")}
