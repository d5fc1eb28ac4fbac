"""The spec's basic JAX pattern: variables set inside the script, jax.profiler.trace, TraceAnnotation.

The first JAX call happens inside the trace (so JAX initializes its backends, and loads our plugin,
from within start_trace).  argv: [device_profile] [steps] (defaults: 1, 3).
"""
import os
import sys

import jax
import jax.numpy as jnp

os.environ["NEURON_RT_INSPECT_DEVICE_PROFILE"] = sys.argv[1] if len(sys.argv) > 1 else "1"
os.environ["NEURON_RT_INSPECT_OUTPUT_DIR"] = "./output"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3


@jax.jit
def layer(x, w):
    return jnp.tanh(x @ w) + 1.0


@jax.jit
def loss(x):
    return jnp.sum(x * x)


with jax.profiler.trace(os.environ["NEURON_RT_INSPECT_OUTPUT_DIR"]):
    x = jnp.ones((128, 128))
    w = jnp.full((128, 128), 0.01)
    for i in range(steps):
        with jax.profiler.TraceAnnotation("my_label" + str(i)):
            y = layer(x, w)
            out = loss(y).block_until_ready()
print("done", float(out))
