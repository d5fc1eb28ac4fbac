"""Framework integrations that turn PyTorch and JAX activity into runtime events: ``torch``, ``jax``,
``importhook``, which installs them when the framework is imported, and ``versions``, the framework
versions supported and the warning outside them.

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["importhook", "jax", "torch", "versions"]
