"""util.files: bounded reads of regular files only (what every reader of untrusted files opens through)."""

from __future__ import annotations

import errno
import os
import socket
import stat

import pytest

from neuron_explorer.util import files


def test_a_file_up_to_the_limit_is_read_whole(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 64)
    assert files.read_regular(p, 64) == b"x" * 64
    (tmp_path / "empty").write_bytes(b"")
    assert files.read_regular(tmp_path / "empty", 0) == b""


def test_one_byte_over_the_limit_is_refused_with_the_sizes(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 65)
    with pytest.raises(files.FileTooLarge) as e:
        files.read_regular(p, 64)
    assert (e.value.size, e.value.limit, e.value.errno) == (65, 64, errno.EFBIG)
    assert str(p) in str(e.value) and "65 bytes, more than 64" in str(e.value)


def test_a_file_that_grows_while_read_is_refused(tmp_path, monkeypatch):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 100)
    real = files.open_regular

    def stale_size(path):  # the size the check saw before the file grew
        fd, st = real(path)
        return fd, os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 10,
                                   st.st_atime, st.st_mtime, st.st_ctime))

    monkeypatch.setattr(files, "open_regular", stale_size)
    with pytest.raises(files.FileTooLarge) as e:
        files.read_regular(p, 50)
    assert e.value.size == 51  # what was read: one byte past the limit is enough to know


def test_a_symlink_to_a_regular_file_is_followed(tmp_path):
    (tmp_path / "target").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert files.read_regular(tmp_path / "link", 10) == b"data"


@pytest.mark.parametrize("make,kind", [
    (lambda p: p.mkdir(), "a directory"),
    (lambda p: os.mkfifo(p), "a FIFO"),  # never opened: a reader would block on it forever
    (lambda p: p.symlink_to("/dev/null"), "a character device"),
])
def test_anything_but_a_regular_file_is_named_and_refused(tmp_path, make, kind):
    p = tmp_path / "x"
    make(p)
    with pytest.raises(files.NotRegularFile) as e:
        files.read_regular(p, 10)
    assert e.value.kind == kind and e.value.errno == errno.EINVAL and f"not a regular file ({kind})" in str(e.value)


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(files.NotRegularFile) as e:
            files.open_regular(path)
    assert e.value.kind == "a socket"


def test_a_missing_file_is_an_ordinary_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        files.read_regular(tmp_path / "missing", 10)


def test_file_kind_names_every_mode():
    assert files.file_kind(stat.S_IFREG) == "a regular file"
    assert files.file_kind(stat.S_IFBLK) == "a block device"
    assert files.file_kind(0) == "a special file"
