"""``view --output-format summary-text`` shows what summary-json holds (issue #17, item 6): per core,
in the README's fixed order, collective count/time/share and idle gaps next to the execution
figures, then the top graphs and the device-profile figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import (
    clean_env,
    cli_in_process as cli,  # conversions in this process (decision 0173)
    free_port,
    run,
)

WORKLOAD = Path(__file__).parent / "workloads" / "waits.py"
ORDER = ["nc_idx", "nd_idx", "total_time", "executions", "busy %", "p50", "p99", "collectives", "cc_time",
         "cc %", "idle_time", "idle_max", "num_err"]


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cap") / "o"
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                    NEURON_RT_INSPECT_DEVICE_PROFILE="1", MASTER_PORT=str(free_port()))
    run([sys.executable, str(WORKLOAD)], env)
    return out


def test_summary_text_shows_the_json_figures_in_the_fixed_order(capture):
    js = json.loads(cli("view", "-d", str(capture), "--output-format", "summary-json", check=True).stdout)
    text = cli("view", "-d", str(capture), "--output-format", "summary-text", check=True).stdout
    lines = text.splitlines()
    (head,) = [ln for ln in lines if ln.strip().startswith("nc_idx")]
    pos = [head.index(h) for h in ORDER]
    assert pos == sorted(pos), head  # every heading present, in the fixed order
    (proc,) = js["profiles"]
    (core,) = proc["cores"]
    row = lines[lines.index(head) + 1].split()
    # "0.123 s" cells are two tokens: rebuild the cells from the right widths' order
    cells, i = [], 0
    for h in ORDER:
        two = h in ("total_time", "p50", "p99", "cc_time", "idle_time", "idle_max") and row[i] != "-"
        cells.append(" ".join(row[i:i + 2]) if two else row[i])
        i += 2 if two else 1
    got = dict(zip(ORDER, cells))
    assert int(got["executions"]) == core["executions"] >= 3
    assert int(got["collectives"]) == core["collectives"] == 2
    assert got["cc %"] == f"{core['collective_pct']:.2f}" and core["collective_pct"] > 0
    assert got["cc_time"] == f"{core['collective_time']:.3f} s"
    assert got["idle_time"] == f"{core['idle_gaps']['total_s']:.3f} s"
    assert got["idle_max"] == f"{core['idle_gaps']['max_ns'] / 1e6:.3f} ms"
    assert int(got["num_err"]) == core["numerical_errors"] == 0
    # below the row: the top graph, then the device profile with its figures
    (dp,) = proc["device_profiles"]
    top = [ln for ln in lines if "top graph" in ln]
    dev = [ln for ln in lines if "device profile" in ln]
    assert len(top) == 1 and len(dev) == 1 and lines.index(top[0]) < lines.index(dev[0])
    assert dp["profile_id"] in dev[0] and f"{dp['ops']} ops" in dev[0]
    assert f"{dp['executions']} executions" in dev[0] and "MFU - (peak unknown)" in dev[0]
