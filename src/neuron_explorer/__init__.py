"""neuron-explorer: Neuron Explorer, NDET and neuron-monitor for PyTorch and JAX on CPUs and GPUs."""

__version__ = "0.1.0"

__all__ = ["__version__", "load_ipython_extension"]


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext neuron_explorer``: the ``%%neuron_profile`` cell magic (``neuron_explorer.notebook``)."""
    from neuron_explorer.notebook import load_ipython_extension as load

    load(ipython)
