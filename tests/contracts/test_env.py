"""contracts.env: every environment variable's parser, and its one-line error naming the variable,
the value and the accepted forms.  (Core and type filters: tests/capture/test_filters.py.)"""

from __future__ import annotations

import os

import pytest

from neuron_explorer.contracts import env
from neuron_explorer.contracts.env import ConfigError


@pytest.mark.parametrize("value,want", [(None, True), ("", True), ("  ", True), ("1", True), (" TRUE ", True),
                                        ("yes", True), ("on", True), ("0", False), ("False", False),
                                        ("no", False), ("off", False)])
def test_booleans(value, want):
    assert env.parse_bool("V", value, True) is want


@pytest.mark.parametrize("value", ["2", "maybe", "1.0", "y"])
def test_a_bad_boolean_names_the_variable_and_value(value):
    with pytest.raises(ConfigError) as e:
        env.parse_bool("SOME_VAR", value, False)
    assert str(e.value) == f"SOME_VAR={value!r} is not valid; accepted: 0 or 1"


def test_a_flag_other_tools_read_is_off_with_a_warning_when_odd():
    warnings: list[str] = []
    assert env.parse_flag_leniently("XLA_IR_DEBUG", "1", warnings) is True
    assert env.parse_flag_leniently("XLA_IR_DEBUG", "verbose", warnings) is False
    assert warnings == ["XLA_IR_DEBUG='verbose' is not 0 or 1; neuron-explorer takes it as off"]


@pytest.mark.parametrize("value,want", [(None, 7), ("", 7), ("5", 5), (" 1,000 ", 1000), ("1_000_000", 10**6)])
def test_positive_integers_take_separators(value, want):
    assert env.parse_positive_int("V", value, 7) == want


@pytest.mark.parametrize("value", ["0", "-3", "x", "1.5", "1e3"])
def test_a_positive_integer_refuses_the_rest(value):
    with pytest.raises(ConfigError, match=r"V=.* is not valid; accepted: a whole number greater than 0"):
        env.parse_positive_int("V", value, 7)


def test_max_events_up_to_the_limit_and_not_one_more():
    assert env.parse_max_events("M", None) == env.DEFAULT_MAX_EVENTS
    assert env.parse_max_events("M", str(env.MAX_EVENTS_LIMIT)) == env.MAX_EVENTS_LIMIT
    with pytest.raises(ConfigError, match="too large"):
        env.parse_max_events("M", str(env.MAX_EVENTS_LIMIT + 1))


def test_named_types_are_the_names_a_filter_spells_out():
    assert env.named_types(None) == [] and env.named_types("") == []
    assert env.named_types("hardware, device_exec,^cc_running, ,tensor_read") == ["device_exec", "tensor_read"]


@pytest.mark.parametrize("value,want", [(None, None), ("", None), ("0", None), ("1", "model"), ("Model", "model"),
                                        (" session ", "session")])
def test_device_profile_modes(value, want):
    assert env.parse_device_profile(value) == want


def test_a_bad_device_profile_mode_lists_the_accepted_ones():
    with pytest.raises(ConfigError, match=r"NEURON_RT_INSPECT_DEVICE_PROFILE='2' is not valid; accepted: 0, 1, "
                                          r"model, session"):
        env.parse_device_profile("2")


def test_capture_requested_quiet_and_ndet_requested_read_the_given_mapping():
    assert env.capture_requested({}) is False and env.capture_requested({env.ENABLE: "1"}) is True
    with pytest.raises(ConfigError):
        env.capture_requested({env.ENABLE: "banana"})
    assert [env.quiet({env.QUIET: v}) for v in ("", "0", "1", "yes")] == [False, False, True, True]
    assert [env.ndet_requested({env.NDET_FLUSH_USEC: v}) for v in ("", "0", " 0 ", "5000")] == [False, False, False,
                                                                                               True]
    assert env.ndet_requested({}) is False


@pytest.mark.parametrize("raw,want", [("", 1.0), ("0", 0.0), ("2.5", 2.5), ("3600", 3600.0)])
def test_progress_delay_in_seconds(raw, want):
    assert env.progress_delay({env.PROGRESS_DELAY: raw}) == want


@pytest.mark.parametrize("raw", ["-1", "3600.5", "nan", "inf", "soon"])
def test_progress_delay_refuses_what_is_not_0_to_3600_seconds(raw):
    with pytest.raises(ConfigError, match="accepted: seconds from 0 to 3600"):
        env.progress_delay({env.PROGRESS_DELAY: raw})


def test_s3_endpoint_flag_then_s3_variable_then_generic_variable():
    both = {env.AWS_ENDPOINT_URL_S3: "http://s3:9000/", env.AWS_ENDPOINT_URL: "http://any:1"}
    assert env.s3_endpoint("https://flag", both) == "https://flag"
    assert env.s3_endpoint(None, both) == "http://s3:9000"  # (the trailing / dropped)
    assert env.s3_endpoint(None, {env.AWS_ENDPOINT_URL: "http://any:1"}) == "http://any:1"
    assert env.s3_endpoint(None, {}) is None


@pytest.mark.parametrize("value", ["ftp://x", "localhost:9000", "http://a b", "http://" + "x" * 2048])
def test_s3_endpoint_refuses_what_is_not_an_http_url(value):
    with pytest.raises(ConfigError, match="accepted: http://HOST:PORT or https://HOST") as e:
        env.s3_endpoint(value, {})
    assert len(str(e.value)) < 300  # a long value is cut in the message


def test_ndet_flush_period_and_entries():
    assert env.parse_ndet_flush_usec(" 5_000 ") == 5000
    for bad in (None, "", "0", "-1", "soon"):
        with pytest.raises(ConfigError, match="NEURON_RT_DBG_NDET_FLUSH_USEC"):
            env.parse_ndet_flush_usec(bad)
    assert env.parse_ndet_num_entries(None) == env.DEFAULT_NUM_ENTRIES
    assert env.parse_ndet_num_entries(str(env.MAX_NUM_ENTRIES)) == env.MAX_NUM_ENTRIES
    for bad in ("0", str(env.MAX_NUM_ENTRIES + 1), "many"):
        with pytest.raises(ConfigError, match="NEURON_RT_DBG_NDET_NUM_ENTRIES"):
            env.parse_ndet_num_entries(bad)


def test_ndet_log_location_must_be_an_existing_directory(tmp_path):
    assert env.parse_ndet_log_location(f" {tmp_path} ") == str(tmp_path)
    assert env.parse_ndet_log_location(None) == os.path.abspath(env.DEFAULT_LOG_LOCATION)
    with pytest.raises(ConfigError, match="does not exist"):
        env.parse_ndet_log_location(str(tmp_path / "missing"))
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        env.parse_ndet_log_location(str(tmp_path / "file"))


def test_parquet_writer_choice():
    assert [env.parquet_writer({env.PARQUET_WRITER: v}) for v in ("", "own", " OWN ", "arrow")] == \
        ["own", "own", "own", "arrow"]
    with pytest.raises(ConfigError, match="accepted: own, arrow"):
        env.parquet_writer({env.PARQUET_WRITER: "fast"})


def test_job_environment_keeps_set_launcher_variables_cut_to_length():
    got = env.job_environment({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "", "SLURM_JOB_ID": "x" * 1000,
                               "HOME": "/root"})
    assert got == {"MASTER_ADDR": "10.0.0.1", "SLURM_JOB_ID": "x" * env.JOB_VALUE_MAX}
