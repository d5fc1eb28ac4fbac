"""A runtime started after a JAX program made its jitted functions (neuron-monitor discovery: JAX
loads our plugin only when it first initialises a backend) instruments what the program made
before, and nothing it must not touch (docs/decisions/0076-jax-jit-unseen-and-adopted.md)."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import clean_env, run

pytest.importorskip("jax", reason="JAX is not installed (pip install jax jaxlib)")

PROGRAM = r'''
import functools, json, sys, types, warnings
import jax, jax.numpy as jnp
from jax import jit

warnings.simplefilter("error")  # any warning our scan caused would end the program


class Loud:
    """An object a scan must not look into (a deprecated alias warns on any attribute read)."""
    @property
    def __class__(self):
        raise AssertionError("the scan read __class__")
    def __getattr__(self, name):
        raise AssertionError(f"the scan read {name}")


loud = Loud()


@jax.jit
def step(x):
    return x + 1


jit_k = functools.partial(jax.jit, static_argnames="k")


class Model:
    @functools.partial(jax.jit, static_argnums=0)
    def scale(self, x):
        return x * 2


lazy = types.ModuleType("lazy_thing")
lazy.__getattr__ = lambda name: (_ for _ in ()).throw(AssertionError("a lazy module was loaded"))
sys.modules["lazy_thing"] = lazy

before = type(step).__module__
from neuron_explorer import boot, discovery  # (what discovery does once a monitor is found)

boot.start(for_monitor=True)
n = discovery.adopt_jitted_functions()
from neuron_explorer.integrations.jax.runtime import installed

ring = installed().core.ring
e0 = ring.executions()
step(jnp.ones(2)); Model().scale(jnp.ones(2)); jit_k(lambda x, k=1: x * k)(jnp.ones(2)); jit(lambda x: x)(jnp.ones(2))
print(json.dumps({"adopted": n, "executions": ring.executions() - e0, "type": type(step).__name__,
                  "partial_is_ours": jit_k.func is jax.jit, "jit_is_ours": jit is jax.jit,
                  "step": float(step(jnp.ones(2)).sum())}))
'''


@pytest.mark.slow
def test_a_late_runtime_adopts_the_jitted_functions_made_before_and_reads_nothing_else(tmp_path):
    p = run([sys.executable, "-c", PROGRAM], clean_env(), cwd=tmp_path)
    facts = json.loads(p.stdout)
    # step, the jitted method, the partial of jax.jit and `from jax import jit`
    assert facts == {"adopted": 4, "executions": 4, "type": "PjitFunction", "partial_is_ours": True,
                     "jit_is_ours": True, "step": 4.0}, p.stdout + p.stderr
    assert p.stderr.strip() == "", p.stderr
