"""Framework integrations that turn PyTorch and JAX activity into runtime events: ``torch``, ``jax``,
and ``importhook``, which installs them when the framework is imported.

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["importhook", "jax", "torch"]
