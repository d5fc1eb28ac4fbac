"""A collective's end is recorded once, whichever way it completes: a blocking torch.distributed call
(its Work.wait on the calling thread), an async op waited through Work.wait, one waited only
through its future (the callback path, as DDP's buckets are), or an operator that returns no Work
(``monitored_barrier``: it returns when the barrier is done)."""

from __future__ import annotations

import sys

from neuron_explorer.analysis.reader import discover, load_session

from ..conftest import clean_env, free_port, run

SCRIPT = r"""
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
x = torch.ones(256)
for _ in range(5):
    dist.all_reduce(x)                      # blocking: ended by Work.wait
w = dist.all_reduce(x, async_op=True)
w.wait()                                    # async, waited on the Work
f = dist.all_reduce(x, async_op=True).get_future()
f.wait()                                    # async, waited only through the future: the callback
dist.barrier()
dist.broadcast(x, 0)
dist.monitored_barrier()
dist.destroy_process_group()
from neuron_explorer.integrations.torch import installed
print("pending", len(installed().pending_cc))
"""


def test_every_collective_end_is_recorded_once(tmp_path):
    out = tmp_path / "out"
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out))
    p = run([sys.executable, "-c", SCRIPT, str(free_port())], env)
    assert "pending 0" in p.stdout
    (path,) = discover(str(out))
    s = load_session(path)
    e = s.events
    names = [s.type_names[int(t)] for t in e["type"]]
    cc = [i for i, n in enumerate(names) if n in ("cc_running", "cc_exec_barrier")]
    ops = sorted(s.strings[int(e[s.arg(names[i], "op_str")][i])] for i in cc)
    assert ops == ["all_reduce"] * 7 + ["barrier", "broadcast", "monitored_barrier"]
    seqs = sorted(int(e[s.arg(names[i], "seq")][i]) for i in cc)
    assert seqs == list(range(10))  # one record per collective, none twice
    assert "not recorded" not in p.stderr
    assert all(e["end_ns"][i] > e["start_ns"][i] for i in cc)
