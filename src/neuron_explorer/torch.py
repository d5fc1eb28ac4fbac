"""Native PyTorch profiling: ``NeuronConfig``, ``ProfileMode`` and ``NeuronProfiler``.

Use it as the Neuron tools document, with only the import line changed::

    from neuron_explorer.torch import NeuronConfig, ProfileMode, NeuronProfiler

    neuron_config = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir="./profile_output")
    exporter = NeuronProfiler(neuron_config)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                                experimental_config=neuron_config, on_trace_ready=exporter.export_trace) as prof:
        model(x)
        torch.neuron.synchronize()

Importing this module turns the runtime's PyTorch hooks on (so graphs compiled during warm-up are
already instrumented) without capturing anything.  A capture session runs exactly while
``torch.profiler`` traces with a ``NeuronConfig`` as its ``experimental_config`` (every active
window of a ``schedule`` is its own session directory); ``NeuronProfiler.export_trace`` then puts
PyTorch's own trace as ``trace.json`` next to the system traces.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sys
import threading
import types
from typing import Iterable

import torch

from neuron_explorer.contracts import env as cfgmod
from neuron_explorer.runtime.config import CaptureConfig

__all__ = ["NeuronConfig", "ProfileMode", "NeuronProfiler", "synchronize", "Stream", "stream"]


class ProfileMode(enum.Enum):
    DEVICE = "device"            # .neff, .ntff
    RUNTIME = "runtime"          # ntrace.pb, trace_info.pb
    CPU_UTIL = "cpu_util"        # cpu_util.pb
    HOST_MEMORY = "host_memory"  # host_mem.pb


def _modes(modes: Iterable | None) -> list[ProfileMode]:
    if modes is None:
        return [ProfileMode.DEVICE, ProfileMode.RUNTIME]
    out = []
    for m in modes:
        if isinstance(m, ProfileMode):
            out.append(m)
            continue
        try:
            out.append(ProfileMode(str(m).lower()))
        except ValueError:
            accepted = ", ".join(f"ProfileMode.{p.name}" for p in ProfileMode)
            raise cfgmod.ConfigError(f"NeuronConfig(modes=...): {m!r} is not a profile mode; "
                                     f"accepted: {accepted}") from None
    return out


class NeuronConfig(torch._C._profiler._ExperimentalConfig):
    """What a Neuron capture session records; pass it as ``experimental_config``."""

    def __init__(self, modes: Iterable[ProfileMode] | None = None, max_events_per_nc: int | None = None,
                 capture_enabled_for_nc: str | None = None, profile_output_dir: str | None = None,
                 neff_cache_dir: str | None = None, precache_node_info: bool = True) -> None:
        super().__init__()
        self.modes = _modes(modes)
        if max_events_per_nc is not None and (not isinstance(max_events_per_nc, int) or
                                              not 0 < max_events_per_nc <= cfgmod.MAX_EVENTS_LIMIT):
            raise cfgmod.ConfigError(f"NeuronConfig(max_events_per_nc={max_events_per_nc!r}) is not valid; "
                                     f"accepted: a whole number from 1 to {cfgmod.MAX_EVENTS_LIMIT:,}")
        self.max_events_per_nc = max_events_per_nc or cfgmod.DEFAULT_MAX_EVENTS
        self.capture_enabled_for_nc = capture_enabled_for_nc
        self.nc_filter = cfgmod.parse_nc_filter(capture_enabled_for_nc, "NeuronConfig(capture_enabled_for_nc)")
        self.profile_output_dir = profile_output_dir or os.environ.get(cfgmod.OUTPUT_DIR) or "./output"
        self.neff_cache_dir = neff_cache_dir or os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR") or None
        self.precache_node_info = bool(precache_node_info)
        self.session_dirs: list[str] = []
        if self.neff_cache_dir:
            _runtime().neff_cache_dir = self.neff_cache_dir  # graphs compiled from now on are cached there

    def capture_config(self) -> CaptureConfig:
        base = CaptureConfig.from_env({k: v for k, v in os.environ.items() if k.startswith("NEURON_EXPLORER_")})
        base.output_dir = self.profile_output_dir
        base.system_profile = ProfileMode.RUNTIME in self.modes
        base.device_profile = "session" if ProfileMode.DEVICE in self.modes else None
        base.cpu_util = ProfileMode.CPU_UTIL in self.modes
        base.host_memory = ProfileMode.HOST_MEMORY in self.modes
        base.max_events_per_nc = self.max_events_per_nc
        base.nc_filter = self.nc_filter
        base.raw_env = dict(base.raw_env, modes=",".join(m.name for m in self.modes),
                            capture_enabled_for_nc=self.capture_enabled_for_nc or "",
                            neff_cache_dir=self.neff_cache_dir or "",
                            precache_node_info="1" if self.precache_node_info else "0")
        return base


class NeuronProfiler:
    """Exports PyTorch's trace into the capture session directory (``on_trace_ready``)."""

    def __init__(self, config: NeuronConfig) -> None:
        if not isinstance(config, NeuronConfig):
            raise TypeError("NeuronProfiler needs a NeuronConfig")
        self.config = config
        self.trace_files: list[str] = []

    def export_trace(self, prof) -> str:
        """Write ``trace.json`` (PyTorch's Chrome trace) into the latest session directory."""
        d = self.config.session_dirs[-1] if self.config.session_dirs else None
        if d is None:
            d = os.path.join(self.config.profile_output_dir, "framework")
            os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        self.trace_files.append(path)
        return path

    @contextlib.contextmanager
    def profile(self, **kwargs):
        """``torch.profiler.profile`` with this config and exporter filled in."""
        from torch.profiler import ProfilerActivity, profile

        acts = kwargs.pop("activities", None) or [ProfilerActivity.CPU] + (
            [ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        with profile(activities=acts, experimental_config=self.config, on_trace_ready=self.export_trace,
                     **kwargs) as prof:
            yield prof


def synchronize(device=None) -> None:
    """Wait for the device to finish queued work (CUDA; the CPU is synchronous and returns at
    once).  Recorded as a ``kbl_exec_wait`` when a runtime is on (on CUDA hosts through the
    recorded ``torch.cuda.synchronize``)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize(device)
        return
    from neuron_explorer.integrations.torch import record_sync
    from neuron_explorer.runtime.clock import now_ns
    from neuron_explorer.runtime.core import get_runtime

    t = now_ns()
    record_sync(get_runtime(), t, t)


def _sync_device() -> None:
    """synchronize() for our own use: not the program's wait, so not recorded on a CPU host."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class Stream:
    """A side stream for overlapping work (a CUDA stream on GPUs; the CPU runs in order)."""

    def __init__(self, device=None) -> None:
        dev = torch.device(device) if device is not None else torch.device("cpu")
        self.device = dev
        self.cuda = torch.cuda.Stream(dev) if dev.type == "cuda" else None


@contextlib.contextmanager
def stream(s: Stream):
    if s is not None and s.cuda is not None:
        with torch.cuda.stream(s.cuda):
            yield
    else:
        yield


# -------------------------------------------------------------------------------------------------
# the capture session behind torch.profiler

_lock = threading.Lock()
_active: dict[int, object] = {}  # id(profiler) -> CaptureSink


def _runtime():
    from neuron_explorer import boot

    from .runtime.core import get_runtime

    rt = get_runtime()
    if rt is None:
        rt = boot.start(CaptureConfig.from_env({}), from_env=False, capture=False, keep_rings=True)
    return rt


def _begin(prof) -> None:
    cfg: NeuronConfig = prof.experimental_config
    from neuron_explorer.integrations.torch.device import DeviceProfiler
    from neuron_explorer.runtime.core import DEVICE_PROFILER

    from .capture.sink import CaptureSink

    rt = _runtime()
    ccfg = cfg.capture_config()
    with _lock:
        rt.discard()  # what ran before the session is not part of it
        sink = CaptureSink(rt, config=ccfg)
        if ccfg.device_profile:
            rt.register(DEVICE_PROFILER, DeviceProfiler(rt, ccfg.device_profile, precache=cfg.precache_node_info))
        rt.add_sink(sink)
        _active[id(prof)] = sink
        sink.start()


def _end(prof) -> None:
    with _lock:
        sink = _active.pop(id(prof), None)
    if sink is None:
        return
    rt = sink.rt
    _sync_device()
    sink.flush(rt, final=True, reason="profiler stop")
    if sink.final_error is not None:
        from .capture.sink import report_written

        report_written(sink)  # "profile incomplete: the final write failed (...)"
    from neuron_explorer.runtime.core import DEVICE_PROFILER

    with _lock:
        rt.remove_sink(sink)
        if not _active:
            rt.unregister(DEVICE_PROFILER)
    if sink.session_dir:
        prof.experimental_config.session_dirs.append(sink.session_dir)


def _patch_profiler() -> None:
    from torch.profiler import profiler as tp

    K = tp._KinetoProfile
    if getattr(K, "_neuron_explorer_patched", False):
        return
    orig_start, orig_stop = K.start_trace, K.stop_trace

    def start_trace(self):
        orig_start(self)
        if isinstance(getattr(self, "experimental_config", None), NeuronConfig):
            _begin(self)

    def stop_trace(self):
        if isinstance(getattr(self, "experimental_config", None), NeuronConfig):
            _end(self)
        orig_stop(self)

    K.start_trace, K.stop_trace = start_trace, stop_trace
    K._neuron_explorer_patched = True


def _install_torch_neuron() -> None:
    """Give scripts written for Trainium the ``torch.neuron.synchronize()`` they call."""
    if not hasattr(torch, "neuron"):
        mod = types.ModuleType("torch.neuron")
        mod.synchronize = synchronize
        torch.neuron = mod
        sys.modules.setdefault("torch.neuron", mod)


_patch_profiler()
_install_torch_neuron()
_runtime()
