#!/usr/bin/env bash
# Installs what neuron-explorer and its tests need on a fresh machine (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# System packages the end-to-end tests drive for real (installed only when missing).
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# torch.utils.cpp_extension's build of integrations/torch/_c10d_stamp.cpp (below)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1 ] || need+=(faketime)
if [ ${#need[@]} -gt 0 ] && [ "${NEURON_EXPLORER_SKIP_APT:-0}" != 1 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "setup: please install: ${need[*]} (apt-get install ${need[*]})" >&2
  fi
fi

# torch is pinned to the CPU build (torch==2.13.0); the rest comes from pyproject's extras.
"$PY" -m pip install -q --disable-pip-version-check torch==2.13.0
"$PY" -m pip install -q --disable-pip-version-check -e '.[all]'

# The extension built against this torch (collectives' completion stamps without the GIL, decision
# 0221): once per torch build, into ~/.cache/neuron_explorer/ext.  Optional: without it the
# collectives use the C stamp, and a failed build says why in one line.
"$PY" -m neuron_explorer.integrations.build_native build || true
