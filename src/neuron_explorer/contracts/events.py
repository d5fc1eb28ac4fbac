"""The event vocabulary, defined once for every producer and consumer.

Integrations record events as small integer tuples; everything that needs a name, a group, a
source or the meaning of an argument slot looks it up here.  The capture files carry this table
too (``ntrace.pb`` stores each type's name, group, source and argument names), so a reader never
depends on the writer's version of this module.

A recorded event is the tuple ``(type_id, start_ns, end_ns, thread_id, a, b, c, d, e)`` where
``a``..``e`` are integers whose meaning depends on the type (see ``ARGS``); strings are interned
into the runtime's string table first.  Keeping one fixed shape makes the hot path a single tuple
build and lets the flusher convert a batch with one ``numpy.array`` call.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

HARDWARE = "hardware"
SOFTWARE = "software"

SOURCE_RT = "neuron_rt"
SOURCE_HW = "neuron_hw"
SOURCE_FRAMEWORK = "framework"

# Number of integer argument slots after (type, start, end, thread).
NUM_ARGS = 5
RECORD_WIDTH = 4 + NUM_ARGS


@dataclass(frozen=True)
class EventType:
    id: int
    name: str
    group: str
    source: str
    args: tuple[str, ...]  # meaning of slots a..e ('' = unused); '*_str' slots hold string ids
    doc: str


_DEFS: list[tuple[str, str, str, tuple[str, ...], str]] = [
    # name, group, source, argument names, meaning
    ("nc_exec_running", HARDWARE, SOURCE_HW, ("model_id", "exec_id", "ret", "", ""),
     "a compiled graph executing on the core"),
    ("cc_running", HARDWARE, SOURCE_HW, ("op_str", "seq", "bytes", "dtype_str", "group_str"),
     "a collective communication operation running"),
    ("cc_exec_barrier", HARDWARE, SOURCE_HW, ("op_str", "seq", "", "", "group_str"),
     "a barrier across the ranks of a process group"),
    ("numerical_err", HARDWARE, SOURCE_HW, ("model_id", "exec_id", "ret", "nan_count", "inf_count"),
     "NaN or Inf found in a graph's outputs (ret 1003)"),
    ("nrt_model_switch", HARDWARE, SOURCE_HW, ("model_id", "exec_id", "prev_model_id", "", ""),
     "the core switched to another graph"),
    ("timestamp_sync_point", HARDWARE, SOURCE_HW, ("cpu_timestamp_ns", "nc_timestamp_ns", "exec_id", "", ""),
     "paired host and device clock samples"),
    ("hw_notify", HARDWARE, SOURCE_HW, ("ret", "op_str", "seq", "", "group_str"),
     "a completion notification from asynchronous work (a collective's Work completing)"),
    ("nrt_load", SOFTWARE, SOURCE_RT, ("model_id", "", "", "", ""),
     "loading a compiled graph onto a core"),
    ("model_load", SOFTWARE, SOURCE_RT, ("model_id", "compile_ns", "", "", ""),
     "compiling and loading a graph"),
    ("nrt_execute", SOFTWARE, SOURCE_RT, ("model_id", "exec_id", "ret", "", ""),
     "the host-side call into a compiled graph"),
    ("runtime_execute", SOFTWARE, SOURCE_RT, ("model_id", "exec_id", "", "", ""),
     "the runtime's own share of an execution request (before the work runs on the core)"),
    ("nrt_tensor_read", SOFTWARE, SOURCE_RT, ("bytes", "src_device", "dst_device", "", ""),
     "a device-to-host copy"),
    ("nrt_tensor_write", SOFTWARE, SOURCE_RT, ("bytes", "src_device", "dst_device", "", ""),
     "a host-to-device copy"),
    ("device_exec", SOFTWARE, SOURCE_RT, ("model_id", "exec_id", "", "", ""),
     "a kernel of an execution running on a device stream (GPU hosts)"),
    ("kbl_exec_wait", SOFTWARE, SOURCE_RT, ("model_id", "exec_id", "op_str", "seq", "group_str"),
     "the host blocked waiting for results: a graph's (model_id) or a collective's (op, seq, group)"),
    ("kmgr_exec_core", SOFTWARE, SOURCE_RT, ("model_id", "exec_id", "", "", ""),
     "dispatch of an execution to a core"),
    ("framework_op", SOFTWARE, SOURCE_FRAMEWORK, ("name_str", "", "", "", ""),
     "a labelled framework region (record_function, TraceAnnotation)"),
]

EVENT_TYPES: tuple[EventType, ...] = tuple(
    EventType(i, name, group, source, args, doc) for i, (name, group, source, args, doc) in enumerate(_DEFS)
)
BY_NAME: dict[str, EventType] = {t.name: t for t in EVENT_TYPES}

# Names the spec's examples use for the same events.
ALIASES: dict[str, str] = {
    "tensor_read": "nrt_tensor_read",
    "tensor_write": "nrt_tensor_write",
    "cc_exec": "cc_running",
}

GROUPS: dict[str, tuple[str, ...]] = {
    HARDWARE: tuple(t.name for t in EVENT_TYPES if t.group == HARDWARE),
    SOFTWARE: tuple(t.name for t in EVENT_TYPES if t.group == SOFTWARE),
}

# What each recording mechanism produces, whatever group each type is in.  A mechanism runs when
# the capture keeps ANY of its types, never only when one of them is kept: the capture-time filter
# then drops the others, and a filtered capture is the unfiltered one restricted to the kept types
# (docs/decisions/0073-type-filters-gate-mechanisms.md).
# - an execution (compiled graph, eager root, backward, optimizer step, jitted call): one record
#   that becomes nrt_execute, runtime_execute, nc_exec_running and the nrt_model_switch it implies;
#   its graph's first call gives model_load and nrt_load, a graph load a timestamp_sync_point, the
#   NaN check numerical_err;
# - a collective: cc_running (or cc_exec_barrier), the hw_notify of its completion, and the
#   kbl_exec_wait of a Work.wait on it.
EXECUTION_TYPES: tuple[str, ...] = ("nrt_execute", "runtime_execute", "nc_exec_running", "nrt_model_switch",
                                    "model_load", "nrt_load", "timestamp_sync_point", "numerical_err")
COLLECTIVE_TYPES: tuple[str, ...] = ("cc_running", "cc_exec_barrier", "hw_notify", "kbl_exec_wait")


def type_id(name: str) -> int:
    return BY_NAME[ALIASES.get(name, name)].id


# Integer ids for the hot path (module constants are one global lookup).
NC_EXEC_RUNNING = type_id("nc_exec_running")
CC_RUNNING = type_id("cc_running")
CC_EXEC_BARRIER = type_id("cc_exec_barrier")
NUMERICAL_ERR = type_id("numerical_err")
NRT_MODEL_SWITCH = type_id("nrt_model_switch")
TIMESTAMP_SYNC_POINT = type_id("timestamp_sync_point")
NRT_LOAD = type_id("nrt_load")
MODEL_LOAD = type_id("model_load")
NRT_EXECUTE = type_id("nrt_execute")
NRT_TENSOR_READ = type_id("nrt_tensor_read")
NRT_TENSOR_WRITE = type_id("nrt_tensor_write")
FRAMEWORK_OP = type_id("framework_op")
RUNTIME_EXECUTE = type_id("runtime_execute")
KBL_EXEC_WAIT = type_id("kbl_exec_wait")
HW_NOTIFY = type_id("hw_notify")
DEVICE_EXEC = type_id("device_exec")

# Event types no mechanism produces on some hosts (the README's event vocabulary): name ->
# (what a host needs for it, or "" when no host here has it; why).  A filter that names one of
# them gets a one-line warning instead of silently matching nothing.
HOST_LIMITS: dict[str, tuple[str, str]] = {
    "kmgr_exec_core": ("", "no host here dispatches an execution to a core as a step of its own (on a CPU the "
                           "graph runs on the calling thread; on CUDA the launch is part of nrt_execute)"),
    "device_exec": ("gpu", "it is recorded from device streams (JAX traces on GPU hosts), and this host has no GPU"),
}


def unproducible(names: Iterable[str], has_gpu: bool) -> list[str]:
    """One warning per named type that cannot be recorded on a host with (or without) a GPU."""
    out = []
    for n in sorted(set(ALIASES.get(x, x) for x in names)):
        need, why = HOST_LIMITS.get(n, (None, ""))
        if need == "" or (need == "gpu" and not has_gpu):
            out.append(f"event type {n} is never recorded here: {why}")
    return out

# A compact record that stands for one execution: the writer expands it into ``nrt_execute``
# (host call), ``runtime_execute`` (the runtime's share of it) and ``nc_exec_running`` (core),
# which share one span on a synchronous device.
# It is never written as itself.  Args: model_id, exec_id, ret, device_start_ns, device_end_ns
# (0 = same as the host span).
EXEC_PAIR = 255

# Runtime status codes (the ``ret`` of error events).
STATUS_CODES: dict[int, str] = {
    0: "NRT_SUCCESS", 1: "NRT_FAILURE", 2: "NRT_INVALID", 3: "NRT_INVALID_HANDLE", 4: "NRT_RESOURCE",
    5: "NRT_TIMEOUT", 6: "NRT_HW_ERROR", 7: "NRT_QUEUE_FULL", 9: "NRT_LOAD_NOT_ENOUGH_NC",
    10: "NRT_UNSUPPORTED_NEFF_VERSION", 13: "NRT_UNINITIALIZED", 14: "NRT_CLOSED", 15: "NRT_QUEUE_EMPTY",
    101: "NRT_EXEC_UNIT_UNRECOVERABLE", 1002: "NRT_EXEC_BAD_INPUT", 1003: "NRT_EXEC_COMPLETED_WITH_NUM_ERR",
    1004: "NRT_EXEC_COMPLETED_WITH_ERR", 1005: "NRT_EXEC_NC_BUSY", 1006: "NRT_EXEC_OOB",
    1100: "NRT_COLL_PENDING", 1200: "NRT_EXEC_HW_ERR_COLLECTIVES", 1201: "NRT_EXEC_HW_ERR_HBM_UE",
    1202: "NRT_EXEC_HW_ERR_NC_UE", 1203: "NRT_EXEC_HW_ERR_DMA_ABORT", 1204: "NRT_EXEC_SW_NQ_OVERFLOW",
    1205: "NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE", 1206: "NRT_NETWORK_PROXY_FAILURE",
}
RET_NUM_ERR = 1003
