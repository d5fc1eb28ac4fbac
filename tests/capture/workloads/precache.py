"""Two NeuronConfig device-profile sessions over Inductor graphs compiled in warm-up, one with
``precache_node_info=False`` and one with the default (True); prints, per session, which graphs had
their node info ready before the first profiled execution (tests/capture/test_precache_node_info.py)."""
import json
import sys

import torch
from torch.profiler import ProfilerActivity

from neuron_explorer.runtime.core import get_runtime
from neuron_explorer.torch import NeuronConfig, NeuronProfiler, ProfileMode

out = sys.argv[1]
x = torch.randn(4, 16)
report = {}
for name, precache in (("lazy", False), ("precached", True)):
    m = torch.compile(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()), backend="inductor")
    with torch.no_grad():
        m(x)  # warm-up: the graph is compiled and loaded outside the profile
    model_id = get_runtime().models[-1].id
    kwargs = {} if precache else {"precache_node_info": False}
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=f"{out}/{name}", **kwargs)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], experimental_config=cfg,
                                on_trace_ready=NeuronProfiler(cfg).export_trace):
        ready = model_id in get_runtime().devprof.inductor
        with torch.no_grad():
            m(x)
    report[name] = {"model_id": model_id, "ready_before_first_profiled_execution": ready}
print(json.dumps(report))
