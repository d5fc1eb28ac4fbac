"""A JAX training loop (one ``jax.jit`` step function) that knows nothing of neuron-explorer.

Prints ``pid <pid>``, then ``step <i> loss <value>`` per step; stops as ``ddp_job.py`` does
(argv[1]: the release file, argv[2]: the least number of steps before the last 10)."""
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

release, min_steps = sys.argv[1], int(sys.argv[2])
PARENT = os.getppid()


def loss_fn(w, x, y):
    return jnp.mean((jnp.tanh(x @ w["a"]) @ w["b"] - y) ** 2)


@jax.jit
def train_step(w, x, y):
    loss, g = jax.value_and_grad(loss_fn)(w, x, y)
    return jax.tree_util.tree_map(lambda p, d: p - 0.05 * d, w, g), loss


rng = np.random.default_rng(0)
w = {"a": jnp.asarray(rng.standard_normal((16, 32), dtype=np.float32) * 0.25),
     "b": jnp.asarray(rng.standard_normal((32, 1), dtype=np.float32) * 0.25)}
print(f"pid {os.getpid()}", flush=True)
end, i = None, 0
while end is None or i < end:
    if os.getppid() != PARENT:
        sys.exit(3)  # the test (or torchrun) that started this job is gone: never outlive it
    x = rng.standard_normal((64, 16), dtype=np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True))
    w, loss = train_step(w, x, y)
    print(f"step {i} loss {float(loss):.8f}", flush=True)
    if end is None and os.path.exists(release):
        end = max(i, min_steps) + 10
    i += 1
    time.sleep(0.01)
