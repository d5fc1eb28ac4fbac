"""A plain JAX program (no neuron_explorer, no jax.profiler): a jitted training step called in a
loop inside TraceAnnotation regions.  ``python jit_loop.py STEPS [SECONDS]``: with SECONDS, it
prints "ready" after the first step and keeps stepping for that long (for neuron-monitor).

It prints the final loss and what it checked about the jitted functions, so a test can compare a
profiled run with an unprofiled one."""
import sys
import time
from functools import partial

import jax
import jax.numpy as jnp

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0


@jax.jit
def predict(w, x):  # also called inside `step`: staged out there, not an execution of its own
    return jnp.tanh(x @ w)


def loss(w, x, y):
    return jnp.mean((predict(w, x) - y) ** 2)


@partial(jax.jit, static_argnames=("lr",))
def step(w, x, y, lr=0.1):
    g = jax.grad(loss)(w, x, y)
    return w - lr * g, loss(w, x, y)


class Model:
    @partial(jax.jit, static_argnums=0)
    def scale(self, x):  # a jitted method binds like one
        return x * 2.0


k = jax.random.PRNGKey(0)
w = jax.random.normal(k, (32, 32)) * 0.1
x = jax.random.normal(k, (16, 32))
y = jnp.zeros((16, 32))
for i in range(steps):
    with jax.profiler.TraceAnnotation(f"train_step_{i}"):
        w, l = step(w, x, y)
with jax.named_scope("evaluate"):
    p = predict(w, x)
checks = [step.__name__, type(step.lower(w, x, y).compile()).__name__, float(Model().scale(jnp.ones(2))[0])]
print("loss", float(l), "pred", float(p.sum()), "checks", checks, flush=True)
if seconds:
    print("ready", flush=True)
    end = time.time() + seconds
    while time.time() < end:
        w, l = step(w, x, y)
        l.block_until_ready()
        time.sleep(0.002)
