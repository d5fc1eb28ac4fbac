"""The commit-msg hook of CONTRIBUTING.md's rule: a subject of at most 72 characters."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "commit_subject", Path(__file__).resolve().parent.parent / "scripts" / "commit_subject.py")
assert _SPEC is not None and _SPEC.loader is not None
cs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cs)


def _check(tmp_path: Path, text: str) -> int:
    f = tmp_path / "COMMIT_EDITMSG"
    f.write_text(text)
    return cs.main(["commit_subject.py", str(f)])


def test_a_subject_of_72_characters_passes_and_73_is_refused(tmp_path, capsys) -> None:
    assert _check(tmp_path, "x" * 72 + "\n\nbody " + "y" * 200 + "\n") == 0
    assert _check(tmp_path, "x" * 73 + "\n") == 1
    assert "73 characters, at most 72" in capsys.readouterr().err


def test_comment_lines_before_the_subject_are_not_the_subject(tmp_path) -> None:
    assert _check(tmp_path, "# " + "c" * 100 + "\nshort subject\n") == 0
    assert _check(tmp_path, "# only a comment\n") == 0  # git itself refuses an empty message
