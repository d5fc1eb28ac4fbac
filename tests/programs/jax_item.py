"""A small JAX training loop that reads its loss on the host every step (``.item()``), for the
summary's ``sync_waits`` insight (docs/summary.md, "What each substrate can show").

``python jax_item.py MODE STEPS``.  Each step dispatches one jitted update (an MLP's loss, its
gradient and an SGD step: matrix products taking a few ms on a CPU), then does some host work
(``HOST_MS`` of Python) while XLA computes, then, in mode ``item``, reads the loss with
``loss.item()``: the host blocks until the update is done.  The program times each ``.item()``
itself (``perf_counter_ns`` around the call) and prints the times as ``ITEM_NS [..]`` and their
median over the steps after the first as ``INJECTED_NS``.  Mode ``noitem`` is the same loop
without the read: the loss is kept on the device and waited for once, after the last step
(``jax.block_until_ready``).
"""
import json
import sys
import time

import jax
import jax.numpy as jnp

BATCH, WIDTH, DEPTH = 256, 384, 3
HOST_MS = 1.0
LR = 1e-3


def init(key):
    ks = jax.random.split(key, DEPTH)
    return [jax.random.normal(k, (WIDTH, WIDTH)) / WIDTH ** 0.5 for k in ks]


def loss_fn(ws, x, y):
    h = x
    for w in ws[:-1]:
        h = jnp.tanh(h @ w)
    return jnp.mean((h @ ws[-1] - y) ** 2)


@jax.jit
def train_step(ws, x, y):
    loss, g = jax.value_and_grad(loss_fn)(ws, x, y)
    return [w - LR * gw for w, gw in zip(ws, g)], loss


def host_work() -> None:
    end = time.perf_counter_ns() + int(HOST_MS * 1e6)
    while time.perf_counter_ns() < end:
        pass


def main(mode: str, steps: int) -> None:
    kx, ky, kw = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(kx, (BATCH, WIDTH))
    y = jax.random.normal(ky, (BATCH, WIDTH))
    ws = init(kw)
    jax.block_until_ready((x, y, ws))
    timed = []
    loss = None
    for _ in range(steps):
        ws, loss = train_step(ws, x, y)
        host_work()
        if mode == "item":
            t0 = time.perf_counter_ns()
            loss.item()
            timed.append(time.perf_counter_ns() - t0)
    if mode != "item":
        jax.block_until_ready((ws, loss))
        print("INJECTED_NS 0")
        return
    rest = sorted(timed[1:])
    print(f"ITEM_NS {json.dumps(timed)}")
    print(f"INJECTED_NS {rest[len(rest) // 2]}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
