"""Refuse a commit message whose subject line is longer than 72 characters (CONTRIBUTING.md).

Run by pre-commit's ``commit-msg`` stage with the message file as its argument; lines git strips
(comments) are ignored.  Exit 1 with one line naming the length when the subject is too long."""

from __future__ import annotations

import sys

LIMIT = 72


def subject(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        return line.rstrip()
    return ""


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: commit_subject.py MESSAGE_FILE", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        first = subject(f.read())
    if len(first) > LIMIT:
        print(f"commit subject is {len(first)} characters, at most {LIMIT}: put the details in the body",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
