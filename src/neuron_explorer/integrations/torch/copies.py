"""Host/device copies on CUDA hosts: ``nrt_tensor_write`` / ``nrt_tensor_read`` spans.

``Tensor.to``/``cuda``/``cpu`` are wrapped (only when CUDA is available; a CPU-only process has no
such copies).  A copy to the device is timed to the end of its stream, so the span covers the
transfer rather than its launch.
"""

from __future__ import annotations

from neuron_explorer.contracts import events as ev
from neuron_explorer.runtime import clock
from neuron_explorer.runtime.core import CoreState, Runtime

__all__ = ["install_copies"]

now_ns = clock.now_ns
native_tid = clock.native_tid


def install_copies(rt: Runtime, torch, core: CoreState) -> None:
    """Wrap the tensor methods that copy between host and device."""
    T = torch.Tensor
    ring = core.ring
    append, tick = ring.append, ring.tick
    dev_sid = {}

    def sid(d) -> int:
        s = dev_sid.get(d)
        if s is None:
            s = dev_sid[d] = rt.intern(str(d))
        return s

    def wrap(name):
        orig = getattr(T, name)

        def method(self, *args, **kwargs):
            src = self.device
            t0 = now_ns()
            out = orig(self, *args, **kwargs)
            dst = getattr(out, "device", src)
            if dst != src and (src.type == "cpu" or dst.type == "cpu"):
                if dst.type != "cpu":
                    torch.cuda.current_stream(dst).synchronize()
                t1 = now_ns()
                etype = ev.NRT_TENSOR_WRITE if src.type == "cpu" else ev.NRT_TENSOR_READ
                if rt.enabled[etype]:
                    append((etype, t0, t1, native_tid(), self.numel() * self.element_size(), sid(src), sid(dst), 0, 0))
                    tick()
            return out

        method.__wrapped__ = orig  # type: ignore[attr-defined]
        setattr(T, name, method)

    for name in ("to", "cuda", "cpu"):
        wrap(name)
