"""A jitted function whose compile is far longer than its run (a long unrolled chain of small ops on
a 4-element array), called on one shape and then on another (a recompile on the fast path)."""
import jax
import jax.numpy as jnp


@jax.jit
def heavy(x):
    for i in range(400):
        x = jnp.sin(x) * 0.5 + jnp.cos(x * i)
    return x


for shape in [(4,), (4,), (4,), (8,), (8,)]:
    y = heavy(jnp.ones(shape))
    y.block_until_ready()
print("sum", float(y.sum()))
