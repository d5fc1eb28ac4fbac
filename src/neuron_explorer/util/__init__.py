"""Leaf utilities that import nothing else of this project: atomic and special-file-safe writes
(``atomic``), bounded file reads (``files``), a process's cgroup memory limit (``cgroup``), JSON
encoding (``jsonfast``), interval union (``intervals``), protobuf wire helpers (``pbwire``) and
small messages from a table of fields (``pbmessage``), range
parsing with bounds (``ranges``), path-safe names (``names``), launcher and helper-process
detection (``procs``), the host and process figures the capture samples, psutil's read from
``/proc`` (``procfs``), allocator tuning for workers (``alloc``), the shared command-line error type
(``cliargs``), object storage (``storage``: s3:// URLs through pyarrow's S3 file system) and Arrow
arrays built from numpy buffers and Python lists without ``pa.array`` (``arrays``: pyarrow would
import pandas), a stop flag a signal handler may set (``stopflag``), and the ``neuron_explorer``
logger tree every message goes through (``log``).

Submodules are imported on use; the package itself loads nothing.
"""

__all__ = ["alloc", "arrays", "atomic", "cgroup", "cliargs", "files", "intervals", "jsonfast", "log", "names",
           "pbmessage", "pbwire", "procfs", "procs", "ranges", "stopflag", "storage"]
