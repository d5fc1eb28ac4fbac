"""An eager graph's flops read off the autograd graph its first call built (decision 0169).

Counting a first call under a dispatch mode (``flops.FlopCounter``) sends every ATen op of it
through Python: 1.2-1.3x a small model's first step.  A training step's forward leaves the
autograd graph behind, and each node of it says which op made it and the shapes it saw, so the
ops with a flop formula (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``convolution``) are all
found by one walk of that graph, with nothing dispatched:

* **forward** (``GraphFlops.forward``): after a root module's first call, the graph from its
  outputs back to its inputs' own nodes; each node's forward op counted as PyTorch's formula
  counts it (``torch.utils.flop_counter``: 2*m*n*k for a matmul, bias adds not counted);
* **backward** (``GraphFlops.backward``): before ``torch.autograd.backward`` runs, the whole
  graph from its tensors; each node's backward ops as the engine will run them (a matmul's
  gradient is one matmul for each input that needs one; a convolution's is one
  ``convolution_backward`` with its output mask), counted as the formulas count them.

Shapes come from the nodes' metadata (their output's, the sizes autograd keeps, the producing
node's output, a parameter's shape), never from a saved tensor: unpacking one would run the
program's saved-tensor hooks (activation checkpointing recomputes there).

Only what is known is counted this way.  A node of a type neither handled here nor known to
dispatch no op with a formula (``ZERO``), a custom ``autograd.Function`` (its forward and
backward are the program's Python), a module hook's node, a shape that cannot be read, or a call
that leaves no graph to walk (grad off, frozen parameters, ``torch.autograd.grad``, ``inputs=``)
answers ``None``: the caller counts the graph's next call under the dispatch mode, as before.
tests/capture/test_autograd_flops.py checks the counts against ``FlopCounterMode``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FLOP_NODES", "ZERO", "GraphFlops", "forward_flops", "backward_flops"]

# node types whose forward and backward dispatch no op with a flop formula (their derivative
# formulas are elementwise, reductions, views, indexing, norms, pooling and fused CPU kernels;
# PyTorch's CPU flash attention and mkldnn RNN kernels have no formula).  Anything else is unknown
ZERO = frozenset("""
AbsBackward0 AccumulateGrad AddBackward0 AddBackward1 AliasBackward0 AsStridedBackward0 AvgPool2DBackward0
AvgPool3DBackward0 BinaryCrossEntropyBackward0 BinaryCrossEntropyWithLogitsBackward0 CatBackward0
ClampBackward1 ClampMinBackward0 ClampMaxBackward0 CloneBackward0 CosBackward0 CumsumBackward0
DivBackward0 DivBackward1 EluBackward0 EmbeddingBackward0 ExpBackward0 ExpandBackward0 GeluBackward0
GatherBackward0 HardtanhBackward0 IndexBackward0 IndexSelectBackward0 LeakyReluBackward0 LogBackward0
LogSoftmaxBackward0 LogSigmoidBackward0 MaskedFillBackward0 MaxPool2DWithIndicesBackward0
MaxPool3DWithIndicesBackward0 MaxBackward0 MaxBackward1 MeanBackward0 MeanBackward1 MinBackward0
MinBackward1 MkldnnRnnLayerBackward0 MseLossBackward0 MulBackward0 MulBackward1 NativeBatchNormBackward0
NativeDropoutBackward0 NativeGroupNormBackward0 NativeLayerNormBackward0 NegBackward0 NllLossBackward0
NllLoss2DBackward0 NormBackward1 PermuteBackward0 PowBackward0 PowBackward1 ReciprocalBackward0
ReluBackward0 RepeatBackward0 ReshapeAliasBackward0 RsqrtBackward0 RsubBackward1 SafeSoftmaxBackward0
ScaledDotProductFlashAttentionForCpuBackward0 SelectBackward0 SigmoidBackward0 SiluBackward0 SinBackward0
SliceBackward0 SmoothL1LossBackward0 SoftmaxBackward0 SplitBackward0 SplitWithSizesBackward0 SqrtBackward0
SqueezeBackward0 SqueezeBackward1 SqueezeBackward2 StackBackward0 SubBackward0 SubBackward1 SumBackward0
SumBackward1 TBackward0 TanhBackward0 TransposeBackward0 TransposeBackward1 UnbindBackward0
UnsafeSplitBackward0 UnsafeViewBackward0 UnsqueezeBackward0 UpsampleNearest2DBackward0 ViewBackward0
WhereBackward0 AdaptiveAvgPool2DBackward0 LinalgVectorNormBackward0 ConstantPadNdBackward0 RollBackward0
ToCopyBackward0 SoftplusBackward0 HardswishBackward0 MishBackward0 L1LossBackward0 HuberLossBackward0
""".split())
FLOP_NODES = frozenset({"MmBackward0", "AddmmBackward0", "BmmBackward0", "BaddbmmBackward0", "ConvolutionBackward0"})


class _Unknown(Exception):
    """The walk met what it cannot count: the dispatch mode counts instead."""


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= int(x)
    return p


def _conv(x: list, w: list, out: list, transposed: bool) -> int:
    """A convolution's multiplications and adds, as ``conv_flop_count`` counts them: each point
    of the output (the input, transposed) times the filter, the batch and both channel counts."""
    c_out, c_in, *k = w
    return 2 * _prod((x if transposed else out)[2:]) * _prod(k) * int(x[0]) * int(c_out) * int(c_in)


def _shape_in(node, i: int) -> list | None:
    """The shape of the tensor that entered the forward op as its ``i``-th differentiable input,
    from the node that made it (None: it needs no gradient, so no node made it)."""
    prod, nr = node.next_functions[i]
    if prod is None:
        return None
    var = getattr(prod, "variable", None)  # AccumulateGrad: the leaf itself
    if var is not None:
        return list(var.shape)
    try:
        return list(prod._input_metadata[nr].shape)
    except Exception as e:  # noqa: BLE001 - a node without metadata: unknown
        raise _Unknown(type(prod).__name__) from e


def _out(node) -> list:
    return list(node._input_metadata[0].shape)


def _needs(node, i: int) -> bool:
    return node.next_functions[i][0] is not None


def _sizes(node, name: str) -> list:
    return [int(s) for s in getattr(node, name)]


def _node_flops(node, name: str) -> tuple[int, int]:
    """(forward, backward) flops of one node that ``FLOP_NODES`` names."""
    if name == "AddmmBackward0" or name == "MmBackward0":
        a = _sizes(node, "_saved_mat1_sym_sizes" if name == "AddmmBackward0" else "_saved_self_sym_sizes")
        b = _sizes(node, "_saved_mat2_sym_sizes")
        one = 2 * a[0] * a[1] * b[1]
        first = 1 if name == "AddmmBackward0" else 0  # (addmm's input 0 is the added term: no matmul)
        return one, one * (int(_needs(node, first)) + int(_needs(node, first + 1)))
    if name == "BmmBackward0" or name == "BaddbmmBackward0":
        first = 1 if name == "BaddbmmBackward0" else 0
        out = _out(node)  # (b, m, n)
        a, b = _shape_in(node, first), _shape_in(node, first + 1)
        k = a[2] if a is not None else b[1] if b is not None else None
        if k is None:
            raise _Unknown(name)
        one = 2 * out[0] * out[1] * out[2] * int(k)
        return one, one * (int(a is not None) + int(b is not None))
    # ConvolutionBackward0
    transposed = bool(node._saved_transposed)
    out = _out(node)
    w = _shape_in(node, 1)
    if w is None:  # (a constant filter: its shape only from the saved tensor)
        raise _Unknown("convolution with a filter that needs no gradient")
    x = _shape_in(node, 0)
    if x is None:
        if transposed:  # (its input's spatial size counts: not read from a saved tensor)
            raise _Unknown("transposed convolution of an input that needs no gradient")
        x = [out[0], int(w[1]) * int(node._saved_groups)] + out[2:]  # (only batch and channels count)
    fwd = _conv(x, w, out, transposed)
    bwd = 0
    if _needs(node, 0):  # grad input: the transposed convolution of grad_out by the filter
        bwd += _conv(out, w, x, not transposed)
    if _needs(node, 1):  # grad weight: input x grad_out, batch and channels swapped
        t = (lambda s: [s[1], s[0]] + list(s[2:]))
        gw = t(w)
        bwd += _conv(t(out), t(x), gw, False) if transposed else _conv(t(x), t(out), gw, False)
    return fwd, bwd


def _walk(roots: list, stop: set) -> tuple[int, int, bool]:
    """(forward, backward, any flop node) over the graph from ``roots``, not entering ``stop``."""
    fwd = bwd = 0
    found = False
    seen = set(stop)
    todo = [n for n in roots if n is not None]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        name = type(node).__name__
        if name in FLOP_NODES:
            f, b = _node_flops(node, name)
            fwd, bwd, found = fwd + f, bwd + b, True
        elif name not in ZERO:
            raise _Unknown(name)
        for nxt, _ in node.next_functions:
            if nxt is not None and nxt not in seen:
                todo.append(nxt)
    return fwd, bwd, found


def _tensors(x: Any, out: list, depth: int = 0) -> list:
    """The tensors in ``x`` and the lists, tuples and dicts (any subclass: a ``ModelOutput``)
    it holds, four levels deep."""
    if hasattr(x, "grad_fn") and hasattr(x, "requires_grad"):
        out.append(x)
    elif depth < 4:
        if isinstance(x, (list, tuple)):
            for v in x:
                _tensors(v, out, depth + 1)
        elif isinstance(x, dict):
            for v in x.values():
                _tensors(v, out, depth + 1)
    return out


def forward_flops(inputs: Any, outputs: Any) -> float | None:
    """The flops of the forward that made ``outputs`` from ``inputs`` (as ``FlopCounterMode``
    counts them); None when no op with a formula is in it, or when the graph says what the walk
    cannot count (raises ``LookupError`` naming it)."""
    stop = {t.grad_fn for t in _tensors(inputs, []) if t.grad_fn is not None}
    roots = [t.grad_fn for t in _tensors(outputs, []) if t.grad_fn is not None]
    if not roots:
        raise LookupError("no autograd graph behind the outputs")
    try:
        fwd, _, found = _walk(roots, stop)
    except _Unknown as e:
        raise LookupError(f"graph node {e}") from None
    return float(fwd) if found else None


def backward_flops(tensors: Any) -> float | None:
    """The flops ``torch.autograd.backward(tensors)`` will dispatch (raises ``LookupError``
    naming what the walk cannot count)."""
    roots = [t.grad_fn for t in _tensors(tensors, []) if t.grad_fn is not None]
    if not roots:
        raise LookupError("no autograd graph behind the tensors")
    try:
        _, bwd, found = _walk(roots, set())
    except _Unknown as e:
        raise LookupError(f"graph node {e}") from None
    return float(bwd) if found else None


class GraphFlops:
    """The ``FlopCounter`` interface for a first call counted by a walk: ``forward`` or
    ``backward`` make one (None when the call is not one a walk can count: the caller uses the
    dispatch mode); ``done(out)`` after the call; then ``flops``, or ``failed`` saying why the
    walk could not count it (the graph's next call is counted under the dispatch mode)."""

    deferred = ""  # (nothing dispatched: the program's profiler and modes see nothing of it)

    def __init__(self, inputs: Any, tensors: Any = None) -> None:
        self.inputs = inputs
        self.flops: float | None = None
        self.failed = ""
        if tensors is not None:  # backward: the graph is freed by the call, walked before it
            try:
                self.flops = backward_flops(tensors)
            except (LookupError, AttributeError, IndexError, TypeError, ValueError) as e:
                self.failed = str(e) or type(e).__name__
            self.inputs = None

    def __enter__(self) -> "GraphFlops":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def done(self, out: Any) -> None:
        """After the call: a forward's walk (never raises)."""
        if self.inputs is None:
            return
        inputs, self.inputs = self.inputs, None
        try:
            self.flops = forward_flops(inputs, out)
        except Exception as e:  # noqa: BLE001 - anything unexpected: the dispatch mode next time
            self.failed = str(e) or type(e).__name__

    @staticmethod
    def forward(torch, module, args: tuple, kwargs: dict) -> "GraphFlops | None":
        """For a root module's first call: grad on, every parameter trained (a frozen one's ops
        leave no node when its input needs no gradient either)."""
        try:
            if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
                return None
            n = 0
            for p in module.parameters():
                if not p.requires_grad:
                    return None
                n += 1
            return GraphFlops((args, kwargs)) if n else None
        except Exception:  # noqa: BLE001 - anything unexpected: the dispatch mode
            return None

    @staticmethod
    def backward(args: tuple, kwargs: dict) -> "GraphFlops | None":
        """For ``torch.autograd.backward(tensors, grad_tensors, retain_graph, create_graph,
        grad_variables, inputs)``: the whole graph runs unless ``inputs`` limits it, and a
        double backward's graph is built by it (the dispatch mode counts those)."""
        if len(args) > 3 and args[3] or len(args) > 5 and args[5] is not None:
            return None
        if kwargs.get("create_graph") or kwargs.get("inputs") is not None:
            return None
        tensors = args[0] if args else kwargs.get("tensors")
        return GraphFlops(None, tensors) if tensors is not None else None
