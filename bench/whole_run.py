"""Whole-run overhead of the system profile on eager programs, phase by phase (issue 33, item 2).

Per-step figures hide what a run pays once: the runtime's start, the first step (each graph's
``model_load``, its ``.neff`` and its flop count), the background threads, the final write.  This
bench runs two realistic eager training programs in fresh processes, interleaved, with process
CPU time (every thread) split into phases:

* ``startup``  -- interpreter start to the worker's first line (``site``, the ``.pth`` hook, the
  runtime's start);
* ``import``   -- ``import torch`` (our hooks install there) and building the model;
* ``first``    -- the first training step (forward, loss, backward, optimizer): every graph's
  first call, counted flops included;
* ``second``   -- the second step, the same work warm: ``first - second`` is what a first call costs;
* ``steady``   -- the next STEPS steps, per step;
* ``threads``  -- CPU of the process's threads other than the main one at the end of the window
  (the samplers and the periodic flush; torch's own, the same in every configuration);
* ``exit``     -- end of the window to process exit, from the child's rusage (the final write).

Workloads (``OMP_NUM_THREADS=1``): ``lstm`` -- a word-language-model LSTM (vocabulary 10k, 2
layers of 200, bptt 35, batch 20, clipping and a hand-written SGD update); ``transformer`` -- a
6-layer ``nn.TransformerEncoder`` (d 256, 4 heads, batch 8 x 64) with Adam; and the corpus of the
trust issue (``bench/whole_run_programs.py``): ``cnn`` -- an MNIST-style convolutional net fed by
a ``DataLoader`` with two worker processes, Adadelta; ``jax`` -- a ``jax.jit`` MLP with an SGD
update; ``ddp`` -- a 2-rank ``torchrun`` (gloo) job, ``DistributedDataParallel`` over an MLP.  For
``ddp`` the phases are rank 0's and ``total`` is the whole job (torchrun and both ranks: the
parent's rusage of torchrun counts the ranks it waited for); ``exit`` is not split out.

Configurations: ``plain`` and ``plain_aa`` (the A/A control: the same program, the spread two
identical configurations show), ``system`` (``NEURON_RT_INSPECT_ENABLE=1``, this tree) and, with
``--before SRC``, ``system_before`` (the same with ``PYTHONPATH=SRC``: another checkout's code).
The flop counts each system run recorded (``ModelInfo.flops`` per graph) are compared between
``system`` and ``system_before``: a change of how flops are counted must not change a count.

Usage::

    python -m bench.whole_run --rounds 5 --before /work/main/src    # ~6 minutes on 2 cores

Results go to ``bench/results/whole_run.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import interleave, provenance, whole_run_programs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEPS = {"lstm": 40, "transformer": 12, **whole_run_programs.STEPS}
LABELS = {"lstm": "eager lstm", "transformer": "eager transformer", **whole_run_programs.LABELS}
PHASES = ("startup", "import", "first", "second", "steady", "threads", "exit")


def build(torch, workload: str):
    """The model and one training step of ``workload``."""
    if workload in whole_run_programs.STEPS:
        return whole_run_programs.build(torch, workload)
    nn = torch.nn
    torch.manual_seed(0)
    if workload == "lstm":
        class RNNModel(nn.Module):
            def __init__(self, ntoken=10000, ninp=200, nhid=200, nlayers=2):
                super().__init__()
                self.drop = nn.Dropout(0.2)
                self.encoder = nn.Embedding(ntoken, ninp)
                self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=0.2)
                self.decoder = nn.Linear(nhid, ntoken)

            def forward(self, x, hidden):
                out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
                return torch.log_softmax(self.decoder(self.drop(out)).view(-1, 10000), dim=1), hidden

        model, criterion = RNNModel(), nn.NLLLoss()
        data = torch.randint(0, 10000, (35 * 200 + 1, 20))
        hidden = [(torch.zeros(2, 20, 200), torch.zeros(2, 20, 200))]
        pos = [0]

        def step():
            i = pos[0] % 200 * 35
            pos[0] += 1
            x, y = data[i:i + 35], data[i + 1:i + 36].reshape(-1)
            model.zero_grad()
            h = tuple(t.detach() for t in hidden[0])
            out, hidden[0] = model(x, h)
            loss = criterion(out, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-20.0)
        return step
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True), 6)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x, y = torch.randn(8, 64, 256), torch.randn(8, 64, 256)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return step


def _other_threads_cpu_ns() -> int:
    """CPU time of this process's threads other than the calling one (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    me, total = str(interleave_native_tid()), 0
    for tid in os.listdir("/proc/self/task"):
        if tid == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        except (OSError, IndexError, ValueError):
            continue
    return total * 1_000_000_000 // tick


def interleave_native_tid() -> int:
    import threading

    return threading.get_native_id()


def worker(workload: str, steps: int) -> None:
    interleave.mark_start()
    c0 = time.process_time_ns()
    if workload == "jax":
        torch = None
    else:
        import torch

        torch.set_num_threads(1)
    step = build(torch, workload)
    c1 = time.process_time_ns()
    step()
    c2 = time.process_time_ns()
    step()
    c3 = time.process_time_ns()
    for _ in range(steps):
        step()
    c4 = time.process_time_ns()
    r = {"startup_cpu_ns": c0, "import_ns": c1 - c0, "first_ns": c2 - c1, "second_ns": c3 - c2,
         "cpu_step_ns": (c4 - c3) / steps, "wall_step_ns": 0.0, "threads_ns": _other_threads_cpu_ns(),
         "end_cpu_ns": c4, "dynamo_imported": "torch._dynamo" in sys.modules}
    if workload == "ddp":
        r.pop("end_cpu_ns")  # the job's total is not this process's: no exit phase
        if not whole_run_programs.ddp_finish():
            return  # rank 1: rank 0 reports
    interleave.report(r)


_READ_FLOPS = """
import json, sys
from neuron_explorer.analysis.reader import discover, load_session
got = {}
for p in discover(sys.argv[1]):
    for m in load_session(p).models:
        got[m.kind + ":" + (m.name if m.kind == "backward" else m.name.rsplit("_", 1)[0])] = m.flops
print(json.dumps(got))
"""


def _flops(out_dir: str, src: str) -> dict:
    """Each graph's flops in the capture under ``out_dir``, by graph kind and class, read by the
    tree that wrote it (``src``: another checkout may write a newer format); {"error": ...} when
    it cannot be read."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=src)
    p = subprocess.run([sys.executable, "-c", _READ_FLOPS, out_dir], env=env, capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(p.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workloads", default="lstm,transformer")
    ap.add_argument("--before", default="", help="another checkout's src/: adds system_before")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "whole_run.json"))
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker, a.steps)
        return 0
    # a run of some workloads keeps the others' figures (each workload carries its own date,
    # commit and command)
    result = _previous(a.out)
    result.update(**provenance.stamp(),
                  command="python -m bench.whole_run " + " ".join(argv if argv is not None else sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="ne-whole-run-") as tmp:
        for wl in a.workloads.split(","):
            configs = ["plain", "system", "plain_aa"] + (["system_before"] if a.before else [])
            jobs = {c: _job(wl, c, STEPS[wl], tmp, a.before) for c in configs}
            got = interleave.run_interleaved(jobs, a.rounds, cwd=ROOT, label=wl)
            flops = {c: _flops(os.path.join(tmp, f"{wl}_{c}_0"),
                               a.before if c == "system_before" else os.path.join(ROOT, "src"))
                     for c in configs if c.startswith("system")}
            result["workloads"][wl] = {"label": LABELS.get(wl, wl), "date": result["date"], "commit": result["commit"],
                                       "command": result["command"],
                                       "phases": _phases(got["runs"]), "load_average": got["load_average"],
                                       "failures": got["failures"], "flops": flops,
                                       "dynamo_imported": {c: [r and r["dynamo_imported"] for r in rs]
                                                           for c, rs in got["runs"].items()}}
            _print(wl, result["workloads"][wl])
            provenance.write_results(a.out, result)  # (each workload as it is done: a later failure keeps it)
    provenance.write_results(a.out, result)
    print(f"wrote {a.out}")
    return 0


def _previous(path: str) -> dict:
    """The results file as it is (its other workloads are kept), or a fresh one."""
    try:
        with open(path) as f:
            old = json.load(f)
        if isinstance(old, dict) and isinstance(old.get("workloads"), dict):
            for d in old["workloads"].values():  # files written before workloads carried their own
                if isinstance(d, dict):
                    for k in ("date", "commit", "command"):
                        d.setdefault(k, old.get(k))
            return old
    except (OSError, ValueError):
        pass
    return {"workloads": {}}


def _job(wl: str, config: str, steps: int, tmp: str, before: str):
    def make(i: int):
        if config.startswith("system"):
            env = interleave.system_env(os.path.join(tmp, f"{wl}_{config}_{i}"))
            if config == "system_before":
                env["PYTHONPATH"] = before + os.pathsep + ROOT
        else:
            env = interleave.clean_env()
        if config != "system_before":
            env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + ROOT
        if wl == "jax":
            env.update(whole_run_programs.jax_env())
        argv = ["-m", "bench.whole_run", "--worker", wl, "--steps", str(steps)]
        if wl == "ddp":
            argv = whole_run_programs.torchrun_argv() + argv
        return [sys.executable] + argv, env
    return make


def _phases(runs: dict) -> dict:
    """Per configuration and phase: median ms and median paired difference from ``plain``."""
    out: dict = {}
    keys = {"startup": "startup_cpu_ns", "import": "import_ns", "first": "first_ns", "second": "second_ns",
            "steady": "cpu_step_ns", "threads": "threads_ns", "exit": "exit_cpu_ns", "total": "process_cpu_ns"}
    for c, rs in runs.items():
        d: dict = {}
        for ph, k in keys.items():
            if any(r is not None and k not in r for r in rs):
                continue  # (ddp has no exit phase of its own)
            xs = [r[k] for r in rs if r is not None]
            pairs = [r[k] - b[k] for r, b in zip(rs, runs["plain"]) if r is not None and b is not None]
            ratios = [r[k] / b[k] for r, b in zip(rs, runs["plain"]) if r is not None and b is not None and b[k]]
            d[ph] = {"median_ms": statistics.median(xs) / 1e6 if xs else None,
                     "paired_extra_ms": statistics.median(pairs) / 1e6 if pairs else None,
                     "paired_ratio": interleave.spread(ratios) if ratios else None}
        out[c] = d
    return out


def _print(wl: str, r: dict) -> None:
    print(f"\n{wl}: median CPU ms (paired ratio to plain: median [min..max]); load {r['load_average']}")
    for c, d in r["phases"].items():
        cells = []
        for ph in ("startup", "import", "first", "second", "steady", "threads", "exit", "total"):
            if ph not in d:
                continue
            x = d[ph]
            pr = x["paired_ratio"]
            cells.append(f"{ph} {x['median_ms']:.1f}" + (f" ({pr['median']:.3f} [{pr['min']:.2f}..{pr['max']:.2f}])"
                                                        if pr and c != "plain" else ""))
        print(f"  {c:<14}" + "; ".join(cells))
    print(f"  flops: {json.dumps(r['flops'])}")




if __name__ == "__main__":
    sys.exit(main())
