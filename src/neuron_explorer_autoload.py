"""The target of neuron-explorer's ``torch.backends`` entry point, kept apart from the package.

PyTorch imports every ``torch.backends`` entry point at the end of ``import torch`` and fails the
user's import when one cannot be loaded.  This module imports nothing at load time and swallows
every error of the real hook (``neuron_explorer.discovery``), so a damaged, partial or mismatched
install of neuron-explorer can never stop ``import torch``.  It is a single file that the wheel
places at the root of site-packages (pyproject's force-include), a real file even in an editable
install, so that deleting or moving the checkout an editable install points at leaves it working.
"""

__all__ = ["on_torch_import"]


def on_torch_import() -> None:
    """neuron-monitor discovery (docs/decisions/0030-monitor-discovery.md); never raises."""
    try:
        from neuron_explorer.discovery import on_torch_import as discover
    except Exception:  # noqa: BLE001 - not installed as expected: no discovery, torch imports as usual
        return
    discover()
