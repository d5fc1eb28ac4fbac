"""``neuron-det`` on each batch directory of damaged logs ``test_fuzz_ndet.py`` wrote, one batch after
another in this one process (``tests.inproc.run_tool``: the console script's ``main``, its status,
stdout and stderr), which the test starts under a memory cap.  One interpreter for all batches
instead of one per batch: its start and imports were 0.2 of the 0.25 CPU-s each batch cost
(docs/decisions/0183-suite-cpu-round-four.md).

``python fuzz_det_driver.py WORK RUN...``: batch ``RUN`` is ``WORK/runRUN``, its trace goes to
``WORK/traceRUN.json`` and what ``neuron-det`` answered to ``WORK/resultRUN.json`` (status, stderr),
written before the next batch starts: a batch that ends the process (the memory cap, a crash) is the
first without a result."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.inproc import run_tool  # noqa: E402


def main(argv: list[str]) -> None:
    work = Path(argv[0])
    for run in argv[1:]:
        args = ["--log-prefix", str(work / f"run{run}"), "-o", str(work / f"trace{run}.json")]
        r = run_tool("neuron_explorer.ndet.cli", args, dict(os.environ))
        tmp = work / f"result{run}.tmp"
        tmp.write_text(json.dumps({"returncode": r.returncode, "stderr": r.stderr}))
        tmp.replace(work / f"result{run}.json")


if __name__ == "__main__":
    main(sys.argv[1:])
