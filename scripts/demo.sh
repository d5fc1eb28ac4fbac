#!/usr/bin/env bash
# The main job on the bundled workload: profile a 2-rank torchrun/gloo training job that uses
# torch.compile and DDP, with no code changes, then print the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${1:-output/demo}
rm -rf "$OUT"
echo "== capturing: NEURON_RT_INSPECT_ENABLE=1 torchrun --nproc_per_node 2 examples/train.py (output: $OUT)"
NEURON_RT_INSPECT_ENABLE=1 NEURON_RT_INSPECT_OUTPUT_DIR="$OUT" OMP_NUM_THREADS=1 \
  "$PY" -m torch.distributed.run --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "${MASTER_PORT:-29531}" \
  examples/train.py --steps 50 2>&1 | grep -v -e '^W[0-9]' -e '^\*\*\*' -e 'OMP_NUM_THREADS' || true
echo "== files written:"
find "$OUT" -type f | sort
echo "== neuron-explorer view -d $OUT --output-format summary-text"
"$PY" -m neuron_explorer view -d "$OUT" --output-format summary-text
echo "== next: 'neuron-explorer view -d $OUT' writes the Parquet dataset (system_profile_parquet/);"
echo "   'neuron-explorer view --ui -d $OUT' opens it in the System Trace Viewer (http://127.0.0.1:3001/)"
