"""The Neuron Explorer basic PyTorch example, with its import line changed and its device made CPU.

    python examples/profile_api_basic.py
    neuron-explorer view -d ./profile_output --output-format summary-text
"""
import torch
from torch.profiler import profile, ProfilerActivity
from neuron_explorer.torch import NeuronConfig, ProfileMode, NeuronProfiler

model = torch.compile(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)),
                      backend="aot_eager")
x = torch.randn(32, 256)

# Configure Neuron profiling
neuron_config = NeuronConfig(
    modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME],
    profile_output_dir="./profile_output",
)

# NeuronProfiler.export_trace() places the framework trace
# in the same directory as Neuron system traces
exporter = NeuronProfiler(neuron_config)

# IMPORTANT: Warm up first (3+ iterations)
with torch.no_grad():
    for _ in range(3):
        model(x)

# Profile your workload
with profile(
    activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
    experimental_config=neuron_config,
    on_trace_ready=exporter.export_trace,
) as prof:
    with torch.no_grad():
        model(x)
        torch.neuron.synchronize()  # Ensures device finishes before export

print("profile written to", neuron_config.session_dirs[-1])
