"""Device profiles in ``model`` mode once every graph has been profiled: the wrappers go back to
their lean path, and that must not change what is recorded -- each graph's first execution under
each profiler gets its ops, every execution gets its record, a later profiler starts afresh, and
``session`` mode keeps profiling every call."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from neuron_explorer.contracts import events as ev  # noqa: E402
from neuron_explorer.integrations.torch import execution, graphs  # noqa: E402
from neuron_explorer.integrations.torch.device import DeviceProfiler  # noqa: E402
from neuron_explorer.integrations.torch.state import Installed  # noqa: E402
from neuron_explorer.runtime.config import CaptureConfig  # noqa: E402
from neuron_explorer.runtime.core import DEVICE_PROFILER, Runtime  # noqa: E402


@pytest.fixture(params=["c", "python"])
def impl(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(execution, "_CWrapper", None)
    elif execution._CWrapper is None:
        pytest.skip("the C extension is not built")
    return request.param


def _setup(tmp_path, mode: str):
    rt = Runtime(CaptureConfig(output_dir=str(tmp_path), cpu_util=False, host_memory=False))
    core = rt.core()
    model = rt.add_model(name="g", neff_name="neff_1", graph_hash="0", backend="aot_eager", kind="forward",
                         nc_idx=core.nc)

    def graph(x):
        return torch.relu(x @ x) + 1

    run = graphs.wrap_graph(Installed(rt), torch, core, model, graph)
    dp = DeviceProfiler(rt, mode)
    rt.register(DEVICE_PROFILER, dp)
    return rt, core, model, run, dp


def _ops(dp: DeviceProfiler) -> dict[int, set[str]]:
    """{exec id: the op names recorded in it} over the profiler's tables."""
    out: dict[int, set[str]] = {}
    for table in dp.tables.values():
        names = {i: s for s, i in table.strings.items()}
        for e in table.executions:
            out[e.exec_id] = set()
        for idx, n in zip(table.exec_idx, table.name):
            out[table.executions[idx].exec_id].add(names[n])
    return out


def test_model_mode_profiles_each_graph_once_per_profiler(tmp_path, impl) -> None:
    rt, core, model, run, dp = _setup(tmp_path, "model")
    x = torch.eye(3)
    with torch.no_grad():
        for _ in range(4):
            assert torch.equal(run(x), torch.relu(x @ x) + 1)
        first = _ops(dp)
        assert list(first) == [0] and {"aten::mm", "aten::relu"} <= first[0]
        second = DeviceProfiler(rt, "model")  # a new profiler (a new session) profiles the graph again
        rt.unregister(DEVICE_PROFILER)
        rt.register(DEVICE_PROFILER, second)
        run(x)
        run(x)
    assert list(_ops(second)) == [4] and "aten::mm" in _ops(second)[4]
    assert list(_ops(dp)) == [0]  # the first profiler saw nothing more
    recs = core.ring.drain()
    pairs = recs[recs[:, 0] == ev.EXEC_PAIR]
    assert sorted(pairs[:, 5].tolist()) == list(range(6)) and set(pairs[:, 6].tolist()) == {0}


def test_session_mode_profiles_every_call(tmp_path, impl) -> None:
    rt, core, model, run, dp = _setup(tmp_path, "session")
    with torch.no_grad():
        for _ in range(3):
            run(torch.eye(2))
    assert sorted(_ops(dp)) == [0, 1, 2] and all("aten::mm" in ops for ops in _ops(dp).values())
