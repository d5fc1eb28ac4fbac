"""The ``jax.jit`` stand-in's call, in process: what it records for top-level calls (positional,
keyword and static arguments, a call that raises, a call that compiles), what it leaves alone
(calls while JAX traces, a function first called after the capture stopped), and that the
exception a jitted function raises reaches the caller unchanged.  The C call path
(``runtime/_fastpath.c``, ``JitCall``) and the Python closure must record the same events."""

from __future__ import annotations

import inspect
import os
import threading
import traceback

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install jax jaxlib)")
import jax.numpy as jnp  # noqa: E402
from jax._src import monitoring as jmon  # noqa: E402

from neuron_explorer.contracts import events as ev  # noqa: E402
from neuron_explorer.integrations.jax import jit as jit_mod  # noqa: E402
from neuron_explorer.integrations.jax.runtime import JaxRuntime  # noqa: E402
from neuron_explorer.runtime.config import CaptureConfig  # noqa: E402
from neuron_explorer.runtime.core import Runtime  # noqa: E402
from neuron_explorer.runtime.ring import NativeRing  # noqa: E402

JAX_JIT = jax._src.api.jit  # JAX's own, whatever a runtime of this process made of jax.jit


class Boom(Exception):
    pass


@pytest.fixture(params=["c", "python"])
def call_impl(request, monkeypatch):
    """The stand-in's call in C (runtime/_fastpath.c) or as the Python closure."""
    if request.param == "python":
        monkeypatch.setattr(jit_mod, "_CJitCall", None, raising=False)
    elif os.environ.get("NEURON_EXPLORER_PURE_PYTHON", "0") not in ("", "0"):
        pytest.skip("NEURON_EXPLORER_PURE_PYTHON is set")
    return request.param


@pytest.fixture
def jx(tmp_path):
    """A JAX runtime on a fresh capture runtime (jax.jit itself is not replaced), listening to
    JAX's compile spans for the test's duration."""
    rt = Runtime(CaptureConfig(output_dir=str(tmp_path), cpu_util=False, host_memory=False))
    j = JaxRuntime(rt, rt.core())
    before = list(jmon._event_time_span_listeners)
    j.install_compile_listener()
    mine = [f for f in jmon._event_time_span_listeners if f not in before]
    yield j
    for f in mine:
        jmon.unregister_event_time_span_listener(f)


def _standin(jx, fun, **kw):
    return jit_mod.make_jitted(jx, JAX_JIT(fun, **kw), fun, kw, None)


def _execs(jx) -> list[tuple]:
    """The ring's records: executions as (model, exec id, ret) with their span checked, and the
    other record types by name."""
    rows = jx.core.ring.drain()
    me = threading.get_native_id()
    out = []
    for r in rows.tolist():
        if r[0] == ev.EXEC_PAIR:
            assert r[1] <= r[2] and r[3] == me and r[7:] == [0, 0], r
            out.append(("exec", r[4], r[5], r[6]))
        else:
            out.append((ev.EVENT_TYPES[r[0]].name,))
    return out


def test_the_c_call_path_is_the_one_taken_when_built(jx, call_impl):
    f = _standin(jx, lambda x: x + 1)
    c_type = getattr(jit_mod, "_CJitCall", None)
    if call_impl == "c":
        assert c_type is not None, "the C extension has no JitCall (make ext)"
        assert type(type(f).__call__) is c_type
    else:
        assert inspect.isfunction(type(f).__call__)


def test_top_level_calls_record_one_execution_each(jx, call_impl):
    x = jnp.arange(4.0)

    def step(x, scale=1.0):
        return x * scale + 1

    f = _standin(jx, step)
    np.testing.assert_allclose(f(x), x + 1)  # first call: registers the model, compiles
    first = _execs(jx)
    (mid,) = [m.id for m in jx.rt.models]
    assert ("exec", mid, 0, 0) in first and ("model_load",) in first and ("nrt_load",) in first
    np.testing.assert_allclose(f(x), x + 1)
    np.testing.assert_allclose(f(x, 2.0), x * 2 + 1)  # (a traced scalar: no new compile)
    np.testing.assert_allclose(f(x, scale=3.0), x * 3 + 1)  # keywords: a new signature compiles
    np.testing.assert_allclose(f(x, scale=4.0), x * 4 + 1)
    got = _execs(jx)
    assert got[0] == ("exec", mid, 1, 0) and got[-1] == ("exec", mid, 4, 0)
    assert [r for r in got if r[0] == "exec"] == [("exec", mid, i, 0) for i in (1, 2, 3, 4)]
    assert {r for r in got if r[0] != "exec"} <= {("model_load",), ("nrt_load",), ("timestamp_sync_point",)}
    assert jx.core.ring.executions() == 5


def test_static_arguments_and_new_shapes_split_the_compile_off(jx, call_impl):
    def power(x, n):
        return x ** n

    f = _standin(jx, power, static_argnums=1)
    x = jnp.arange(3.0)
    np.testing.assert_allclose(f(x, 2), x ** 2)
    _execs(jx)
    mid = jx.rt.models[-1].id
    np.testing.assert_allclose(f(x, 2), x ** 2)
    assert _execs(jx) == [("exec", mid, 1, 0)]
    np.testing.assert_allclose(f(x, 3), x ** 3)  # a new static value: JAX compiles in the call
    assert _execs(jx) == [("model_load",), ("nrt_load",), ("timestamp_sync_point",), ("exec", mid, 2, 0)]
    np.testing.assert_allclose(f(jnp.arange(5.0), 3), jnp.arange(5.0) ** 3)  # a new shape
    assert _execs(jx) == [("model_load",), ("nrt_load",), ("timestamp_sync_point",), ("exec", mid, 3, 0)]


def test_an_exception_reaches_the_caller_unchanged_and_is_recorded(jx, call_impl):
    err = Boom("from the traced function")

    def picky(x, fail):
        if fail:
            raise err
        return x - 1

    f = _standin(jx, picky, static_argnames="fail")
    x = jnp.ones(2)
    f(x, fail=False)
    _execs(jx)
    mid = jx.rt.models[-1].id
    with pytest.raises(Boom) as info:
        f(x, fail=True)
    assert info.value is err
    ours = [f for f in traceback.extract_tb(info.tb) if f.filename == jit_mod.__file__]
    assert ours == [] if call_impl == "c" else len(ours) == 1  # (the closure's frame; none in C)
    assert _execs(jx) == [("exec", mid, 1, 1)]  # the failed call is an execution with ret 1
    with pytest.raises(TypeError) as info:  # raised by JAX before tracing
        f(x, fail=False, extra=1)
    with pytest.raises(TypeError) as plain:
        type(f)._nx_pjit(x, fail=False, extra=1)
    assert str(info.value) == str(plain.value)
    assert _execs(jx) == [("exec", mid, 2, 1)]
    np.testing.assert_allclose(f(x, fail=False), x - 1)  # and the next call is recorded as before
    assert _execs(jx) == [("exec", mid, 3, 0)]


def test_calls_while_jax_traces_are_passed_through(jx, call_impl):
    f = _standin(jx, lambda x: jnp.sin(x))
    x = jnp.arange(3.0)
    f(x)
    _execs(jx)
    outer = JAX_JIT(lambda x: f(x) * 2)
    np.testing.assert_allclose(outer(x), np.sin(np.arange(3.0)) * 2, rtol=1e-6)
    np.testing.assert_allclose(jax.grad(lambda x: f(x).sum())(x), np.cos(np.arange(3.0)), rtol=1e-6)
    np.testing.assert_allclose(jax.vmap(f)(x), np.sin(np.arange(3.0)), rtol=1e-6)
    assert _execs(jx) == []  # staged out: none of these ran the stand-in's function at the top level
    f(x)
    assert _execs(jx) == [("exec", jx.rt.models[-1].id, 1, 0)]


def test_neuron_monitor_gets_the_same_records(jx, call_impl):
    fed: list[tuple] = []
    jx.stats_rec = fed.append
    f = _standin(jx, lambda x: x * 3)
    x = jnp.ones(3)
    for _ in range(3):
        f(x)
    recs = jx.core.ring.drain()
    pairs = [tuple(r) for r in recs.tolist() if r[0] == ev.EXEC_PAIR]
    assert [tuple(r) for r in fed] == pairs and len(pairs) == 3
    if NativeRing is not None:  # the monitor's own C ring (AppStats.runtime_feed), rows as they are
        q = NativeRing(16, ev.RECORD_WIDTH)
        jx.stats_rec = q.append
        g = _standin(jx, lambda x: x * 4)
        g(x)
        g(x)
        rows = np.frombuffer(q.take(), dtype=np.int64).reshape(-1, ev.RECORD_WIDTH).tolist()
        assert rows == [r for r in jx.core.ring.drain().tolist() if r[0] == ev.EXEC_PAIR]


def test_after_the_capture_stopped(jx, call_impl):
    f = _standin(jx, lambda x: x + 2)
    x = jnp.ones(2)
    f(x)
    _execs(jx)
    jx.rt.flush(final=True)  # no sinks: the runtime only stops
    assert jx.rt.stopped
    _execs(jx)
    g = _standin(jx, lambda x: x + 3)
    np.testing.assert_allclose(g(x), x + 3)  # a function first called now is passed through
    np.testing.assert_allclose(g(x), x + 3)
    assert _execs(jx) == [] and len(jx.rt.models) == 1
    f(x)  # one already running keeps its lean path, as before
    assert _execs(jx) == [("exec", jx.rt.models[0].id, 1, 0)]


def test_slow_gate_sends_every_call_to_the_general_path(jx, call_impl):
    f = _standin(jx, lambda x: x - 2)
    x = jnp.ones(2)
    f(x)
    _execs(jx)
    state = type(f)._nx_state
    seen = []
    general = jx.run_general

    def spy(j, args, kwargs):
        seen.append((len(args), sorted(kwargs)))
        return general(j, args, kwargs)

    jx.run_general = spy
    state.gate[0] = "slow"  # (what gate_for hands back under NDET or a device profile)
    jx.gate_for = lambda model: "slow"
    np.testing.assert_allclose(f(x), x - 2)
    np.testing.assert_allclose(f(x=x), x - 2)
    assert seen == [(1, []), (0, ["x"])]
    mid = jx.rt.models[0].id
    assert [r for r in _execs(jx) if r[0] == "exec"] == [("exec", mid, 1, 0), ("exec", mid, 2, 0)]
