"""What the PyTorch hooks read off tensors: shape summaries, sizes and the NaN/Inf scan.

Shared by the graph registration (signatures), the execution wrapper (the NaN check), the
collectives (bytes moved) and the device profiler (op shapes and bytes), so none of them imports
another for a helper.  Only duck typing here: nothing imports torch (the NaN scan is handed the
module).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from neuron_explorer.runtime.ring import NanScanner

__all__ = [
    "SCAN_CONTAINERS", "SCAN_DEPTH", "nan_scanner", "output_leaves", "signature", "tensor_bytes", "tensor_summary",
    "tensors_in",
]


def tensor_summary(xs, include_others: bool = True) -> list[str]:
    """``float32[16, 32]`` for each tensor-like (and the type name of anything else, optionally)."""
    parts = []
    for x in xs:
        shape = getattr(x, "shape", None)
        if shape is not None:
            parts.append(f"{str(getattr(x, 'dtype', '')).replace('torch.', '')}{list(shape)}")
        elif include_others:
            parts.append(type(x).__name__)
    return parts


def signature(example_inputs) -> str:
    """A graph's input signature as shown in its model record: ``(float32[4], int)``."""
    return "(" + ", ".join(tensor_summary(example_inputs)) + ")"


def tensors_in(x: Any, out: list) -> None:
    """Append the tensors of ``x`` (nested lists and tuples walked) to ``out``."""
    if isinstance(x, (list, tuple)):
        for y in x:
            tensors_in(y, out)
    elif hasattr(x, "element_size") and hasattr(x, "numel"):
        out.append(x)


def tensor_bytes(x: Any) -> int:
    """Bytes held by the tensors of ``x`` (nested lists and tuples walked; anything else is 0)."""
    n = 0
    if isinstance(x, (list, tuple)):
        for y in x:
            n += tensor_bytes(y)
    elif hasattr(x, "untyped_storage") and hasattr(x, "element_size"):
        try:
            n += x.numel() * x.element_size()
        except Exception:
            pass
    return n


# How far the NaN scan walks nested outputs (as runtime/_finite.h's NE_SCAN_DEPTH and
# NE_SCAN_CONTAINERS): deeper levels, and containers past the budget, are not read
SCAN_DEPTH = 32
SCAN_CONTAINERS = 4096


def output_leaves(outs: Any) -> list:
    """What a graph or module returned, as the list of its non-container parts: tuples, lists and
    dict values walked to ``SCAN_DEPTH`` levels, at most ``SCAN_CONTAINERS`` containers, in the
    order the C scanner reads them."""
    leaves: list = []
    budget = [SCAN_CONTAINERS]

    def walk(o: Any, depth: int) -> None:
        if isinstance(o, dict):
            items = list(o.values())
        elif isinstance(o, (list, tuple)):
            items = list(o)
        else:
            leaves.append(o)
            return
        if depth >= SCAN_DEPTH or budget[0] <= 0:
            return
        budget[0] -= 1
        for x in items:
            walk(x, depth + 1)

    walk(outs, 0)
    return leaves


def nan_scanner(torch) -> Callable[[Any], tuple[int, int]]:
    """``scan(outs) -> (NaN count, Inf count)`` of a graph's floating-point outputs: a tensor, or
    tensors in tuples, lists and dicts (a compiled graph returns a flat list or tuple, an eager
    module anything; ``output_leaves``).

    With the C extension this is ``_fastpath.NanScanner``: one pass over each CPU float16,
    bfloat16, float32 or float64 tensor's memory, reached through DLPack's C exchange API (no
    tensor op, no temporary), so the check costs about as much as reading the outputs once; the C
    execution wrapper calls it without a Python frame.  What it does not read itself (another
    device, a tensor subclass, float8) goes to ``_slow_check`` below, torch's own ops.  Without the
    extension, or when torch publishes no exchange API, the Python scan runs."""
    slow = _slow_check(torch)
    api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if NanScanner is not None and api is not None:
        try:
            return NanScanner(torch.Tensor, api, slow)
        except (TypeError, ValueError):  # a capsule of another name: the Python scan
            pass
    return _python_scanner(torch, slow)


def _slow_check(torch) -> Callable[[Any], tuple[int, int]]:
    """``check(t) -> (NaN count, Inf count)`` of one tensor with torch's ops (any device, any float
    type); the counts are computed only when something is not finite."""
    isfinite, isnan, isinf = torch.isfinite, torch.isnan, torch.isinf

    def check(t) -> tuple[int, int]:
        if not t.is_floating_point() or not t.numel() or bool(isfinite(t).all()):
            return 0, 0
        return int(isnan(t).sum()), int(isinf(t).sum())

    return check


def _python_scanner(torch, slow: Callable[[Any], tuple[int, int]]) -> Callable[[Any], tuple[int, int]]:
    """The scan without the C extension: CPU tensors of numpy's float types through a zero-copy
    numpy view (a few microseconds, against ~15 us for the equivalent torch ops), others through
    ``slow``."""
    numpy_floats = {torch.float32, torch.float64, torch.float16}
    Tensor, strided = torch.Tensor, torch.strided

    def scan(outs) -> tuple[int, int]:
        nan = inf = 0
        for t in output_leaves(outs):
            if not isinstance(t, Tensor) or not t.is_floating_point() or not t.numel():
                continue
            if t.dtype in numpy_floats and t.device.type == "cpu" and t.layout == strided:
                a = t.detach().numpy()
                if np.isfinite(a).all():
                    continue
                nan += int(np.isnan(a).sum())
                inf += int(np.isinf(a).sum())
            else:
                n, i = slow(t)
                nan += n
                inf += i
        return nan, inf

    return scan
