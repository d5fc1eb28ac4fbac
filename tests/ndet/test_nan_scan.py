"""The NaN/Inf check of graph outputs: exact counts in every float type and layout (and in nested
outputs), and what a user sees when a compiled graph or an eager root module produces NaN or Inf
(the capture's events, the NDET log's records, neuron-det's verdict).

The C scanner (``_fastpath.NanScanner``, reached through ``nan_scanner``) and the Python scan
without the extension are both checked against torch's own ``isnan``/``isinf`` counts."""
from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from neuron_explorer.contracts.ndet_log import KIND_EXEC, KIND_NUMERICAL_ERROR, read_log  # noqa: E402
from neuron_explorer.integrations.torch import tensors  # noqa: E402

from .helpers import logs_in, ndet_env, neuron_det  # noqa: E402

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _truth(outs) -> tuple[int, int]:
    nan = inf = 0
    for t in outs if isinstance(outs, (list, tuple)) else (outs,):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            nan += int(torch.isnan(t).sum())
            inf += int(torch.isinf(t).sum())
    return nan, inf


@pytest.fixture(params=["c", "python"])
def scan(request):
    """The scanner the execution wrapper uses, and the Python one (no extension)."""
    if request.param == "c":
        s = tensors.nan_scanner(torch)
        if not getattr(s, "reads_memory", False):
            pytest.skip("the C scanner is not built")
        return s
    return tensors._python_scanner(torch, tensors._slow_check(torch))


def _poisoned(dtype, shape=(6, 9)) -> torch.Tensor:
    t = torch.randn(*shape).to(dtype)
    t[1, 2] = float("nan")
    t[3, 4] = float("inf")
    t[0, 0] = -float("inf")
    t[5, 8] = float("nan")
    t[2, 7] = -float("nan")
    return t


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_nan_and_both_infinities_are_counted_in_every_layout(scan, dtype) -> None:
    t = _poisoned(dtype)
    views = {"contiguous": t, "transposed": t.t(), "column step": t[:, ::2], "row step": t[::2],
             "expanded": t[:, 2:3].expand(6, 5), "scalar": t[1, 2], "3-d permuted": t.reshape(3, 2, 9).permute(2, 0, 1),
             "negative-stride free narrow": t.narrow(1, 3, 4)}
    for name, v in views.items():
        assert scan(v) == _truth(v), name
    assert scan(t) == (3, 2)
    assert scan([t, t.t()]) == (6, 4)  # a list of outputs: summed


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_finite_empty_and_grad_tensors_count_nothing(scan, dtype) -> None:
    big = torch.finfo(dtype).max
    t = torch.tensor([big, -big, torch.finfo(dtype).tiny, 0.0, -0.0], dtype=dtype)
    assert scan(t) == (0, 0)  # the largest finite values are not Inf
    assert scan(torch.empty(0, 4, dtype=dtype)) == (0, 0)
    assert scan(torch.empty(3, 0, dtype=dtype).t()) == (0, 0)
    w = torch.ones(4, dtype=dtype, requires_grad=True) * float("inf")  # a graph's output needs grad
    assert scan(w) == (0, 4)


def test_other_types_are_skipped_or_checked_by_torch(scan) -> None:
    outs = (torch.arange(5), torch.zeros(3, dtype=torch.bool), torch.full((2,), complex("nan+0j")), 7, None,
            "x", torch.full((3,), float("nan"), dtype=torch.float8_e5m2),
            torch.nn.Parameter(torch.tensor([float("inf"), 1.0])))
    assert scan(outs) == (3, 1)  # float8 (torch's ops) and a Tensor subclass count; ints/bool/complex do not


def test_tensors_nested_in_tuples_lists_and_dicts_are_counted(scan) -> None:
    """An eager module returns anything: a tuple of tuples (an LSTM's ``out, (h, c)``), a dict or a
    dict subclass (a Hugging Face ``ModelOutput``), a named tuple.  Every tensor in it counts, once
    per place it holds; other values are skipped; a self-containing list ends at the depth limit."""
    import collections

    nan, inf = torch.tensor([float("nan"), 1.0]), torch.tensor([float("inf"), -float("inf")]).to(torch.bfloat16)
    Out = collections.namedtuple("Out", "logits hidden")
    assert scan([[nan]]) == (1, 0)
    assert scan((nan, (inf, [nan, {"a": inf}]))) == (2, 4)
    assert scan({"loss": nan, "extra": {"hidden": (inf, inf), "n": 3, "s": "x"}}) == (1, 4)
    assert scan(collections.OrderedDict(logits=inf, past=((nan, nan),))) == (2, 2)
    assert scan(Out(nan, [inf, None])) == (1, 2)
    assert scan(({}, [], ())) == (0, 0)
    deep = nan
    for _ in range(tensors.SCAN_DEPTH):
        deep = [deep]
    assert scan(deep) == (1, 0) and scan([deep]) == (0, 0)  # 32 levels of containers are read, not 33
    loop: list = [nan]
    loop.append(loop)
    assert scan(loop) == (tensors.SCAN_DEPTH, 0)  # the walk stops; the user's call is not hung


def test_random_layouts_match_torch(scan) -> None:
    """Fuzz: random dtypes, shapes, strides, offsets and poison positions against torch's counts."""
    rng = random.Random(1804)
    for _ in range(300):
        dtype = rng.choice(FLOATS)
        shape = [rng.randint(0, 5) for _ in range(rng.randint(0, 4))]
        t = torch.randn(*shape).to(dtype) if shape else torch.randn(()).to(dtype)
        flat = t.view(-1)
        for _ in range(rng.randint(0, 4)):
            if flat.numel():
                flat[rng.randrange(flat.numel())] = rng.choice([float("nan"), float("inf"), -float("inf")])
        if t.dim() >= 2 and rng.random() < 0.5:
            t = t.transpose(0, t.dim() - 1)
        if t.dim() >= 1 and t.shape[0] > 1 and rng.random() < 0.5:
            t = t[rng.randint(0, 1)::rng.randint(1, 2)]
        assert scan(t) == _truth(t), (dtype, tuple(t.shape), t.stride())


def test_long_contiguous_runs_find_one_bad_value_anywhere(scan) -> None:
    """Fuzz the wide pass over contiguous memory: lengths past several blocks, starts at any
    element (unaligned), one or no NaN/Inf at any position (the first, the last, a tail byte), and
    the finite values nearest the exponent's edge (the largest finite, subnormals, -0.0)."""
    rng = random.Random(2511)
    for _ in range(400):
        dtype = rng.choice(FLOATS)
        fi = torch.finfo(dtype)
        n, start = rng.randint(0, 3000), rng.randint(0, 7)
        base = torch.randn(n + start).to(dtype)
        edge = torch.tensor([fi.max, -fi.max, fi.tiny / 2, -0.0]).to(dtype)
        for _ in range(rng.randint(0, 6)):
            if n:
                base[start + rng.randrange(n)] = edge[rng.randrange(4)]
        t = base[start:]
        if n and rng.random() < 0.7:
            i = rng.choice([0, n - 1, rng.randrange(n)])
            t[i] = rng.choice([float("nan"), float("inf"), -float("inf")])
        assert t.is_contiguous()
        assert scan(t) == _truth(t), (dtype, n, start)


NAN_SCRIPT = """
import sys, torch
dtype = getattr(torch, sys.argv[1])
def f(x):
    y = torch.log(x) * 2
    return y, y + 1
cf = torch.compile(f, backend='aot_eager')
x = torch.ones(4, 6, dtype=dtype)
cf(x)
x[0, 0] = -1.0   # log -> NaN
x[1, 1] = 0.0    # log -> -Inf
x[2, 0] = 0.0
cf(x)
"""


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_graph_that_returns_nan_and_inf_is_logged_as_a_numerical_error(tmp_path: Path, dtype: str) -> None:
    """What the user sees: the second call's record in the NDET log and neuron-det's culprit line,
    with the counts over both outputs (NaN 1 + 1, -Inf 2 + 2)."""
    script = tmp_path / "nan.py"
    script.write_text(NAN_SCRIPT)
    logs = tmp_path / "ndet"
    logs.mkdir()
    p = subprocess.run([sys.executable, str(script), dtype], env=ndet_env(logs), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    (log,) = logs_in(logs)
    r = read_log(str(log)).records
    errs = r[r["kind"] == KIND_NUMERICAL_ERROR]
    assert len(errs) == 1 and errs["ret"][0] == 1003
    assert int(errs["b"][0]) == 1  # exec_id 1: the second call
    assert (int(errs["c"][0]), int(errs["d"][0])) == (2, 4)
    execs = r[r["kind"] == KIND_EXEC]
    assert execs["ret"].tolist() == [0, 1003]
    out = neuron_det("--log-prefix", str(logs), "-o", str(tmp_path / "trace.json"))
    assert out.returncode == 1
    assert "first numerical error (NaN 2, Inf 4)" in out.stdout


def _wrapped(tmp_path: Path, graph, c: bool):
    """``graph`` wrapped as a compiled graph's execution on a runtime with NDET and the NaN check on."""
    from neuron_explorer.integrations.torch import execution, graphs
    from neuron_explorer.integrations.torch.state import Installed
    from neuron_explorer.recorders.ndet import NdetRecorder
    from neuron_explorer.runtime.config import CaptureConfig
    from neuron_explorer.runtime.core import NDET, Runtime

    if c and execution._CWrapper is None:
        pytest.skip("the C extension is not built")
    rt = Runtime(CaptureConfig(output_dir=str(tmp_path), cpu_util=False, host_memory=False, nan_check=True))
    rt.register(NDET, NdetRecorder(rt, str(tmp_path), 10**12, require_framework=False))
    core = rt.core()
    model = rt.add_model(name="g", neff_name="n", graph_hash="0", backend="b", kind="forward", nc_idx=core.nc)
    run = graphs.wrap_graph(Installed(rt), torch, core, model, graph)
    assert (type(run).__name__ == "ExecWrapper") == c
    return rt, core, model, run


@pytest.mark.parametrize("c", [True, False], ids=["c", "python"])
def test_the_wrapper_records_a_numerical_error_in_both_logs(tmp_path: Path, monkeypatch, c: bool) -> None:
    from neuron_explorer.contracts import events as ev
    from neuron_explorer.integrations.torch import execution

    if not c:
        monkeypatch.setattr(execution, "_CWrapper", None)

    def graph(x):
        return (x.log(), x + 1)

    rt, core, model, run = _wrapped(tmp_path, graph, c)
    with torch.no_grad():
        run(torch.ones(3))
        x = torch.tensor([-1.0, 0.0, 2.0, 0.0], dtype=torch.bfloat16)
        out = run(x)
    assert torch.isnan(out[0][0]) and out[1].tolist() == [0.0, 1.0, 3.0, 1.0]  # outputs untouched
    recs = core.ring.drain()
    assert recs[:, 0].tolist() == [ev.EXEC_PAIR, ev.NUMERICAL_ERR, ev.EXEC_PAIR]
    assert recs[:, 6].tolist() == [0, 1003, 1003] and recs[1, 7:].tolist() == [1, 2]
    assert recs[1, 5] == recs[2, 5] == 1  # the error names the execution
    nd = rt.ndet
    nd._drain()
    h = nd._ordered_history()[0]
    assert h["kind"].tolist() == [KIND_EXEC, KIND_NUMERICAL_ERROR, KIND_EXEC]
    assert h["ret"].tolist() == [0, 1003, 1003] and (h["c"][1], h["d"][1]) == (1, 2)
    assert nd.in_flight() == []


def test_in_flight_slots_overflow_into_the_dict_and_all_end(tmp_path: Path) -> None:
    """More executions running at once than the C table has slots (recursion here): each is in
    flight while it runs, and none is left once they have returned."""
    seen = []
    depth = 40
    box = {}

    def graph(n):
        seen.append(len(box["rt"].ndet.in_flight()))
        if n > 1:
            box["run"](n - 1)
        return torch.zeros(1)

    rt, core, model, run = _wrapped(tmp_path, graph, True)
    box.update(rt=rt, run=run)
    run(depth)
    assert seen == list(range(1, depth + 1))
    assert rt.ndet.in_flight() == []
    rt.ndet._drain()
    assert len(rt.ndet._ordered_history()[0]) == depth


EAGER_NAN_SCRIPT = """
import torch
torch.manual_seed(0)
nan, inf = float("nan"), float("inf")
# step -> what the module's nested extra output holds: (NaN count, Inf count) in the comment
POISON = {0: [nan, nan, 1.0],      # (2, 0): the graph's first call, recorded on its own path
          3: [inf, -inf, 1.0],     # (0, 2)
          5: [nan, inf, -inf]}     # (1, 2), half of it in bfloat16


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, step):
        y = self.lin(x)
        p = torch.tensor(POISON.get(step, [0.0, 0.0, 0.0]))
        return y, {"aux": [p[:1], (p[1:].to(torch.bfloat16), torch.arange(3))], "step": step}


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 4)
for step in range(8):
    y, extra = model(x, step)
    y.square().mean().backward()
    opt.step()
    opt.zero_grad()
"""

# the forward executions (in call order) that hold NaN/Inf, and their (NaN, Inf) counts
EAGER_BAD = {0: (2, 0), 3: (0, 2), 5: (1, 2)}


@pytest.mark.parametrize("setting", ["ndet", "capture"])
@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_an_eager_root_module_returning_nan_is_a_numerical_error_at_exactly_those_steps(
        tmp_path: Path, pure: str, setting: str) -> None:
    """An eager model (no ``torch.compile``) whose nested outputs hold NaN/Inf at steps 0, 3 and 5
    of 8: each of those forward executions, and no other, has a ``numerical_err`` event in the
    capture and a ``numerical_error`` record in the NDET log with its exec id and counts, its
    execution ends with ret 1003, and neuron-det names the first.  ``ndet``: NDET and a capture,
    the check on by NDET's default; ``capture``: a capture with ``NEURON_EXPLORER_NAN_CHECK=1``."""
    from neuron_explorer.analysis.reader import discover, load_session

    script = tmp_path / "eager_nan.py"
    script.write_text(EAGER_NAN_SCRIPT)
    logs, out = tmp_path / "ndet", tmp_path / "out"
    logs.mkdir()
    env = dict(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out), NEURON_EXPLORER_PURE_PYTHON=pure)
    if setting == "ndet":
        env = ndet_env(logs, **env)
    else:
        from ..conftest import clean_env

        env = clean_env(NEURON_EXPLORER_NAN_CHECK="1", **env)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]

    (path,) = discover(str(out))
    s = load_session(path)
    ev = s.events
    names = [s.type_names[t] for t in ev["type"]]
    execs = [i for i, n in enumerate(names) if n == "nrt_execute"]
    model_of = {i: s.models[int(ev["a"][i])].name for i in execs}
    fwd = sorted((i for i in execs if model_of[i].startswith("Net_") and not model_of[i].endswith("_bwd")),
                 key=lambda i: int(ev["b"][i]))
    assert len(fwd) == 8 and len(execs) == 24, sorted(set(model_of.values()))
    fwd_ids = [int(ev["b"][i]) for i in fwd]
    want = {fwd_ids[k]: v for k, v in EAGER_BAD.items()}
    errs = [i for i, n in enumerate(names) if n == "numerical_err"]
    got = {int(ev["b"][i]): (int(ev["d"][i]), int(ev["e"][i])) for i in errs}
    assert got == want and len(errs) == 3
    assert {int(ev["c"][i]) for i in errs} == {1003}
    rets = {int(ev["b"][i]): int(ev["c"][i]) for i in execs}
    assert {k for k, r in rets.items() if r} == set(want) and {rets[k] for k in want} == {1003}

    if setting != "ndet":
        assert not list(logs.iterdir())
        return
    (log,) = logs_in(logs)
    r = read_log(str(log)).records
    nerr = r[r["kind"] == KIND_NUMERICAL_ERROR]
    assert {int(b): (int(c), int(d)) for b, c, d in zip(nerr["b"], nerr["c"], nerr["d"])} == want
    assert len(nerr) == 3 and set(nerr["ret"].tolist()) == {1003}
    ex = r[r["kind"] == KIND_EXEC]
    assert len(ex) == 24 and sorted(int(b) for b in ex["b"][ex["ret"] == 1003]) == sorted(want)
    det = neuron_det("--log-prefix", str(logs), "-o", str(tmp_path / "trace.json"))
    assert det.returncode == 1
    assert "first numerical error (NaN 2, Inf 0) in graph Net_" in det.stdout, det.stdout
