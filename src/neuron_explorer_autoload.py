"""The targets of neuron-explorer's start-up hooks, kept apart from the package: the
``torch.backends`` entry point and the ``neuron_explorer_autostart.pth`` line.

PyTorch imports every ``torch.backends`` entry point at the end of ``import torch`` and fails the
user's import when one cannot be loaded.  This module imports nothing at load time and swallows
every error of the real hook (``neuron_explorer.discovery``), so a damaged, partial or mismatched
install of neuron-explorer can never stop ``import torch``.  It is a single file that the wheel
places at the root of site-packages (pyproject's force-include), a real file even in an editable
install, so that deleting or moving the checkout an editable install points at leaves it working.
"""

__all__ = ["autostart", "on_torch_import"]


def autostart() -> None:
    """The ``.pth`` line's body, run at interpreter start-up when a variable of the spec is set.

    When the package cannot be imported (a dependency not on the path yet, as in a virtual
    environment whose numpy lives in the system site-packages, processed after the venv's), the
    process runs unprofiled with one line saying why, instead of the interpreter's many-line
    "Error processing line 1" traceback. A bad setting still ends the launch with status 2 and one
    line: ``boot.start`` runs outside the ``try``."""
    try:
        from neuron_explorer.util.procs import framework_helper, is_launcher

        if framework_helper() is not None or is_launcher():
            return  # never profiled (boot.start says why): not even the runtime's imports, ~0.15 CPU-s
        from neuron_explorer import boot
    except Exception as e:  # noqa: BLE001 - any failure to import: say so once, run the program as is
        import logging
        logging.getLogger("neuron_explorer.autoload").warning(  # (logging.lastResort: the same line)
            f"neuron-explorer: warning: not started, this process runs unprofiled: cannot import "
            f"neuron_explorer ({type(e).__name__}: {e})")
        return
    boot.start()


def on_torch_import() -> None:
    """neuron-monitor discovery (docs/decisions/0030-monitor-discovery.md); never raises."""
    try:
        from neuron_explorer.discovery import on_torch_import as discover
    except Exception:  # noqa: BLE001 - not installed as expected: no discovery, torch imports as usual
        return
    discover()
