"""A program with a command-line argument and a process tag that are not UTF-8, every tool on at once
(system and session device profiles, NDET, neuron-monitor's stats): each file is written, with the
undecodable bytes as ``\\xNN`` escapes, and each tool reads it back.  Before decision 0214 protobuf
and the JSON encoders refused such strings: trace_info.pb, the NDET log and the stats snapshot were
never written, and nothing said why but a warning per flush."""

from __future__ import annotations

import json
import subprocess
import sys

from neuron_explorer.contracts import ndet_log

from ..conftest import clean_env, cli
from .helpers import sessions

PROGRAM = """
import glob, json, sys, time, torch
m = torch.nn.Linear(8, 8)
for _ in range(5):
    m(torch.randn(4, 8)).sum().backward()
deadline = time.monotonic() + 120  # the first stats snapshot (0.5 s period), however loaded the machine
while not glob.glob(sys.argv[2] + "/*.json") and time.monotonic() < deadline:
    time.sleep(0.05)
snaps = [json.load(open(f)) for f in glob.glob(sys.argv[2] + "/*.json")]
print("TAGS", json.dumps([s.get("tag") for s in snaps]))
"""


def test_every_tool_writes_and_reads_a_non_utf8_argument_and_tag(tmp_path):
    out, ndet, stats = tmp_path / "out", tmp_path / "ndet", tmp_path / "stats"
    for d in (ndet, stats):
        d.mkdir()
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                    NEURON_RT_INSPECT_DEVICE_PROFILE="session", NEURON_RT_DBG_NDET_FLUSH_USEC="200000",
                    NEURON_RT_DBG_NDET_LOG_LOCATION=str(ndet), NEURON_EXPLORER_AUTOSTART="1",
                    NEURON_EXPLORER_STATS_DIR=str(stats))
    env["NEURON_PROCESS_TAG"] = "tag\udcff"  # b"tag\xff", as os.environ holds it
    p = subprocess.run([sys.executable, "-c", PROGRAM, "data/caf\udce9.csv", str(stats)], env=env,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0 and "failed" not in p.stderr, p.stderr
    assert json.loads(p.stdout.split("TAGS ", 1)[1]) == ["tag\\xff"]
    (s,) = sessions(out)
    assert list(s.info.argv)[-2:] == ["data/caf\\xe9.csv", str(stats)] and s.info.process_tag == "tag\\xff"
    assert s.num_events > 0 and s.cpu is not None and s.mem is not None and s.device_paths
    (log,) = ndet.glob("ndet_*.log")
    header = ndet_log.read_log(str(log)).header
    assert header["ident"]["argv"][1] == "data/caf\\xe9.csv" and header["ident"]["process_tag"] == "tag\\xff"
    v = cli("view", "-d", str(out), "--output-format", "summary-json")
    assert v.returncode == 0, v.stderr
    c = cli("check", "-d", str(out))
    assert c.returncode == 0, c.stdout + c.stderr
    det = subprocess.run([sys.executable, "-m", "neuron_explorer.ndet", "--log-prefix", str(ndet / "ndet"), "-o",
                          str(tmp_path / "trace.json")], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert det.returncode == 0 and "1 log analysed" in det.stderr, det.stderr
