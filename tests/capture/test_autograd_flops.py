"""An eager first call's flops read off the autograd graph (decision 0169): the same totals as
PyTorch's ``FlopCounterMode`` run separately, nothing of the program's run again, and a graph
the walk cannot count handed to the dispatch mode on its next call."""
from __future__ import annotations

import pytest

from .helpers import sessions
from .test_device_and_api import _run_script

torch = pytest.importorskip("torch")

from bench.whole_run_programs import cnn_net  # noqa: E402
from neuron_explorer.integrations.torch.autograd_flops import (  # noqa: E402
    GraphFlops,
    backward_flops,
    forward_flops,
)

nn, F = torch.nn, torch.nn.functional


_Cnn = cnn_net(torch)  # bench/whole_run_programs.py's MNIST net


class _Lm(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.rnn, self.dec = nn.Embedding(50, 16), nn.LSTM(16, 16, 2), nn.Linear(16, 50)

    def forward(self, x):
        return self.dec(self.rnn(self.enc(x))[0])


class _Attention(nn.Module):
    """Matmuls of every kind the walk reads: bmm both ways, fused attention, an einsum."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 10, 3, 4, 8).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        b = torch.softmax(q @ k.transpose(-1, -2), -1) @ v
        return torch.einsum("bhld,bhmd->bhlm", a, b)


def _models():
    return {
        "mlp": lambda: (nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), torch.randn(16, 64)),
        "cnn": lambda: (_Cnn(), torch.rand(8, 1, 28, 28)),
        "transformer_block": lambda: (nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), torch.randn(4, 16, 64)),
        "pre_norm_gelu_block": lambda: (nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, norm_first=True,
                                                                   activation="gelu"), torch.randn(4, 16, 64)),
        "lstm": lambda: (_Lm(), torch.randint(0, 50, (7, 4))),
        "convs": lambda: (nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.BatchNorm2d(8), nn.ConvTranspose2d(8, 4, 3, 2),
                                        nn.Conv2d(4, 4, 3, groups=2)), torch.randn(2, 3, 17, 17)),
        "transposed_first": lambda: (nn.Sequential(nn.ConvTranspose2d(3, 4, 3, stride=2), nn.SiLU()),
                                     torch.randn(2, 3, 9, 9, requires_grad=True)),
        "attention": lambda: (_Attention(), torch.randn(2, 10, 32)),
    }


def _reference(name: str) -> tuple[float, float]:
    """(forward, backward) by ``FlopCounterMode`` on a fresh copy (same seed, same inputs)."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model, x = _models()[name]()
    with FlopCounterMode(display=False) as f:
        out = model(x)
    with FlopCounterMode(display=False) as b:
        out.float().pow(2).mean().backward()
    return f.get_total_flops(), b.get_total_flops()


@pytest.mark.parametrize("name", list(_models()))
def test_the_walk_counts_what_flop_counter_mode_counts(name):
    """The tolerance is none: the same formulas on the same shapes (decision 0169)."""
    want = _reference(name)
    torch.manual_seed(0)
    model, x = _models()[name]()
    out = model(x)
    fwd = forward_flops((x,), out)
    bwd = backward_flops(out.float().pow(2).mean())
    assert (fwd, bwd) == want and want[0] > 0


def test_the_walk_stops_at_the_inputs_nodes():
    """A root fed by another's output counts its own ops, not those that made its input."""
    a, b = nn.Linear(8, 8), nn.Linear(8, 4)
    h = a(torch.randn(3, 8))
    assert forward_flops((h,), b(h)) == 2 * 3 * 8 * 4


def test_the_walk_unpacks_no_saved_tensor():
    """Saved-tensor hooks (activation checkpointing recomputes in its unpack hook) are not run."""
    unpacked, runs = [], []

    class Counted(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            runs.append(1)
            return self.lin(x).relu()

    inner, x = Counted(), torch.randn(4, 8, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: unpacked.append(1) or t):
        out = inner(x)
    ck = torch.utils.checkpoint.checkpoint(inner, x, use_reentrant=False)
    assert forward_flops((x,), out) == forward_flops((x,), ck) == 2 * 4 * 8 * 8
    assert backward_flops(out.sum()) == 2 * (2 * 4 * 8 * 8)
    assert backward_flops(ck.sum()) == 2 * (2 * 4 * 8 * 8)  # (not the recomputation: see decision 0169)
    assert unpacked == [] and len(runs) == 2


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x @ x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g @ x.T + x.T @ g


def test_what_the_walk_cannot_count_is_handed_back():
    """A custom Function's Python, a frozen parameter, grad off, ``inputs=`` or a double
    backward: no walk, or a ``LookupError`` naming the node."""
    lin, x = nn.Linear(4, 4), torch.randn(4, 4)
    with pytest.raises(LookupError, match="BackwardCFunction|_SquareBackward"):
        forward_flops((x,), _Square.apply(lin(x)))
    with pytest.raises(LookupError):
        forward_flops((x,), x * 2)  # no graph at all
    assert GraphFlops.forward(torch, lin, (x,), {}) is not None
    with torch.no_grad():
        assert GraphFlops.forward(torch, lin, (x,), {}) is None
    lin.bias.requires_grad_(False)
    assert GraphFlops.forward(torch, lin, (x,), {}) is None
    loss = lin(x).sum()
    assert GraphFlops.backward((loss,), {"inputs": [lin.weight]}) is None
    assert GraphFlops.backward((loss, None, None, True), {}) is None
    assert GraphFlops.backward((loss,), {}).flops == 2 * 4 * 4 * 4


CUSTOM = """
import torch
class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x @ x.T
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (g + g.T) @ x
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
    def forward(self, x):
        return Square.apply(self.lin(x))
torch.manual_seed(0)
model, x = Net(), torch.randn(4, 8)
for _ in range(3):
    model(x).sum().backward()
"""


@pytest.mark.slow
def test_a_graph_the_walk_cannot_count_is_counted_on_its_next_call(tmp_path):
    """A custom autograd.Function in the forward: its flops (the Function's own matmuls
    included) come from the dispatch mode on the graph's second call."""
    out = tmp_path / "out"
    _run_script(tmp_path, CUSTOM, NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out))
    (s,) = sessions(out)
    flops = {m.kind: m.flops for m in s.models}
    assert flops["forward"] == 2 * 4 * 8 * 8 + 2 * 4 * 8 * 4  # the Linear's addmm, then x @ x.T
    assert flops["backward"] == 2 * 4 * 4 * 8 + 2 * 8 * 4 * 8  # the Function's matmul, the weight's grad


def test_the_walk_changes_nothing_in_the_step():
    """Walked or not, a step gives the same gradients bit for bit, leaves the random generator
    where it was, and frees its graph as before (a second backward still fails)."""
    def step(walk: bool):
        torch.manual_seed(0)
        model, x = _models()["cnn"]()
        out = model(x)
        loss = out.float().pow(2).mean()
        if walk:
            rng = torch.random.get_rng_state()
            assert forward_flops((x,), out) and backward_flops(loss)
            assert torch.equal(rng, torch.random.get_rng_state())
        loss.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            loss.backward()
        return [p.grad for p in model.parameters()], torch.rand(3)

    (plain, r1), (walked, r2) = step(False), step(True)
    assert all(torch.equal(a, b) for a, b in zip(plain, walked)) and torch.equal(r1, r2)
