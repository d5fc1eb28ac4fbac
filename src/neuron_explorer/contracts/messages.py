"""The capture files' messages (``proto/neuron_explorer_capture.proto``) as a table of fields.

The profiled process writes its files with ``util.pbmessage`` from this table instead of the
generated protobuf classes, so it never loads protobuf (decision 0214); readers in other processes
(``view``, ``check``) parse them with the generated module.  ``tests/contracts/test_messages.py``
holds the table to the generated descriptors (every field's name, number, type and label) and the
bytes to protobuf's own.
"""

from __future__ import annotations

from typing import Any

from neuron_explorer.util.pbmessage import Field, Schema, encode_message


def _fields(*rows: tuple) -> dict[str, Field]:
    """(name, number, kind) rows; a kind starting with ``*`` is repeated."""
    return {name: Field(number, kind.lstrip("*"), kind.startswith("*")) for name, number, kind in rows}


SCHEMA: Schema = {
    "EventTypeInfo": _fields(
        ("id", 1, "uint32"), ("name", 2, "string"), ("group", 3, "string"), ("source", 4, "string"),
        ("args", 5, "*string")),
    "ModelInfo": _fields(
        ("id", 1, "uint32"), ("name", 2, "string"), ("neff_name", 3, "string"), ("graph_hash", 4, "string"),
        ("backend", 5, "string"), ("kind", 6, "string"), ("compile_ns", 7, "int64"), ("nc_idx", 8, "int32"),
        ("source_location", 9, "string"), ("module_path", 10, "string"), ("num_nodes", 11, "int64"),
        ("flops", 12, "double"), ("constants_bytes", 13, "int64"), ("signature", 14, "string")),
    "EventColumns": _fields(
        ("count", 1, "uint32"), *((name, i, "bytes") for i, name in enumerate(
            ("type", "start_ns", "end_ns", "nc_idx", "thread_id", "a", "b", "c", "d", "e"), start=2))),
    "SystemTrace": _fields(
        ("format_version", 1, "uint32"), ("event_types", 2, "*EventTypeInfo"), ("strings", 3, "*string"),
        ("models", 4, "*ModelInfo"), ("events", 5, "EventColumns")),
    "ClockAnchor": _fields(("monotonic_ns", 1, "int64"), ("wall_ns", 2, "int64"), ("label", 3, "string")),
    "CoreStats": _fields(
        ("nc_idx", 1, "int32"), ("capacity", 2, "int64"), ("recorded", 3, "int64"), ("kept", 4, "int64"),
        ("dropped", 5, "int64")),
    "TraceInfo": _fields(
        ("format_version", 1, "uint32"), ("instance_id", 2, "string"), ("hostname", 3, "string"),
        ("pid", 4, "int64"), ("process_tag", 5, "string"), ("rank", 6, "int32"), ("local_rank", 7, "int32"),
        ("world_size", 8, "int32"), ("node_rank", 9, "int32"), ("nd_idx", 10, "int32"),
        ("device_kind", 11, "string"), ("nc_indices", 12, "*int32"), ("anchors", 13, "*ClockAnchor"),
        ("config", 14, "map"), ("cores", 15, "*CoreStats"), ("versions", 16, "map"), ("argv", 17, "*string"),
        ("session_dir", 18, "string"), ("end_reason", 19, "string"), ("runtime_events_seen", 20, "bool"),
        ("note", 21, "string"), ("start_wall_ns", 22, "int64"), ("enabled_event_types", 23, "*string"),
        ("enabled_ncs", 24, "*int32"), ("job", 25, "map")),
    "CpuUtil": _fields(
        ("format_version", 1, "uint32"), ("num_cpus", 2, "uint32"), ("period_ns", 3, "int64"),
        ("ts_ns", 4, "bytes"), ("cpu_percent", 5, "bytes"), ("process_percent", 6, "bytes"),
        ("monitored_pid", 7, "int64"), ("dropped_samples", 8, "uint64"), ("main_thread_wait_percent", 9, "bytes"),
        ("main_thread_percent", 10, "bytes")),
    "HostMem": _fields(
        ("format_version", 1, "uint32"), ("period_ns", 2, "int64"), ("ts_ns", 3, "bytes"),
        ("process_rss", 4, "bytes"), ("process_vms", 5, "bytes"), ("host_total", 6, "bytes"),
        ("host_used", 7, "bytes"), ("host_available", 8, "bytes"), ("monitored_pid", 9, "int64"),
        ("dropped_samples", 10, "uint64"), ("device_mem_ts_ns", 11, "bytes"), ("device_mem_names", 12, "*string"),
        ("device_mem_values", 13, "bytes"), ("memory_limit", 14, "int64"), ("memory_limit_source", 15, "string"),
        ("memory_limit_cgroup", 16, "string")),
    "DeviceExecution": _fields(
        ("exec_id", 1, "int64"), ("model_id", 2, "uint32"), ("model_name", 3, "string"), ("neff_name", 4, "string"),
        ("start_ns", 5, "int64"), ("end_ns", 6, "int64")),
    "DeviceOpColumns": _fields(
        ("count", 1, "uint32"), *((name, i, "bytes") for i, name in enumerate(
            ("start_ns", "end_ns", "name", "track", "exec_idx", "flops", "nbytes", "detail", "source"), start=2))),
    "ClockSync": _fields(("cpu_timestamp_ns", 1, "int64"), ("nc_timestamp_ns", 2, "int64"), ("exec_id", 3, "int64")),
    "DeviceTrace": _fields(
        ("format_version", 1, "uint32"), ("instance_id", 2, "string"), ("pid", 3, "int64"), ("nc_idx", 4, "int32"),
        ("mode", 5, "string"), ("device_kind", 6, "string"), ("strings", 7, "*string"),
        ("executions", 8, "*DeviceExecution"), ("ops", 9, "DeviceOpColumns"), ("sync", 10, "*ClockSync"),
        ("peak_flops", 11, "double"), ("source", 12, "string")),
    "GraphNode": _fields(
        ("name", 1, "string"), ("op", 2, "string"), ("target", 3, "string"), ("source_location", 4, "string"),
        ("module_path", 5, "string")),
    "NeffFile": _fields(
        ("format_version", 1, "uint32"), ("neff_name", 2, "string"), ("graph_hash", 3, "string"),
        ("model_name", 4, "string"), ("backend", 5, "string"), ("kind", 6, "string"), ("signature", 7, "string"),
        ("code", 8, "string"), ("nodes", 9, "*GraphNode"), ("framework", 10, "string"), ("compile_ns", 11, "int64")),
    "EventSegment": _fields(("format_version", 1, "uint32"), ("nc_idx", 2, "int32"), ("blocks", 3, "*EventColumns")),
}


def encode(message: str, /, **values: Any) -> bytes:
    """The capture message ``message`` (``TraceInfo``, ``CpuUtil``, ...) with ``values``."""
    return encode_message(SCHEMA, message, values)


def number(message: str, field: str) -> int:
    """A field's number in the schema."""
    return SCHEMA[message][field].number

