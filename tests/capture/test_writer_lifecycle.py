"""The capture writer under concurrency and failure: session directories, multi-file writes."""

from __future__ import annotations

import os

import pytest

from neuron_explorer.capture import writer


def test_a_failed_multi_file_write_leaves_the_previous_complete_set(tmp_path):
    a, b = tmp_path / "ntrace.pb", tmp_path / "trace_info.pb"
    writer.atomic_write_all([(str(a), lambda: b"old a"), (str(b), lambda: [b"old ", b"b"])])

    def disk_full():
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        writer.atomic_write_all([(str(a), lambda: b"new a"), (str(b), disk_full)])
    # not a new ntrace.pb beside an old trace_info.pb: both old, and no temporary file left
    assert a.read_bytes() == b"old a" and b.read_bytes() == b"old b"
    assert sorted(os.listdir(tmp_path)) == ["ntrace.pb", "trace_info.pb"]
