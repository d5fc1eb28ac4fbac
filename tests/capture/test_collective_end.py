"""A collective's end is recorded once, whichever way it completes: a blocking torch.distributed call
(its Work.wait on the calling thread), an async op waited through Work.wait, one waited only
through its future (the callback path, as DDP's buckets are), or an operator that returns no Work
(``monitored_barrier``: it returns when the barrier is done)."""

from __future__ import annotations

import sys

import pytest

from neuron_explorer.analysis.reader import discover, load_session

from ..conftest import clean_env, free_port, native_stamp_built, ranks, run

# the environment of each collective path but the default (C++ kernels and stamp: "kernels"); "cxx":
# the Python kernels with the C++ stamp
PATH_ENV = {"cxx": {"NEURON_EXPLORER_CPP_KERNELS": "0"}, "c": {"NEURON_EXPLORER_EXT_CACHE": "0"},
            "python": {"NEURON_EXPLORER_PURE_PYTHON": "1"}}


SCRIPT = r"""
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
x = torch.ones(256)
for _ in range(5):
    dist.all_reduce(x)                      # blocking: ended by Work.wait
w = dist.all_reduce(x, async_op=True)
w.wait()                                    # async, waited on the Work
f = dist.all_reduce(x, async_op=True).get_future()
f.wait()                                    # async, waited only through the future: the callback
from neuron_explorer.integrations.torch import installed
print("stamps", sorted({type(e[11]).__name__ for e in installed().pending_cc.values()}))
print("kernels", type(installed().lib).__name__)
dist.barrier()
dist.broadcast(x, 0)
dist.monitored_barrier()
dist.destroy_process_group()
print("pending", len(installed().pending_cc))
"""


@pytest.mark.parametrize("path", ["kernels", "cxx", "c", "python"])
def test_every_collective_end_is_recorded_once(tmp_path, path):
    """On every path: the C++ kernels (decision 0223), the C++ stamp of the torch-ABI extension
    (decision 0221), the C stamp the training thread records from (decision 0220; the
    extension's cache off) and the Python callback that records on the backend's thread."""
    if path in ("kernels", "cxx"):
        native_stamp_built()
    out = tmp_path / "out"
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out), **PATH_ENV.get(path, {}))
    p = run([sys.executable, "-c", SCRIPT, str(free_port())], env)
    assert "pending 0" in p.stdout
    # the stamp the callback path used (still pending: its end is recorded by the next collective;
    # the Python callback records it on gloo's thread, so it may be gone already).  The C++
    # kernels queue their records, which the next Work.wait adopts: none is pending yet
    want = {"kernels": ["stamps []"], "cxx": ["stamps ['WorkStamp']"], "c": ["stamps ['Stamp']"],
            "python": ["stamps ['NoneType']", "stamps []"]}[path]
    assert any(w in p.stdout for w in want), p.stdout
    assert f"kernels {'Kernels' if path == 'kernels' else 'Library'}" in p.stdout
    (path,) = discover(str(out))
    s = load_session(path)
    e = s.events
    names = [s.type_names[int(t)] for t in e["type"]]
    cc = [i for i, n in enumerate(names) if n in ("cc_running", "cc_exec_barrier")]
    ops = sorted(s.strings[int(e[s.arg(names[i], "op_str")][i])] for i in cc)
    assert ops == ["all_reduce"] * 7 + ["barrier", "broadcast", "monitored_barrier"]
    seqs = sorted(int(e[s.arg(names[i], "seq")][i]) for i in cc)
    assert seqs == list(range(10))  # one record per collective, none twice
    assert "not recorded" not in p.stderr
    assert all(e["end_ns"][i] > e["start_ns"][i] for i in cc)
    # every end is one moment: the span's end is its hw_notify's (for the all_reduce waited only
    # through its future, the callback's time, whichever thread records it)
    seq = e[s.arg("hw_notify", "seq")]
    notes = {int(seq[i]): int(e["start_ns"][i]) for i, n in enumerate(names) if n == "hw_notify"}
    assert {int(e[s.arg(names[i], "seq")][i]): int(e["end_ns"][i]) for i in cc} == notes


LATE = r"""
import sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 1:
    time.sleep(1.0)  # rank 0 has reached its exit by now
work = dist.all_reduce(torch.ones(1 << 14), async_op=True)
if rank == 1:
    work.wait()
print("rank", rank, "leaves", flush=True)  # rank 0 leaves its Work to the interpreter's exit
"""


@pytest.mark.parametrize("setting", ["capture", "capture_c_stamp", "ndet", "monitor"])
def test_a_collective_left_running_at_exit_ends_the_process_as_unprofiled(tmp_path, setting):
    """Rank 0 exits with an async all_reduce still waiting for rank 1.  Unprofiled, its interpreter
    waits for the work as it tears down and exits 0 once rank 1 joins.  Our completion callback
    runs on gloo's thread and needs the GIL: run during the interpreter's finalization, that thread
    is ended by ``pthread_exit`` and the process aborted ("terminate called without an active
    exception", found by the suite under load through DDP's last bucket).  The callbacks are
    drained before finalization (decision 0198), in every setting that installs the hooks; the C++
    stamp (decision 0221, ``capture`` where it is built) takes no GIL there, and the drain still
    waits for it so that the final write has the collective's end."""
    if setting == "capture":
        native_stamp_built()
    script = tmp_path / "late.py"
    script.write_text(LATE)
    (tmp_path / "ndet").mkdir()
    env = {"capture": dict(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out")),
           "capture_c_stamp": dict(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"),
                                   NEURON_EXPLORER_EXT_CACHE="0"),
           "ndet": dict(NEURON_RT_DBG_NDET_LOG_LOCATION=str(tmp_path / "ndet"), NEURON_RT_DBG_NDET_FLUSH_USEC="200000"),
           "monitor": dict(NEURON_PROCESS_TAG="late", NEURON_EXPLORER_STATS_DIR=str(tmp_path / "stats"))}[setting]
    p = ranks(2, script, [], clean_env(**env), cwd=tmp_path, check=False)
    assert p.returncode == 0 and "terminate called" not in p.stderr, p.stderr[-2000:]
    assert p.stdout.count("leaves") == 2
    if setting.startswith("capture"):
        for path in discover(str(tmp_path / "out")):
            s = load_session(path)
            names = [s.type_names[int(t)] for t in s.events["type"]]
            assert names.count("cc_running") == 1, (path, names)


def test_the_exit_drain_follows_each_callback_until_released_and_is_bounded():
    """In process: a callback is listed from its making until it is let go, whether it ran or not;
    one never let go (a collective that never ends) holds the drain only to its bound; a forked
    child starts with none listed (its backend threads are the parent's)."""
    import os

    from neuron_explorer.integrations.torch import collectives as cc

    seen = []
    cb = cc._Done(lambda key, fut: seen.append((key, fut)), 7)
    assert id(cb) in cc._LIVE
    cb("fut")
    assert seen == [(7, "fut")] and id(cb) in cc._LIVE
    held = id(cb)
    del cb
    assert held not in cc._LIVE
    stuck = cc._Done(lambda key, fut: None, 8)
    cc.drain_callbacks(0.01)  # returns: bounded
    assert id(stuck) in cc._LIVE
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports what it would wait for
        os.write(w, str(len(cc._LIVE)).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 16) == b"0"
    del stuck
    assert not cc._LIVE


def test_a_stamp_keeps_the_time_and_thread_of_its_first_call():
    """The C completion callback (decision 0220): its first call, on the backend's thread, keeps the
    clock and that thread's id; later calls change nothing; it takes no arguments to be made."""
    import threading

    from neuron_explorer.runtime import clock
    from neuron_explorer.runtime.ring import Stamp

    if Stamp is None:
        pytest.skip("no C extension")
    s = Stamp()
    assert s.t == 0
    before = clock.now_ns()
    t = threading.Thread(target=s, args=("fut",))
    t.start()
    t.join()
    assert s.tid == t.native_id and before <= s.t <= clock.now_ns()
    first = s.t
    s("again")
    assert (s.t, s.tid) == (first, t.native_id)
    with pytest.raises(TypeError):
        Stamp(1)


def test_a_kernel_settles_from_the_oldest_collective_up_to_the_first_not_stamped():
    """A collective's kernel records the stamped ends before it, oldest first, and stops at the
    first still running (O(1) a call with many in flight); a full settle takes every stamped one,
    each at its stamp's time with its status from the future.  Whoever records an end, ``finish``
    puts it at the stamp's time on the stamp's thread once the stamp has been called."""
    import threading

    from neuron_explorer.integrations.torch import collectives as cc
    from neuron_explorer.runtime.ring import Stamp

    if Stamp is None:
        pytest.skip("no C extension")

    class Future:
        def value(self):
            raise RuntimeError("Connection closed by peer")  # a failed collective: status 1

    class Work:
        def get_future(self):
            return Future()

    class Inst:
        def __init__(self) -> None:
            self.pending_cc: dict[int, list] = {}
            self.ended: list[tuple[int, int, int, int]] = []

        def cc_complete(self, key, t1, status, remember=True):
            self.pending_cc.pop(key)
            self.ended.append((key, t1, status))

    inst = Inst()
    stamps = {k: Stamp() for k in (1, 2, 3)}
    stamps[1]("fut")
    stamps[3]("fut")
    inst.pending_cc = {k: [Work()] + [None] * 10 + [s] for k, s in stamps.items()}
    cc.settle_oldest(inst)
    assert inst.ended == [(1, stamps[1].t, 1)] and list(inst.pending_cc) == [2, 3]
    cc.settle_stamped(inst)
    assert inst.ended[1:] == [(3, stamps[3].t, 1)] and list(inst.pending_cc) == [2]

    class Ring:
        rows: list[tuple] = []
        append = rows.append

        def tick(self) -> int:
            return 0

    class Core:
        ring = Ring()

    finish = cc._finisher(1, 5, Core(), True, True)  # (a span type, op string 5: span and notify kept)
    stamp, late = inst.pending_cc[2][11], 10**18
    finish(inst.pending_cc[2], late, 0)  # not called yet: the recorder's time, on its thread
    (_, _, end, *_), (_, at, _, tid, *_) = Ring.rows
    assert end == at == late and tid == threading.get_native_id() and inst.pending_cc[2][11] is None
    t = threading.Thread(target=stamp, args=("fut",))
    t.start()
    t.join()
    entry = [Work()] + [None] * 10 + [stamp]
    Ring.rows.clear()
    finish(entry, late, 0)  # called: its time on gloo's thread, whoever records
    (_, _, end, *_), (_, at, _, tid, *_) = Ring.rows
    assert end == at == stamp.t and tid == t.native_id and entry[11] is None


def test_the_exit_drain_settles_stamped_ends_and_waits_only_for_stamps_a_backend_holds():
    """A stamp the backend has called and let go is held only by its entry until a settle records
    it: the drain settles, and then waits (to its bound) only for a stamp a backend still holds.
    A forked child counts none of its parent's."""
    import os

    from neuron_explorer.integrations.torch import collectives as cc
    from neuron_explorer.runtime.ring import Stamp, stamps_alive

    if Stamp is None:
        pytest.skip("no C extension")
    base = stamps_alive()
    held = Stamp()  # a backend's, for a collective that never ends
    fired = Stamp()
    fired("fut")
    entries = [fired]
    del fired
    settled = []

    def settle() -> None:  # as settle_stamped: the entry recorded, it lets go of its stamp
        settled.append(len(entries))
        entries.clear()

    cc.drain_callbacks(0.01, settle)  # returns: bounded
    assert settled[:1] == [1] and not entries
    assert stamps_alive() == base + 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, str(stamps_alive()).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 16) == b"0"
    del held
    assert stamps_alive() == base


def test_a_backend_thread_keeps_its_python_thread_state_from_one_callback_to_the_next():
    """gloo completes a future on its own thread, which Python did not start: pybind makes a thread
    state for each callback and deletes it after (~100 us of CPU per collective), unless ours keeps
    it (``collectives._keep_thread_state``).  Two ranks of one process (a gloo group per thread):
    rank 0's work cannot complete before rank 1 joins, so its callback is attached first and runs on
    rank 0's gloo thread; from the second callback on that thread on, its state is the kept one."""
    import threading

    import torch
    import torch.distributed as dist

    from neuron_explorer.integrations.torch import collectives

    store = dist.HashStore()
    groups: dict[int, object] = {}

    def make(rank: int) -> None:
        groups[rank] = dist.ProcessGroupGloo(store, rank, 2)

    makers = [threading.Thread(target=make, args=(r,)) for r in (0, 1)]
    for t in makers:
        t.start()
    for t in makers:
        t.join(60)
    assert sorted(groups) == [0, 1]
    seen: list[tuple[int, bool]] = []  # per callback: (native thread, its state kept before this call)

    def on_done(key: int, fut) -> None:
        seen.append((threading.get_native_id(), getattr(collectives._KEPT, "on", False)))

    main = threading.get_native_id()
    for i in range(6):
        w0 = groups[0].allreduce([torch.ones(64)])
        w0.get_future().add_done_callback(collectives._Done(on_done, i))
        w1 = groups[1].allreduce([torch.ones(64)])
        w1.wait()
        w0.wait()
        assert torch.equal(w0.result()[0], torch.full((64,), 2.0))
    groups.clear()  # (the groups end with their last reference)
    foreign = [(tid, kept) for tid, kept in seen if tid != main]
    assert len(foreign) == 6, seen  # every callback ran on a gloo thread
    firsts = {tid: i for i, (tid, _) in reversed(list(enumerate(foreign)))}
    assert [kept for i, (_, kept) in enumerate(foreign) if i not in firsts.values()] == [True] * (6 - len(firsts))
    assert len(firsts) < 6  # gloo reused a thread: the check above saw at least one later callback


MIXED = r"""
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
x = torch.ones(256)
dist.all_reduce(x)
side = dist.new_group([0])                   # a second group: its own sequence numbers and label
dist.all_reduce(torch.ones(8, dtype=torch.float64), group=side)
try:
    dist.broadcast(torch.ones(4), 5)         # no rank 5: gloo raises in the call
except Exception as e:
    print("raised", type(e).__name__)
out = [torch.zeros(3, dtype=torch.int32)]
dist.all_gather(out, torch.arange(3, dtype=torch.int32))
w = dist.broadcast(x, 0, async_op=True)
dist.all_reduce(x, group=side)
w.wait()
dist.barrier(group=side)
dist.all_reduce(torch.ones(2, dtype=torch.bfloat16), async_op=True).get_future().wait()
from neuron_explorer.integrations.torch import installed
print("kernels", type(installed().lib).__name__)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("path", ["kernels", "cxx", "c", "python", "ndet"])
def test_the_cpp_and_python_kernels_record_the_same_collectives(tmp_path, path):
    """The C++ kernels (decision 0223, where the extension is built), the Python kernels with the C
    stamp (cache off), pure Python and NDET's Python kernels record one program's collectives
    alike: op, sequence number in its group (a call that raises counts, as torch's own numbering
    does), bytes, dtype and group label, over two groups, blocking, async and future-waited calls."""
    if path in ("kernels", "cxx", "ndet"):
        native_stamp_built()
    out = tmp_path / "out"
    # (NDET with the C++ kernels asked for: it keeps the Python ones)
    extra = {"ndet": {"NEURON_RT_DBG_NDET_LOG_LOCATION": str(tmp_path / "ndet"),
                      "NEURON_RT_DBG_NDET_FLUSH_USEC": "200000", "NEURON_EXPLORER_CPP_KERNELS": "1"}
             }.get(path, PATH_ENV.get(path, {}))
    (tmp_path / "ndet").mkdir()
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out), **extra)
    p = run([sys.executable, "-c", MIXED, str(free_port())], env)
    assert "raised" in p.stdout and "not recorded" not in p.stderr, p.stderr[-2000:]
    assert f"kernels {'Kernels' if path == 'kernels' else 'Library'}" in p.stdout, p.stdout
    (session,) = discover(str(out))
    s = load_session(session)
    e = s.events
    names = [s.type_names[int(t)] for t in e["type"]]

    def arg(i: int, field: str) -> int:
        return int(e[s.arg(names[i], field)][i])

    got = sorted((s.strings[arg(i, "op_str")], s.strings[arg(i, "group_str")], arg(i, "seq"),
                  *((arg(i, "bytes"), s.strings[arg(i, "dtype_str")]) if n == "cc_running" else (0, "")))
                 for i, n in enumerate(names) if n in ("cc_running", "cc_exec_barrier"))
    side = [g for _, g, *_ in got if g != "0"][0]
    assert side.startswith("0#")
    assert got == sorted([
        ("all_reduce", "0", 0, 1024, "float32"), ("all_gather", "0", 2, 12, "int32"),
        ("broadcast", "0", 3, 1024, "float32"), ("all_reduce", "0", 4, 4, "bfloat16"),
        ("all_reduce", side, 0, 64, "float64"), ("all_reduce", side, 1, 1024, "float32"),
        ("barrier", side, 2, 0, ""),
    ]), got


P2P = r"""
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.arange(6, dtype=torch.float32)
for _ in range(2):
    if rank == 0:
        dist.send(t, 1)                      # blocking: gloo's send Work has no future
        dist.isend(t * 2, 1).wait()
    else:
        dist.recv(t, 0)
        w = dist.irecv(t, 0)
        w.wait()
dist.all_reduce(t)
print("result", t.tolist())
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize("path", ["kernels", "cxx", "c", "python", "ndet"])
def test_send_and_recv_keep_their_results_and_are_recorded_on_every_path(tmp_path, path):
    """gloo's send and recv return a Work whose ``getFuture`` raises: on every path the program's
    results and output are those it has unprofiled, and each point-to-point call is recorded once,
    ended by its ``Work.wait`` (the C++ kernels once made such a recv raise: stop 60)."""
    if path in ("kernels", "cxx", "ndet"):
        native_stamp_built()
    script = tmp_path / "p2p.py"
    script.write_text(P2P)
    plain = ranks(2, script, [], clean_env())
    out = tmp_path / "out"
    # (NDET with the C++ kernels asked for: it keeps the Python ones)
    extra = {"ndet": {"NEURON_RT_DBG_NDET_LOG_LOCATION": str(tmp_path / "ndet"),
                      "NEURON_RT_DBG_NDET_FLUSH_USEC": "200000", "NEURON_EXPLORER_CPP_KERNELS": "1"}
             }.get(path, PATH_ENV.get(path, {}))
    (tmp_path / "ndet").mkdir()
    p = ranks(2, script, [], clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(out), **extra))
    assert p.stdout == plain.stdout and "not recorded" not in p.stderr, p.stderr[-2000:]
    sessions = [load_session(d) for d in discover(str(out))]
    assert len(sessions) == 2
    for s in sessions:
        e = s.events
        names = [s.type_names[int(t)] for t in e["type"]]
        cc = [i for i, n in enumerate(names) if n == "cc_running"]
        ops = sorted(s.strings[int(e[s.arg("cc_running", "op_str")][i])] for i in cc)
        assert ops in (["all_reduce"] + ["send"] * 4, ["all_reduce"] + ["recv"] * 4), ops
        assert all(e["end_ns"][i] > e["start_ns"][i] for i in cc)


STOPPED = r"""
import sys, torch, torch.distributed as dist
from neuron_explorer.integrations.torch import installed, native
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
x = torch.ones(256)
for _ in range(10):
    dist.all_reduce(x, async_op=True).get_future().wait()   # no Work.wait: queued until a settle
print("queued", native.module(torch).queued())
installed().rt.flush(final=True, reason="test")              # the capture's final write
for _ in range(200):
    dist.all_reduce(x, async_op=True).get_future().wait()
print("after", native.module(torch).queued(), x[0].item())
dist.destroy_process_group()
"""


def test_the_cpp_kernels_stop_queueing_once_the_capture_has_ended(tmp_path):
    """After the final write nothing adopts the C++ kernels' records, and each would pin its Work
    (and its tensors) in the queue: they stop recording there, and the collectives go on."""
    native_stamp_built()
    env = clean_env(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_OUTPUT_DIR=str(tmp_path / "out"))
    p = run([sys.executable, "-c", STOPPED, str(free_port())], env)
    assert "queued 10" in p.stdout and "after 0 1.0" in p.stdout, p.stdout + p.stderr[-2000:]
