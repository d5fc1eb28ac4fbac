"""A from-scratch JAX MLP the way tutorials write one: ``jax.jit`` with a static argument,
``jax.grad`` and ``jax.vmap``, and an Adam update written by hand in optax's style
(``init``/``update`` over pytrees).  Unless ``--in-process`` is given, it also ships
``functools.partial(jax.jit, static_argnames="k")`` to a ``spawn`` worker (pickled, as a process
pool or Dask would) that builds and runs a jitted function with it.

Ground truth: every top-level call of a jitted function is one execution (kind ``jit``); calls
inside another transformation are not.  The worker is its own process with its own count.
"""
import functools
import json
import multiprocessing
import sys

import jax
import jax.numpy as jnp
import numpy as np


def init_mlp(key, sizes):
    params = []
    for din, dout in zip(sizes[:-1], sizes[1:]):
        key, k1 = jax.random.split(key)
        params.append({"w": jax.random.normal(k1, (din, dout)) * (1.0 / np.sqrt(din)), "b": jnp.zeros(dout)})
    return params


def forward(params, x, activation):
    for layer in params[:-1]:
        x = x @ layer["w"] + layer["b"]
        x = jnp.tanh(x) if activation == "tanh" else jax.nn.relu(x)
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y, activation):
    return jnp.mean((forward(params, x, activation) - y) ** 2)


# an optax-style optimizer: a pair of pure functions over pytrees
def adam(lr, b1=0.9, b2=0.999, eps=1e-8):
    def init(params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"mu": zeros, "nu": zeros, "count": jnp.zeros([], jnp.int32)}

    def update(grads, state):
        count = state["count"] + 1
        mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
        nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
        mhat = jax.tree_util.tree_map(lambda m: m / (1 - b1 ** count), mu)
        vhat = jax.tree_util.tree_map(lambda v: v / (1 - b2 ** count), nu)
        updates = jax.tree_util.tree_map(lambda m, v: -lr * m / (jnp.sqrt(v) + eps), mhat, vhat)
        return updates, {"mu": mu, "nu": nu, "count": count}

    return init, update


opt_init, opt_update = adam(1e-2)


@functools.partial(jax.jit, static_argnums=(4,))
def train_step(params, state, x, y, activation):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y, activation)
    updates, state = opt_update(grads, state)
    params = jax.tree_util.tree_map(lambda p, u: p + u, params, updates)
    return params, state, loss


# per-example losses: vmap over the batch, jitted
per_example_loss = jax.jit(jax.vmap(loss_fn, in_axes=(None, 0, 0, None)), static_argnums=3)


def power_sum(x, k):
    return jnp.sum(x ** k)


def run_in_worker(jit_with_static_k, data):
    """Runs in the spawn worker: build the jitted function from the pickled partial, call it."""
    f = jit_with_static_k(power_sum)
    out = [float(f(jnp.asarray(data), k=k)) for k in (1, 2, 3, 2)]
    return out, {"key": "worker", "models": ["power_sum@jax_train.py"], "jit": 4}


def main():
    in_process = "--in-process" in sys.argv
    key = jax.random.PRNGKey(0)
    kx, kp = jax.random.split(key)
    x = jax.random.normal(kx, (64, 8))
    y = jnp.sin(x.sum(axis=1, keepdims=True))
    params = init_mlp(kp, [8, 32, 32, 1])
    state = opt_init(params)
    counts = {"key": "main", "models": ["train_step@jax_train.py", "loss_fn@jax_train.py"], "jit": 0}
    for activation in ("tanh", "relu"):
        for step in range(5):
            params, state, loss = train_step(params, state, x, y, activation)
            counts["jit"] += 1
            print(f"{activation} step {step} loss {float(loss):.6f}")
    losses = per_example_loss(params, x[:4, None], y[:4, None], "relu")
    counts["jit"] += 1
    print("per-example", " ".join(f"{v:.5f}" for v in np.asarray(losses).ravel()))
    procs = [counts]
    data = np.arange(1, 5, dtype=np.float32)
    ship = functools.partial(jax.jit, static_argnames="k")
    if in_process:
        out, _ = run_in_worker(ship, data)
    else:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            out, worker_counts = pool.apply(run_in_worker, (ship, data))
        procs.append(worker_counts)
    print("power sums", " ".join(f"{v:.1f}" for v in out))
    if in_process:
        counts["jit"] += 4
        counts["models"].append("power_sum@jax_train.py")
    print("GROUND_TRUTH " + json.dumps({"processes": procs}))


if __name__ == "__main__":
    main()
