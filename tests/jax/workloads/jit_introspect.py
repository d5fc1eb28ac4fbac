"""A JAX program that looks at ``jax.jit`` and its jitted functions the way libraries do, and ships
them to a spawn worker: ``pickle`` of ``jax.jit`` and of ``functools.partial(jax.jit, ...)``, a
jitted function sent with cloudpickle (as Dask does), type names, ``isinstance``, signatures,
``__wrapped__``.  It prints one JSON object of what it saw, identical with and without a capture.
"""
import functools
import inspect
import json
import multiprocessing as mp
import pickle

import cloudpickle
import jax
import jax.numpy as jnp
from jaxlib import _jax


def scale(x, k=2):
    return x * k


def shift(x, k=1):
    return x + k


def worker(blobs, q):
    """Runs in a spawn worker: jit with the pickled partial of jax.jit, and call the jitted function
    that came by cloudpickle."""
    jit_k, jitted = pickle.loads(blobs[0]), cloudpickle.loads(blobs[1])
    a = jit_k(scale)(jnp.ones(3), k=3)
    b = jitted(jnp.ones(3), k=4)
    q.put([float(a.sum()), float(b.sum()), type(jit_k(scale)).__name__, type(jitted).__name__])


def facts() -> dict:
    jitted = jax.jit(shift, static_argnames="k")
    p = functools.partial(jax.jit, static_argnames="k")

    @p
    def decorated(x, k=5):
        return x - k

    out = {
        "pickle_jit": pickle.loads(pickle.dumps(jax.jit)) is jax.jit,
        "pickle_partial": pickle.loads(pickle.dumps(p)).func is jax.jit,
        "type": [type(jitted).__name__, type(decorated).__name__, jitted.__class__.__name__],
        "isinstance": isinstance(jitted, _jax.PjitFunction),
        "jit_signature": str(inspect.signature(jax.jit)),
        "signature": [str(inspect.signature(jitted)), str(inspect.signature(decorated))],
        "jit_wrapped": [jax.jit.__wrapped__.__module__, jax.jit.__wrapped__.__qualname__,
                        inspect.unwrap(jax.jit).__qualname__, jax.jit.__name__, jax.jit.__qualname__,
                        jax.jit.__doc__ == jax._src.api.jit.__doc__],
        "wrapped": [jitted.__wrapped__ is shift, jitted._fun is shift, decorated.__name__,
                    decorated.__qualname__, jitted.__module__],
        "vars": [sorted(vars(jax.jit)), sorted(vars(jitted))],
        "calls": [float(jitted(jnp.ones(2)).sum()), float(decorated(jnp.ones(2)).sum())],
    }
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    blobs = [pickle.dumps(p), cloudpickle.dumps(jax.jit(scale, static_argnames="k"))]
    proc = ctx.Process(target=worker, args=(blobs, q))
    proc.start()
    out["worker"] = q.get(timeout=300)
    proc.join()
    out["worker_exit"] = proc.exitcode
    return out


if __name__ == "__main__":
    print(json.dumps(facts(), sort_keys=True), flush=True)
