"""A small training loop with one injected pathology, for the summary's insights (docs/summary.md).

``python pathologies.py MODE STEPS`` (or under ``torchrun --nproc_per_node 2`` for the
distributed modes).  Each injected cost is a fixed amount of time per step, printed as
``INJECTED_NS <ns per step>`` so a test can compare the insight's impact with it:

* ``healthy``: nothing injected.
* ``dataloader``: the dataset sleeps ``COST_MS`` per batch (a slow input pipeline).
* ``recompile``: ``torch.compile`` on an input whose shape changes every step; the injected cost is
  measured here (a new shape's call minus a known shape's call: the mean, and each step's).
* ``straggler``: two ranks (gloo) all-reduce their gradients after the backward; rank 1's forward
  busy-waits ``STRAGGLER_MS`` (a slower device).  The injected cost is what the program measures:
  the median over steps of rank 1's own time (its wall time but the all-reduce) minus rank 0's (on a
  loaded host more than ``STRAGGLER_MS``: the rank that spun is descheduled more, and its other
  work slows too).
* ``buckets``: DDP (gloo) with ``bucket_cap_mb`` so small that every gradient is its own
  all-reduce (``LAYERS`` x 2 per step); the injected cost is measured in the same steps: each
  step also runs the pass under default buckets, and the difference is the cost.
* ``optimizer``: a deep stack of small layers stepped by Adam without its foreach path (a Python
  loop over the parameters); the expected impact is the optimizer's time beyond 10% of
  the step, both measured here (docs/summary.md, ``optimizer_share``; each the lower quartile of
  the steps after the first, as the rule takes them).
* ``hostbound``: the host spins ``COST_MS`` between the forward and the backward, outside any
  recorded region (Python work in the step); the injected cost is the spin, measured (its 10th
  percentile over the steps after the first, the order statistic below, as the rule takes the
  gaps: a loaded host that preempts the spin at its deadline makes it overshoot).
* ``cpusat``: two ranks (gloo) that all-reduce their loss after each step; rank 1 starts
  ``CPUSAT_BURNERS`` threads that keep its CPU busy with matrix products (GIL released) for the
  whole run.  Each rank makes a session of its own (with Linux's autogroup, the scheduler shares
  the CPU between sessions first: each rank has its own share, as in a container of its own, and
  the threads take from their rank's share, not the machine's).  The injected cost is what the program
  measures: the median over steps of rank 1's own time (its wall time but the all-reduce) minus
  rank 0's; it also prints each rank's process CPU % of its median step (``CPU_PCT``, decision
  0140) and the shares of its median step its main thread waited for a CPU and ran (``WAIT_PCT``,
  ``MAIN_PCT``, from /proc/self/schedstat: decision 0203).
* ``leak``: each step's loss kept in a list (its autograd graph with it, ``retain_graph``): device
  memory grows every step by what the graph saved, printed as ``INJECTED_BYTES`` (measured by a
  saved-tensors hook); ``noleak``: the same loop keeping ``loss.item()``, memory flat.
* ``exposed``: two ranks without DDP all-reduce ``EXPOSED_FLOATS`` floats after the backward, with
  nothing to overlap it; the injected cost is the all-reduce's median time, measured.
"""
import json
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)
COST_MS = 12.0
STRAGGLER_MS = 30.0
LAYERS = 12
# the unfused optimizer's layers: ~10 ms of optimizer a step on the test VM when not preempted,
# well above a loaded host's step noise (48 layers gave 2 ms, under the noise floor of 15 steps at
# load 16; 128 gave 5.5 ms against a 3.6 ms floor at load 10)
OPT_LAYERS = 256
EXPOSED_FLOATS = 4 << 20
# cpusat's threads beside rank 1's steps, on its CPU: its main thread gets a quarter of its rank's
# share (one thread left rank 1 slower than rank 0's noise in 1 of 3 runs at load 7.5: decision 0203)
CPUSAT_BURNERS = 3
# the kept graphs' saved tensors: the input and the hidden activation, 2 MiB each, per step
LEAK_BATCH, LEAK_WIDTH = 1024, 512
SLEPT: list = []


class Data(Dataset):
    def __init__(self, n: int, slow: bool):
        self.n, self.slow = n, slow
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 32, generator=g), torch.randn(n, 4, generator=g)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.slow and i % 8 == 0:  # one sleep per batch of 8, measured (a loaded host oversleeps)
            t0 = time.perf_counter_ns()
            time.sleep(COST_MS / 1e3)
            SLEPT.append(time.perf_counter_ns() - t0)
        return self.x[i], self.y[i]


class Net(nn.Module):
    def __init__(self, spin_ms: float = 0.0):
        super().__init__()
        self.a, self.b = nn.Linear(32, 64), nn.Linear(64, 4)
        self.spin_ms = spin_ms

    def forward(self, x):
        if self.spin_ms:
            end = time.perf_counter() + self.spin_ms / 1e3
            while time.perf_counter() < end:
                pass
        return self.b(torch.relu(self.a(x)))


def train(mode: str, steps: int) -> None:
    if mode in EXTRA:
        return EXTRA[mode](steps)
    torch.manual_seed(0)
    net = Net()
    model = net
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Data(8 * steps, mode == "dataloader"), batch_size=8)
    if mode == "recompile":
        return recompile(net, opt, steps)
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    if mode == "dataloader":
        print(f"INJECTED_NS {sorted(SLEPT)[len(SLEPT) // 2]}")


def straggler(steps: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = Net(STRAGGLER_MS if rank == 1 else 0.0)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(8, 32), torch.randn(8, 4)
    own, waits = [], []
    last = time.perf_counter_ns()
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        t0 = time.perf_counter_ns()
        flat = torch.cat([q.grad.reshape(-1) for q in net.parameters()])
        dist.all_reduce(flat)  # (waits for the slower rank)
        t1 = time.perf_counter_ns()
        i = 0
        for q in net.parameters():
            q.grad.copy_(flat[i:i + q.numel()].view_as(q) / dist.get_world_size())
            i += q.numel()
        opt.step()
        end = time.perf_counter_ns()
        own.append(end - last - (t1 - t0))  # (a step ends where its optimizer step ends)
        waits.append(t1 - t0)
        last = end
    _print_own_excess(dist, own, waits)
    dist.barrier()
    dist.destroy_process_group()


def _main_thread() -> tuple[int, int]:
    """The time this process's main thread has run on a CPU and waited for one so far (Linux's
    schedstat)."""
    with open("/proc/self/schedstat") as f:
        ran, waited = f.read().split()[:2]
    return int(ran), int(waited)


def _print_own_excess(dist, own: list, waits: list, *extra: float) -> None:
    """Rank 0 prints what rank 0 waited for rank 1 per step: the median over the steps after the
    first of rank 1's own time beyond rank 0's, at most rank 0's time in the all-reduce
    (``INJECTED_NS``: the straggler rule's statistic, docs/summary.md), each rank's median own
    time (``OWN_NS``) and its ``extra`` figures (``CPU_PCT``, ``WAIT_PCT``, ``MAIN_PCT``), then step by step
    what rank 0 waited for rank 1 (``SAVED_NS``) and each rank's own times and waits
    (``STEPS_NS``: a list per rank, own times then waits)."""
    world, n = dist.get_world_size(), len(own)
    mine = torch.tensor([*map(float, own), *map(float, waits), *extra], dtype=torch.float64)
    every = [torch.zeros(len(mine), dtype=torch.float64) for _ in range(world)]
    dist.all_gather(every, mine)
    if dist.get_rank() == 0:
        saved = [min(max(float(every[1][i] - every[0][i]), 0.0), float(every[0][n + i])) for i in range(n)]
        print(f"INJECTED_NS {int(_median(saved))}")
        line = f"OWN_NS {[int(_median(e[:n].tolist())) for e in every]}"
        for i, name in enumerate(("CPU_PCT", "WAIT_PCT", "MAIN_PCT")[:len(extra)]):
            line += f" {name} {[round(float(e[2 * n + i])) for e in every]}"
        print(line)
        print(f"SAVED_NS {[int(x) for x in saved]}")
        print(f"STEPS_NS {[[int(x) for x in e[:2 * n].tolist()] for e in every]}")


def buckets(steps: int) -> None:
    """Each step runs a forward and backward of the network twice, the same data through two
    copies: one under tiny buckets (one all-reduce per gradient, ``2 * LAYERS``), one under
    DDP's 25 MiB buckets (one all-reduce), in alternating order, then steps SGD (the summary's
    step boundary).  The program times both passes in every step: their difference is what the
    tiny buckets cost under the load of that very step (a default-bucket phase run after the
    tiny one measured a load that had changed: 44.6 and 10.8 ms where two runs' estimates read
    14.7 and 59 ms; decision 0174).

    The step's small all-reduces are ``2 * LAYERS + 1`` (the default pass's 200 KB one is under
    1 MiB too); in one bucket they would be one.  The difference saves ``2 * LAYERS - 1`` calls
    (the default pass keeps its own), so the injected cost of the step is the difference per
    saved call times ``2 * LAYERS``: the interquartile mean over the steps after the first, as the
    rule takes its steps (``INJECTED_NS``; ``DIFF_NS``: the difference's minimum, lower quartile, median and
    maximum)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    x, y = torch.randn(8, 64), torch.randn(8, 64)
    tiny, default = (DDP(nn.Sequential(*[nn.Linear(64, 64) for _ in range(LAYERS)]), bucket_cap_mb=cap)
                     for cap in (1e-6, 25))
    opt = torch.optim.SGD(tiny.parameters(), lr=0.01)

    def pass_of(model) -> int:
        t0 = time.perf_counter_ns()
        nn.functional.mse_loss(model(x), y).backward()  # (DDP's all-reduces end inside the backward)
        return time.perf_counter_ns() - t0

    diffs = []
    for i in range(steps):
        opt.zero_grad()
        default.zero_grad()
        first, second = (tiny, default) if i % 2 else (default, tiny)
        t = {id(first): pass_of(first), id(second): pass_of(second)}
        opt.step()
        diffs.append(t[id(tiny)] - t[id(default)])
    if dist.get_rank() == 0:
        calls = 2 * LAYERS
        d = sorted(diffs[1:])
        mid = d[len(d) // 4:len(d) - len(d) // 4]  # (the interquartile mean, as the rule takes its steps)
        print(f"INJECTED_NS {int(sum(mid) / len(mid) * calls / (calls - 1))}")
        print(f"DIFF_NS {json.dumps([d[0], int(_quartile(diffs)), _median(diffs), d[-1]])}")
    dist.barrier()
    dist.destroy_process_group()


def _median(xs: list) -> int:
    xs = sorted(xs[1:])
    return xs[len(xs) // 2]


def _quartile(xs: list) -> float:
    """The lower quartile after the first (numpy's linear interpolation), as the rule takes the
    optimizer's and the step's time."""
    xs = sorted(xs[1:])
    at = 0.25 * (len(xs) - 1)
    lo = int(at)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (at - lo)


def optimizer(steps: int) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Linear(16, 16) for _ in range(OPT_LAYERS)])
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, foreach=False)
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    step, in_opt = [], []
    last = time.perf_counter_ns()
    # at least ``steps``; more while the steps' own spread would hide the optimizer's cost (a loaded
    # host: 15 steps with a 0.37 coefficient of variation put the noise bar above ~10 ms of optimizer)
    while len(step) < max(steps, 3) or (_noise_bar(step) > 0.5 * _injected(in_opt, step) and len(step) < 8 * steps):
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        t0 = time.perf_counter_ns()
        opt.step()
        t1 = time.perf_counter_ns()
        in_opt.append(t1 - t0)
        step.append(t1 - last)
        last = t1
    print(f"INJECTED_NS {int(_injected(in_opt, step))}")


def _injected(in_opt: list, step: list) -> float:
    """The optimizer's time beyond 10% of the step, as the ``optimizer_share`` rule takes it."""
    return _quartile(in_opt) - 0.1 * _quartile(step)


def _noise_bar(step: list) -> float:
    """The summary's noise threshold for these steps (``insights._step_noise_ns``): twice the
    standard error of a steady step, from the median absolute deviation of the steps after the first."""
    xs = sorted(step[1:])
    med = xs[len(xs) // 2]
    mad = sorted(abs(x - med) for x in xs)[len(xs) // 2]
    return 2 * 1.4826 * mad / len(xs) ** 0.5


def hostbound(steps: int) -> None:
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(8, 32), torch.randn(8, 4)
    spun = []
    for _ in range(steps):
        opt.zero_grad()
        out = net(x)
        t0 = time.perf_counter_ns()
        end = t0 + int(COST_MS * 1e6)
        while time.perf_counter_ns() < end:
            pass
        spun.append(time.perf_counter_ns() - t0)
        nn.functional.mse_loss(out, y).backward()
        opt.step()
    xs = sorted(spun[1:])  # the order statistic at the 10th percentile, as the rule takes the gaps
    print(f"INJECTED_NS {xs[int(0.1 * (len(xs) - 1))]}")


def exposed(steps: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(8, 32), torch.randn(8, 4)
    stats = torch.zeros(EXPOSED_FLOATS)
    took = []
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        t0 = time.perf_counter_ns()
        dist.all_reduce(stats)  # e.g. statistics gathered every step, after the work: nothing overlaps it
        took.append(time.perf_counter_ns() - t0)
        opt.step()
    if dist.get_rank() == 0:
        print(f"INJECTED_NS {_median(took)}")
    dist.barrier()
    dist.destroy_process_group()


def cpusat(steps: int) -> None:
    import os
    import threading

    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:  # a session of its own: Linux's autogroup then shares the CPU between sessions first
        os.setsid()
    except OSError:  # (already a session leader)
        pass
    if rank == 1:  # its threads on one CPU: the threads take from its rank's share, wherever it runs
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 8))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(256, 256), torch.randn(256, 8)
    stop = threading.Event()

    def burn() -> None:  # another workload in the rank's process: products that release the GIL
        a = torch.randn(192, 192)
        while not stop.is_set():
            torch.mm(a, a)

    if rank == 1:
        for _ in range(CPUSAT_BURNERS):
            threading.Thread(target=burn, name="burner", daemon=True).start()
    own, waits, step_pct, wait_pct, main_pct = [], [], [], [], []
    last, waited = time.perf_counter_ns(), 0
    last_cpu, last_main = time.process_time_ns(), _main_thread()
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        end, cpu, main = time.perf_counter_ns(), time.process_time_ns(), _main_thread()
        own.append(end - last - waited)  # (a step ends where its optimizer step ends: docs/summary.md)
        waits.append(waited)
        step_pct.append(100.0 * (cpu - last_cpu) / max(end - last, 1))
        wait_pct.append(100.0 * (main[1] - last_main[1]) / max(end - last, 1))
        main_pct.append(100.0 * (main[0] - last_main[0]) / max(end - last, 1))
        last, last_cpu, last_main = end, cpu, main
        # the ranks agree on the loss every step: one small all-reduce, which waits for the slower
        # rank (a gradients' all-reduce would add gloo's transfer, exposed, to every step).  The wait
        # is the call alone: the moments before it (on rank 1 the burner may hold the GIL) are the
        # rank's own time, as the summary counts them (~0.9 ms apart on a quiet host otherwise)
        done = loss.detach()
        called = time.perf_counter_ns()
        dist.all_reduce(done)
        waited = time.perf_counter_ns() - called
    # the median step's CPU % (after the first: _median), as the summary reads it (a whole-loop figure is
    # weighted by wall time: one step that a loaded host stalled for seconds pulls it far down)
    pct = float(_median(step_pct))
    stop.set()
    _print_own_excess(dist, own, waits, pct, float(_median(wait_pct)), float(_median(main_pct)))
    dist.barrier()
    dist.destroy_process_group()


def leak(steps: int, keep_graph: bool = True) -> None:
    """Each step's loss kept in a list, as a job that logs its losses later does: each one holds
    its step's autograd graph and the tensors the backward saved (``keep_graph``; else the
    fix, ``loss.item()``).  The injected growth is what the graph saved per step, measured by a
    saved-tensors hook (distinct storages), the median over the steps after the first."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(LEAK_WIDTH, LEAK_WIDTH), nn.ReLU(), nn.Linear(LEAK_WIDTH, 16))
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    y = torch.randn(LEAK_BATCH, 16)
    kept, saved = [], []
    seen: dict = {}

    def pack(t):
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
        return t

    for _ in range(steps):
        seen.clear()
        x = torch.randn(LEAK_BATCH, LEAK_WIDTH)
        opt.zero_grad()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = nn.functional.mse_loss(net(x), y)
        loss.backward(retain_graph=keep_graph)
        opt.step()
        kept.append(loss if keep_graph else loss.item())
        params = {p.untyped_storage().data_ptr() for p in net.parameters()}
        saved.append(sum(n for ptr, n in seen.items() if ptr not in params))
    print(f"INJECTED_BYTES {_median(saved) if keep_graph else 0}")


EXTRA = {"straggler": straggler, "buckets": buckets, "cpusat": cpusat, "optimizer": optimizer, "hostbound": hostbound,
         "exposed": exposed, "leak": leak, "noleak": lambda steps: leak(steps, keep_graph=False)}


def recompile(net, opt, steps: int) -> None:
    """A new batch size every step: each step compiles a graph (Dynamo, dynamic shapes off)."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = torch._dynamo.config.cache_size_limit = 10 * steps
    f = torch.compile(net, backend="aot_eager", dynamic=False)
    new, old = [], []
    for i in range(steps):
        x, y = torch.randn(8 + i, 32), torch.randn(8 + i, 4)
        opt.zero_grad()
        t0 = time.perf_counter_ns()
        out = f(x)
        t1 = time.perf_counter_ns()
        f(x)  # the same shape again: no compile
        t2 = time.perf_counter_ns()
        nn.functional.mse_loss(out, y).backward()
        opt.step()
        if i:
            new.append(t1 - t0)
            old.append(t2 - t1)
    # the mean, as the insight's ``stat="mean"``; and each step's, numbered from 1 (the test compares
    # the steps' medians: a host that deschedules a new shape's first execution lengthens what this
    # program times but not the compile, and one such step moves the mean by its whole stall)
    print(f"INJECTED_NS {(sum(new) - sum(old)) // max(len(new), 1)}")
    print("INJECTED_STEPS_NS " + json.dumps([a - b for a, b in zip(new, old)]))
    print("GROUND_TRUTH " + json.dumps({"steps": steps}))


if __name__ == "__main__":
    train(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
    sys.stdout.flush()
