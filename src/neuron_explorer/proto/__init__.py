"""The protobuf schema of capture files (``neuron_explorer_capture_pb2``), generated; part of the contracts.

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["neuron_explorer_capture_pb2"]
