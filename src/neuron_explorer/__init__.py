"""neuron-explorer: Neuron Explorer, NDET and neuron-monitor for PyTorch and JAX on CPUs and GPUs."""

__version__ = "0.1.0"

__all__ = ["__version__"]
