"""The Neuron Explorer multi-rank host-CC example on CPU: the backend is gloo, the device is the CPU,
and `torch_neuronx`'s stream/synchronize come from neuron_explorer.torch.

    torchrun --nproc_per_node 2 examples/profile_host_cc.py
    neuron-explorer view -d ./profile_host_cc --output-format summary-text
"""
import torch
import torch.distributed as dist
import neuron_explorer.torch as torch_neuronx
from neuron_explorer.torch import NeuronConfig, ProfileMode, NeuronProfiler
from torch.profiler import ProfilerActivity, profile, record_function

SIZE = 512  # the original uses 4096 x 4096 and 4M elements on Trainium


def main():
    dist.init_process_group(backend="gloo")
    device = torch.device("cpu")
    cc_stream = torch_neuronx.Stream(device)

    exp_config = NeuronConfig(
        modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME,
               ProfileMode.CPU_UTIL, ProfileMode.HOST_MEMORY],
        profile_output_dir="./profile_host_cc",
        max_events_per_nc=100000,
        capture_enabled_for_nc="0,1",
    )
    exporter = NeuronProfiler(exp_config)
    matmul = torch.compile(torch.matmul, backend="aot_eager")

    with (
        profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
            experimental_config=exp_config,
            with_stack=True,
            on_trace_ready=exporter.export_trace,
        ) as prof,
        record_function("model_inference"),
    ):
        a = torch.randn(SIZE, SIZE, device=device, dtype=torch.float32)
        b = torch.randn(SIZE, SIZE, device=device, dtype=torch.float32)
        t = torch.randn(SIZE * SIZE // 4, device=device, dtype=torch.float32)

        # Warmup
        for _ in range(3):
            matmul(a, b)
            with torch_neuronx.stream(cc_stream):
                dist.all_reduce(t)
        torch_neuronx.synchronize()
        dist.barrier()

        # Profiled iterations
        for _ in range(10):
            matmul(a, b)
            with torch_neuronx.stream(cc_stream):
                dist.all_reduce(t)
        torch_neuronx.synchronize()
        dist.barrier()

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
