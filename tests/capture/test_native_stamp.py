"""The torch-ABI extension (``integrations/torch/native.py``, decision 0221): a collective's
completion stamped by a C++ callback on the backend's thread, which takes no GIL there.

In process: where the build is looked for, that nothing but a matching, loadable build is used (a
missing, corrupt or foreign file means the C stamp, never an exception), and that the exit drain
waits for a C++ stamp still open.  End to end: a real async all_reduce stamped on gloo's thread,
and every collective's end recorded once with and without the extension (test_collective_end)."""

from __future__ import annotations

import os
import sys
import threading
import types

import pytest

from neuron_explorer.integrations.torch import collectives as cc, native

from ..conftest import clean_env, free_port, native_stamp_built, run


def _fake_torch(version: str = "2.13.0+cpu", git: str = "abc") -> types.SimpleNamespace:
    return types.SimpleNamespace(__version__=version, version=types.SimpleNamespace(git_version=git))


def test_the_cache_is_the_variable_else_the_user_cache_and_0_turns_it_off(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURON_EXPLORER_EXT_CACHE", str(tmp_path / "c"))
    assert native.cache_root() == str(tmp_path / "c")
    monkeypatch.setenv("NEURON_EXPLORER_EXT_CACHE", "0")
    assert native.cache_root() is None
    assert native.built_path(_fake_torch()) is None
    assert native.stamp_work(_fake_torch()) is None
    monkeypatch.delenv("NEURON_EXPLORER_EXT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert native.cache_root() == str(tmp_path / "xdg" / "neuron_explorer" / "ext")


def test_a_build_is_keyed_by_torch_and_by_the_source(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURON_EXPLORER_EXT_CACHE", str(tmp_path))
    a = native.built_path(_fake_torch())
    assert a == native.built_path(_fake_torch())  # stable
    assert native.built_path(_fake_torch(git="abd")) != a  # another build of the same version
    assert native.built_path(_fake_torch("2.14.0")) != a
    assert os.path.basename(os.path.dirname(a)).startswith("ne_c10d_stamp-2.13.0_cpu-")
    src = tmp_path / "edited.cpp"
    src.write_bytes(open(native.SOURCE, "rb").read() + b"\n// edited\n")
    monkeypatch.setattr(native, "SOURCE", str(src))
    assert native.built_path(_fake_torch()) != a


@pytest.mark.parametrize("content", [b"", b"\x7fELF garbage", b"not a library at all" * 100])
def test_a_damaged_build_is_not_used_and_raises_nothing(monkeypatch, tmp_path, content):
    monkeypatch.setenv("NEURON_EXPLORER_EXT_CACHE", str(tmp_path))
    monkeypatch.delitem(sys.modules, native.NAME, raising=False)
    path = native.built_path(_fake_torch("9.9.9"))
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(content)
    assert native.stamp_work(_fake_torch("9.9.9")) is None
    assert native.NAME not in sys.modules


def test_the_exit_drain_waits_for_an_open_cpp_stamp_until_it_fires_or_the_bound():
    class Fired:  # (a WorkStamp's interface: t is 0 until the future completes)
        t = 0
        tid = 0

    inst = types.SimpleNamespace(pending_cc={})
    stamp = Fired()
    inst.pending_cc[1] = [None] * 11 + [stamp, cc._FORK_GEN[0]]
    assert cc._unstamped(inst)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a forked child does not wait for the stamps it inherited
        os.write(w, b"1" if cc._unstamped(inst) else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 4) == b"0"
    cc.drain_callbacks(0.02, None, lambda: cc._unstamped(inst))  # returns at its bound
    settled = []
    threading.Timer(0.05, lambda: setattr(stamp, "t", 5)).start()
    # (a bound far beyond the timer's: the drain returns when the stamp fires, not at its bound)
    cc.drain_callbacks(600.0, lambda: settled.append(stamp.t), lambda: cc._unstamped(inst))
    assert stamp.t == 5 and not cc._unstamped(inst)
    assert settled  # the settle ran while the stamp was open (it records the ends once stamped)


ASYNC = r"""
import datetime, sys, threading, time, torch, torch.distributed as dist
from neuron_explorer.integrations.torch import native
stamp_work = native.stamp_work(torch)
# two ranks in this process: rank 0's all_reduce cannot complete before rank 1 joins, so the stamp
# always goes on a pending future, whatever the machine's load (one rank could finish first)
store = dist.HashStore()
pgs = [None, None]
def make(r):
    pgs[r] = dist.ProcessGroupGloo(store, r, 2, datetime.timedelta(seconds=120))
ts = [threading.Thread(target=make, args=(r,)) for r in (0, 1)]
[t.start() for t in ts]; [t.join() for t in ts]
x = torch.ones(1 << 16)
w = pgs[0].allreduce([x])
s = stamp_work(w)
w1 = pgs[1].allreduce([x.clone()])
w.wait(); w1.wait()
deadline = time.monotonic() + 120  # (gloo's thread runs the callback right after completing)
while not s.t and time.monotonic() < deadline:
    time.sleep(0.001)
print("async", s.t > 0, s.tid != threading.get_native_id(), s.t <= time.monotonic_ns())
done = stamp_work(w)  # already complete: stamped at once, on this thread
print("inline", done.t > 0, done.tid == threading.get_native_id())
try:
    stamp_work(object())
except (TypeError, RuntimeError):
    print("refuses", True)
"""


@pytest.mark.processes
def test_a_cpp_stamp_keeps_the_completion_on_the_backends_thread(tmp_path):
    native_stamp_built()
    p = run([sys.executable, "-c", ASYNC, str(free_port())], clean_env())
    assert "async True True True" in p.stdout, p.stdout + p.stderr
    assert "inline True True" in p.stdout
    assert "refuses True" in p.stdout
