"""One small training program for ``neuron-explorer diff``'s tests: run twice, identical, it is an
A/A pair; each switch injects exactly one change into the candidate.  Run alone or under
``torchrun`` (gloo: an explicit barrier + all-reduce per step).

Per step: a ``record_function("load_batch")`` region builds the batch; two eager root modules
(``Encoder``, ``Head``: two graphs) run forward and backward; a small ``torch.compile``d function
(``tail``); the gradient all-reduce; ``opt.step()`` (an eager optimizer graph).

``--rendezvous DIR --parties N``: every process waits in DIR until N processes are ready before
its first step, so that two jobs started together measure under the same load; after its last step
it keeps the CPU busy (unrecorded matrix products) until all N are done, so that a job whose steps
take longer (a candidate that recompiles every step) is not left to finish on a quieter machine.

Switches (the candidate's one change):
  --sleep-head-ms MS     Head.forward sleeps MS (a slower graph)
  --allreduce-scale K    the all-reduce moves K times the bytes (a bigger collective)
  --recompile            ``tail`` sees a new shape every step (a new graph every step)
  --slow-rank R --slow-ms MS   rank R sleeps MS before each step, outside every recorded item
  --slow-rank R --slow-work N  rank R does N matrix products there instead (CPU work)
  --no-momentum          the optimizer drops momentum: one pass per tensor instead of three
                         (a faster optimizer, ~2-3x on that graph)

The program measures its own items with ``perf_counter`` (an independent ground truth) and prints
``GROUND_TRUTH {json}`` on each rank: per item, the median duration in ns over the steps, and the
graphs Dynamo compiled (its own counter).
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn as nn

torch.set_num_threads(1)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)])

    def forward(self, x):
        return torch.relu(self.layers(x))


class Head(nn.Module):
    def __init__(self, sleep_s):
        super().__init__()
        self.out = nn.Linear(64, 8)
        self.sleep_s = sleep_s

    def forward(self, x):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self.out(x)


def tail(x):
    return torch.tanh(x) * 2 + 1


def rendezvous(directory, parties, deadline_s=300):
    """Start the steps when every process of both jobs is ready: a baseline and a candidate run at
    once share the machine's load over their measured parts (docs/decisions/0127-diff-statistics.md)."""
    open(os.path.join(directory, f"ready.{os.getpid()}"), "w").close()
    end = time.monotonic() + deadline_s
    while sum(n.startswith("ready.") for n in os.listdir(directory)) < parties and time.monotonic() < end:
        time.sleep(0.01)


def hold_load(directory, parties, busy, deadline_s=600):
    """After the last step: the same kind of CPU work as a step (matrix products, recorded as no
    event) until every process of every job is done, so the others' last steps see the load that
    their first steps saw."""
    open(os.path.join(directory, f"done.{os.getpid()}"), "w").close()
    end = time.monotonic() + deadline_s
    while sum(n.startswith("done.") for n in os.listdir(directory)) < parties and time.monotonic() < end:
        for _ in range(20):
            torch.mm(busy, busy)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--sleep-head-ms", type=float, default=0.0)
    ap.add_argument("--allreduce-scale", type=int, default=1)
    ap.add_argument("--recompile", action="store_true")
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--slow-work", type=int, default=0, help="matrix products rank --slow-rank does before each step")
    ap.add_argument("--no-momentum", action="store_true", help="plain SGD: a third of the optimizer's work")
    ap.add_argument("--rendezvous", default=None, help="directory: wait there for --parties processes before the steps")
    ap.add_argument("--parties", type=int, default=0)
    ap.add_argument("--pin", action="store_true", help="run local rank r on the r-th CPU this process may use")
    a = ap.parse_args()
    dist = None
    rank = 0
    if "RANK" in os.environ:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
    if a.pin:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[int(os.environ.get("LOCAL_RANK", "0")) % len(cpus)]})
    torch.manual_seed(0)
    enc, head = Encoder(), Head(a.sleep_head_ms / 1000)
    # a few large parameter tensors: the optimizer's time is passes over their memory, CPU work a
    # loaded host slows like the rest of the step.  With momentum each step makes three passes per
    # tensor (buffer scale, buffer add, parameter update), without it one: the candidate's optimizer
    # is 2-3x faster whatever the load, far beyond the diff's noise floor (a foreach optimizer over
    # 1000 tiny tensors was only 15-26% faster in a captured, loaded run: the capture's per-operation
    # cost is the same for both)
    extra = nn.ParameterList([nn.Parameter(torch.randn(256 * 1024)) for _ in range(4)])
    params = list(enc.parameters()) + list(head.parameters()) + list(extra)
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.0 if a.no_momentum else 0.9)
    ctail = torch.compile(tail, backend="eager", dynamic=False)
    grad_buf = torch.ones(64 * 1024 * a.allreduce_scale)
    t = {"head": [], "all_reduce": [], "optimizer": [], "step": [], "slow": []}
    busy = torch.randn(192, 192)
    g = torch.Generator().manual_seed(1)
    if a.rendezvous:
        rendezvous(a.rendezvous, a.parties)
    for step in range(a.steps):
        s0 = time.perf_counter_ns()
        if rank == a.slow_rank and (a.slow_ms or a.slow_work):
            t0 = time.perf_counter_ns()
            time.sleep(a.slow_ms / 1000)
            for _ in range(a.slow_work):  # CPU work: slowed by a busy host like the rest of the step
                torch.mm(busy, busy)
            t["slow"].append(time.perf_counter_ns() - t0)
        with torch.profiler.record_function("load_batch"):
            x = torch.randn(32, 64, generator=g)
            y = torch.randint(0, 8, (32,), generator=g)
        opt.zero_grad()
        h = enc(x)
        t0 = time.perf_counter_ns()
        out = head(h)
        t["head"].append(time.perf_counter_ns() - t0)
        n = 8 + step if a.recompile else 8
        out = out + ctail(torch.ones(n, 8))[:1].mean()
        loss = nn.functional.cross_entropy(out, y) + sum(p.sum() for p in extra) * 0
        loss.backward()
        if dist is not None:
            dist.barrier()
            t0 = time.perf_counter_ns()
            dist.all_reduce(grad_buf)
            t["all_reduce"].append(time.perf_counter_ns() - t0)
            # idle after the collective: on one shared CPU, gloo's work that goes on after all_reduce
            # returns slows whatever runs next (measured: the optimizer +23-44% with a 16x buffer);
            # a quiet gap keeps the bigger all-reduce's cost in the all-reduce (and the idle part)
            time.sleep(0.02)
        t0 = time.perf_counter_ns()
        opt.step()
        t["optimizer"].append(time.perf_counter_ns() - t0)
        t["step"].append(time.perf_counter_ns() - s0)
    if a.rendezvous:
        hold_load(a.rendezvous, a.parties, busy)
    truth = {k: statistics.median(v) for k, v in t.items() if v}
    from torch._dynamo.utils import counters
    print("GROUND_TRUTH " + json.dumps({"rank": rank, "median_ns": truth,
                                        "compiled_graphs": int(counters["stats"]["unique_graphs"])}), flush=True)
    if dist is not None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
