#!/usr/bin/env bash
# Regenerates the capture schema's Python module and its type stub from proto/ (`make proto`):
#   src/neuron_explorer/proto/neuron_explorer_capture_pb2.py   protoc's Python output (grpcio-tools)
#   src/neuron_explorer/proto/neuron_explorer_capture_pb2.pyi  mypy-protobuf's stub, the .proto's
#                                                              comments as docstrings (mypy reads it)
# Both are committed; run this after editing proto/neuron_explorer_capture.proto. The _pb2.py pins
# the protobuf runtime it needs (its "Protobuf Python Version"), so a different grpcio-tools makes a
# different file: keep the one that generated the committed module unless the runtime moves too.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
command -v protoc-gen-mypy >/dev/null || { echo "gen_proto: protoc-gen-mypy not found (pip install mypy-protobuf)" >&2; exit 1; }
"$PY" -m grpc_tools.protoc -Iproto --python_out=src/neuron_explorer/proto --mypy_out=src/neuron_explorer/proto \
  proto/neuron_explorer_capture.proto
