"""A program with its own SIGTERM handler, which must behave the same profiled and unprofiled.

argv[1]: ``after`` (the handler is installed after the runtime started from the environment) or
``before`` (installed first; then, when argv[2] is an output directory rather than ``-``, the
runtime is started through the API, as ``neuron_explorer.torch`` does).  The handler prints; the
main loop notices, cleans up and exits with status 3."""
import signal
import sys
import time

import torch  # noqa: F401 - a framework process: it gets a profile

got = []


def handler(signum, frame):
    got.append(signum)
    print(f"handled {signum}", flush=True)


signal.signal(signal.SIGTERM, handler)
if sys.argv[1] == "before" and sys.argv[2] != "-":
    from neuron_explorer import boot
    from neuron_explorer.runtime.config import CaptureConfig

    boot.start(CaptureConfig(output_dir=sys.argv[2]), from_env=False)
print("ready", flush=True)
deadline = time.time() + 60
while not got and time.time() < deadline:
    time.sleep(0.01)
print("cleanup", flush=True)
sys.exit(3)
