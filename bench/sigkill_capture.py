"""The SIGKILL check of ``tests/capture/test_sigkill.py`` on a large capture (issue 33, item 1):
a child records ``--events`` events through the real capture sink at ``--rate`` events/s and is
killed at ``--kills`` random moments; every event handed over more than one flush period plus the
longest write before each kill must be in the session, with none missing in between::

    PYTHONPATH=src python bench/sigkill_capture.py --events 20000000 --rate 2000000 --period 2
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.capture.test_sigkill import check  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    ap.add_argument("--events", type=int, default=20_000_000)
    ap.add_argument("--rate", type=float, default=2_000_000)
    ap.add_argument("--period", type=float, default=2.0)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--seed", type=int, default=33)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sigkill_"))
    try:
        res = check(tmp, args.events, args.rate, args.period, args.kills, args.seed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(res)} kills: every promised event survived "
          f"(margins {', '.join(f'{r.margin_s:.2f} s' for r in res)})")


if __name__ == "__main__":
    main()
