"""Device memory over time by category (docs/decisions/0031-device-memory-by-category.md): a real
PyTorch training job captured without code changes gives ``device_mem.nc<N>.<category>`` counters
in Parquet (SystemProfileCounters) and Perfetto counter tracks, with the bytes the model holds."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from neuron_explorer.capture import writer
from neuron_explorer.capture.samplers import HostSampler
from neuron_explorer.proto import neuron_explorer_capture_pb2 as pb

from ..conftest import (
    clean_env,
    cli_in_process as cli,  # conversions in this process (decision 0173)
    run,
    shared_dir,
)

WORKLOAD = Path(__file__).parent / "workloads" / "train_memory.py"
PARAM_BYTES = (256 * 512 + 512 + 512 * 10 + 10) * 4
# what a sample can see of the parameters while the model is being built (one tensor after another);
# a sampler tick that falls in the workload's construction is right to see part of them
PARAM_PREFIXES = {4 * sum((256 * 512, 512, 512 * 10, 10)[:k]) for k in range(5)}
ADAM_BYTES = 2 * PARAM_BYTES + 4 * 4  # exp_avg and exp_avg_sq per parameter, a float32 step each


def test_samples_of_several_cores_are_stored_on_one_timeline_with_gaps():
    hs = HostSampler(os.getpid(), 0.25, max_samples=100)
    hs.record_device_memory(10, {(0, "parameters"): 100, (0, "tensors"): 7})
    hs.record_device_memory(20, {(0, "parameters"): 100, (1, "tensors"): 5, (0, "bogus"): 1})
    ts, names, values, dropped = hs.device_memory_columns()
    assert ts.tolist() == [10, 20] and dropped == 0
    assert names == ["nc0.parameters", "nc0.tensors", "nc1.tensors"]
    assert values.tolist() == [[100, 7, -1], [100, -1, 5]]
    msg = pb.HostMem.FromString(writer.encode_host_mem(hs))
    assert list(msg.device_mem_names) == names
    assert np.frombuffer(msg.device_mem_values, "<i8").tolist() == [100, 7, -1, 100, -1, 5]


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """Made once per run whichever xdist worker asks first (``shared_dir``); the tests read it or a copy."""
    def build(d: Path) -> None:
        env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(d / "out"),
                        NEURON_EXPLORER_SAMPLE_PERIOD_MS="40")
        run([sys.executable, str(WORKLOAD)], env)

    return shared_dir(tmp_path_factory, "device_memory_capture", build)[0] / "out"


@pytest.mark.slow
def test_a_training_job_writes_device_memory_by_category_to_parquet(captured, tmp_path):
    import duckdb

    pq = tmp_path / "pq"
    r = cli("view", "-d", str(captured), "--output-format", "parquet", "--output-file", str(pq))
    assert r.returncode == 0, r.stderr
    rows = duckdb.sql(f"""select counter, unit, min(value), max(value), count(*)
                          from read_parquet('{pq}/SystemProfileCounters/**/*.parquet', hive_partitioning=true)
                          where counter like 'device_mem.%' group by 1, 2""").fetchall()
    got = {r[0]: r[1:] for r in rows}
    assert set(got) >= {f"device_mem.nc0.{c}" for c in
                        ("parameters", "gradients", "optimizer_state", "tensors", "model_code")}, got
    assert all(unit == "bytes" for unit, *_ in got.values())
    lo, hi = got["device_mem.nc0.parameters"][1:3]
    assert hi == PARAM_BYTES and lo in PARAM_PREFIXES  # lo < hi: the first sample fell in the model's construction
    assert got["device_mem.nc0.gradients"][2] == PARAM_BYTES  # once backward ran
    assert got["device_mem.nc0.optimizer_state"][2] == ADAM_BYTES  # once the optimizer stepped
    assert got["device_mem.nc0.model_code"][1] > 0  # the forward graph's code
    assert got["device_mem.nc0.tensors"][3] >= 10  # sampled at the sampler's cadence


@pytest.mark.slow
def test_the_perfetto_trace_has_a_counter_track_per_category(captured, tmp_path):
    from tests.view.test_perfetto_semantics import decode

    pf = tmp_path / "t.pftrace"
    r = cli("view", "-d", str(captured), "--output-format", "perfetto", "--output-file", str(pf))
    assert r.returncode == 0, r.stderr
    d = decode(pf.read_bytes())
    tracks = {d.tracks[u].name: s for u, s in d.counters.items()}
    params = [v for _, v in sorted(tracks["device_mem.nc0.parameters"])]
    assert params and params[-1] == PARAM_BYTES and set(params) <= PARAM_PREFIXES
    assert params == sorted(params)  # built one tensor after another, never fewer later
    assert max(v for _, v in tracks["device_mem.nc0.optimizer_state"]) == ADAM_BYTES


@pytest.mark.slow
def test_a_damaged_device_memory_block_is_one_line_naming_the_file(captured, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(captured, copy)
    hm = next(copy.rglob("host_mem.pb"))
    msg = pb.HostMem.FromString(hm.read_bytes())
    msg.device_mem_names.append("../../etc")
    hm.write_bytes(msg.SerializeToString())
    r = cli("view", "-d", str(copy), "--output-format", "parquet", "--output-file", str(tmp_path / "pq"))
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if "host_mem.pb" in ln]
    assert len(lines) == 1 and "nc<N>.<category>" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


RACE = Path(__file__).parent / "workloads" / "grad_race.py"


def test_sampling_memory_during_backward_never_crashes_the_job(tmp_path):
    """The autograd engine writes ``.grad`` without the GIL; the sampler must not read it from its
    thread.  Before the fix this job died by SIGSEGV or SIGABRT in 3 runs out of 3 within 5 s."""
    import subprocess

    out = tmp_path / "out"
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out),
                    NEURON_EXPLORER_SAMPLE_PERIOD_MS="1", OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, str(RACE), "5"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    from neuron_explorer.analysis.reader import discover, load_session

    (s,) = [load_session(d) for d in discover(str(out))]
    names = list(s.mem.device_mem_names)
    vals = np.frombuffer(s.mem.device_mem_values, "<i8").reshape(-1, len(names))
    grads = vals[:, names.index("nc0.gradients")]
    assert grads.max() == 40 * (64 * 64 + 64) * 4  # every layer's gradients, read at a step


@pytest.mark.parametrize("impl", ["c", "python"])
def test_the_optimizer_hook_reads_gradients_at_most_as_often_as_its_gate_says(impl):
    """The device-memory pre-hook is a rate gate in front of the Python snapshot (in C, and the
    same rule in Python without the extension): per optimizer, the first step and then a step
    once the period (or, after `calls` steps, a shorter one) has passed; other optimizers have
    their own turns; a failing snapshot reaches the step."""
    import time
    import weakref

    from neuron_explorer.runtime import ring

    if impl == "c" and ring.RateGate is ring.PyRateGate:
        pytest.skip("C extension not built or disabled")
    RateGate = ring.RateGate if impl == "c" else ring.PyRateGate

    class Opt:  # stands for an optimizer (weak references, as torch's)
        pass

    def scenario(period: float) -> bool:
        """The gate's turns, checked; False if the host stalled the scenario so long that a call
        meant to land within the period did not (then it says nothing, and is run again)."""
        got: list = []
        gate = RateGate(lambda o, a, k: got.append(o), period, 3, 2.5 * period)
        a, b = Opt(), Opt()
        t_a = time.monotonic()
        for _ in range(5):
            assert gate(a, (), {}) is None
        gate(b, (), {}), gate(b, (), {})
        if time.monotonic() - t_a >= period:
            return False
        assert got == [a, b]  # a's first step only, within the period; another optimizer has its own turn
        time.sleep(period * 1.05)
        t_a = time.monotonic()
        gate(a, (), {})
        assert got == [a, b, a]  # the period passed
        gate(a, (), {}), gate(a, (), {})
        time.sleep(period / 10)
        gate(a, (), {})
        if time.monotonic() - t_a >= period:
            return False
        assert got == [a, b, a]  # neither the period nor max_s passed
        five = [Opt() for _ in range(5)]  # more optimizers than it remembers: each still goes through once
        for o in five:
            gate(o, (), {})
        assert got[-5:] == five
        gone = weakref.ref(five[0])
        del five, got[:]  # the gate holds no optimizer alive
        assert gone() is None
        return True

    # a scenario a stalled host spoiled is run again: whether it was spoiled is measured, not assumed
    assert any(scenario(0.2) for _ in range(20)), "20 scenarios in a row stalled past the gate's period"

    def boom(o, a, k):
        raise ValueError("snapshot failed")

    with pytest.raises(ValueError, match="snapshot failed"):
        RateGate(boom, 1.0, 16, 1.0)(Opt(), (), {})
    for bad in ((1, 1.0, 1, 1.0), (print, -1.0, 1, 1.0), (print, 1.0, 1, float("nan"))):
        with pytest.raises((TypeError, ValueError)):
            RateGate(*bad)


def test_the_snapshot_gates_longest_wait_comes_from_its_variable(monkeypatch):
    """``NEURON_EXPLORER_GRAD_SNAPSHOT_MAX_MS`` sets the gate's one-second bound (benches under
    valgrind stretch it: a step there can take a second of wall time, decision 0118); a bad value
    keeps the default, a huge one stops at the gate's limit."""
    from neuron_explorer.integrations.torch.memory import _snapshot_max_s

    for value, want in ((None, 1.0), ("2500", 2.5), ("0", 1.0), ("soon", 1.0), ("10" * 20, 1e6)):
        if value is None:
            monkeypatch.delenv("NEURON_EXPLORER_GRAD_SNAPSHOT_MAX_MS", raising=False)
        else:
            monkeypatch.setenv("NEURON_EXPLORER_GRAD_SNAPSHOT_MAX_MS", value)
        assert _snapshot_max_s() == want, value


def _source(torch):
    from types import SimpleNamespace

    from neuron_explorer.integrations.torch.memory import MemorySource

    return MemorySource(SimpleNamespace(ident=SimpleNamespace(default_core=0), models=[]), torch)


def test_host_tensors_of_any_kind_count_on_the_processs_core():
    """Gradients, parameters and states that live on the host (CPU, or meta: no storage of their
    own) are this process's core's; the core is read off the tensor without building its device's
    name (``MemorySource._core_of``)."""
    from types import SimpleNamespace

    import torch

    from neuron_explorer.integrations.torch.memory import MemorySource

    src = MemorySource(SimpleNamespace(ident=SimpleNamespace(default_core=3), models=[]), torch)
    for t in (torch.zeros(2), torch.zeros(2, dtype=torch.int8), torch.zeros(2, device="meta")):
        assert src._core_of(t) == 3, t
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net(torch.randn(3, 4)).sum().backward()
    src.snapshot_step(opt)
    (snap, _), = src.grads.values()
    assert sorted(nb for _, _, nb in snap) == [2 * 4, 2 * 4 * 4] and {nc for _, nc, _ in snap} == {3}
    for name, p in net.named_parameters():
        src.on_tensor_registered(net, name, p)
    assert src._attributed() == {(3, "parameters"): 40, (3, "gradients"): 40}


def test_the_gradient_snapshot_records_each_gradients_storage_key_core_and_bytes():
    """The snapshot (decision 0204: its lookups hoisted out of the loop) records, per parameter
    with a gradient and in the groups' order, its storage's address, its core and its storage's
    bytes: a gradient viewing a shared buffer gives that buffer's, a parameter without one gives
    nothing, and snapshots of optimizers that are gone are dropped."""
    import gc

    import torch

    src = _source(torch)
    a, b, c = (torch.nn.Parameter(torch.zeros(n)) for n in (3, 5, 7))
    flat = torch.zeros(16)
    a.grad, b.grad = flat[:3], flat[8:13]  # views into one buffer, one at an offset
    opt = torch.optim.SGD([{"params": [a]}, {"params": [c, b]}], lr=0.1)
    src.snapshot_step(opt)
    key = flat.untyped_storage().data_ptr()
    assert src.grads[id(opt)][0] == [(key, 0, 64), (key, 0, 64)]
    c.grad = torch.ones(7)
    src.snapshot_step(opt)
    assert src.grads[id(opt)][0] == [(key, 0, 64), (c.grad.untyped_storage().data_ptr(), 0, 28), (key, 0, 64)]
    for _ in range(12):
        src.snapshot_step(torch.optim.SGD([c], lr=0.1))
        gc.collect()
    assert id(opt) in src.grads and len(src.grads) <= len(src.optimizers) + 9


def test_the_gradient_loop_in_c_gives_what_its_python_twin_gives():
    """The snapshot's loop runs in C with the extension (``runtime/_hooks.h`` ``grad_entries``,
    decision 0206): for the same groups it gives the Python twin's entries, in order, and raises
    what the twin raises (the snapshot then keeps nothing)."""
    import torch

    from neuron_explorer.integrations.torch import memory
    from neuron_explorer.runtime import _fastpath

    class Groups(dict):  # a group that is not exactly a dict: its own get
        def get(self, k, default=None):
            return super().get(k, default) if k != "params" else list(super().get(k, default))

    class Raises:
        @property
        def grad(self):
            raise RuntimeError("no gradient here")

    a, b, c, d = (torch.nn.Parameter(torch.zeros(n)) for n in (3, 5, 7, 2))
    flat = torch.zeros(16)
    a.grad, b.grad, d.grad = flat[:3], flat[8:13], torch.ones(2)
    groups = [{"params": [a]}, {"lr": 0.1}, Groups(params=(c, b, object(), d)), {"params": iter([d, a])}]
    py = memory._grad_entries([dict(g) if type(g) is dict else g for g in groups[:3]] + [{"params": [d, a]}],
                              torch.Tensor, 5)
    got = _fastpath.grad_entries(groups, torch.Tensor, 5)
    key = flat.untyped_storage().data_ptr()
    assert got == py == [(key, 5, 64), (key, 5, 64), (d.grad.untyped_storage().data_ptr(), 5, 8),
                         (d.grad.untyped_storage().data_ptr(), 5, 8), (key, 5, 64)]
    assert _fastpath.grad_entries([], torch.Tensor, 0) == memory._grad_entries([], torch.Tensor, 0) == []
    for bad in ([{"params": [a, Raises()]}], [{"params": 3}], [3]):
        errors = []
        for fn in (memory._grad_entries, _fastpath.grad_entries):
            try:
                fn(bad, torch.Tensor, 0)
            except Exception as e:  # noqa: BLE001 - the two must raise alike
                errors.append(type(e))
        assert len(errors) == 2 and errors[0] is errors[1], (bad, errors)


def test_the_walk_over_parameters_and_states_is_reused_until_tensors_are_added(monkeypatch):
    """The sampler and the monitor's publisher ask for memory several times a second; the walk
    over every parameter and optimizer state runs again only when tensors were added or
    ``WALK_REFRESH_S`` passed, and every answer equals a fresh walk's."""
    import torch

    from neuron_explorer.integrations.torch import memory

    src = _source(torch)
    walks = []
    real_walk = src._walk
    monkeypatch.setattr(src, "_walk", lambda opts: walks.append(1) or real_walk(opts))
    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 4))
    for name, p in net.named_parameters():
        src.on_tensor_registered(net, name, p)
    opt = torch.optim.Adam(net.parameters())
    fresh = _source(torch)
    fresh.params, fresh.optimizers, fresh.grads = src.params, src.optimizers, src.grads
    monkeypatch.setattr(fresh, "_walked", None)

    def answer():
        fresh._walked = None  # the reference walks every time
        return src._attributed(), fresh._attributed()

    a, b = answer()
    assert a == b and a[(0, "parameters")] == sum(p.numel() * 4 for p in net.parameters())
    for step in range(3):
        net(torch.randn(8, 64)).sum().backward()
        src.snapshot_step(opt)
        opt.step()
        a, b = answer()
        assert a == b, step  # gradients at every call; the states the first step made, at once
        assert a[(0, "optimizer_state")] == 2 * a[(0, "parameters")] + 4 * 4
    n = len(walks)
    for _ in range(20):
        assert src._attributed() == a
    assert len(walks) == n  # nothing added: no walk
    monkeypatch.setattr(memory, "WALK_REFRESH_S", 0.0)
    src._attributed()
    assert len(walks) == n + 1  # the period passed: walked again


def test_a_graphs_code_is_counted_in_utf8_bytes_and_follows_its_replacement():
    from types import SimpleNamespace

    import torch

    src = _source(torch)
    model = SimpleNamespace(nc_idx=0, artifacts={"code": "def f(x):\n    return x  # é\n"})
    src.rt.models.append(model)
    want = len(model.artifacts["code"].encode())
    assert [src()[(0, "model_code")] for _ in range(3)] == [want] * 3
    model.artifacts["code"] = "ü" * 1000  # recompiled
    assert src()[(0, "model_code")] == 2000
