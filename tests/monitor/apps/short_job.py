"""An unmodified short job (no neuron_explorer import, no variable) that ends right after its last
step, as real training scripts do: ``short_job.py torch|jax STEPS [wait]``.

It prints "ready" once its framework is up, waits for a line on stdin when ``wait`` is given (so
a test can start a monitor first, or after), runs STEPS executions back to back (torch: an eager
module's forward under no_grad; jax: a module-level ``jax.jit`` function), prints "done STEPS" and
exits at once."""
import sys

framework, steps = sys.argv[1], int(sys.argv[2])
wait = len(sys.argv) > 3 and sys.argv[3] == "wait"

if framework == "torch":
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    x = torch.randn(8, 64)

    def run_step():
        with torch.no_grad():
            model(x)
else:
    import jax
    import jax.numpy as jnp

    @jax.jit
    def update(w, x):
        return w - 0.01 * jnp.tanh(x.T @ x @ w)

    w = jnp.ones((32, 32)) * 0.1
    x = jnp.ones((8, 32))

    def run_step():
        global w
        w = update(w, x)
        w.block_until_ready()

print("ready", flush=True)
if wait:
    sys.stdin.readline()
for _ in range(steps):
    run_step()
print("done", steps, flush=True)
