"""contracts.layout: the names of the capture and NDET files, made here and read back by the readers."""

from __future__ import annotations

import calendar
import os
import time

import pytest

from neuron_explorer.analysis.reader import Session
from neuron_explorer.contracts import layout
from neuron_explorer.ndet import sources

WALL = calendar.timegm((2024, 3, 5, 14, 7, 9)) * 10**9 + 42_123_456  # 2024-03-05 14:07:09.042123456 UTC


def test_a_session_directory_is_named_by_its_utc_start_to_the_millisecond():
    assert layout.session_dir_name(WALL) == "20240305T140709042Z"
    assert layout.session_dir_name(0) == "19700101T000000000Z"


def test_the_last_nanoseconds_of_a_second_stay_in_that_second():
    """The seconds came from a float (``wall_ns / 1e9`` rounds 14:07:09.999999999 up to :10) and the
    milliseconds from the integer: the name said 14:07:10.999, a second late, and sorted after the
    sessions of the next second."""
    last = WALL - 42_123_456 + 999_999_999
    assert layout.session_dir_name(last) == "20240305T140709999Z"
    names = [layout.session_dir_name(last + d) for d in range(-2, 3)]
    assert names == sorted(names)


def test_sessions_of_one_instant_each_get_their_own_directory(tmp_path):
    made = [layout.make_session_dir(str(tmp_path), "i-0abc", 4242, WALL) for _ in range(3)]
    base = os.path.join(str(tmp_path), "i-0abc_pid_4242", "20240305T140709042Z")
    assert made == [base, base + "_1", base + "_2"] and all(os.path.isdir(p) for p in made)


@pytest.mark.parametrize("instance,pid", [("i-0123456789abcdef0", 7), ("host.example", 123456),
                                          ("node_pid_7", 99)])
def test_the_reader_parses_instance_and_pid_back_from_the_directory(tmp_path, instance, pid):
    path = layout.make_session_dir(str(tmp_path), instance, pid, WALL)
    s = Session(path)  # no trace_info.pb: the names are all there is
    assert (s.instance_id, s.pid) == (instance, pid)


def test_device_and_graph_file_names():
    assert layout.model_ntff_name("1234567", 3) == "1234567_instid_0_vnc_3.ntff"
    assert layout.session_ntff_name(2) == "profile_nc_2_session_0.ntff"
    assert layout.session_ntff_name(2, 5) == "profile_nc_2_session_5.ntff"
    assert layout.neff_file_name("99", 0) == "neff_99_vnc_0.neff"
    assert layout.model_ntff_name("a/b", 0) == "a%2Fb_instid_0_vnc_0.ntff"  # a hash from a file stays one name


def test_ndet_log_names_carry_start_instance_ranks_and_pid():
    name = layout.log_file_name(WALL, "i-0abc", 3, 8, 4242)
    assert name == "ndet_20240305T140709042_i-0abc_gid3_pid4242.log"
    assert layout.log_file_name(WALL, "i-0abc", -1, 1, 5) == "ndet_20240305T140709042_i-0abc_gid-_pid5.log"


def test_ndet_logs_are_found_by_their_names(tmp_path):
    p = tmp_path / layout.log_file_name(time.time_ns(), "i-0abc", 0, 2, 1)
    p.write_bytes(b"")
    assert sources.is_candidate(str(p), from_directory=True)
    other = tmp_path / "notes.txt"
    other.write_bytes(b"x")
    assert not sources.is_candidate(str(other), from_directory=True)
