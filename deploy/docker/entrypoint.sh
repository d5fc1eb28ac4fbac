#!/bin/bash
# Runs neuron-monitor feeding the Prometheus companion through a FIFO, so both
# pids are known: SIGTERM from the orchestrator reaches both, and when either
# side stops the other is stopped too and the container exits (to be restarted).
set -u
args=()
if [[ -n "${NEURON_MONITOR_CONFIG:-}" && -f "${NEURON_MONITOR_CONFIG}" ]]; then
  args+=(-c "${NEURON_MONITOR_CONFIG}")
fi
tls=()
if [[ -n "${NEURON_MONITOR_TLS_CERT:-}" && -n "${NEURON_MONITOR_TLS_KEY:-}" ]]; then
  tls+=(--cert-file "${NEURON_MONITOR_TLS_CERT}" --key-file "${NEURON_MONITOR_TLS_KEY}")
fi
workdir=$(mktemp -d)
fifo="$workdir/reports"
mkfifo -m 600 "$fifo"
neuron-monitor-prometheus.py --host "${NEURON_MONITOR_PROMETHEUS_HOST:-0.0.0.0}" \
  --port "${NEURON_MONITOR_PROMETHEUS_PORT:-8000}" "${tls[@]}" < "$fifo" &
exporter=$!
neuron-monitor "${args[@]}" --verbose "${NEURON_MONITOR_VERBOSE:-1}" > "$fifo" &
monitor=$!
stop() { kill -TERM "$monitor" "$exporter" 2>/dev/null; }
trap 'stop; wait; rm -rf "$workdir"; exit 0' TERM INT
wait -n "$monitor" "$exporter"
status=$?
stop
wait
rm -rf "$workdir"
exit "$status"
