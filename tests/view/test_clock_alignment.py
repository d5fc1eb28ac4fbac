"""Two "instances" in one real gloo job whose wall clocks disagree by seconds (one process under
libfaketime, monotonic clock untouched) come out aligned by `view`."""

import glob
import re
import subprocess
import sys

import duckdb
import pytest

from ..conftest import (
    EXAMPLES,
    clean_env,
    cli_in_process as cli,  # conversions in this process (decision 0173)
    free_port,
)

pytestmark = pytest.mark.slow

LIBS = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
SKEW_S = 7


@pytest.mark.skipif(not LIBS, reason="libfaketime is not installed (apt-get install faketime)")
def test_skewed_instances_are_aligned_by_collectives(tmp_path):
    out = tmp_path / "output"
    port = free_port()
    procs = []
    for rank, inst in ((0, "i-0aaaaaaaaaaaaaaa1"), (1, "i-0bbbbbbbbbbbbbbb2")):
        env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                        NEURON_EXPLORER_INSTANCE_ID=inst, RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE="2",
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        if rank == 1:
            env.update(LD_PRELOAD=LIBS[0], FAKETIME=f"+{SKEW_S}s", FAKETIME_DONT_FAKE_MONOTONIC="1",
                       FAKETIME_DONT_RESET="1")
        procs.append(subprocess.Popen([sys.executable, str(EXAMPLES / "train.py"), "--steps", "6", "--no-ddp"],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]

    pq = tmp_path / "pq"
    r = cli("view", "-d", str(out), "--output-file", str(pq), check=True)
    assert "clock offset i-0bbbbbbbbbbbbbbb2" in r.stderr
    con = duckdb.connect()
    ev = f"read_parquet('{pq}/SystemProfileEvents/**/*.parquet', hive_partitioning=true)"
    # the same collective ends within a few milliseconds on both instances
    diffs = con.execute(f"""select max(end_ts) - min(end_ts) from {ev} where name = 'cc_running'
                            group by group_ranks, seq, op having count(*) = 2""").fetchall()
    assert len(diffs) >= 20
    worst = sorted(d[0] for d in diffs)[int(0.9 * len(diffs))]
    assert worst < 20_000_000, f"90th percentile misalignment {worst / 1e6:.1f} ms"
    (off, unc, method, n) = con.execute(f"""select clock_offset_ns, clock_offset_uncertainty_ns,
        clock_offset_method, clock_offset_samples from '{pq}/ProfileMetadata.parquet'
        where instance_id = 'i-0bbbbbbbbbbbbbbb2'""").fetchone()
    assert method == "collectives" and n >= 10  # outliers (e.g. the first, late collective) are dropped
    assert abs(off + SKEW_S * 1e9) < 100_000_000, off  # the +7 s clock is moved back by ~7 s
    summary = cli("view", "-d", str(out), "--output-format", "summary-text", check=True).stdout
    m = re.search(r"i-0bbbbbbbbbbbbbbb2: ([-+][\d.]+) ms ± ([\d.]+) ms", summary)
    assert "clock offsets applied" in summary and m
    assert abs(float(m.group(1)) + SKEW_S * 1000) < 100
